"""The code under test: a stand-in for a module of your project."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
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

    def upload(path: Path) -> None:
        client.write(bucket, prefix + path.relative_to(local_dir).as_posix(), path.read_bytes())

    # Client calls block only their own thread: the requests of 16 threads
    # overlap on the client's event loop, bounded by its max_concurrency.
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(upload, files))
    return len(files)


def count_objects(url: str, client: aioflux.Client) -> int:
    """How many objects live under ``gs://bucket/prefix``."""
    bucket, prefix = aioflux.parse_url(url)
    return sum(1 for _ in client.list_objects(bucket, prefix))
