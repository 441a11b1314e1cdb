"""s3_loader: one epoch of 10,000 x 100 KiB from ``s3://`` through a DataLoader (batch 64).

loader_small's shape on the emulator's S3 face (same store, GCS-like
profile: 20 ms to first byte, 100 MB/s per connection): aioflux's
ObjectMapDataset / ObjectIterableDataset on ``s3://`` against s3torchconnector 1.5's
S3MapDataset / S3IterableDataset, and a bare aiohttp GetObject loop at the
same concurrency. Parameters: ``count`` (10000; 500 with --quick), ``size``
(102400), ``concurrency`` (aioflux's default, 128), ``batch`` (64).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]

PREFIX = "s3_loader/obj-"
FOLDER = "s3_loader/"

_S3TC = ("s3torchconnector 1.5 on the emulator's S3 face over plain http: endpoint=, "
         "region='us-east-1', S3ClientConfig(force_path_style=True), dummy AWS_* credentials")


def _ready() -> str | None:
    return project_imports("import aioflux.s3, aioflux.torch; aioflux.torch.ObjectMapDataset")


def plan(options: Options) -> Plan:
    count = options.get("count", 500 if options.quick else 10_000)
    size = options.get("size", 100 * 1024)
    conc = options.get("concurrency", 128)  # aioflux._core.settings.config.DEFAULT_MAX_CONCURRENCY
    batch = str(options.get("batch", 64))
    common = ("--batch", batch, "--prefix", FOLDER)
    ours = ("--concurrency", str(conc), *common)
    contenders = [
        Contender("aioflux-s3-map-w0", "loader_aioflux_s3.py", None, ("--kind", "map", *ours),
                  note="ObjectMapDataset.from_prefix('s3://B/FOLDER/', endpoint=S3 face), "
                       "DataLoader(batch, num_workers=0)", available=_ready),
        Contender("aioflux-s3-map-w2", "loader_aioflux_s3.py", None,
                  ("--kind", "map", "--workers", "2", *ours),
                  note="the same with num_workers=2 (fork)", available=_ready),
        Contender("aioflux-s3-iter-w0", "loader_aioflux_s3.py", None, ("--kind", "iter", *ours),
                  note=f"ObjectIterableDataset.from_prefix(prefetch={conc}, shuffle=False)",
                  available=_ready),
        Contender("aiohttp-s3-bare", "read_s3_aiohttp.py", None, ("--concurrency", str(conc)),
                  note=f"one session, Semaphore({conc}), unsigned path-style GetObject per "
                       "object, no checks"),
        Contender("s3tc-map-w0", "loader_s3tc.py", "s3tc", ("--kind", "map", *common),
                  note=f"S3MapDataset.from_prefix, transform reads each object, "
                       f"num_workers=0; {_S3TC}"),
        Contender("s3tc-map-w2", "loader_s3tc.py", "s3tc",
                  ("--kind", "map", "--workers", "2", *common),
                  note="S3MapDataset.from_prefix, num_workers=2"),
        # Its one knob: workers, each reading one object at a time; aioflux's
        # 128 in flight is out of reach on 2 cores, so 8 and 16 stand for its best.
        *(Contender(f"s3tc-map-w{w}", "loader_s3tc.py", "s3tc",
                    ("--kind", "map", "--workers", str(w), *common),
                    note=f"S3MapDataset.from_prefix, num_workers={w}: {w} objects in flight")
          for w in (8, 16)),
        Contender("s3tc-iter-w0", "loader_s3tc.py", "s3tc", ("--kind", "iter", *common),
                  note="S3IterableDataset.from_prefix (lists while it reads: its listing is "
                       "inside the timed epoch), num_workers=0"),
        *(Contender(f"s3tc-iter-w{w}", "loader_s3tc.py", "s3tc",
                    ("--kind", "iter", "--workers", str(w), *common),
                    note=f"S3IterableDataset.from_prefix(enable_sharding=True), "
                         f"num_workers={w}: each worker lists and reads one object in {w}")
          for w in (2, 8, 16)),
    ]
    return Plan(
        name="s3_loader",
        description=f"one epoch of {count:,} x {size / 1024:g} KiB from s3:// through "
                    f"DataLoader(batch {batch}) on the emulator's S3 face; listing at dataset "
                    "construction is untimed for the map datasets",
        bucket="perf-s3-loader",
        objects=[ObjectSet(PREFIX, count, size)],
        contenders=contenders,
        baseline="aioflux-s3-map-w0",
        targets=[Target("s3tc-map-w0", 3.0),
                 Target("s3tc-map-w2", 3.0, "aioflux-s3-map-w2"),
                 Target("s3tc-iter-w0", 3.0, "aioflux-s3-iter-w0"),
                 *(Target("aiohttp-s3-bare", 0.85, mine) for mine in (
                     "aioflux-s3-map-w0", "aioflux-s3-map-w2", "aioflux-s3-iter-w0"))],
        notes=["the data set is seeded through the GCS JSON API into the store the S3 face "
               "serves (plain aiohttp, as in every scenario)",
               "s3torchconnector reads each object with one sequential reader per item, "
               "one item after another per DataLoader worker"],
        timeout_s=900.0,
        expect_items=count,
        expect_bytes=count * size,
    )
