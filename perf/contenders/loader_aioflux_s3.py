"""loader contenders on S3: aioflux datasets over ``s3://`` through a DataLoader.

The same shapes as
``loader_aioflux.py`` on ``gs://``: ``--kind map`` is
``ObjectMapDataset.from_prefix`` (listing untimed), DataLoader batches whose
``__getitems__`` downloads each batch at once; ``--kind iter`` is
``ObjectIterableDataset.from_prefix`` with a prefetch window. Only the epoch is
timed; bodies are reduced to their lengths in collate.
"""

from __future__ import annotations

import argparse

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report

from aioflux import ClientConfig
from aioflux.torch import DatasetSettings, ObjectIterableDataset, ObjectMapDataset, Order


def total_len(batch: list[bytes]) -> int:
    return sum(len(b) for b in batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    url = f"s3://{manifest.bucket}/{args.prefix}"
    config = ClientConfig(max_concurrency=args.concurrency)
    ds: torch.utils.data.Dataset[bytes]
    if args.kind == "map":
        ds = ObjectMapDataset.from_prefix(url,
                                          settings=DatasetSettings(endpoint=manifest.s3,
                                                                   config=config))
    else:
        ds = ObjectIterableDataset.from_prefix(url, settings=DatasetSettings(endpoint=manifest.s3,
                                                                             config=config),
                                               prefetch=args.concurrency,
                                               order=Order(shuffle=False))
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                         collate_fn=total_len)
    nbytes = 0
    with Stopwatch() as watch:
        for size in loader:
            nbytes += size
    return watch, nbytes, len(manifest.objects)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["map", "iter"], default="map")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, kind=args.kind, workers=args.workers)
