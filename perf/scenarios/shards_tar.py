"""shards_tar: one epoch of WebDataset tar shards through a DataLoader (batch 64).

32 shards of 320 samples (``KEY.jpg``, 100 KiB random, and ``KEY.cls``,
three digits; about 32 MiB a shard, 1 GiB in all), 0 and 2 DataLoader
workers: aioflux's ``ShardDataset`` with its index built in the timed
region (cold) or read from its local index cache (warm), against
webdataset over gcsfs, s3torchconnector with webdataset's tar expander on
the S3 face, and LitData's ``StreamingDataset`` over the same samples
converted by ``litdata.optimize``. Parameters: ``shards`` (32; 4 with
--quick), ``samples`` (320 per shard; 40 with --quick), ``size``
(102400), ``batch`` (64).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ShardSet

__all__ = ["plan"]

FOLDER = "shards_tar/"
# Where LitData's optimize() writes its chunks (same bucket, untimed).
LITDATA_FOLDER = "shards_tar_litdata/"

_S3TC = ("s3torchconnector 1.5 on the emulator's S3 face over plain http: endpoint=, "
         "region='us-east-1', S3ClientConfig(force_path_style=True), dummy AWS_* credentials")


def _ready() -> str | None:
    return project_imports("import aioflux.torch; aioflux.torch.ShardDataset")


def plan(options: Options) -> Plan:
    shards = options.get("shards", 4 if options.quick else 32)
    samples = options.get("samples", 40 if options.quick else 320)
    size = options.get("size", 100 * 1024)
    batch = str(options.get("batch", 64))
    data = ShardSet(f"{FOLDER}shard-", shards, samples, size)
    common = ("--batch", batch, "--prefix", FOLDER)
    contenders = []
    for w in ("0", "2"):
        workers = ("--workers", w)
        contenders += [
            Contender(f"aioflux-w{w}", "shards_aioflux.py", None,
                      ("--format", "tar", "--index", "cold", *workers, *common),
                      note=f"ShardDataset.from_prefix(gs://B/{FOLDER}, format='tar', "
                           f"order=Order(batch_size={batch}), reads=ShardReads(index_dir=a "
                           "fresh temp dir)) made inside the "
                           "timed region (listing, sidecar look-ups, one streamed pass per "
                           f"shard building its index), DataLoader(num_workers={w})",
                      available=_ready),
        ]
    for w in ("0", "2"):
        contenders.append(
            Contender(f"aioflux-warm-w{w}", "shards_aioflux.py", None,
                      ("--format", "tar", "--index", "warm", "--workers", w, *common),
                      note="the same with the index cache filled before the timer (the "
                           "dataset made once in the same index_dir), num_workers=" + w,
                      available=_ready))
    for w in ("0", "2"):
        contenders.append(
            Contender(f"webdataset-gcsfs-w{w}", "shards_wds_gcsfs.py", "gcsfs",
                      ("--workers", w, *common),
                      note="wds.WebDataset(gs:// shard URLs, shardshuffle=SHARDS, "
                           "workersplitter=split_by_worker); gs:// opened by gcsfs at its "
                           "defaults through webdataset's gopen_schemes table (its own gs "
                           f"opener runs gsutil), num_workers={w}"))
    for w in ("0", "2"):
        contenders.append(
            Contender(f"s3tc-wds-w{w}", "shards_s3tc.py", "s3tc",
                      ("--format", "tar", "--workers", w, *common),
                      note="S3IterableDataset.from_prefix(s3://B/FOLDER/, transform="
                           "{url, stream}, enable_sharding) + webdataset's tar_file_expander "
                           f"and group_by_keys, num_workers={w}; " + _S3TC))
    for w in ("0", "2"):
        contenders.append(
            Contender(f"litdata-w{w}", "shards_litdata.py", "litdata",
                      ("--workers", w, "--source", FOLDER, *common[:2],
                       "--prefix", LITDATA_FOLDER),
                      note=f"litdata.StreamingDataset(gs://B/{LITDATA_FOLDER}) at its defaults "
                           f"(chunks downloaded whole into a fresh cache_dir), "
                           f"StreamingDataLoader(num_workers={w}); emulator through obstore's "
                           "GOOGLE_BASE_URL / GOOGLE_SKIP_SIGNATURE / GOOGLE_ALLOW_HTTP"))
    items = shards * samples
    return Plan(
        name="shards_tar",
        description=f"one epoch of {shards} WebDataset tar shards x {samples} samples "
                    f"({size / 1024:g} KiB jpg + cls, {data.size / 2**20:.1f} MiB a shard) "
                    f"through DataLoader(batch {batch}), 0 and 2 workers",
        bucket="perf-shards-tar",
        objects=[data],
        contenders=contenders,
        baseline="aioflux-w0",
        # webdataset and s3torchconnector keep no index: against them, aioflux
        # builds its own inside the timed region. LitData's conversion (its
        # index) is untimed: against it, aioflux's index is built untimed too.
        targets=[Target("webdataset-gcsfs-w0", 2.0),
                 Target("webdataset-gcsfs-w2", 2.0, "aioflux-w2"),
                 Target("s3tc-wds-w0", 1.5),
                 Target("s3tc-wds-w2", 1.5, "aioflux-w2"),
                 Target("litdata-w0", 1.0, "aioflux-warm-w0"),
                 Target("litdata-w2", 1.0, "aioflux-warm-w2")],
        notes=["headline: aioflux-w0 / aioflux-w2, the index built inside the timed region "
               "(a cold index cache, no sidecars), against webdataset and s3torchconnector, "
               "which keep no index; aioflux-warm-* (index from the local cache) against "
               "LitData, whose optimize() conversion is untimed",
               "aioflux shuffles at its defaults (shards, then ~1 MiB reads within 8,192 "
               "samples); webdataset shuffles the shard order only; s3torchconnector and "
               "LitData (shuffle=False, its default) read in order",
               "LitData's data set: litdata.optimize(chunk_bytes='32MB') of the tar shards' "
               "samples into a local folder, uploaded with google-cloud-storage (optimize "
               "into gs:// uploads through obstore, which signs uploads even with "
               "GOOGLE_SKIP_SIGNATURE: the emulator's anonymous credentials cannot), once, "
               "untimed, by the first litdata round; its time is in these notes",
               "gcsfs 2026.10's default file cache (AdaptiveReadaheadCache, with a background "
               "prefetcher) hands every read() to gcsfs's event-loop thread and waits for "
               "it, and webdataset's tar reader reads 10 KiB at a time: ~3,250 thread "
               "hops per 32 MiB shard (seen in a profile)",
               "the shards are seeded through the GCS JSON API (plain aiohttp), as ustar "
               "archives like webdataset's TarWriter writes"],
        timeout_s=1200.0,
        expect_items=items,
        expect_bytes=items * data.sample_bytes,
        seed_concurrency=8,
    )
