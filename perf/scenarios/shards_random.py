"""shards_random: single samples of tar shards read through the index, p50/p99.

8 shards of shards_tar's layout (320 samples of 100 KiB jpg + cls, about
32 MiB a shard). aioflux only: ``ShardDataset(format="tar",
reads=ShardReads(samples_per_read=1), order=Order(shuffle=True))`` with
its index built before the timer; the first ``count`` samples of a
shuffled epoch, each its own ranged read, one in flight (each wait is one
sample's read: the p50/p99 are in the notes) or 32. Parameters: ``shards`` (8; 2 with --quick),
``samples`` (320; 40 with --quick), ``size`` (102400), ``count`` (1000
samples; 50 with --quick).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan
from perf.seed import ShardSet

__all__ = ["plan"]

FOLDER = "shards_random/"


def _ready() -> str | None:
    return project_imports("import aioflux.torch; aioflux.torch.ShardDataset")


def plan(options: Options) -> Plan:
    shards = options.get("shards", 2 if options.quick else 8)
    samples = options.get("samples", 40 if options.quick else 320)
    size = options.get("size", 100 * 1024)
    count = options.get("count", 50 if options.quick else 1000)
    data = ShardSet(f"{FOLDER}shard-", shards, samples, size)
    contenders = [
        Contender(f"aioflux-random-{n}", "shards_random_aioflux.py", None,
                  ("--count", str(count), "--in-flight", str(n), "--prefix", FOLDER),
                  note=f"ShardDataset.from_prefix(format='tar', reads=ShardReads("
                       f"samples_per_read=1, reads_in_flight={n}), order=Order(shuffle=True)), "
                       "index built untimed; the first "
                       f"{count} samples of the epoch, iterated without a DataLoader"
                       + ("; each wait is one sample's ranged read, crc32c check and tar "
                          "decode" if n == 1 else "; waits are throughput here"),
                  available=_ready)
        for n in (1, 32)
    ]
    return Plan(
        name="shards_random",
        description=f"{count} single-sample reads in shuffled order from {shards} tar shards "
                    f"x {samples} samples ({size / 1024:g} KiB jpg + cls) through the index",
        bucket="perf-shards-random",
        objects=[data],
        contenders=contenders,
        baseline="aioflux-random-1",
        notes=["the emulator's gcs-like profile adds 20 ms to every response's first byte: "
               "a single-sample read cannot be faster than that here",
               "read p50/p99: each sample's wait, from the previous sample's arrival"],
        timeout_s=600.0,
        expect_items=count,
        expect_bytes=count * data.sample_bytes,
    )
