"""The code under test: a stand-in for a module of your project."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aioflux


def upload_dir(local_dir: Path, url: str, client: aioflux.Client) -> int:
    """Upload every file under ``local_dir`` to ``gs://bucket/prefix/<relative path>``.

    Returns:
        The number of files uploaded.
    """
    bucket, prefix = aioflux.parse_url(url)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    files = sorted(p for p in Path(local_dir).rglob("*") if p.is_file())

    async def upload_all() -> None:
        # Concurrent uploads, bounded by the client's max_concurrency.
        await asyncio.gather(*(
            client.aio.write(bucket, prefix + p.relative_to(local_dir).as_posix(), p.read_bytes())
            for p in files))

    aioflux.call(upload_all())  # run on aioflux's background event loop
    return len(files)


def count_objects(url: str, client: aioflux.Client) -> int:
    """How many objects live under ``gs://bucket/prefix``."""
    bucket, prefix = aioflux.parse_url(url)
    return sum(1 for _ in client.list_objects(bucket, prefix))
