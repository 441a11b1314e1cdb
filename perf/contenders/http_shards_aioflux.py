"""http_shards contender: aioflux's ``ShardDataset`` over the shards' http://
URLs (served by nginx, see ``_http_served.py``), in a DataLoader.

The dataset is made inside the timed region from the list of URLs (a web
server has no listing): a HEAD per shard, then the epoch of ranged,
version-pinned reads (``samples_per_read`` about 1 MiB). ``--index cold``
(a user's first run): a fresh ``index_dir``, so the timed region also
probes for the manifest and the sidecars (404s: a public mirror publishes
none) and indexes every shard by one streamed pass. ``--index warm`` (every
later run, and every later epoch): the same ``index_dir`` was filled by an
untimed construction first, in this process, as a user's earlier run with
``ShardReads(index_dir=...)`` fills it. CPU per sample is the timed region's user +
system CPU over the samples.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from typing import Any

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report
from _http_served import served

from aioflux.torch import Order, ShardDataset, ShardReads


def tar_batch(batch: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(len(s["jpg"]) + len(s["cls"]) for s in batch), len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    index_dir = tempfile.mkdtemp(prefix="aioflux-shard-index-")
    try:
        with served(manifest, args.prefix) as urls:
            if args.index == "warm":
                ShardDataset(urls, order=Order(batch_size=args.batch),
                             reads=ShardReads(index_dir=index_dir)).close()
            nbytes = items = 0
            with Stopwatch() as watch:
                ds = ShardDataset(urls, order=Order(batch_size=args.batch),
                                  reads=ShardReads(index_dir=index_dir))
                loader = torch.utils.data.DataLoader(ds, batch_size=args.batch,
                                                     num_workers=args.workers,
                                                     collate_fn=tar_batch)
                for size, count in loader:
                    nbytes += size
                    items += count
            ds.close()
    finally:
        shutil.rmtree(index_dir, ignore_errors=True)
    return watch, nbytes, items


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    p.add_argument("--index", choices=("cold", "warm"), default="cold")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    cpu = watch.cpu_user_s + watch.cpu_sys_s
    report(watch, nbytes=nbytes, items=items, workers=args.workers,
           cpu_us_per_sample=round(cpu / max(items, 1) * 1e6, 1))
