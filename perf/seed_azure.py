"""Seeding Azurite for the ``az_*`` scenarios: the same bodies as
:mod:`perf.seed`, uploaded with Microsoft's azure-storage-blob (its asyncio
client), so no client under test shapes the data.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

from perf.seed import _POOL_BYTES, ObjectSet, ShardSet, _makers

__all__ = ["read_all_azure", "seed_azure"]


async def _upload(connection_string: str, container: str,
                  sets: Sequence[ObjectSet | ShardSet], concurrency: int) -> int:
    from azure.storage.blob.aio import BlobServiceClient

    pool = random.Random(0).randbytes(_POOL_BYTES)
    items = _makers(sets, pool)
    sem = asyncio.Semaphore(concurrency)
    async with BlobServiceClient.from_connection_string(connection_string) as service:
        client = service.get_container_client(container)

        async def put(name: str, body: object) -> None:
            async with sem:
                data = body()  # type: ignore[operator]
                await client.upload_blob(name, data, overwrite=True, max_concurrency=4)

        await asyncio.gather(*(put(name, body) for name, body in items))
    return len(items)


def seed_azure(connection_string: str, container: str, sets: Sequence[ObjectSet | ShardSet],
               *, concurrency: int = 32) -> None:
    """Upload every object of ``sets`` into ``container`` (created first)."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    try:
        BlobServiceClient.from_connection_string(connection_string).create_container(container)
    except ResourceExistsError:
        pass
    if not sets:
        return
    start = time.perf_counter()
    count = asyncio.run(_upload(connection_string, container, sets, concurrency))
    total = sum(s.total_bytes for s in sets)
    print(f"[perf] seeded {count} blobs, {total / 1e6:.1f} MB into Azurite "
          f"in {time.perf_counter() - start:.1f}s", flush=True)


async def _read(connection_string: str, container: str, names: Sequence[str],
                concurrency: int) -> int:
    from azure.storage.blob.aio import BlobServiceClient

    sem = asyncio.Semaphore(concurrency)
    async with BlobServiceClient.from_connection_string(connection_string) as service:
        client = service.get_container_client(container)

        async def get(name: str) -> int:
            async with sem:
                return len(await (await client.download_blob(name)).readall())

        return sum(await asyncio.gather(*(get(n) for n in names)))


def read_all_azure(connection_string: str, container: str,
                   sets: Sequence[ObjectSet | ShardSet], *, concurrency: int = 32) -> None:
    """Read every seeded blob once, untimed (see :func:`perf.seed.read_all`)."""
    names = [n for s in sets for n in s.names()]
    if not names:
        return
    start = time.perf_counter()
    total = asyncio.run(_read(connection_string, container, names, concurrency))
    print(f"[perf] warm-up read {len(names)} blobs, {total / 1e6:.1f} MB "
          f"in {time.perf_counter() - start:.1f}s", flush=True)
