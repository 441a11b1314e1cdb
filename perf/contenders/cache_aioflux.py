"""cache_epochs contender: an ObjectMapDataset epoch with no cache, a cold or a warm one.

``--mode none|cold|warm`` (warm: one untimed epoch first); ``--limit`` sets
``cache_limit=``. Only one epoch is timed; the result line adds the
emulator's object GETs during it and the cache's hits and misses.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import torch.utils.data
from _contender import Manifest, Stopwatch, load, object_gets, report

from aioflux import ClientConfig
from aioflux.torch import DatasetSettings, ObjectMapDataset


def total_len(batch: list[bytes]) -> int:
    return sum(len(b) for b in batch)


def epoch(loader: torch.utils.data.DataLoader[int]) -> int:
    return sum(loader)


def main(manifest: Manifest,
         args: argparse.Namespace) -> tuple[Stopwatch, int, int, dict[str, object]]:
    url = f"gs://{manifest.bucket}/{args.prefix}"
    # In the run's scratch folder, removed when the run ends (see
    # perf.harness.run_scratch); alone, in a folder of its own.
    scratch = os.environ.get("PERF_SCRATCH")
    where = tempfile.mkdtemp(prefix="aioflux-perf-cache-", dir=scratch)
    try:
        cached = args.mode != "none"
        settings = DatasetSettings(endpoint=manifest.endpoint,
                                   config=ClientConfig(max_concurrency=args.concurrency),
                                   cache_dir=where if cached else None,
                                   cache_limit=args.limit if cached else None)
        ds = ObjectMapDataset.from_prefix(url, settings=settings)
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=0,
                                             collate_fn=total_len)
        if args.mode == "warm":
            epoch(loader)
        source_cache = ds._source.cache
        hits0 = source_cache.stats.hits if source_cache is not None else 0
        misses0 = source_cache.stats.misses if source_cache is not None else 0
        gets0 = object_gets(manifest.endpoint)
        # The contenders before wrote (and removed) a GiB of cache files
        # each: none of their write-back lands in this epoch.
        os.sync()
        with Stopwatch() as watch:
            nbytes = epoch(loader)
        gets = object_gets(manifest.endpoint)
        extra: dict[str, object] = {"mode": args.mode, "object_gets": None if gets is None
                                    or gets0 is None else gets - gets0}
        if source_cache is not None:
            extra["cache_hits"] = source_cache.stats.hits - hits0
            extra["cache_misses"] = source_cache.stats.misses - misses0
        print(f"cache epoch {extra}", file=sys.stderr)
        ds.close()
        return watch, nbytes, len(ds), extra
    finally:
        if scratch is None:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["none", "cold", "warm"], required=True)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, items, extra = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, **extra)
