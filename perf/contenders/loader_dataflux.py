"""loader contenders: gcs-torch-dataflux's map and iterable datasets.

Listing at construction is untimed (as for aioflux); only the epoch through
a DataLoader of ``--batch`` is timed. The iterable dataset calls the bucket
IAM ``testPermissions`` endpoint, which emulators lack: that check is
replaced by one reporting no missing permission. Its iterable dataset does
not shard across DataLoader workers, so it runs with 0 workers only.
"""

from __future__ import annotations

import argparse

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report
from dataflux_pytorch import dataflux_iterable_dataset as it
from dataflux_pytorch import dataflux_mapstyle_dataset as ms


def total_len(batch: list[bytes]) -> int:
    return sum(len(b) for b in batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    ds: torch.utils.data.Dataset[bytes]
    if args.kind == "map":
        ds = ms.DataFluxMapStyleDataset("perf", manifest.bucket,
                                        config=ms.Config(prefix=args.prefix))
    else:
        it._get_missing_permissions = lambda **_: []  # emulators have no IAM endpoint
        ds = it.DataFluxIterableDataset("perf", manifest.bucket,
                                        config=it.Config(prefix=args.prefix))
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
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, kind=args.kind, workers=args.workers)
