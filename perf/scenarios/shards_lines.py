"""shards_lines: one epoch of JSONL shards through a DataLoader (batch 512 lines).

4 shards of 25,000 lines of 1,600 bytes (40 MB a shard), 0 and 2
DataLoader workers: aioflux's ``ShardDataset(format="lines")`` with its
index built in the timed region (cold) or read from its local index cache
(warm), against fsspec ``open()`` and line iteration through gcsfs and
through s3fs on the S3 face, and s3torchconnector's readers split into
lines. Parameters: ``shards`` (4; 2 with --quick), ``lines`` (25000 per
shard; 2000 with --quick), ``size`` (1600 bytes a line with its newline),
``batch`` (512).

``--param compression=gzip`` runs the ``.jsonl.gz`` case instead (its
contenders named ``...-gz``): 2 DataLoader workers without a disk cache
(each worker decompresses every shard it gets lines of), with one
(``cache_dir``: each shard decompressed once, into the cache), no workers,
and fsspec over gcsfs with ``compression="gzip"`` (each worker reads whole
shards, so each shard once).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ShardSet

__all__ = ["plan"]

FOLDER = "shards_lines/"

_S3 = ("on the emulator's S3 face over plain http (path-style, region us-east-1, dummy AWS_* "
       "credentials)")


def _ready() -> str | None:
    return project_imports("import aioflux.torch; aioflux.torch.ShardDataset")


def plan(options: Options) -> Plan:
    shards = options.get("shards", 2 if options.quick else 4)
    lines = options.get("lines", 2000 if options.quick else 25_000)
    size = options.get("size", 1600)
    batch = str(options.get("batch", 512))
    compression = options.params.get("compression")
    if compression is not None:
        return _compressed(options, shards, lines, size, batch, compression)
    data = ShardSet(f"{FOLDER}part-", shards, lines, size, kind="jsonl", suffix=".jsonl")
    common = ("--batch", batch, "--prefix", FOLDER)
    contenders = []
    for index in ("cold", "warm"):
        for w in ("0", "2"):
            name = f"aioflux-w{w}" if index == "cold" else f"aioflux-warm-w{w}"
            note = (f"ShardDataset.from_prefix(gs://B/{FOLDER}, format='lines', "
                    f"order=Order(batch_size={batch}), reads=ShardReads(index_dir=a fresh "
                    "temp dir)) made inside the timed "
                    "region (listing, sidecar look-ups, one streamed pass per shard building "
                    f"its index), DataLoader(num_workers={w}); lines as bytes"
                    if index == "cold" else
                    "the same with the index cache filled before the timer, num_workers=" + w)
            contenders.append(Contender(
                name, "shards_aioflux.py", None,
                ("--format", "lines", "--index", index, "--workers", w, *common),
                note=note, available=_ready))
    for fs, venv in (("gcs", "gcsfs"), ("s3", "s3fs")):
        for w in ("0", "2"):
            contenders.append(Contender(
                f"fsspec-{venv}-w{w}", "shards_lines_fsspec.py", venv,
                ("--fs", fs, "--workers", w, *common),
                note=(f"{venv}: every n-th shard per worker, fs.open(path, 'rt') at its "
                      f"defaults, `for line in f`, num_workers={w}"
                      + (f"; {_S3}" if fs == "s3" else ""))))
    for w in ("0", "2"):
        contenders.append(Contender(
            f"s3tc-lines-w{w}", "shards_s3tc.py", "s3tc",
            ("--format", "lines", "--workers", w, *common),
            note=f"S3IterableDataset.from_prefix(enable_sharding), each reader read in 8 MiB "
                 f"pieces split on newlines, num_workers={w}; s3torchconnector 1.5 {_S3}"))
    targets = [Target(f"{peer}-w{w}", 2.0, f"aioflux-w{w}")
               for peer in ("fsspec-gcsfs", "fsspec-s3fs", "s3tc-lines") for w in ("0", "2")]
    items = shards * lines
    return Plan(
        name="shards_lines",
        description=f"one epoch of {shards} JSONL shards x {lines:,} lines of {size:,} bytes "
                    f"({data.size / 1e6:.0f} MB a shard) through DataLoader(batch {batch}), "
                    "0 and 2 workers",
        bucket="perf-shards-lines",
        objects=[data],
        contenders=contenders,
        baseline="aioflux-w0",
        targets=targets,
        notes=["headline: aioflux-w0 / aioflux-w2, the index built inside the timed region "
               "(a cold index cache, no sidecars); the peers keep no index",
               "gcsfs 2026.10's default file cache hands every read() to its event-loop "
               "thread and waits for it; text-mode line iteration reads 8 KiB at a time",
               "aioflux yields each line's bytes (checked against its indexed crc32c) in its "
               "default shuffled order (shards, then reads of ~650 lines within 8,192 "
               "lines); fsspec yields str lines (text mode) in shard order, s3torchconnector "
               "bytes in shard order"],
        timeout_s=900.0,
        expect_items=items,
        expect_bytes=items * data.sample_bytes,
        seed_concurrency=8,
    )


def _compressed(options: Options, shards: int, lines: int, size: int, batch: str,
                compression: str) -> Plan:
    if compression != "gzip":
        raise SystemExit("shards_lines: --param compression=gzip is the one compression")
    folder = f"{FOLDER}gz/"
    data = ShardSet(f"{folder}part-", shards, lines, size, kind="jsonl", suffix=".jsonl.gz",
                    compression="gzip")
    common = ("--batch", batch, "--prefix", folder)
    base = ("--format", "lines", "--index", "cold", *common)
    contenders = [
        Contender("aioflux-cache-w2-gz", "shards_aioflux.py", None,
                  (*base, "--workers", "2", "--cache"), available=_ready,
                  note="ShardDataset(format='lines', cache_dir=a fresh temp dir, no limit), "
                       "index built in the timed region, DataLoader(num_workers=2): each "
                       "shard decompressed once, by the first worker to want it"),
        Contender("aioflux-w2-gz", "shards_aioflux.py", None, (*base, "--workers", "2"),
                  available=_ready,
                  note="the same without cache_dir: each worker decompresses every shard "
                       "it gets lines of"),
        Contender("aioflux-w0-gz", "shards_aioflux.py", None, (*base, "--workers", "0"),
                  available=_ready, note="the same in the main process, no cache"),
        Contender("fsspec-gcsfs-w2-gz", "shards_lines_fsspec.py", "gcsfs",
                  ("--fs", "gcs", "--workers", "2", "--compression", "gzip", *common),
                  note="gcsfs: every n-th shard per worker, fs.open(path, 'rt', "
                       "compression='gzip'), `for line in f`, num_workers=2"),
    ]
    items = shards * lines
    return Plan(
        name="shards_lines",
        description=f"one epoch of {shards} gzip JSONL shards x {lines:,} lines of {size:,} "
                    f"bytes ({data.size / 1e6:.0f} MB a shard decompressed, "
                    f"{data.sizes()[0] / 1e6:.0f} MB stored) through DataLoader(batch {batch})",
        bucket="perf-shards-lines",
        objects=[data],
        contenders=contenders,
        baseline="aioflux-cache-w2-gz",
        targets=[],
        notes=["the index is built in the timed region (one streamed pass per shard)",
               "aioflux's order spreads every shard over both workers' batches: without "
               "a cache both download and decompress every shard; with one, the first to "
               "want a shard decompresses it into the cache and the other waits for its "
               "units. The gain is in object GETs and CPU (per round below); on two cores "
               "and a loopback emulator the wall time is bound elsewhere"],
        timeout_s=900.0,
        expect_items=items,
        expect_bytes=items * data.sample_bytes,
        seed_concurrency=8,
    )
