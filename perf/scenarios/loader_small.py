"""loader_small: one epoch of 10,000 x 100 KiB through a DataLoader (batch 64).

aioflux's ObjectMapDataset (0 and 2 workers) and ObjectIterableDataset against
gcs-torch-dataflux's map and iterable datasets, LitData's
StreamingRawDataset (0 and 2 workers), an obstore loader-like loop and the
bare aiohttp loop at the same concurrency. Parameters: ``count`` (10000; 500 with --quick),
``size`` (102400), ``concurrency`` (aioflux's default, 128), ``batch`` (64).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]

PREFIX = "loader_small/obj-"
# What the loaders are given: the folder (a dataset URL names a folder, not
# a raw name prefix: gs://b/loader_small/obj- would be the folder obj-/).
FOLDER = "loader_small/"


def _ready() -> str | None:
    return project_imports("import aioflux.torch; aioflux.torch.ObjectMapDataset")


def plan(options: Options) -> Plan:
    count = options.get("count", 500 if options.quick else 10_000)
    size = options.get("size", 100 * 1024)
    conc = options.get("concurrency", 128)  # aioflux._core.settings.config.DEFAULT_MAX_CONCURRENCY
    batch = str(options.get("batch", 64))
    common = ("--batch", batch, "--prefix", FOLDER)
    ours = ("--concurrency", str(conc), *common)
    contenders = [
        Contender("aioflux-map-w0", "loader_aioflux.py", None, ("--kind", "map", *ours),
                  note="ObjectMapDataset.from_prefix, DataLoader(batch, num_workers=0)",
                  available=_ready),
        Contender("aioflux-map-w2", "loader_aioflux.py", None,
                  ("--kind", "map", "--workers", "2", *ours),
                  note="ObjectMapDataset.from_prefix, DataLoader(batch, num_workers=2, fork)",
                  available=_ready),
        Contender("aioflux-map-w0-ahead", "loader_aioflux.py", None,
                  ("--kind", "map", "--batch-sampler", *ours),
                  note="ObjectMapDataset.from_prefix, DataLoader(batch_sampler="
                       "ds.batch_sampler(order=Order(batch_size=batch, shuffle=False))), "
                       "num_workers=0: the next batches (concurrency / batch) download during "
                       "this one",
                  available=_ready),
        Contender("aioflux-map-w0-nolean", "loader_aioflux.py", None,
                  ("--kind", "map", "--no-lean", *ours),
                  note="as aioflux-map-w0 with ClientConfig(lean_reads=False)",
                  available=_ready),
        Contender("aioflux-iter-w0", "loader_aioflux.py", None, ("--kind", "iter", *ours),
                  note=f"ObjectIterableDataset.from_prefix(prefetch={conc}, shuffle=False)",
                  available=_ready),
        Contender("aiohttp-bare", "read_aiohttp.py", None, ("--concurrency", str(conc)),
                  note=f"one session, Semaphore({conc}), media GET per object, no checks"),
        Contender("obstore-batches", "read_obstore.py", "obstore",
                  ("--mode", "batches", "--batch", batch, "--concurrency", str(conc)),
                  note=f"a loader-like loop without torch: batches of {batch} names, each "
                       "gathered with obstore.get_async before the next (no read-ahead)"),
        Contender("litdata-raw-w0", "loader_litdata.py", "litdata", common,
                  note="litdata.raw.StreamingRawDataset(gs://B/FOLDER/) at its defaults "
                       "(adaptive concurrency, max_prefetch=16), num_workers=0; index from the "
                       "manifest, emulator through obstore's GOOGLE_BASE_URL / "
                       "GOOGLE_SKIP_SIGNATURE / GOOGLE_ALLOW_HTTP"),
        Contender("litdata-raw-w2", "loader_litdata.py", "litdata",
                  ("--workers", "2", *common),
                  note="the same with num_workers=2"),
        Contender("dataflux-map-w0", "loader_dataflux.py", "dataflux", ("--kind", "map", *common),
                  note="DataFluxMapStyleDataset (compose at its defaults), num_workers=0"),
        Contender("dataflux-map-w2", "loader_dataflux.py", "dataflux",
                  ("--kind", "map", "--workers", "2", *common),
                  note="DataFluxMapStyleDataset, num_workers=2"),
        Contender("dataflux-iter-w0", "loader_dataflux.py", "dataflux",
                  ("--kind", "iter", *common),
                  note="DataFluxIterableDataset, num_workers=0 (it does not shard across "
                       "workers); its IAM testPermissions check is replaced (no emulator has it)"),
    ]
    return Plan(
        name="loader_small",
        description=f"one epoch of {count:,} x {size / 1024:g} KiB through DataLoader(batch "
                    f"{batch}); listing at dataset construction is untimed for every contender",
        bucket="perf-loader-small",
        objects=[ObjectSet(PREFIX, count, size)],
        contenders=contenders,
        baseline="aioflux-map-w0",
        # Pair by pair: each of ours against the peer's same kind of loader,
        # and against the bare loop at the same concurrency.
        targets=[Target("litdata-raw-w0", 2.0),
                 Target("litdata-raw-w2", 2.0, "aioflux-map-w2"),
                 Target("obstore-batches", 1.0),
                 Target("dataflux-map-w0", 8.0),
                 Target("dataflux-map-w0", 8.0, "aioflux-map-w0-ahead"),
                 Target("dataflux-map-w2", 8.0, "aioflux-map-w2"),
                 Target("dataflux-iter-w0", 8.0, "aioflux-iter-w0"),
                 *(Target("aiohttp-bare", 0.85, mine) for mine in (
                     "aioflux-map-w0", "aioflux-map-w0-ahead", "aioflux-map-w2",
                     "aioflux-iter-w0"))],
        notes=["aioflux at its defaults: these 100 KiB objects are above its compose "
               "threshold (32 KiB), so every read is a direct GET; dataflux composes at its "
               "defaults"],
        timeout_s=900.0,
    )
