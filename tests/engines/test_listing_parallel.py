"""Parallel listing against the emulator (and fake-gcs-server)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioflux import AsyncClient, ServerError
from aioflux._engines.compose import COMPOSED_PREFIX
from aioflux._engines.listing import iter_objects, list_objects_parallel
from aioflux.testing import Emulator, MemoryStore
from tests.conftest import unique_bucket


def _seed_names(emulator: Emulator, bucket: str, names: list[str]) -> None:
    for name in names:
        emulator.store.put(bucket, name, name.encode())


async def test_parallel_listing_matches_store(client: AsyncClient, emulator: Emulator,
                                              bucket: str) -> None:
    names = [f"train/{i % 7}/sample-{i:05d}.bin" for i in range(3500)]
    _seed_names(emulator, bucket, [*names, "train/dir/", f"{COMPOSED_PREFIX}9-abc", "other/x"])
    before = client.transport.stats.requests
    got = await list_objects_parallel(client, bucket, "train/", concurrency=8, sort=True)
    assert [o.name for o in got] == sorted(names)
    assert all(o.size == len(o.name) and o.generation > 0 and o.crc32c is not None for o in got)
    # 3500 names fill 4 sequential pages; work stealing adds a bounded number of requests.
    assert client.transport.stats.requests - before < 4 + 8 * 3


async def test_parallel_listing_unsorted_and_streaming(client: AsyncClient, emulator: Emulator,
                                                       bucket: str) -> None:
    names = [f"{chr(97 + i % 26)}{i}" for i in range(2100)]
    _seed_names(emulator, bucket, names)
    got = await list_objects_parallel(client, bucket, concurrency=5)
    assert sorted(o.name for o in got) == sorted(names)
    streamed = [o.name async for o in iter_objects(client, bucket, concurrency=3)]
    assert sorted(streamed) == sorted(names)


async def test_parallel_listing_on_fake_gcs_server(fake_gcs: object) -> None:
    endpoint = fake_gcs.endpoint  # type: ignore[attr-defined]
    async with AsyncClient(endpoint=endpoint) as client:
        bucket = unique_bucket("listing-fake")  # fake-gcs-server is shared by the session
        await client.create_bucket(bucket)
        names = [f"f/{i:03d}" for i in range(60)]
        for n in names:
            await client.write(bucket, n, n.encode())
        got = await list_objects_parallel(client, bucket, "f/", concurrency=4, sort=True)
        assert [o.name for o in got] == names


async def test_every_failed_lister_is_retrieved_the_first_raised() -> None:
    # Listers that fail after the first: only the first failure was taken,
    # and asyncio logged each other one as "Task exception was never
    # retrieved", with its traceback.
    class SplitsFail(MemoryStore):
        """A listing from an offset (a split lister's) fails."""

        def list(self, bucket: str, prefix: str = "", **kw: Any) -> Any:
            if not kw.get("start_offset"):
                return super().list(bucket, prefix, **kw)

            async def failing() -> AsyncIterator[Any]:
                await asyncio.sleep(0)
                raise ServerError(f"list {bucket}/{prefix} failed: HTTP 500", operation="list",
                                  bucket=bucket, name=prefix, status=500)
                yield  # an async generator

            return failing()

    reported: list[object] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx))
    store = SplitsFail(buckets=["bkt"])
    for i in range(20_000):
        await store.write("bkt", f"p/{i:06d}", b"")
    with pytest.raises(ServerError):
        async for _ in iter_objects(store, "bkt", "p/", concurrency=16):
            pass
    gc.collect()
    await asyncio.sleep(0)
    assert reported == []
