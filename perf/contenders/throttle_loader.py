"""throttle contender: one ObjectMapDataset epoch through a DataLoader whose N
workers share the capped server.

The dataset lists the scenario's folder (untimed, at construction); a
``Subset`` keeps the first N x per-worker objects. ``collate_fn`` runs in
the worker and stamps each batch with the worker's id and the time, so a
worker's time is the arrival of its last batch from the common start.
``--rate off`` sets ``ClientConfig(request_rate='off')``; ``--start
fork|spawn`` the workers' start method.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report
from _throttle import counted, emulator_counts, fresh_rate, summarize

from aioflux import ClientConfig
from aioflux.torch import DatasetSettings, ObjectMapDataset


def stamp(batch: list[bytes]) -> tuple[int, float, int, int]:
    info = torch.utils.data.get_worker_info()
    return (info.id if info else 0, time.monotonic(), len(batch), sum(len(b) for b in batch))


def main(manifest: Manifest, args: argparse.Namespace) -> None:
    config = ClientConfig() if args.rate == "adaptive" else ClientConfig(request_rate="off")
    ds = ObjectMapDataset.from_prefix(f"gs://{manifest.bucket}/{args.prefix}",
                                      settings=DatasetSettings(endpoint=manifest.endpoint,
                                                               config=config))
    subset = torch.utils.data.Subset(ds, range(min(len(ds), args.workers * args.per_worker)))
    loader = torch.utils.data.DataLoader(subset, batch_size=args.batch, num_workers=args.workers,
                                         collate_fn=stamp, multiprocessing_context=args.start)
    ends: dict[int, float] = {}
    items = nbytes = 0
    error = None
    # After the (untimed) listing, before any worker starts: the node meets
    # the cap afresh, not at the rate an earlier row or round left.
    fresh_rate(manifest.endpoint, manifest.bucket)
    before = emulator_counts(manifest.endpoint)
    with Stopwatch() as watch:
        t0 = time.monotonic()
        try:
            for worker, at, n, size in loader:
                ends[worker] = max(ends.get(worker, 0.0), at)
                items += n
                nbytes += size
        except Exception as exc:  # a failed epoch is a figure, not a crash
            error = f"{type(exc).__name__}: {str(exc)[:300]}"
    after = emulator_counts(manifest.endpoint)
    spans = [(t0, end) for end in ends.values()] or [(t0, time.monotonic())]
    figures = summarize(spans, failures=int(error is not None), kinds=counted(before, after),
                        cap=args.cap)
    print(f"throttle loader {figures} error={error}", file=sys.stderr)
    ds.close()
    report(watch, nbytes=nbytes, items=items, workers=args.workers, start=args.start,
           rate=args.rate, **figures, errors=[error] if error else [])


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--per-worker", type=int, default=400)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--rate", default="adaptive", choices=("adaptive", "off"))
    p.add_argument("--start", default="fork", choices=("fork", "spawn", "forkserver"))
    p.add_argument("--cap", type=float, default=200.0)
    p.add_argument("--prefix", default="throttle/")
    main(manifest, p.parse_args(rest))
