"""Streams hold a bounded number of bytes ahead of their consumer
(``DownloadOptions.prefetch_bytes``), not only a bounded number of objects.

The stores count the reads they start; a slow consumer compares that with
what it has taken: the difference is what the stream holds (downloading, or
downloaded and not yet yielded).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from aioflux import ClientConfig, DownloadOptions, ObjectInfo
from aioflux._core.concurrency.window import window
from aioflux._engines.cache import DiskCache
from aioflux._engines.cache._downloader import CachedDownloader
from aioflux._engines.download import DEFAULT_PREFETCH_BYTES, Downloader
from aioflux._engines.iterables import stream
from aioflux.testing import MemoryStore

KIB = 1024


class Counting(MemoryStore):
    """Counts reads started, and the most inside ``read`` at once."""

    def __init__(self, *args: Any, delay: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started = self.inside = self.peak_inside = 0
        self.delay = delay

    async def read(self, bucket: str, name: str, **kw: Any) -> Any:
        self.started += 1
        self.inside += 1
        self.peak_inside = max(self.peak_inside, self.inside)
        try:
            await asyncio.sleep(self.delay)
            return await super().read(bucket, name, **kw)
        finally:
            self.inside -= 1


async def seeded(count: int, size: int, **kwargs: Any) -> tuple[Counting, list[ObjectInfo],
                                                                 list[bytes]]:
    store = Counting(buckets=["bkt"], **kwargs)
    bodies = [os.urandom(size) for _ in range(count)]
    infos = [await store.write("bkt", f"o/{i:04d}", b) for i, b in enumerate(bodies)]
    store.started = 0
    return store, infos, bodies


async def held_ahead(store: Counting, items: Any) -> tuple[list[bytes], int]:
    """Consume slowly; the most objects started but not yet taken, and the bytes."""
    got: list[bytes] = []
    most = 0
    async for data in items:
        most = max(most, store.started - len(got))
        got.append(bytes(data))
        await asyncio.sleep(0.001)  # the stream starts whatever it may meanwhile
    return got, most


@pytest.mark.parametrize("ordered", [True, False])
async def test_downloader_stream_holds_at_most_prefetch_bytes(ordered: bool) -> None:
    store, infos, bodies = await seeded(60, 64 * KIB)
    dl = Downloader(store, DownloadOptions(disable_compose=True, prefetch_bytes=256 * KIB))
    got, most = await held_ahead(store, (d async for _, d in dl.stream(infos, window=64,
                                                                       ordered=ordered)))
    assert sorted(got) == sorted(bodies)
    if ordered:
        assert got == bodies
    # 4 objects of 64 KiB fill the budget: the one just yielded and 3
    # behind it. By count alone (window 64) all 60 started at once.
    assert most == 4


class CountingBytes(MemoryStore):
    """Counts the bytes its reads returned, composites' included."""

    got = 0

    async def fetch(self, *args: Any, **kw: Any) -> Any:
        fetched = await super().fetch(*args, **kw)
        self.got += fetched.count
        return fetched

    async def read(self, *args: Any, **kw: Any) -> Any:
        data = await super().read(*args, **kw)
        self.got += len(data)
        return data


@pytest.mark.parametrize("ordered", [True, False])
async def test_composites_of_a_stream_stay_within_prefetch_bytes(ordered: bool) -> None:
    # A composite is held whole: 32 objects of 30 KiB (960 KiB) were one
    # unit, however small prefetch_bytes (half of that held 1.9 times it).
    # Now a composite takes at most an eighth of it: 2 objects here.
    store = CountingBytes(buckets=["bkt"])
    bodies = [os.urandom(30 * KIB) for _ in range(200)]
    infos = [await store.write("bkt", f"o/{i:04d}", b) for i, b in enumerate(bodies)]
    store.got = 0
    dl = Downloader(store, DownloadOptions(prefetch_bytes=512 * KIB, min_sources=2))
    got: list[bytes] = []
    most = 0
    async for _, data in dl.stream(infos, window=64, ordered=ordered):
        most = max(most, store.got - 30 * KIB * len(got))
        got.append(bytes(data))
        await asyncio.sleep(0.001)
    assert sorted(got) == sorted(bodies)
    assert dl.stats.composed_batches > 0
    assert most <= 512 * KIB + 30 * KIB


