"""http_shards: one epoch of the shards_tar shards over plain http:// from nginx.

The tar shards of ``shards_tar`` (32 shards of 320 samples, ``KEY.jpg``
100 KiB random and ``KEY.cls``; 4 x 40 with --quick), mirrored from the
emulator into a local directory once (untimed) and served by nginx
(Debian's binary, see tests/servers/nginx.py) on loopback; read with 0 and 2
DataLoader workers by aioflux's ``ShardDataset`` over the list of URLs
and by webdataset's ``WebDataset`` over the same URLs with its own http
handler (curl). aioflux runs twice: ``cold`` (the first run on a machine:
every shard indexed by one streamed pass inside the timed region) and
``warm`` (every later run and epoch: the index already in ``index_dir``);
the 2x targets are on the warm rows, the cold ones' ratios are reported.
Parameters: ``shards``, ``samples``, ``size``, ``batch`` as shards_tar's.
"""

from __future__ import annotations

import shutil

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ShardSet

__all__ = ["plan"]

FOLDER = "shards_tar/"


def _aioflux_ready() -> str | None:
    return project_imports(
        "import aioflux.torch, tests.servers.nginx; tests.servers.nginx.install_nginx()"
    )


def _wds_ready() -> str | None:
    if shutil.which("curl") is None:
        return "webdataset opens http URLs with curl, which is not installed"
    return project_imports(
        "import webdataset, tests.servers.nginx; tests.servers.nginx.install_nginx()"
    )


def plan(options: Options) -> Plan:
    shards = options.get("shards", 4 if options.quick else 32)
    samples = options.get("samples", 40 if options.quick else 320)
    size = options.get("size", 100 * 1024)
    batch = str(options.get("batch", 64))
    data = ShardSet(f"{FOLDER}shard-", shards, samples, size)
    common = ("--batch", batch, "--prefix", FOLDER)
    contenders = []
    made = (f"ShardDataset([http://127.0.0.1:PORT/{FOLDER}shard-NNNNNN.tar, ...], "
            f"order=Order(batch_size={batch}), reads=ShardReads(index_dir=DIR)) made inside "
            "the timed region")
    for w in ("0", "2"):
        contenders.append(Contender(
            f"aioflux-warm-w{w}", "http_shards_aioflux.py", None,
            ("--workers", w, "--index", "warm", *common),
            note=f"{made} (HEADs; the indexes read from DIR, filled by an untimed "
                 f"construction first), DataLoader(num_workers={w})",
            available=_aioflux_ready))
        contenders.append(Contender(
            f"aioflux-cold-w{w}", "http_shards_aioflux.py", None,
            ("--workers", w, "--index", "cold", *common),
            note=f"{made} (DIR fresh: HEADs, the manifest's and sidecars' 404s, one "
                 f"streamed pass per shard for its index), DataLoader(num_workers={w})",
            available=_aioflux_ready))
    for w in ("0", "2"):
        contenders.append(Contender(
            f"webdataset-w{w}", "http_shards_wds.py", None, ("--workers", w, *common),
            note="wds.WebDataset(the same http:// URLs, shardshuffle=SHARDS, "
                 f"workersplitter=split_by_worker), its own http opener (curl), "
                 f"num_workers={w}",
            available=_wds_ready))
    items = shards * samples
    return Plan(
        name="http_shards",
        description=f"one epoch of {shards} WebDataset tar shards x {samples} samples over "
                    f"http:// from nginx ({data.size / 2**20:.1f} MiB a shard) through "
                    f"DataLoader(batch {batch}), 0 and 2 workers",
        bucket="perf-http-shards",
        objects=[data],
        contenders=contenders,
        baseline="aioflux-warm-w0",
        targets=[Target("webdataset-w0", 2.0),
                 Target("webdataset-w2", 2.0, "aioflux-warm-w2"),
                 Target("webdataset-w0", None, "aioflux-cold-w0"),
                 Target("webdataset-w2", None, "aioflux-cold-w2")],
        figures=[("cpu_us_per_sample", "CPU per sample (us)")],
        notes=["the shards are mirrored from the emulator into a local directory once "
               "(untimed) and served by nginx on loopback; every contender reads the same "
               "URLs from the same nginx configuration (sendfile on and a worker process "
               "a core, as Debian's own)",
               "aioflux reads ranges of ~1 MiB pinned by If-Match, each sample checked "
               "against the crc32c its shard's index recorded; webdataset streams each "
               "shard once, unchecked, and keeps no index",
               "the index (each shard's sample offsets, lengths and crc32c) is what buys "
               "exact resume, equal sample counts on every rank and random access; it is "
               "built once per machine and shard version. cold: the first run, which "
               "builds it in the timed region by one streamed pass a shard, so it moves "
               "every byte twice (reported, no target); warm: every later run (the same "
               "index_dir) and every later epoch of the same dataset (targets). A public "
               "mirror's reader cannot publish sidecars beside shards it does not own, "
               "so warm means the local index_dir, not sidecars on the server"],
        timeout_s=1200.0,
        expect_items=items,
        expect_bytes=items * data.sample_bytes,
        seed_concurrency=8,
        warm_read=False,
    )
