"""parquet contender: aioflux's ``ShardDataset(format="parquet")`` over the
files' http:// URLs (served by nginx behind the shaper, see
``_http_served.py``), rows as dicts through a DataLoader.

The clock runs from constructing the dataset (a HEAD per file, the
manifest's 404, each file's footer by range into a fresh ``index_dir``:
a user's first run) to the last row. ``--columns`` reads only those
columns: with ``--workers 0`` the bytes its ranged reads of the files
returned are reported (``fetched_bytes``, footers included, and
``data_bytes`` without them; counted where the Parquet reader takes them
from the store: the http store keeps no byte count of its own)
beside the compressed size of those columns' chunks (``column_bytes``,
from the footers, untimed), as ``bytes_ratio``. ``first_row_s`` is the
time to the first batch.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from typing import Any

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report
from _http_served import served

from aioflux.torch import ShardDataset

TAIL = 64 * 1024  # the footer read: a file's last 64 KiB


def rows_of(batch: list[dict[str, Any]]) -> int:
    return len(batch)


def counting() -> list[int]:
    """Count the bytes of every ranged read of a Parquet file (footers and chunks)."""
    from aioflux._engines.shards import _parquet_read

    seen = [0]
    real = _parquet_read._pinned_read

    async def read(store: Any, info: Any, version: Any, start: int, end: int,
                   hedger: Any = None) -> bytes:
        data = await real(store, info, version, start, end, hedger)
        seen[0] += len(data)
        return data

    _parquet_read._pinned_read = read  # type: ignore[assignment]
    return seen


def main(manifest: Manifest, args: argparse.Namespace) -> dict[str, Any]:
    seen = counting()
    index_dir = tempfile.mkdtemp(prefix="aioflux-parquet-index-")
    columns = args.columns.split(",") if args.columns else None
    out: dict[str, Any] = {}
    try:
        with served(manifest, args.prefix) as urls:
            items = 0
            first = None
            with Stopwatch() as watch:
                start = time.perf_counter()
                ds = ShardDataset(urls, batch_size=args.batch, index_dir=index_dir,
                                  columns=columns, seed=1)
                loader = torch.utils.data.DataLoader(ds, batch_size=args.batch,
                                                     num_workers=args.workers,
                                                     collate_fn=rows_of)
                for count in loader:
                    if first is None:
                        first = time.perf_counter() - start
                    items += count
            out.update(watch=watch, items=items, first_row_s=round(first or 0.0, 4))
            if args.workers == 0 and columns:
                from aioflux._engines.shards._parquet_read import FooterCache
                fetched = seen[0]
                footers = FooterCache(ds._shards.parquet.footers.directory)
                column = tail = 0
                for info in ds.shards:
                    footer = footers.get(info)
                    assert footer is not None
                    md = footer.metadata
                    for g in range(md.num_row_groups):
                        column += sum(e - s for s, e in footer.chunks(g, columns))
                    tail += min(info.size, TAIL)
                out.update(fetched_bytes=fetched, data_bytes=fetched - tail,
                           column_bytes=column,
                           bytes_ratio=round((fetched - tail) / max(1, column), 3))
            ds.close()
    finally:
        shutil.rmtree(index_dir, ignore_errors=True)
    return out


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    p.add_argument("--columns", default="")
    args = p.parse_args(rest)
    found = main(manifest, args)
    watch = found.pop("watch")
    items = found.pop("items")
    report(watch, nbytes=0, items=items, workers=args.workers, **found)
