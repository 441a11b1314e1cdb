"""loader contenders: aioflux datasets through a torch DataLoader.

``--kind map``: ``ObjectMapDataset.from_prefix`` (listing untimed), DataLoader
batches of ``--batch`` whose ``__getitems__`` downloads each batch at once;
``--kind iter``: ``ObjectIterableDataset.from_prefix`` with a prefetch window;
``--batch-sampler``: the map dataset's own batch sampler, batches ahead.
Only the epoch is timed; bodies are reduced to their lengths in collate.
"""

from __future__ import annotations

import argparse

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report

from aioflux import ClientConfig, DownloadOptions
from aioflux.torch import DatasetSettings, ObjectIterableDataset, ObjectMapDataset, Order


def total_len(batch: list[bytes]) -> int:
    return sum(len(b) for b in batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    url = f"gs://{manifest.bucket}/{args.prefix}"
    options = None
    if args.compose_threshold is not None:  # else the library's default
        options = DownloadOptions(compose_threshold=args.compose_threshold)
    settings = DatasetSettings(endpoint=manifest.endpoint,
                               config=ClientConfig(max_concurrency=args.concurrency,
                                                   lean_reads=args.lean),
                               download_options=options)
    ds: torch.utils.data.Dataset[bytes]
    if args.kind == "map":
        ds = ObjectMapDataset.from_prefix(url, settings=settings)
    else:
        ds = ObjectIterableDataset.from_prefix(url, prefetch=args.concurrency,
                                               order=Order(shuffle=False), settings=settings)
    loader: torch.utils.data.DataLoader[bytes]
    if args.batch_sampler:
        assert isinstance(ds, ObjectMapDataset)
        loader = torch.utils.data.DataLoader(ds, batch_sampler=ds.batch_sampler(
                                                 order=Order(batch_size=args.batch, shuffle=False)),
                                             num_workers=args.workers, collate_fn=total_len)
    else:
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch,
                                             num_workers=args.workers, collate_fn=total_len)
    nbytes = items = 0
    with Stopwatch() as watch:
        for size in loader:
            nbytes += size
            items += 1
    return watch, nbytes, len(manifest.objects)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["map", "iter"], default="map")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--compose-threshold", type=int, default=None)
    p.add_argument("--batch-sampler", action="store_true",
                   help="ObjectMapDataset.batch_sampler: download batches ahead")
    p.add_argument("--prefix", default="")
    p.add_argument("--no-lean", dest="lean", action="store_false",
                   help="ClientConfig(lean_reads=False): bodies through aiohttp")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, kind=args.kind, workers=args.workers,
           lean_reads=args.lean)