async def test_an_object_larger_than_the_budget_still_flows_one_at_a_time() -> None:
    store, infos, bodies = await seeded(12, 64 * KIB)
    dl = Downloader(store, DownloadOptions(disable_compose=True, prefetch_bytes=1))
    got, most = await held_ahead(store, (d async for _, d in dl.stream(infos, window=64)))
    assert got == bodies
    assert most == 1


async def test_a_size_listed_wrong_counts_as_what_it_turned_out_to_be() -> None:
    # Listed as 0 bytes (unknown): nothing bounds the first window's worth
    # but the count (16). Once their 64 KiB arrive they count, and no more
    # start until the consumer has brought the bytes held within 256 KiB
    # (3 objects held): 13 taken. Counted as 0 for good, each one taken
    # would start the next at once. The 3 held have ended, so they take no
    # place in the window: 16 start then.
    store, infos, bodies = await seeded(40, 64 * KIB)
    unknown = [o.replace(size=0, crc32c=None) for o in infos]
    dl = Downloader(store, DownloadOptions(disable_compose=True, prefetch_bytes=256 * KIB))
    got: list[bytes] = []
    started: list[int] = []
    async for _, data in dl.stream(unknown, window=16):
        started.append(store.started)
        got.append(bytes(data))
        await asyncio.sleep(0.001)
    assert got == bodies
    # (The reads admitted as the 13th is yielded start after it.)
    assert started[:13] == [16] * 13
    assert started[13] == 16 + 16


async def test_small_objects_keep_the_whole_window_in_flight() -> None:
    # perf s3_loader / loader's shape: 100 KiB objects, 128 permits and a
    # window of 128; 128 x 100 KiB is far within the default budget.
    store, infos, bodies = await seeded(300, 100 * KIB, delay=0.01)
    assert store.config.max_concurrency == 128
    dl = Downloader(store, DownloadOptions(disable_compose=True))
    assert dl.options.prefetch_bytes == DEFAULT_PREFETCH_BYTES
    got = [bytes(d) async for _, d in dl.stream(infos, window=128)]
    assert got == bodies
    assert store.peak_inside == 128


async def test_client_stream_holds_at_most_prefetch_bytes() -> None:
    store, _, bodies = await seeded(50, 64 * KIB)
    items = stream(store, "bkt", "o/", concurrency=32, ordered=True,
                   options=DownloadOptions(prefetch_bytes=128 * KIB))
    got, most = await held_ahead(store, (item.data async for item in items))
    assert got == bodies
    assert most == 2  # the one just yielded and one behind it


async def test_window_needs_nbytes_with_max_bytes() -> None:
    async def job(item: int) -> int:
        return item

    for kwargs in ({"max_bytes": 10}, {"nbytes": int}, {"measure": int}):
        with pytest.raises(ValueError, match="max_bytes and nbytes"):
            async for _ in window([1], job, limit=1, **kwargs):  # type: ignore[arg-type]
                pass


def test_prefetch_bytes_is_checked() -> None:
    with pytest.raises(ValueError, match="prefetch_bytes"):
        DownloadOptions(prefetch_bytes=0)
    assert ClientConfig().max_concurrency * 100 * KIB < DEFAULT_PREFETCH_BYTES


async def test_a_cached_stream_holds_at_most_prefetch_bytes(tmp_path: Any) -> None:
    # With cache_dir= the misses go to the store in groups; a group of 8 MiB
    # objects must not be 32 of them, and groups count against the budget.
    store, infos, bodies = await seeded(60, 64 * KIB)
    dl = CachedDownloader(store, DownloadOptions(disable_compose=True,
                                                 prefetch_bytes=512 * KIB),
                          cache=DiskCache(tmp_path / "cache"))
    got, most = await held_ahead(store, (d async for _, d in dl.stream(infos, window=64)))
    assert got == bodies
    # Groups of one object (an eighth of 512 KiB is 64 KiB), 8 of them in the
    # budget; by count alone two groups of 32 started at once.
    assert most <= 8
