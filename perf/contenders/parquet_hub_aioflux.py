"""parquet contender: aioflux over ``hf://`` on the fake Hub (``_hub_served``):
``ShardDataset.from_prefix("hf://datasets/perf/parquet/data/", format="parquet")``,
rows as dicts through a DataLoader.

The clock runs from constructing the dataset (the revision resolved to a
commit, the tree listed, each file's footer by range into a fresh
``index_dir``: a user's first run on a node) to the last row.
``first_row_s`` is the time to the first batch, ``first_after_made_s``
the part of it after the dataset was made (its footers in hand). ``--columns`` reads only
those columns; at 0 workers the bytes the CDN answered with (its own count)
are reported beside the compressed size of those columns' chunks in every
row group (``column_bytes``, from the footers, untimed) as ``bytes_ratio``,
the footers' reads left out (``footer_bytes``: the CDN's count while
making the dataset).

``--random N``: ``ShardMapDataset`` over the same files (made untimed, its
footers read), a warm-up row from every file (its redirect known, as the
issue's target counts), then N rows at seeded random indices, one at a
time: ``random_p50_ms`` and ``random_p90_ms``; the time is the reads'.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from typing import Any

from _contender import Manifest, Stopwatch, load, report
from _hub_served import REPO, Hub, served_hub

URL = f"hf://datasets/{REPO}/data/"


def rows_of(batch: list[dict[str, Any]]) -> int:
    return len(batch)


def column_bytes(ds: Any, columns: list[str]) -> int:
    from aioflux._engines.shards._parquet_read import FooterCache

    footers = FooterCache(ds._shards.parquet.footers.directory)
    total = 0
    for info in ds.shards:
        footer = footers.get(info)
        assert footer is not None
        for g in range(footer.metadata.num_row_groups):
            total += sum(e - s for s, e in footer.chunks(g, columns))
    return total


def epoch(hub: Hub, args: argparse.Namespace, index_dir: str) -> dict[str, Any]:
    import torch.utils.data

    from aioflux.torch import Order, Parquet, ShardDataset, ShardReads

    columns = args.columns.split(",") if args.columns else None
    items = 0
    first = None
    before = hub.cdn_bytes()
    with Stopwatch() as watch:
        start = time.perf_counter()
        ds = ShardDataset.from_prefix(
            URL,
            format=Parquet(columns=columns),
            order=Order(batch_size=args.batch, seed=1),
            reads=ShardReads(index_dir=index_dir),
        )
        made_s = time.perf_counter() - start
        made = hub.cdn_bytes() if columns else 0
        loader = torch.utils.data.DataLoader(
            ds, batch_size=args.batch, num_workers=args.workers, collate_fn=rows_of
        )
        for count in loader:
            if first is None:
                first = time.perf_counter() - start
            items += count
    out: dict[str, Any] = {
        "watch": watch,
        "items": items,
        "first_row_s": round(first or 0.0, 4),
        "first_after_made_s": round((first or 0.0) - made_s, 4),
    }
    if columns and args.workers == 0:
        fetched = hub.cdn_bytes() - before
        footer = made - before
        chunks = column_bytes(ds, columns)
        out.update(
            fetched_bytes=fetched,
            footer_bytes=footer,
            column_bytes=chunks,
            bytes_ratio=round((fetched - footer) / max(1, chunks), 3),
        )
    ds.close()
    return out


def random_rows(args: argparse.Namespace, index_dir: str) -> dict[str, Any]:
    from aioflux.torch import ShardMapDataset, ShardReads

    ds = ShardMapDataset.from_prefix(URL, format="parquet", reads=ShardReads(index_dir=index_dir))
    starts, at = [], 0
    for count in ds.counts:
        starts.append(at)
        at += count
    for i in starts:  # each file's redirect known, as the target counts
        ds[i]
    picks = random.Random(7).sample(range(len(ds)), args.random)
    took = []
    with Stopwatch() as watch:
        for i in picks:
            t0 = time.perf_counter()
            ds[i]
            took.append(time.perf_counter() - t0)
    ds.close()
    deciles = statistics.quantiles(took, n=10)
    return {
        "watch": watch,
        "items": len(picks),
        "random_p50_ms": round(statistics.median(took) * 1000, 2),
        "random_p90_ms": round(deciles[8] * 1000, 2),
    }


def main(manifest: Manifest, args: argparse.Namespace) -> dict[str, Any]:
    index_dir = tempfile.mkdtemp(prefix="aioflux-parquet-index-")
    try:
        with served_hub(manifest, args.prefix) as hub:
            # imports untimed: pyarrow's too, which aioflux makes at the first decode
            import pyarrow.parquet  # noqa: F401

            import aioflux.torch  # noqa: F401

            return random_rows(args, index_dir) if args.random else epoch(hub, args, index_dir)
    finally:
        shutil.rmtree(index_dir, ignore_errors=True)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    p.add_argument("--columns", default="")
    p.add_argument("--random", type=int, default=0)
    args = p.parse_args(rest)
    found = main(manifest, args)
    watch = found.pop("watch")
    items = found.pop("items")
    if not args.random:
        found["rows_s"] = round(items / watch.seconds) if watch.seconds else 0
    report(watch, nbytes=0, items=items, workers=args.workers, **found)
