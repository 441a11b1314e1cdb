"""A run's samples as ``read_runs`` hands them out: checked against the
index, long ones as views of the run's bytes (no copy), none of them
changing afterwards; and ``crc32c_spans``, which checks the long ones in
place."""

from __future__ import annotations

import array
import asyncio
import os

import google_crc32c
import pytest

from aioflux._core.errors import ChecksumMismatch
from aioflux._core.integrity.crc import crc32c_spans
from aioflux._core.records.types import ObjectInfo
from aioflux._engines.shards import Run, ShardIndex, read_runs
from aioflux.testing import MemoryStore

BUCKET = "spans"
# Sample lengths: long ones (views) around short ones (bytes slices).
LENGTHS = [100 * 1024, 10, 70 * 1024, 16 * 1024, 3]


def _index(data: bytes, info: ObjectInfo, lengths: list[int]) -> ShardIndex:
    offsets, at = [], 0
    for n in lengths:
        offsets.append(at)
        at += n
    crcs = [google_crc32c.value(data[o:o + n]) for o, n in zip(offsets, lengths, strict=True)]
    return ShardIndex(format="lines", compression=None, size=info.size, crc32c=info.crc32c,
                      version=info.generation, data_size=at,
                      offsets=array.array("Q", offsets), lengths=array.array("Q", lengths),
                      crcs=array.array("I", crcs))


async def _read(store: MemoryStore, info: ObjectInfo, index: ShardIndex,
                samples: tuple[int, ...]) -> list[bytes | memoryview]:
    async def index_of(k: int) -> ShardIndex:
        return index

    got = [regions async for _, regions in read_runs(
        store, [info], index_of, [Run(0, samples)], limit=2, max_bytes=1 << 30)]
    assert len(got) == 1
    return got[0]


async def test_long_samples_are_views_of_bytes_nothing_writes_short_ones_bytes() -> None:
    store = MemoryStore(buckets=[BUCKET])
    data = os.urandom(sum(LENGTHS))
    info = await store.write(BUCKET, "a.jsonl", data)
    index = _index(data, info, LENGTHS)
    regions = await _read(store, info, index, (4, 0, 1, 2, 3))
    at = [sum(LENGTHS[:k]) for k in range(len(LENGTHS))]
    for k, region in zip((4, 0, 1, 2, 3), regions, strict=True):
        assert bytes(region) == data[at[k]:at[k] + LENGTHS[k]]
        if LENGTHS[k] >= 16 * 1024:
            # A view, not a copy: of an immutable bytes object, so the
            # sample cannot change after it was checked.
            assert isinstance(region, memoryview) and region.readonly
            assert isinstance(region.obj, bytes)
        else:
            assert type(region) is bytes


@pytest.mark.parametrize("sample", [0, 2, 3])
async def test_a_flipped_byte_in_a_long_sample_is_a_checksum_mismatch(sample: int) -> None:
    store = MemoryStore(buckets=[BUCKET])
    data = os.urandom(sum(LENGTHS))
    flipped = bytearray(data)
    at = sum(LENGTHS[:sample]) + LENGTHS[sample] - 1  # its last byte
    flipped[at] ^= 1
    info = await store.write(BUCKET, "a.jsonl", bytes(flipped))
    index = _index(data, info, LENGTHS)  # the checksums of the bytes before the flip
    with pytest.raises(ChecksumMismatch, match=rf"a\.jsonl: sample {sample} at byte "
                                               rf"{sum(LENGTHS[:sample])} does not match"):
        await _read(store, info, index, tuple(range(len(LENGTHS))))
    # The other samples still read, checked.
    others = tuple(k for k in range(len(LENGTHS)) if k != sample)
    regions = await _read(store, info, index, others)
    assert [len(r) for r in regions] == [LENGTHS[k] for k in others]


@pytest.mark.parametrize("sample", [0, 1, 3])
async def test_a_sample_read_alone_is_its_read_bytes_checked(sample: int) -> None:
    # A run of one sample is one read of exactly its bytes: they are its
    # region as they came (no view, no copy), checked all the same.
    store = MemoryStore(buckets=[BUCKET])
    data = os.urandom(sum(LENGTHS))
    info = await store.write(BUCKET, "a.jsonl", data)
    index = _index(data, info, LENGTHS)
    at = sum(LENGTHS[:sample])
    (region,) = await _read(store, info, index, (sample,))
    assert type(region) is bytes and region == data[at:at + LENGTHS[sample]]
    flipped = bytearray(data)
    flipped[at] ^= 1
    info = await store.write(BUCKET, "a.jsonl", bytes(flipped))
    index = _index(data, info, LENGTHS)  # the checksums of the bytes before the flip
    with pytest.raises(ChecksumMismatch, match=rf"a\.jsonl: sample {sample} at byte {at} "
                                               rf"does not match its index \(crc32c .* "
                                               rf"{LENGTHS[sample]} of {LENGTHS[sample]} "
                                               "bytes"):
        await _read(store, info, index, (sample,))


