"""loader_tiny: 10,000 x 8 KiB, composed batches vs direct GETs.

Decides ``DEFAULT_COMPOSE_THRESHOLD`` in ``aioflux/_engines/download.py``:
the ObjectMapDataset with compose off (``aioflux-direct``), with compose
forced on for objects up to 64 KiB, 32 a composite (``aioflux-composed``),
and at the library's defaults (``aioflux-default``: compose up to 32 KiB,
128 requests in flight), DataLoader batch 64, 0 workers, against dataflux's
map-style dataset at 0 workers (its default) and 2 (its best here).
Parameters: ``count`` (10000), ``size`` (8192; the threshold is measured
with ``--param size=32768`` and ``size=65536``), ``concurrency`` (64, of
the direct and forced contenders).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]

PREFIX = "loader_tiny/obj-"
# What the loaders are given: the folder (a dataset URL names a folder, not
# a raw name prefix: gs://b/loader_tiny/obj- would be the folder obj-/).
FOLDER = "loader_tiny/"


def _ready() -> str | None:
    return project_imports("import aioflux.torch; aioflux.torch.ObjectMapDataset")


def plan(options: Options) -> Plan:
    count = options.get("count", 500 if options.quick else 10_000)
    size = options.get("size", 8 * 1024)
    conc = str(options.get("concurrency", 64))
    common = ("--kind", "map", "--concurrency", conc, "--prefix", FOLDER)
    # A run with other parameters gets its own rows (the tables key rows by name).
    variant = "".join(f"-{k}{v}" for k, v in sorted(options.params.items()))
    return Plan(
        name="loader_tiny",
        description=f"one epoch of {count:,} x {size / 1024:g} KiB, ObjectMapDataset batch 64: "
                    "direct GETs vs composed batches",
        bucket="perf-loader-tiny",
        objects=[ObjectSet(PREFIX, count, size)],
        contenders=[
            Contender(f"aioflux-direct{variant}", "loader_aioflux.py", None,
                      (*common, "--compose-threshold", "0"),
                      note="compose off (compose_threshold=0)", available=_ready),
            Contender(f"aioflux-composed{variant}", "loader_aioflux.py", None,
                      (*common, "--compose-threshold", str(64 * 1024)),
                      note="compose_threshold=64 KiB: a batch of 64 is two composites",
                      available=_ready),
            Contender(f"aioflux-default{variant}", "loader_aioflux.py", None,
                      ("--kind", "map", "--prefix", FOLDER),
                      note="the library's defaults: compose up to 32 KiB "
                           "(DEFAULT_COMPOSE_THRESHOLD), max_concurrency 128",
                      available=_ready),
            Contender(f"dataflux-map-w0{variant}", "loader_dataflux.py", "dataflux",
                      ("--kind", "map", "--prefix", FOLDER),
                      note="DataFluxMapStyleDataset (compose at its defaults), num_workers=0"),
            # Its one knob here: DataLoader workers (no concurrency setting).
            Contender(f"dataflux-map-w2{variant}", "loader_dataflux.py", "dataflux",
                      ("--kind", "map", "--workers", "2", "--prefix", FOLDER),
                      note="DataFluxMapStyleDataset, num_workers=2 (its best on 2 cores)"),
        ],
        baseline=f"aioflux-direct{variant}",
        # The defaults against the peer, beside the baseline's pairs.
        targets=[Target(f"dataflux-map-w0{variant}", None, mine=f"aioflux-default{variant}"),
                 Target(f"dataflux-map-w2{variant}", None, mine=f"aioflux-default{variant}")],
        timeout_s=900.0,
    )
