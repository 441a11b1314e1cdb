"""ckpt_load: read a 1 GiB checkpoint object back.

The object is seeded by the harness (plain aiohttp, random bytes), so every
contender times the raw read of the bytes, not ``torch.load``'s
deserialisation (a local copy, identical for all of them): aioflux's
reader read front to back in 8 MiB ``readinto`` calls (what ``torch.load``
does through it), dataflux's ``DatafluxCheckpoint.reader`` (one stream into
a BytesIO), and bare aiohttp ranged GETs at aioflux's chunk size and
concurrency (the ceiling).

Parameters: ``size_mib`` (1024; 128 with --quick), ``chunk_mib`` and
``read_ahead`` (default: the library's; the aiohttp ceiling uses the same).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]

# Mirrors aioflux.ReaderOptions' defaults; perf must import without aioflux.
_CHUNK_MIB = 4
_READ_AHEAD = 32


def _aioflux_ready() -> str | None:
    return project_imports("import aioflux; aioflux.open; aioflux.AsyncClient")


def plan(options: Options) -> Plan:
    size_mib = options.get("size_mib", 128 if options.quick else 1024)
    chunk = options.get("chunk_mib", _CHUNK_MIB)
    ahead = options.get("read_ahead", _READ_AHEAD)
    size = size_mib * 2**20
    # seed.py cannot make one object over 256 MiB; the contenders compose
    # these parts into the checkpoint object (see contenders/ckpt_common.py).
    part_mib = min(size_mib, 128)
    if size_mib % part_mib:
        raise ValueError(f"size_mib must be a multiple of {part_mib}, got {size_mib}")
    contenders = [
        Contender(
            "aioflux",
            "ckpt_load_aioflux.py",
            None,
            ("--chunk-mib", str(chunk), "--read-ahead", str(ahead)),
            note=(
                f"aioflux.open(url, 'rb', reader=ReaderOptions(block_size={chunk} MiB, "
                f"read_ahead={ahead})), "
                "readinto an 8 MiB buffer until EOF (ranged GETs, generation pinned, "
                "crc32c not checkable on ranges)"
            ),
            available=_aioflux_ready,
        ),
        Contender(
            "aiohttp-bare",
            "ckpt_load_aiohttp.py",
            None,
            ("--chunk-mib", str(chunk), "--concurrency", str(ahead)),
            note=(
                f"one ClientSession, {chunk} MiB ranged GETs, {ahead} at once, all submitted "
                "up front, lengths only: the ceiling"
            ),
        ),
        Contender(
            "dataflux",
            "ckpt_load_dataflux.py",
            "dataflux",
            (),
            note=(
                "DatafluxCheckpoint(project_name='perf', bucket_name=B).reader(name): "
                "blob.download_to_file into a BytesIO, one stream; its own storage.Client, "
                "nothing bypassed"
            ),
        ),
        Contender(
            "msc",
            "ckpt_load_msc.py",
            "msc",
            (),
            caveat="its Python provider: a custom endpoint turns MSC's Rust client off",
            note=(
                "multistorageclient.open(url, 'rb', prefetch_file=True) as msc.torch.load "
                "opens it, then readinto an 8 MiB buffer until EOF; MSC's GCS provider with "
                "endpoint_url=emulator, skip_signature=True (Python provider: MSC turns its "
                "Rust client off for a custom endpoint)"
            ),
        ),
        Contender(
            f"msc-c{ahead}",
            "ckpt_load_msc.py",
            "msc",
            ("--max-concurrency", str(ahead)),
            caveat="its Python provider: a custom endpoint turns MSC's Rust client off",
            note=(
                f"the msc row at its best: max_concurrency={ahead}, aioflux's reads in "
                "flight (MSC's one concurrency option, default 8 threads of 32 MiB chunks)"
            ),
        ),
    ]
    return Plan(
        name="ckpt_load",
        description=(
            f"Read a {size_mib} MiB checkpoint object back (raw bytes; torch.load's "
            "deserialisation is not timed for anyone)."
        ),
        bucket="perf-ckpt-load",
        objects=[ObjectSet("ckpt_load/part-", size_mib // part_mib, part_mib * 2**20)],
        contenders=contenders,
        baseline="aioflux",
        targets=[Target("dataflux", 6.0), Target("msc", 1.5), Target("aiohttp-bare", 0.8)],
        notes=[
            (
                "the object is random bytes seeded with plain aiohttp as 128 MiB parts and "
                "composed into one object server-side (one JSON compose request, stdlib, "
                "untimed, by the first contender to run), so a bug in aioflux cannot shape "
                "it; the reader is exercised with torch.load itself in "
                "tests/torch/checkpoint/test_checkpoint*.py"
            ),
            (
                "'RSS growth' of dataflux includes its BytesIO (the whole object); "
                "memory is not a target here"
            ),
        ],
        timeout_s=900.0,
        expect_items=1,
        expect_bytes=size,
        # Few large parts: sequential seeding keeps the harness's RSS low.
        seed_concurrency=1,
    )
