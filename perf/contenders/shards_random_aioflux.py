"""shards_random contender: single samples of tar shards read through the index.

``ShardDataset.from_prefix(format="tar", reads=ShardReads(samples_per_read=1,
reads_in_flight=N), order=Order(shuffle=True))``: every sample is its own ranged read,
in the epoch's shuffled order (shards permuted, samples permuted within
8,192), checked against its index's crc32c. The index is built before
the timer (fresh ``index_dir``). Timed: the first ``--count`` samples of
the epoch, iterated in this process (no DataLoader), each sample's wait
measured from the previous one's arrival (the first from ``iter()``).

With ``--in-flight 1`` one read is out at a time and the consumer takes
each sample at once, so a wait is one sample's read: its ranged GET, the
crc32c check and the tar decode. The p50/p99 of those waits are reported
(``read_p50_ms`` / ``read_p99_ms``). With more in flight the waits are
throughput, not latency.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from _contender import Manifest, Stopwatch, load, report

from aioflux.torch import DatasetSettings, Order, ShardDataset, ShardReads


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, list[float]]:
    url = f"gs://{manifest.bucket}/{args.prefix}"
    index_dir = tempfile.mkdtemp(prefix="aioflux-shard-index-")
    try:
        ds = ShardDataset.from_prefix(url, format="tar",
                                      settings=DatasetSettings(endpoint=manifest.endpoint),
                                      reads=ShardReads(samples_per_read=1,
                                                       reads_in_flight=args.in_flight,
                                                       index_dir=index_dir),
                                      order=Order(shuffle=True))
        waits: list[float] = []
        nbytes = 0
        with Stopwatch() as watch:
            samples = iter(ds)
            last = time.perf_counter()
            for sample in samples:
                now = time.perf_counter()
                waits.append(now - last)
                last = now
                nbytes += len(sample["jpg"]) + len(sample["cls"])
                if len(waits) == args.count:
                    break
            samples.close()  # type: ignore[attr-defined]
        ds.close()
    finally:
        shutil.rmtree(index_dir, ignore_errors=True)
    return watch, nbytes, waits


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-100) by the inclusive method, in ms."""
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return round(cuts[int(q) - 1] * 1000, 2)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--in-flight", type=int, default=1)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, waits = main(manifest, args)
    report(watch, nbytes=nbytes, items=len(waits), in_flight=args.in_flight,
           read_p50_ms=percentile(waits, 50), read_p99_ms=percentile(waits, 99),
           read_max_ms=round(max(waits) * 1000, 2))
