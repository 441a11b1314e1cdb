"""hedge_tail contender: an ObjectMapDataset epoch through a DataLoader, hedged or not.

``--hedge-after auto|SECONDS`` sets ``DownloadOptions(hedge_after=...)``;
without it nothing is hedged. ``--kind iter``: an ObjectIterableDataset
instead (a window of ``--concurrency`` in flight, in order, unshuffled), a
stream whose late reads every later sample waits for. ``--kind load``:
``aioflux.load_files`` of the objects' URLs in order (``--concurrency`` in
flight), iterated in this thread. Only the epoch is
timed; the result line adds the batch latency percentiles from
``dataset.stats`` (for ``iter``, a batch is a hand-off from the download
loop) and, for ``map``, the hedges sent and won
(``dataset.download_stats.hedge``).
"""

from __future__ import annotations

import argparse
import sys

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report

import aioflux
from aioflux import Client, ClientConfig, DownloadOptions
from aioflux.torch import DatasetSettings, ObjectIterableDataset, ObjectMapDataset, Order


def total_len(batch: list[bytes]) -> int:
    return sum(len(b) for b in batch)


def load_files(manifest: Manifest,
               args: argparse.Namespace) -> tuple[Stopwatch, int, int, dict[str, object]]:
    urls = [f"gs://{manifest.bucket}/{name}" for name in manifest.names]
    nbytes = items = 0
    with Client(ClientConfig(max_concurrency=args.concurrency),
                endpoint=manifest.endpoint) as client:
        with Stopwatch() as watch:
            for _, data in aioflux.load_files(urls, client=client, concurrency=args.concurrency):
                nbytes += len(data)
                items += 1
    return watch, nbytes, items, {"kind": "load", "hedge_after": "off"}


def main(manifest: Manifest,
         args: argparse.Namespace) -> tuple[Stopwatch, int, int, dict[str, object]]:
    if args.kind == "load":
        return load_files(manifest, args)
    url = f"gs://{manifest.bucket}/{args.prefix}"
    hedge: float | str | None = None
    if args.hedge_after is not None:
        hedge = args.hedge_after if args.hedge_after == "auto" else float(args.hedge_after)
    settings = DatasetSettings(endpoint=manifest.endpoint,
                               config=ClientConfig(max_concurrency=args.concurrency),
                               download_options=DownloadOptions(hedge_after=hedge))
    ds: ObjectMapDataset | ObjectIterableDataset
    if args.kind == "iter":
        ds = ObjectIterableDataset.from_prefix(url, settings=settings, prefetch=args.concurrency,
                                               order=Order(shuffle=False))
    else:
        ds = ObjectMapDataset.from_prefix(url, settings=settings)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=0,
                                         collate_fn=total_len)
    nbytes = 0
    with Stopwatch() as watch:
        for size in loader:
            nbytes += size
    batches = ds.stats.summary()
    extra: dict[str, object] = {
        "kind": args.kind,
        "hedge_after": args.hedge_after or "off",
        "batches": batches["batches"],
        "batch_p50_ms": round(batches["p50"] * 1e3, 1),
        "batch_p95_ms": round(batches["p95"] * 1e3, 1),
        "batch_p99_ms": round(batches["p99"] * 1e3, 1),
    }
    if isinstance(ds, ObjectMapDataset):
        stats = ds.download_stats
        extra.update(hedges_sent=stats.hedge.sent, hedges_won=stats.hedge.won,
                     hedges_denied=stats.hedge.denied,
                     read_p50_ms=round(stats.hedge.latency.percentile(0.5) * 1e3, 1),
                     read_p95_ms=round(stats.hedge.latency.percentile(0.95) * 1e3, 1))
    print(f"batch latency {extra}", file=sys.stderr)
    ds.close()
    # Items as the dataset counted them: a hedged read is one sample.
    return watch, nbytes, int(batches["samples"]), extra


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--prefix", default="")
    p.add_argument("--hedge-after", default=None, help="auto or seconds")
    p.add_argument("--kind", choices=["map", "iter", "load"], default="map")
    args = p.parse_args(rest)
    watch, nbytes, items, extra = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, **extra)
