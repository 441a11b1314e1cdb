"""loader contenders: s3torchconnector datasets through a torch DataLoader.

``--kind map``: ``S3MapDataset.from_prefix`` (its listing is untimed: it
lists lazily, so the contender touches ``len(ds)`` before the stopwatch);
``--kind iter``: ``S3IterableDataset.from_prefix`` (lists as it goes, so
its listing is inside the timed epoch, as it would be in training). Each
item's transform reads the whole object (the reader is sequential by
default) and returns its length; collate sums a batch and counts it.
"""

from __future__ import annotations

import argparse

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report
from s3tc_common import REGION, client_config, read_all
from s3torchconnector import S3IterableDataset, S3MapDataset


def total_len(batch: list[int]) -> tuple[int, int]:
    return sum(batch), len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    url = f"s3://{manifest.bucket}/{args.prefix}"
    kw = dict(region=REGION, endpoint=manifest.s3, transform=read_all,
              s3client_config=client_config())
    ds: torch.utils.data.Dataset[int]
    if args.kind == "map":
        ds = S3MapDataset.from_prefix(url, **kw)
        assert len(ds) == len(manifest.objects), (len(ds), len(manifest.objects))
    else:
        ds = S3IterableDataset.from_prefix(url, enable_sharding=args.workers > 0, **kw)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                         collate_fn=total_len)
    nbytes = items = 0
    with Stopwatch() as watch:
        for size, count in loader:
            nbytes += size
            items += count
    return watch, nbytes, items


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["map", "iter"], default="map")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, kind=args.kind, workers=args.workers)
