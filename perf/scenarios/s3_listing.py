"""s3_listing: list 100,000 objects under one prefix through the S3 face.

aioflux's parallel listing on ``s3://`` (S3 has no end offset: each lister
stops at its range's end) against its own sequential lister and a bare
sequential ListObjectsV2 loop. Parameters: ``count`` (100000; 5000 with
--quick), ``concurrency`` (16).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]

PREFIX = "s3_listing/obj-"


def _ready() -> str | None:
    return project_imports(
        "import aioflux.s3, aioflux._engines.listing; "
        "aioflux._engines.listing.list_objects_parallel")


def plan(options: Options) -> Plan:
    count = options.get("count", 5000 if options.quick else 100_000)
    conc = str(options.get("concurrency", 16))
    return Plan(
        name="s3_listing",
        description=f"list {count:,} objects under one prefix through the emulator's S3 face "
                    "(ListObjectsV2)",
        bucket="perf-s3-listing",
        objects=[ObjectSet(PREFIX, count, 1)],
        contenders=[
            Contender("aioflux-s3-parallel", "listing_aioflux_s3.py", None,
                      ("--mode", "parallel", "--concurrency", conc, "--prefix", PREFIX),
                      note=f"list_objects_parallel(S3 store, concurrency={conc})",
                      available=_ready),
            Contender("aioflux-s3-sequential", "listing_aioflux_s3.py", None,
                      ("--mode", "sequential", "--prefix", PREFIX),
                      note="the S3 store's list_objects: one page after another",
                      available=_ready),
            Contender("s3-list-loop", "listing_s3_loop.py", None, ("--prefix", PREFIX),
                      note="bare aiohttp ListObjectsV2 loop, 1000 keys a page, continuation "
                           "tokens, ElementTree, unsigned"),
        ],
        baseline="aioflux-s3-parallel",
        targets=[Target("s3-list-loop", 5.0), Target("aioflux-s3-sequential", 5.0)],
        timeout_s=900.0,
        # As in listing: the emulator caches each item's XML on first listing.
        warm_rounds=1,
    )
