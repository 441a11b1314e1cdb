"""cache_epochs: a map-style epoch from a cold and from a warm local disk cache.

10,000 x 100 KiB (1,000 with --quick) through ``DataLoader(MapDataset,
batch 64, num_workers=0)`` under the GCS-like profile. Contenders (one
script): no cache; ``cache_dir=`` cold (the first epoch, which fills it);
``cache_dir=`` warm (a first epoch untimed, then the second timed) and the
same with ``cache_limit=`` half the data set (every sample still once; what
was evicted is fetched again). Each reports the emulator's object GETs
during its timed epoch (its ``/_aioflux_stats`` counters). The goal: the
second epoch >= 5x the first, with 0 object GETs. Parameters: ``count``,
``size`` (102400), ``batch`` (64).
"""

from __future__ import annotations

from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]

PREFIX = "cache_epochs/obj-"
FOLDER = "cache_epochs/"


def plan(options: Options) -> Plan:
    count = options.get("count", 1000 if options.quick else 10_000)
    size = options.get("size", 100 * 1024)
    batch = str(options.get("batch", 64))
    common = ("--batch", batch, "--prefix", FOLDER)
    half = str(count * size // 2)
    contenders = [
        Contender("aioflux-nocache", "cache_aioflux.py", None, ("--mode", "none", *common),
                  note="MapDataset.from_prefix, DataLoader(batch, num_workers=0), no cache"),
        Contender("aioflux-cache-cold", "cache_aioflux.py", None, ("--mode", "cold", *common),
                  note="the same with cache_dir= a fresh directory: the first epoch, "
                       "which fills the cache"),
        Contender("aioflux-cache-warm", "cache_aioflux.py", None, ("--mode", "warm", *common),
                  note="the same dataset's second epoch (the first, untimed, filled the "
                       "cache)"),
        Contender("aioflux-cache-half", "cache_aioflux.py", None,
                  ("--mode", "warm", "--limit", half, *common),
                  note="the second epoch with cache_limit= half the data set (LRU: a "
                       "sequential pass misses what was evicted)"),
    ]
    return Plan(
        name="cache_epochs",
        description=f"one map-style epoch of {count:,} x {size / 1024:g} KiB (DataLoader batch "
                    f"{batch}, 0 workers) without a cache, from a cold and from a warm "
                    "local disk cache",
        bucket="perf-cache-epochs",
        objects=[ObjectSet(PREFIX, count, size)],
        contenders=contenders,
        baseline="aioflux-cache-warm",
        # Cold and warm side by side, each against no cache.
        targets=[Target("aioflux-cache-cold", 5.0), Target("aioflux-nocache", None),
                 Target("aioflux-nocache", None, mine="aioflux-cache-cold")],
        notes=["each contender's object GETs during its timed epoch are in its result "
               "extras (`object_gets`: the emulator's media GETs and composes); the warm "
               "epoch's must be 0",
               "each cache directory is a fresh folder in the run's scratch folder "
               "(perf.harness.run_scratch), kept until the run ends: a round that deleted "
               "the GiB the round before wrote handed its writes the cost of freeing them "
               "(ext4 mounted with discard), and the cold epoch's system CPU went 2.6, "
               "11.0, 13.0 s over three rounds (20261122T163057)",
               "each contender calls os.sync() before its timed epoch (untimed), so no "
               "earlier contender's write-back lands in it"],
        expect_items=count,
        expect_bytes=count * size,
        timeout_s=900.0,
    )