async def test_a_long_sample_cut_short_is_a_checksum_mismatch_naming_the_lengths() -> None:
    store = MemoryStore(buckets=[BUCKET])
    data = os.urandom(sum(LENGTHS))
    info = await store.write(BUCKET, "a.jsonl", data[:-LENGTHS[-1] - 100])
    # The index claims more bytes than the object holds: sample 3 ends past it.
    index = _index(data, info, LENGTHS)
    with pytest.raises(ChecksumMismatch, match=rf"sample 3 at byte \d+ does not match its "
                                               rf"index \(.*{16 * 1024 - 100} of "
                                               rf"{16 * 1024} bytes\)"):
        await _read(store, info, index, (2, 3))


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_crc32c_spans_equals_the_crc32c_of_each_slice(kind: type) -> None:
    data = os.urandom(3 << 20)
    buffer = kind(data) if kind is not memoryview else memoryview(bytearray(data))
    # Empty, short, in place holding the GIL, and from 1 MiB without it.
    spans = [(0, 0), (5, 6), (100, 70 * 1024 + 100), (1, (1 << 20) + 3 + 1),
             (len(data) - 17, len(data))]
    assert crc32c_spans(buffer, spans) == [google_crc32c.value(data[a:b]) for a, b in spans]


@pytest.mark.parametrize("span", [(-1, 4), (4, 3), (0, 1025), (1024, 1025)])
def test_crc32c_spans_refuses_a_span_outside_the_buffer(span: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="1024-byte buffer"):
        crc32c_spans(os.urandom(1024), [(0, 10), span])


async def _shards(store: MemoryStore, n: int) -> tuple[list[ObjectInfo], list[ShardIndex]]:
    infos, indexes = [], []
    for k in range(n):
        data = os.urandom(64)
        info = await store.write(BUCKET, f"s{k}.jsonl", data)
        infos.append(info)
        indexes.append(_index(data, info, [32, 32]))
    return infos, indexes


async def test_the_next_runs_shards_indexes_are_asked_for_together() -> None:
    # Each index is handed out only once three are being asked for at once:
    # asked one at a time as the window takes their first runs, the first
    # never came back (each load held up every read behind it).
    store = MemoryStore(buckets=[BUCKET])
    infos, indexes = await _shards(store, 4)
    asked: list[int] = []
    three = asyncio.Event()

    async def index_of(k: int) -> ShardIndex:
        asked.append(k)
        if len(asked) >= 3:
            three.set()
        await three.wait()
        return indexes[k]

    runs = [Run(k % 4, (k // 4,)) for k in range(8)]

    async def read() -> list[bytes | memoryview]:
        return [r async for _, regions in read_runs(store, infos, index_of, runs, limit=3,
                                                    max_bytes=1 << 20) for r in regions]

    got = await asyncio.wait_for(read(), 60)  # a hang guard only: it is at once
    assert [bytes(r) for r in got] == [
        (await store.read(BUCKET, f"s{k % 4}.jsonl"))[32 * (k // 4):32 * (k // 4) + 32]
        for k in range(8)]
    # Asked for again only once its shard was let go (no run of it in flight).
    assert sorted(set(asked)) == [0, 1, 2, 3]


async def test_an_index_asked_for_ahead_that_fails_is_the_reads_error() -> None:
    store = MemoryStore(buckets=[BUCKET])
    infos, indexes = await _shards(store, 3)

    async def index_of(k: int) -> ShardIndex:
        if k == 1:
            raise ChecksumMismatch("index 1 is damaged")
        return indexes[k]

    seen = []
    with pytest.raises(ChecksumMismatch, match="index 1 is damaged"):
        # One run in flight at a time (by bytes), three looked ahead.
        async for run, _ in read_runs(store, infos, index_of,
                                      [Run(0, (0,)), Run(2, (0,)), Run(1, (0,))],
                                      limit=3, max_bytes=1):
            seen.append(run.shard)
    # Raised where the window took its run: after shard 0's, never before.
    assert seen in ([0], [0, 2])
