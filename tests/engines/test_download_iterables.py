"""list_files / load_files (sync and async) and AsyncClient.stream."""

from __future__ import annotations

import os

import pytest

from aioflux import AsyncClient, Client
from aioflux._api.iterables import alist_files, aload_files, list_files, load_files
from aioflux.testing import Emulator


def seed(emulator: Emulator, bucket: str, count: int, size: int) -> dict[str, bytes]:
    data = {f"p/{i:04d}": os.urandom(size) for i in range(count)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    emulator.store.put(bucket, "p/folder/", b"")
    return {f"gs://{bucket}/{k}": v for k, v in data.items()}


def test_sync_list_then_load_composes(sync_client: Client, emulator: Emulator,
                                      bucket: str) -> None:
    data = seed(emulator, bucket, 150, 2000)
    urls = list_files(f"gs://{bucket}/p/", client=sync_client)
    loaded = list(load_files(urls, client=sync_client, concurrency=16))
    assert sorted(u for u, _ in loaded) == sorted(data)
    assert all(body == data[u] for u, body in loaded)


def test_sync_load_files_unordered_and_early_close(sync_client: Client, emulator: Emulator,
                                                   bucket: str) -> None:
    data = seed(emulator, bucket, 60, 100)
    urls = sorted(data)
    got = dict(load_files(urls, client=sync_client, concurrency=8, ordered=False))
    assert got == data
    it = load_files(urls, client=sync_client, concurrency=8)
    assert next(it) == (urls[0], data[urls[0]])
    it.close()  # cancels the reads in flight


async def test_async_list_and_load(client: AsyncClient, emulator: Emulator,
                                   bucket: str) -> None:
    data = seed(emulator, bucket, 120, 500)
    urls = alist_files(f"gs://{bucket}/p/", client=client)
    got = [pair async for pair in aload_files(urls, client=client, concurrency=10)]
    assert dict(got) == data and len(got) == len(data)


@pytest.mark.parametrize("ordered", [False, True])
async def test_client_stream_yields_every_object_once(client: AsyncClient, emulator: Emulator,
                                                      bucket: str, ordered: bool) -> None:
    data = seed(emulator, bucket, 1500, 64)
    seen = []
    async for obj in client.stream(f"gs://{bucket}/p/", concurrency=32, ordered=ordered):
        assert obj.data == data[obj.url]
        seen.append(obj.name)
    assert sorted(seen) == sorted(u.split("/", 3)[3] for u in data)
    assert len(seen) == len(set(seen))


async def test_stream_of_a_url_refuses_a_prefix_beside_it(client: AsyncClient,
                                                          bucket: str) -> None:
    # The docstring said the prefix must be empty; it was appended to the URL's.
    from aioflux import InvalidArgument

    with pytest.raises(InvalidArgument, match="prefix='x' beside a URL"):
        async for _ in client.stream(f"gs://{bucket}/p/", prefix="x"):
            pass


async def test_ordered_stream_is_name_order_across_parallel_listers(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    # Ten pages of names on the default 16 listers: ordered=True yielded the
    # pages as the listers brought them (name order within a page only), a
    # different order each run; every run out of order at this size.
    names = [f"o/{i:05d}" for i in range(10_000)]
    for name in names:
        emulator.store.put(bucket, name, name.encode())
    got = [(item.name, bytes(item.data))
           async for item in client.stream(f"gs://{bucket}/o/", ordered=True)]
    assert [name for name, _ in got] == names
    assert all(data == name.encode() for name, data in got)


async def test_ordered_list_files_is_in_name_order(client: AsyncClient, sync_client: Client,
                                                   emulator: Emulator, bucket: str) -> None:
    # Three pages and more, split among the parallel listers (the engine's
    # ordering under every interleaving: tests/engines/test_stream_order.py).
    data = seed(emulator, bucket, 2500, 1)
    want = sorted(data)
    got = [u async for u in alist_files(f"gs://{bucket}/p/", client=client, concurrency=8,
                                        ordered=True)]
    assert got == want
    assert list(list_files([f"gs://{bucket}/p/"], client=sync_client, concurrency=8,
                           ordered=True)) == want
