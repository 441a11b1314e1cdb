"""The download planner against the emulator: direct, composed, ranged."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioflux import (
    AsyncClient,
    ClientConfig,
    InvalidArgument,
    LocalStore,
    ObjectInfo,
    PermissionDenied,
    ProtocolError,
    parse_url,
)
from aioflux._engines.compose import (
    COMPOSED_PREFIX,
    delete_leftovers,
    leftover_composites,
    plan_batches,
)
from aioflux._engines.download import WAVE_RANGES, Downloader, DownloadOptions, download_many
from aioflux._engines.listing import list_objects_parallel
from aioflux.testing import Emulator, Faults, MemoryStore

# Composites of as few as two sources: these tests are about how a composite
# is made, checked and split, not about when one is worth making.
COMPOSE = DownloadOptions(compose_threshold=64 * 1024, min_sources=2)


def seed(emulator: Emulator, bucket: str, sizes: Sequence[int],
         prefix: str = "d/") -> dict[str, bytes]:
    data = {f"{prefix}{i:05d}": os.urandom(size) for i, size in enumerate(sizes)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    return data


async def composites(client: AsyncClient, bucket: str) -> list[str]:
    return [o.name async for o in client.list_objects(bucket, COMPOSED_PREFIX)]


async def test_direct_download_many_is_byte_identical(client: AsyncClient, emulator: Emulator,
                                                      bucket: str) -> None:
    data = seed(emulator, bucket, [0, 1, 1000, 70_000, 5] * 8)
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    got = await download_many(client, objs)
    assert [bytes(g) for g in got] == [data[o.name] for o in objs]


async def test_defaults_compose_objects_up_to_32_kib(client: AsyncClient, emulator: Emulator,
                                                      bucket: str) -> None:
    # DEFAULT_COMPOSE_THRESHOLD (measured in perf/scenarios/loader_tiny.py):
    # up to 32 KiB objects are composed, larger ones read directly.
    data = seed(emulator, bucket, [32 * 1024] * 40 + [32 * 1024 + 1] * 5)
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    dl = Downloader(client)
    got = await dl.download_many(objs)
    assert got == [data[o.name] for o in objs]
    assert dl.stats.composed_objects == 40 and dl.stats.direct == 5
    assert await composites(client, bucket) == []


async def test_composed_batches_split_exactly_and_leave_nothing(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    data = seed(emulator, bucket, [(i * 37) % 3000 + 1 for i in range(100)] + [200_000])
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    dl = Downloader(client, COMPOSE)
    got = await dl.download_many(objs)
    assert [bytes(g) for g in got] == [data[o.name] for o in objs]
    assert dl.stats.composed_batches == 4  # 100 small objects in batches of <= 32
    assert dl.stats.composed_objects == 100 and dl.stats.direct == 1
    assert await composites(client, bucket) == []
    assert leftover_composites() == []


async def test_mismatching_composite_is_never_split(client: AsyncClient, emulator: Emulator,
                                                    bucket: str) -> None:
    data = seed(emulator, bucket, [100] * 10)
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    # A listing that disagrees with storage (e.g. a stale crc32c).
    objs[3] = objs[3].replace(crc32c=(objs[3].crc32c or 0) ^ 1)
    dl = Downloader(client, COMPOSE)
    got = await dl.download_many(objs)
    assert [bytes(g) for g in got] == [data[o.name] for o in objs]
    assert dl.stats.compose_mismatches == 1 and dl.stats.compose_fallbacks == 1
    assert dl.stats.composed_batches == 0 and dl.stats.direct == 10
    assert await composites(client, bucket) == []


async def test_changed_source_falls_back_to_direct(client: AsyncClient, emulator: Emulator,
                                                   bucket: str) -> None:
    seed(emulator, bucket, [50] * 4)
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    emulator.store.put(bucket, objs[0].name, b"new contents")  # generation moves on
    dl = Downloader(client, COMPOSE)
    got = await dl.download_many(objs)
    assert got[0] == b"new contents"
    assert dl.stats.compose_fallbacks == 1
    assert await composites(client, bucket) == []


class ReadOnlyClient(AsyncClient):
    compose_calls = 0

    async def compose(self, *args: Any, **kwargs: Any) -> ObjectInfo:
        self.compose_calls += 1
        raise PermissionDenied("compose: HTTP 403", operation="compose", status=403)


async def test_read_only_bucket_falls_back_once_and_remembers(
        emulator: Emulator, bucket: str, config: Any) -> None:
    data = seed(emulator, bucket, [10] * 40)
    async with ReadOnlyClient(config, endpoint=emulator.endpoint) as client:
        objs = await list_objects_parallel(client, bucket, "d/", sort=True)
        dl = Downloader(client, COMPOSE)
        first = await dl.download_many(objs[:32])
        second = await dl.download_many(objs[32:])
        assert [bytes(g) for g in first + second] == [data[o.name] for o in objs]
        assert client.compose_calls == 1 and dl.stats.compose_denied == 1
        assert bucket in dl.stats.denied_buckets


async def test_ranged_chunks_fill_one_buffer(client: AsyncClient, emulator: Emulator,
                                             bucket: str) -> None:
    data = seed(emulator, bucket, [3 * 1024 * 1024 + 7, 100])
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    opts = DownloadOptions(ranged_threshold=1024 * 1024, range_size=256 * 1024)
    dl = Downloader(client, opts)
    got = await dl.download_many(objs)
    assert isinstance(got[0], bytearray) and bytes(got[0]) == data[objs[0].name]
    assert got[1] == data[objs[1].name]
    assert dl.stats.ranged_objects == 1 and dl.stats.ranged_chunks == 13


@pytest.mark.parametrize("faulty", [False, True], ids=["clean", "faults"])
async def test_ranged_reads_grow_one_buffer_a_wave_at_a_time(
        faults: Emulator, client: AsyncClient, bucket: str, faulty: bool) -> None:
    # 4 waves of 16 ranges. Every wave is read in place and the buffer grows
    # for the next: never a copy of what arrived, also when a wave's ranges
    # were cut and retried (their errors hold views of the buffer in
    # reference cycles, which would refuse the growth until collected).
    step = 64 * 1024
    wave = step * WAVE_RANGES
    data = seed(faults, bucket, [4 * wave - 1000])
    [obj] = await list_objects_parallel(client, bucket, "d/")
    if faulty:
        faults.faults = Faults(p_reset=0.3, seed=11)
    dl = Downloader(client, DownloadOptions(ranged_threshold=1, range_size=step))
    tracemalloc.start()
    try:
        got = await dl.download(obj)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(got, bytearray) and got == data[obj.name]
    assert dl.stats.ranged_chunks == 4 * WAVE_RANGES
    assert (client.transport.stats.retries > 0) == faulty
    # The object and the requests' own buffers; a copy of the bytes so far
    # at any growth would add up to 3 waves.
    assert peak < obj.size + wave, (peak - obj.size) / wave


async def test_a_buffer_a_store_keeps_views_of_is_copied_to_grow(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    # A store that holds on to the buffers it filled: the planner cannot
    # grow that buffer in place, and copies it instead of failing.
    data = seed(emulator, bucket, [3 * WAVE_RANGES * 1000 + 7])
    [obj] = await list_objects_parallel(client, bucket, "d/")
    kept: list[memoryview] = []
    fetch = client.fetch

    async def keeping(*args: Any, into: memoryview | None = None, **kwargs: Any) -> Any:
        if into is not None:
            kept.append(into)
        return await fetch(*args, into=into, **kwargs)

    client.fetch = keeping  # type: ignore[method-assign]
    dl = Downloader(client, DownloadOptions(ranged_threshold=1, range_size=1000))
    got = await dl.download(obj)
    assert got == data[obj.name] and dl.stats.ranged_chunks == 3 * WAVE_RANGES + 1
    # Each wave filled a buffer of its own, the later ones copies of the first.
    assert len({id(view.obj) for view in kept}) == 4


async def test_a_range_that_came_back_short_fails_the_download(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    # The wave's memory is not zero-filled: a range that reports fewer bytes
    # than it spans (no store's checked read does) fails the download rather
    # than hand out what the memory held.
    seed(emulator, bucket, [4 * 1000])
    [obj] = await list_objects_parallel(client, bucket, "d/")
    fetch = client.fetch

    async def short(*args: Any, start: int = 0, **kwargs: Any) -> Any:
        got = await fetch(*args, start=start, **kwargs)
        return dataclasses.replace(got, count=got.count - 1) if start == 2000 else got

    client.fetch = short  # type: ignore[method-assign]
    dl = Downloader(client, DownloadOptions(ranged_threshold=1, range_size=1000))
    with pytest.raises(ProtocolError, match=r"bytes \[2000, 3000\) came back as 999 bytes"):
        await dl.download(obj)


async def test_downloads_survive_faults(faults: Emulator, client: AsyncClient,
                                        bucket: str) -> None:
    data = seed(faults, bucket, [4000] * 64 + [600_000])
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    faults.faults = Faults(p_503=0.1, p_429=0.05, p_reset=0.1, seed=7)
    opts = dataclasses.replace(COMPOSE, ranged_threshold=500_000, range_size=100_000)
    got = await Downloader(client, opts).download_many(objs)
    faults.faults = Faults()
    assert [bytes(g) for g in got] == [data[o.name] for o in objs]
    assert await composites(client, bucket) == []


@pytest.mark.parametrize("ordered", [True, False])
async def test_stream_window_and_early_break(client: AsyncClient, emulator: Emulator,
                                             bucket: str, ordered: bool) -> None:
    data = seed(emulator, bucket, [300] * 200)
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    dl = Downloader(client, COMPOSE)
    seen = [(o.name, d) async for o, d in dl.stream(objs, window=40, ordered=ordered)]
    assert sorted(seen) == sorted(data.items())
    if ordered:
        assert [n for n, _ in seen] == [o.name for o in objs]
    agen = dl.stream(objs, window=64, ordered=ordered)
    async for _ in agen:
        break
    await agen.aclose()  # what `async for` + break does once the generator is collected
    assert await composites(client, bucket) == []
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not [t for t in pending if "Downloader" in repr(t.get_coro())]


async def test_an_ordered_stream_keeps_input_order_across_sizes() -> None:
    # Small objects on both sides of larger ones went into one composite:
    # ordered=True yielded o/000, o/002, o/003 before o/001 (an iterable
    # dataset's batches then held other samples than its resumable state counts).
    store = MemoryStore(buckets=["bkt"])
    sizes = [100, 50_000, 100, 100, 50_000, 100] * 10
    infos = [await store.write("bkt", f"o/{i:03d}", os.urandom(size))
             for i, size in enumerate(sizes)]
    dl = Downloader(store, DownloadOptions(min_sources=2))
    got = [(o.name, bytes(d)) async for o, d in dl.stream(infos, window=64, ordered=True)]
    assert [name for name, _ in got] == [o.name for o in infos]
    assert got == [(o.name, (await store.read("bkt", o.name))) for o in infos]
    assert dl.stats.composed_batches > 0 and dl.stats.direct > 0


async def test_runs_of_fewer_small_objects_than_min_sources_are_read_directly() -> None:
    # An in-order stream of mixed sizes cut its runs of small objects into
    # composites of two or three: three requests (two of them writes) for
    # every two or three GETs saved.
    store = MemoryStore(buckets=["bkt"])
    sizes = [100] * 7 + [50_000] + [100] * 8 + [50_000] + [100] * 100
    infos = [await store.write("bkt", f"o/{i:03d}", os.urandom(size))
             for i, size in enumerate(sizes)]
    dl = Downloader(store)
    got = [(o.name, bytes(d)) async for o, d in dl.stream(infos, window=64, ordered=True)]
    assert got == [(o.name, (await store.read("bkt", o.name))) for o in infos]
    # 7 small + 1 large direct, 8 small composed, 1 large direct, then 100
    # small as 4 composites of 25 (not 32 + 32 + 32 and 4 read directly).
    assert dl.stats.composed_batches == 5 and dl.stats.composed_objects == 108
    assert dl.stats.direct == 9
    with pytest.raises(ValueError, match="min_sources must be 2-32"):
        DownloadOptions(min_sources=1)


class DeleteDenied(MemoryStore):
    """Write access without delete (roles/storage.objectCreator beside objectViewer)."""

    async def delete(self, bucket: str, name: str, **kw: Any) -> None:
        if self.deny:
            raise PermissionDenied(f"delete memory://{bucket}/{name} failed: HTTP 403",
                                   operation="delete", bucket=bucket, name=name, status=403)
        await super().delete(bucket, name, **kw)

    deny = True


async def test_a_bucket_that_refuses_deletes_stops_composing() -> None:
    # Every composite stayed in the bucket (the delete's 403 was swallowed)
    # and the planner went on composing: a batch of 32 objects left one
    # object behind, an epoch of a million objects ~31,000.
    store = DeleteDenied(buckets=["bkt"])
    infos = [await store.write("bkt", f"o/{i:04d}", os.urandom(100)) for i in range(320)]
    dl = Downloader(store)
    try:
        got = [bytes(d) for d in await dl.download_many(infos[:32])]
        got += [bytes(d) for d in await dl.download_many(infos[32:])]
        assert got == [await store.read("bkt", o.name) for o in infos]
        assert "bkt" in dl.stats.denied_buckets and dl.stats.compose_denied == 1
        assert len([o async for o in store.list_objects("bkt", COMPOSED_PREFIX)]) == 1
    finally:
        store.deny = False
        await delete_leftovers(store)
    assert leftover_composites() == []


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 5000), max_size=120), max_bytes=st.integers(0, 20000),
       max_sources=st.integers(1, 40))
def test_compose_plan_never_exceeds_limits(sizes: list[int], max_bytes: int,
                                           max_sources: int) -> None:
    objs = [ObjectInfo("b", f"o{i}", s) for i, s in enumerate(sizes)]
    batches = plan_batches(objs, max_sources, max_bytes)
    assert [i for b in batches for i in b] == list(range(len(objs)))
    for b in batches:
        assert 1 <= len(b) <= min(32, max(1, max_sources))
        if len(b) > 1 and max_bytes:
            assert sum(sizes[i] for i in b) <= max_bytes


async def test_a_store_without_compose_gets_direct_reads(tmp_path: Path) -> None:
    # LocalStore declares compose=0: the planner must not plan composites
    # (it would call compose and fall back on every batch).
    store = LocalStore()
    root = parse_url(str(tmp_path))
    names = [f"{root.name}/s/{i:03d}" for i in range(40)]
    for i, name in enumerate(names):
        await store.write(root.bucket, name, bytes([i]) * 100)
    objs = [o async for o in store.list_objects(root.bucket, f"{root.name}/s/")]
    downloader = Downloader(store, DownloadOptions())
    assert {kind for kind, _ in downloader.plan(objs)} == {"direct"}
    assert await downloader.download_many(objs) == [bytes([i]) * 100 for i in range(40)]
    assert downloader.stats.compose_fallbacks == 0


async def test_direct_reads_beyond_the_permits_wait_in_the_downloader() -> None:
    # 3 batches of 8 on 4 permits: only 4 reads at a time enter the store;
    # the rest wait at the top of the read, not deep inside the transport.
    class Counting(MemoryStore):
        inside = peak = 0

        async def read(self, bucket: str, name: str, **kw: Any) -> Any:
            Counting.inside += 1
            Counting.peak = max(Counting.peak, Counting.inside)
            try:
                await asyncio.sleep(0.001)
                return await super().read(bucket, name, **kw)
            finally:
                Counting.inside -= 1

    store = Counting(ClientConfig(max_concurrency=4), buckets=["bkt"])
    blobs = {f"o/{i:02d}": os.urandom(100 + i) for i in range(24)}
    infos = [await store.write("bkt", k, v) for k, v in blobs.items()]
    dl = Downloader(store, DownloadOptions(disable_compose=True))
    got = await asyncio.gather(*(dl.download_many(infos[i:i + 8]) for i in range(0, 24, 8)))
    assert [bytes(d) for batch in got for d in batch] == list(blobs.values())
    assert Counting.peak == 4 and dl.stats.direct == 24


@pytest.mark.parametrize(("field", "value"), [
    ("disable_compose", "yes"), ("disable_compose", 1), ("compose_threshold", "32k"),
    ("prefetch_bytes", 1.5), ("max_sources", True), ("min_sources", -3),
    ("hedge_budget", 2.0)])
def test_download_options_of_the_wrong_type_or_range_are_refused_by_name(
        field: str, value: object) -> None:
    # A string was taken for True ("yes" composed nothing, silently).
    with pytest.raises(InvalidArgument, match=field):
        DownloadOptions(**{field: value})  # type: ignore[arg-type]
