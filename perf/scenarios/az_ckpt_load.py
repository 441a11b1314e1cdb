"""az_ckpt_load: read a 1 GiB checkpoint blob back from Azurite.

Random bytes seeded as one blob (azure-storage-blob, untimed), read front
to back: aioflux's ranged reader (``aioflux.open(url, "rb")``, readinto
8 MiB) against azure-storage-blob's aio ``download_blob(max_concurrency=8)``
(and with 32, aioflux's reads in flight) and an adlfs file
(readinto 8 MiB). Raw bytes: torch.load's deserialisation is not timed for
anyone. Parameters: ``size_mib`` (1024; 128 with --quick).
"""

from __future__ import annotations

from perf.harness import Contender, Options, Plan, Target
from perf.scenarios.az_read import AZURITE, ready
from perf.scenarios.ckpt_load import _CHUNK_MIB, _READ_AHEAD
from perf.seed import ObjectSet

__all__ = ["plan"]

PREFIX = "az_ckpt_load/state-"


def plan(options: Options) -> Plan:
    size_mib = options.get("size_mib", 128 if options.quick else 1024)
    size = size_mib * 2**20
    target = ("--task", "load", "--object", f"{PREFIX}000000")
    return Plan(
        name="az_ckpt_load",
        description=f"Read a {size_mib} MiB checkpoint blob back from Azurite (raw bytes)",
        bucket="perf-az-ckpt-load",
        objects=[ObjectSet(PREFIX, 1, size)],
        contenders=[
            Contender("aioflux-az", "az_aioflux.py", None,
                      (*target, "--part-mib", str(_CHUNK_MIB), "--in-flight",
                       str(_READ_AHEAD)),
                      note=f"aioflux.open('az://...', 'rb', reader=ReaderOptions(block_size="
                           f"{_CHUNK_MIB} MiB, read_ahead={_READ_AHEAD})), readinto 8 MiB",
                      available=ready),
            Contender("azure-blob-aio", "az_sdk.py", "azblob", target,
                      note="aio download_blob(max_concurrency=8).readinto(a counting sink)"),
            Contender(f"azure-blob-aio-c{_READ_AHEAD}", "az_sdk.py", "azblob",
                      (*target, "--max-concurrency", str(_READ_AHEAD)),
                      note=f"the same with max_concurrency={_READ_AHEAD}: aioflux's reads in "
                           "flight"),
            Contender("adlfs", "az_adlfs.py", "adlfs", target,
                      note="fs.open(path, 'rb') at adlfs's defaults, readinto 8 MiB"),
        ],
        baseline="aioflux-az",
        targets=[Target("azure-blob-aio", 1.5), Target("adlfs", 1.5)],
        notes=[AZURITE],
        timeout_s=900.0,
        expect_items=1,
        expect_bytes=size,
        seed_concurrency=1,
        warm_read=False,
        azurite=True,
    )
