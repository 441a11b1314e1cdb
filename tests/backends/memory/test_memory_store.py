"""``aioflux.testing.MemoryStore``: the in-memory ObjectStore behaves as a bucket does."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import pytest

from aioflux import (
    ChecksumMismatch,
    Conflict,
    InvalidArgument,
    InvalidRequest,
    InvalidURL,
    NotFound,
    ObjectStore,
    PreconditionFailed,
    WriterOptions,
)
from aioflux._core.concurrency.portal import call
from aioflux._core.integrity.crc import Crc32c, crc32c
from aioflux._core.storage.protocol import StoreFeatures
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux._engines.clean import clean_bucket
from aioflux._engines.writer import ObjectWriter
from aioflux.testing import MemoryStore

B = "bkt"


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(buckets=[B])


def _crc(parts: list[bytes]) -> Crc32c:
    running = Crc32c()
    for part in parts:
        running.update(part)
    return running


def test_it_is_an_object_store_with_the_features_it_implements() -> None:
    store = MemoryStore()
    assert isinstance(store, ObjectStore)
    features = store.features
    assert (features.scheme, features.compose, features.end_offset, features.multipart) == (
        "memory", 32, True, True)


async def test_write_keeps_bytes_crc32c_and_a_growing_generation(store: MemoryStore) -> None:
    first = await store.write(B, "a", b"hello", content_type="text/plain",
                              metadata={"k": "v"})
    second = await store.write(B, "b", bytearray(b"world!"))
    again = await store.write(B, "a", memoryview(b"hello again"))
    assert first.crc32c == crc32c(b"hello") and second.crc32c == crc32c(b"world!")
    assert first.generation < second.generation < again.generation
    info = await store.stat(B, "a")
    assert info == again
    assert (info.size, info.scheme, info.url) == (11, "memory", "memory://bkt/a")
    assert (await store.stat(B, "b")).size == 6
    assert await store.read(B, "a") == b"hello again"
    assert first.content_type == "text/plain" and first.metadata == {"k": "v"}


async def test_written_data_is_copied(store: MemoryStore) -> None:
    buf = bytearray(b"abc")
    await store.write(B, "x", buf)
    buf[:] = b"zzz"
    assert await store.read(B, "x") == b"abc"


async def test_missing_object_and_bucket_are_not_found_with_names(store: MemoryStore) -> None:
    with pytest.raises(NotFound, match=r"stat memory://bkt/nope failed") as exc:
        await store.stat(B, "nope")
    assert (exc.value.operation, exc.value.bucket, exc.value.name) == ("stat", B, "nope")
    with pytest.raises(NotFound, match="no such bucket"):
        await store.write("other", "x", b"1")
    with pytest.raises(NotFound):
        await store.read(B, "nope")
    assert not await store.exists(B, "nope")


async def test_if_generation_match_zero_and_n(store: MemoryStore) -> None:
    info = await store.write(B, "obj", b"1", if_generation_match=0)
    with pytest.raises(PreconditionFailed, match=r"write memory://bkt/obj") as exc:
        await store.write(B, "obj", b"2", if_generation_match=0)
    assert exc.value.status == 412
    with pytest.raises(PreconditionFailed):
        await store.write(B, "obj", b"2", if_generation_match=info.generation + 100)
    with pytest.raises(PreconditionFailed):
        await store.write(B, "absent", b"2", if_generation_match=5)
    newer = await store.write(B, "obj", b"3", if_generation_match=info.generation)
    assert await store.read(B, "obj") == b"3" and newer.generation > info.generation


async def test_generation_pins_reads_and_deletes(store: MemoryStore) -> None:
    old = await store.write(B, "obj", b"old")
    new = await store.write(B, "obj", b"new")
    assert await store.read(B, "obj", generation=new.generation) == b"new"
    with pytest.raises(NotFound, match=f"generation {old.generation} is gone"):
        await store.read(B, "obj", generation=old.generation)
    with pytest.raises(NotFound):
        await store.delete(B, "obj", generation=old.generation)
    with pytest.raises(PreconditionFailed):
        await store.delete(B, "obj", if_generation_match=old.generation)
    assert await store.exists(B, "obj")
    await store.delete(B, "obj", generation=new.generation)
    assert not await store.exists(B, "obj")
    with pytest.raises(NotFound):
        await store.delete(B, "obj")
    await store.delete(B, "obj", missing_ok=True)


async def test_ranged_reads_and_into(store: MemoryStore) -> None:
    data = bytes(range(256)) * 4
    await store.write(B, "r", data)
    assert await store.read(B, "r", start=10, end=20) == data[10:20]
    assert await store.read(B, "r", start=1000) == data[1000:]
    assert await store.read(B, "r", start=1000, end=5000) == data[1000:]
    buf = bytearray(2000)
    assert await store.read(B, "r", into=memoryview(buf)[5:]) == len(data)
    assert bytes(buf[5:5 + len(data)]) == data and buf[:5] == bytes(5)
    assert await store.read(B, "r", start=3, end=7, into=buf) == 4 and buf[:4] == data[3:7]
    with pytest.raises(InvalidRequest, match="past the end"):
        await store.read(B, "r", start=len(data))
    with pytest.raises(InvalidArgument, match="do not fit a buffer of 10"):
        await store.read(B, "r", into=bytearray(10))
    await store.write(B, "empty", b"")
    assert await store.read(B, "empty") == b""


async def test_fetch_checks_what_the_caller_knows(store: MemoryStore) -> None:
    info = await store.write(B, "f", b"0123456789")
    got = await store.fetch(B, "f", size=info.size, crc=info.crc32c, want_crc=True)
    assert (got.data, got.count, got.crc, got.size) == (b"0123456789", 10, info.crc32c, 10)
    part = await store.fetch(B, "f", start=2, end=5, want_crc=True)
    assert (part.data, part.crc) == (b"234", crc32c(b"234"))
    with pytest.raises(ChecksumMismatch, match="the caller expected 11"):
        await store.fetch(B, "f", size=11)
    with pytest.raises(ChecksumMismatch, match="crc32c"):
        await store.fetch(B, "f", crc=(info.crc32c or 0) ^ 1)


def _expected_listing(names: list[str], prefix: str, delimiter: str | None,
                      start: str | None, end: str | None) -> tuple[list[str], list[str]]:
    objects: list[str] = []
    prefixes: list[str] = []
    for name in sorted(names):
        if not name.startswith(prefix) or (start is not None and name < start) or (
                end is not None and name >= end):
            continue
        cut = name.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            group = name[:cut + len(delimiter or "")]
            if group not in prefixes:
                prefixes.append(group)
        else:
            objects.append(name)
    return objects, prefixes


NAMES = ["a", "a/1", "a/2", "a/b/3", "a0", "b/x", "b/y", "c", "d/e/f", "dz"]


@pytest.mark.parametrize("page_size", [1, 2, 3, 1000])
@pytest.mark.parametrize(("prefix", "delimiter", "start", "end"), [
    ("", None, None, None), ("", "/", None, None), ("a", "/", None, None),
    ("a/", "/", None, None), ("", "/", "a0", "d"), ("", None, "a/2", "b/y"),
    ("b/", None, None, None), ("zz", "/", None, None), ("", "/", "b/y", None),
])
async def test_listing_is_sorted_paginated_grouped_and_ranged(
        store: MemoryStore, page_size: int, prefix: str, delimiter: str | None,
        start: str | None, end: str | None) -> None:
    for name in reversed(NAMES):
        await store.write(B, name, name.encode())
    objects: list[str] = []
    prefixes: list[str] = []
    pages = 0
    async for page in store.list(B, prefix, delimiter=delimiter, start_offset=start,
                                 end_offset=end, page_size=page_size):
        pages += 1
        assert len(page.objects) + len(page.prefixes) <= page_size
        objects += [o.name for o in page.objects]
        prefixes += page.prefixes
        assert all(o.size == len(o.name) for o in page.objects)
    expected = _expected_listing(NAMES, prefix, delimiter, start, end)
    assert (objects, prefixes) == expected
    entries = len(expected[0]) + len(expected[1])
    assert pages == max(1, -(-entries // page_size))
    listed = [o.name async for o in store.list_objects(B, prefix, start_offset=start,
                                                       end_offset=end)]
    assert listed == _expected_listing(NAMES, prefix, None, start, end)[0]


async def test_listing_a_missing_bucket_is_not_found() -> None:
    with pytest.raises(NotFound):
        async for _ in MemoryStore().list("nobucket"):
            pass


async def test_streaming_upload_publishes_only_on_finish(store: MemoryStore) -> None:
    parts = [b"a" * 4, b"b" * 4, b"c" * 4]
    upload = store.start_upload(B, "big", content_type="x/y", part_size=4)
    # Parts arrive out of order and concurrently, as the writer sends them.
    await asyncio.gather(upload.put(3, memoryview(parts[2])),
                         upload.put(1, memoryview(parts[0]), crc32c(parts[0])))
    assert not await store.exists(B, "big")
    [open_upload] = await store.list_multipart_uploads(B, "bi")
    assert (open_upload.name, open_upload.upload_id) == ("big", upload.upload_id)
    assert [p.number for p in await store.list_parts(B, "big", open_upload.upload_id)] == [1, 3]
    await upload.put(2, memoryview(parts[1]))
    info = await upload.finish(3, None, _crc(parts))
    assert upload.mode == "multipart"
    assert await store.read(B, "big") == b"".join(parts)
    assert (info.crc32c, info.content_type) == (crc32c(b"".join(parts)), "x/y")
    assert await store.list_multipart_uploads(B) == []


async def test_streaming_upload_checks_the_running_crc32c(store: MemoryStore) -> None:
    upload = store.start_upload(B, "bad", part_size=4)
    await upload.put(1, memoryview(b"aaaa"))
    with pytest.raises(ChecksumMismatch, match="nothing was published"):
        await upload.finish(2, memoryview(b"bb"), _crc([b"aaaa", b"bX"]))
    assert not await store.exists(B, "bad")
    await upload.abort()
    await upload.abort()
    assert await store.list_multipart_uploads(B) == []
    with pytest.raises(ChecksumMismatch):
        await store.start_upload(B, "part", part_size=4).put(1, memoryview(b"aaaa"), 123)


async def test_streaming_upload_with_a_missing_part_publishes_nothing(store: MemoryStore) -> None:
    upload = store.start_upload(B, "gap", part_size=1)
    await upload.put(1, memoryview(b"a"))
    with pytest.raises(InvalidRequest, match=r"parts \[2\]"):
        await upload.finish(3, memoryview(b"c"), _crc([b"a", b"c"]))
    assert not await store.exists(B, "gap")


async def test_small_streaming_upload_is_one_write(store: MemoryStore) -> None:
    upload = store.start_upload(B, "small", part_size=4)
    info = await upload.finish(1, memoryview(b"xy"), _crc([b"xy"]))
    assert upload.mode == "single" and await store.read(B, "small") == b"xy"
    assert info.crc32c == crc32c(b"xy")
    with pytest.raises(ChecksumMismatch):
        await store.start_upload(B, "small2", part_size=4).finish(1, memoryview(b"xy"),
                                                                  _crc([b"xz"]))
    assert not await store.exists(B, "small2")


async def test_the_writer_engine_runs_on_it(store: MemoryStore) -> None:
    payload = bytes(itertools.islice(itertools.cycle(range(251)), 10_000))
    options = WriterOptions(part_size=1024, max_in_flight=3)
    async with AsyncObjectWriter(store, B, "w", options=options) as writer:
        for at in range(0, len(payload), 700):
            await writer.write(payload[at:at + 700])
    assert await store.read(B, "w") == payload
    assert writer.stats.parts == 10 and writer.stats.mode == "multipart"


async def test_multipart_primitives(store: MemoryStore) -> None:
    upload_id = await store.initiate_multipart(B, "mp")
    one = await store.upload_part(B, "mp", upload_id, 1, b"one-", crc32c(b"one-"))
    two = await store.upload_part(B, "mp", upload_id, 2, b"two")
    with pytest.raises(ChecksumMismatch):
        await store.upload_part(B, "mp", upload_id, 3, b"three", crc32c(b"3"))
    with pytest.raises(InvalidRequest, match="ascending"):
        await store.complete_multipart(B, "mp", upload_id, [two, one])
    with pytest.raises(InvalidRequest, match="not uploaded"):
        await store.complete_multipart(B, "mp", upload_id,
                                       [one, type(two)(2, '"other"', two.size)])
    headers = await store.complete_multipart(B, "mp", upload_id, [one, two])
    info = await store.stat(B, "mp")
    assert await store.read(B, "mp") == b"one-two"
    assert headers["x-goog-generation"] == str(info.generation)
    with pytest.raises(NotFound, match="no upload"):
        await store.list_parts(B, "mp", upload_id)
    other = await store.initiate_multipart(B, "mp2")
    await store.abort_multipart(B, "mp2", other)
    with pytest.raises(NotFound):
        await store.abort_multipart(B, "mp2", other)


async def test_clean_aborts_open_uploads_on_it(store: MemoryStore) -> None:
    upload = store.start_upload(B, "killed", part_size=4)
    await upload.put(1, memoryview(b"abcd"))
    [listed] = await store.list_multipart_uploads(B)
    report = await clean_bucket(store, B, older_than=0)
    assert [u.upload_id for u in report.uploads] == [listed.upload_id] == [upload.upload_id]
    assert report.errors == [] and await store.list_multipart_uploads(B) == []


async def test_compose_copy_and_their_preconditions(store: MemoryStore) -> None:
    a = await store.write(B, "a", b"AAA")
    b = await store.write(B, "b", b"BB")
    info = await store.compose(B, "ab", [a, ("b", b.generation), "a"],
                               content_type="t/c", if_generation_match=0)
    assert await store.read(B, "ab") == b"AAABBAAA"
    assert (info.crc32c, info.content_type) == (crc32c(b"AAABBAAA"), "t/c")
    with pytest.raises(PreconditionFailed):
        await store.compose(B, "ab", ["a"], if_generation_match=0)
    await store.write(B, "b", b"changed")
    with pytest.raises(PreconditionFailed, match="source b"):
        await store.compose(B, "ab2", [a, b])
    with pytest.raises(ChecksumMismatch, match="nothing was published"):
        await store.compose(B, "ab3", [a, b.replace(generation=0)])
    assert not await store.exists(B, "ab3")
    with pytest.raises(InvalidArgument, match="1-32"):
        await store.compose(B, "many", ["a"] * 33)
    with pytest.raises(NotFound):
        await store.compose(B, "x", ["missing"])
    copied = await store.copy(B, "ab", B, "copy")
    assert await store.read(B, "copy") == b"AAABBAAA"
    assert copied.crc32c == info.crc32c and copied.generation > info.generation


async def test_buckets_exist_once_created() -> None:
    store = MemoryStore()
    with pytest.raises(NotFound, match="no such bucket"):
        await store.stat("fresh", "x")
    await store.create_bucket("fresh")
    with pytest.raises(Conflict, match="the bucket exists"):
        await store.create_bucket("fresh")
    with pytest.raises(InvalidURL):
        await store.create_bucket("Not A Bucket")
    await store.write("fresh", "x", b"1")
    with pytest.raises(NotFound, match="copy memory://nowhere/y"):
        await store.copy("fresh", "x", "nowhere", "y")
    assert [o.name async for o in store.list_objects("fresh")] == ["x"]


class _FewParts(MemoryStore):
    """A store that takes at most 3 parts an upload."""

    @property
    def features(self) -> StoreFeatures:
        return dataclasses.replace(super().features, max_parts=3)


def test_a_part_past_the_stores_limit_is_refused_and_nothing_published() -> None:
    store = _FewParts(buckets=["bkt"])
    with pytest.raises(InvalidArgument, match=r"more than 3 parts of .*part_size"):
        with ObjectWriter(store, "bkt", "big", options=WriterOptions(part_size=4)) as f:
            f.write(b"x" * 20)
    assert call(store.exists("bkt", "big")) is False
    with ObjectWriter(store, "bkt", "fits", options=WriterOptions(part_size=4)) as f:
        f.write(b"x" * 11)  # two parts and a tail
    assert call(store.read("bkt", "fits")) == b"x" * 11


@pytest.mark.parametrize("pieces", [[12], [4, 4, 4], [1] * 12])
def test_exactly_max_parts_full_parts_fit_and_one_byte_more_does_not(pieces: list[int]) -> None:
    # The last part may be a full one: a writer that sent a full buffer as
    # soon as it filled refused the object of exactly max_parts parts
    # (`aioflux cp` of any file past 80 GiB whose size divides by 10,000).
    store = _FewParts(buckets=["bkt"])
    with ObjectWriter(store, "bkt", "full", options=WriterOptions(part_size=4)) as f:
        for n in pieces:
            f.write(b"y" * n)
    assert call(store.read("bkt", "full")) == b"y" * 12
    assert f.stats.parts == 3
    with pytest.raises(InvalidArgument, match=r"more than 3 parts"):
        with ObjectWriter(store, "bkt", "over", options=WriterOptions(part_size=4)) as f:
            for n in pieces:
                f.write(b"y" * n)
            f.write(b"y")
    assert call(store.exists("bkt", "over")) is False


async def test_the_async_writer_refuses_a_part_past_the_limit_too() -> None:
    store = _FewParts(buckets=["bkt"])
    with pytest.raises(InvalidArgument, match=r"more than 3 parts"):
        async with AsyncObjectWriter(store, "bkt", "big",
                                     options=WriterOptions(part_size=4)) as f:
            await f.write(b"x" * 20)
    assert not await store.exists("bkt", "big")
    async with AsyncObjectWriter(store, "bkt", "full", options=WriterOptions(part_size=4)) as f:
        await f.write(b"y" * 8)
        await f.write(b"y" * 4)  # the third part, a full one, is the last
    assert await store.read("bkt", "full") == b"y" * 12
    assert f.stats.parts == 3
    with pytest.raises(InvalidArgument, match=r"more than 3 parts"):
        async with AsyncObjectWriter(store, "bkt", "over",
                                     options=WriterOptions(part_size=4)) as f:
            await f.write(b"y" * 12)
            await f.write(b"y")
    assert not await store.exists("bkt", "over")
