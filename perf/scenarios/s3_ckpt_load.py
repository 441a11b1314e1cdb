"""s3_ckpt_load: read a 1 GiB checkpoint object back through the S3 face.

ckpt_load's shape: random bytes seeded as 128 MiB parts and composed into
one object through the GCS JSON API (the store the S3 face serves),
untimed; aioflux's ranged reader on ``s3://`` against s3torchconnector
1.5's ``S3Checkpoint.reader``, both read front to back in 8 MiB
``readinto`` calls. Parameters: ``size_mib`` (1024; 128 with --quick).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.scenarios.ckpt_load import _CHUNK_MIB, _READ_AHEAD
from perf.seed import ObjectSet

__all__ = ["plan"]


def _ready() -> str | None:
    return project_imports("import aioflux.s3, aioflux; aioflux.open; aioflux.S3Store")


def plan(options: Options) -> Plan:
    size_mib = options.get("size_mib", 128 if options.quick else 1024)
    size = size_mib * 2**20
    part_mib = min(size_mib, 128)
    if size_mib % part_mib:
        raise ValueError(f"size_mib must be a multiple of {part_mib}, got {size_mib}")
    return Plan(
        name="s3_ckpt_load",
        description=f"Read a {size_mib} MiB checkpoint object back through the emulator's S3 "
                    "face (raw bytes; torch.load's deserialisation is not timed for anyone)",
        bucket="perf-s3-ckpt-load",
        objects=[ObjectSet("ckpt_load/part-", size_mib // part_mib, part_mib * 2**20)],
        contenders=[
            Contender("aioflux-s3", "ckpt_load_aioflux_s3.py", None,
                      ("--chunk-mib", str(_CHUNK_MIB), "--read-ahead", str(_READ_AHEAD)),
                      note=f"aioflux.open('s3://...', 'rb', reader=ReaderOptions(block_size="
                           f"{_CHUNK_MIB} MiB, read_ahead={_READ_AHEAD})), readinto 8 MiB",
                      available=_ready),
            Contender("s3tc", "ckpt_load_s3tc.py", "s3tc", (),
                      note="S3Checkpoint(region, endpoint=S3 face, S3ClientConfig("
                           "force_path_style=True)).reader(url) (its default sequential "
                           "reader), readinto 8 MiB until EOF"),
        ],
        baseline="aioflux-s3",
        targets=[Target("s3tc", 1.5)],
        notes=["the object is composed server-side from the seeded parts by the first "
               "contender to run (one JSON compose request, stdlib, untimed)"],
        timeout_s=900.0,
        expect_items=1,
        expect_bytes=size,
        seed_concurrency=1,
    )
