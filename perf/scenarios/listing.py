"""listing: list 100,000 objects under one prefix.

aioflux's work-stealing parallel listing (16 listers, one event loop) vs a
sequential page-token listing with the same client, and dataflux's fast
listing (one process per CPU). Parameters: ``count`` (100000; 5000 with
--quick), ``concurrency`` (16).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]

PREFIX = "listing/obj-"


def _ready() -> str | None:
    return project_imports(
        "import aioflux._engines.listing; aioflux._engines.listing.list_objects_parallel")


def plan(options: Options) -> Plan:
    count = options.get("count", 5000 if options.quick else 100_000)
    conc = str(options.get("concurrency", 16))
    return Plan(
        name="listing",
        description=f"list {count:,} objects under one prefix (name, size, generation, crc32c)",
        bucket="perf-listing",
        objects=[ObjectSet(PREFIX, count, 1)],
        contenders=[
            Contender("aioflux-parallel", "listing_aioflux.py", None,
                      ("--mode", "parallel", "--concurrency", conc, "--prefix", PREFIX),
                      note=f"list_objects_parallel(concurrency={conc})", available=_ready),
            Contender("aioflux-sequential", "listing_aioflux.py", None,
                      ("--mode", "sequential", "--prefix", PREFIX),
                      note="AsyncClient.list_objects: one page after another", available=_ready),
            Contender("dataflux-fast-list", "listing_dataflux.py", "dataflux",
                      ("--prefix", PREFIX),
                      note="dataflux_core.fast_list.ListingController(os.cpu_count()).run()"),
            Contender(f"dataflux-fast-list-p{conc}", "listing_dataflux.py", "dataflux",
                      ("--prefix", PREFIX, "--processes", conc),
                      note=f"the same with ListingController({conc}): as many listers as "
                           "aioflux's, each a process"),
        ],
        baseline="aioflux-parallel",
        targets=[Target("aioflux-sequential", 5.0), Target("dataflux-fast-list", 3.0)],
        timeout_s=900.0,
        # The emulator encodes each listed item once and caches it: without a
        # warm-up the first contender (always the same one) paid ~0.8 s for
        # encoding 100k items on its first round.
        warm_rounds=1,
    )
