"""read_small: 5,000 objects of 100 KiB, each read whole once.

The small-object case dataflux's compose trick targets and the one where
per-request overhead decides throughput. Parameters (``--param k=v``):
``count`` (5000; 500 with --quick), ``size`` (102400 bytes),
``concurrency`` (128, aioflux's default: aioflux, bare aiohttp, obstore and gcsfs alike),
``threads``
(16: the thread-pool peers), ``loop`` (uvloop or asyncio). google-cloud-storage
also runs at ``concurrency`` threads (``gcs-threads128``), as many requests
in flight as aioflux: on 2 cores it was slower than 16 threads (2.9 against
2.0 ms of CPU an object, 20261127T065941), so both rows stay and 16 is its
best setting here.
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]


def _aioflux_ready() -> str | None:
    return project_imports("import aioflux; aioflux.AsyncClient; aioflux.ClientConfig")


def plan(options: Options) -> Plan:
    count = options.get("count", 500 if options.quick else 5000)
    size = options.get("size", 100 * 1024)
    conc = options.get("concurrency", 128)  # aioflux._core.settings.config.DEFAULT_MAX_CONCURRENCY
    threads = options.get("threads", 16)
    loop = ("--loop", options.params.get("loop", "uvloop"))
    async_args = ("--concurrency", str(conc), *loop)
    thread_args = ("--threads", str(threads))
    contenders = [
        Contender(
            "aioflux",
            "read_aioflux.py",
            None,
            async_args,
            note=f"AsyncClient(ClientConfig(max_concurrency={conc})).read() per object, gathered",
            available=_aioflux_ready,
        ),
        Contender(
            "aioflux-nolean",
            "read_aioflux.py",
            None,
            (*async_args, "--no-lean"),
            note="as aioflux with ClientConfig(lean_reads=False): bodies through aiohttp",
            available=_aioflux_ready,
        ),
        Contender(
            "aioflux-stream",
            "read_aioflux.py",
            None,
            (*async_args, "--stream"),
            note=(f"client.stream(folder URL, ordered=False, concurrency={conc}): lists the "
                  "folder and downloads each object as it is listed (the listing is timed)"),
            available=_aioflux_ready,
        ),
        Contender(
            "aioflux-load-files",
            "read_aioflux.py",
            None,
            (*async_args, "--load-files"),
            note=(f"aioflux.load_files(URLs, client=Client(...), concurrency={conc}) in input "
                  "order, iterated in the caller's thread (the blocking API)"),
            available=_aioflux_ready,
        ),
        Contender(
            f"obstore-get{conc}",
            "read_obstore.py",
            "obstore",
            async_args,
            note=(
                f"obstore.get_async + bytes_async per object behind Semaphore({conc}), all "
                "submitted at once; GCSStore(bucket, base_url=emulator, skip_signature=True, "
                "allow_http); object_store's default retries and pool"
            ),
        ),
        Contender(
            "aiohttp-bare",
            "read_aiohttp.py",
            None,
            async_args,
            note=(
                f"one ClientSession, TCPConnector(limit={conc}), Semaphore({conc}), media GET, "
                "no retries or checksums: the ceiling"
            ),
        ),
        Contender(
            f"gcs-threads{threads}",
            "read_gcs.py",
            "gcs",
            thread_args,
            note=(
                "google-cloud-storage 3.x blob.download_as_bytes() in "
                f"ThreadPoolExecutor({threads}), AnonymousCredentials, requests pool widened "
                f"to {threads}, checksum left at the library default ('auto')"
            ),
        ),
        Contender(
            f"gcs-threads{conc}",
            "read_gcs.py",
            "gcs",
            ("--threads", str(conc)),
            note=(
                f"as gcs-threads{threads} with {conc} threads and a pool of {conc}: as many "
                "requests in flight as aioflux (its best setting here)"
            ),
        ),
        Contender(
            f"dataflux-threads{threads}",
            "read_dataflux.py",
            "dataflux",
            thread_args,
            note=(
                f"dataflux_core.download.dataflux_download_threaded(threads={threads}) on the "
                "whole list (compose up to 32 objects, download, split, delete), "
                "max_composite_object_size at its default; this helper never calls the bucket "
                "IAM testPermissions endpoint, so no check had to be bypassed"
            ),
        ),
        Contender(
            f"dataflux-threads{conc}",
            "read_dataflux.py",
            "dataflux",
            ("--threads", str(conc)),
            note=(f"the same with threads={conc}: as many requests in flight as aioflux "
                  "(its best setting here)"),
        ),
        Contender(
            f"gcsfs-cat{conc}",
            "read_gcsfs.py",
            "gcsfs",
            ("--concurrency", str(conc)),
            note=(
                f"GCSFileSystem(token='anon').cat(paths, batch_size={conc}); the gRPC "
                "bucket-type probe is disabled (GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false selects "
                "the plain GCSFileSystem), so no time had to be excluded"
            ),
        ),
    ]
    return Plan(
        name="read_small",
        description=(
            f"{count:,} objects x {size / 1024:g} KiB, each read whole once (concurrency {conc} "
            f"for the async contenders, {threads} threads for the threaded ones)."
        ),
        bucket="perf-read-small",
        objects=[ObjectSet("read_small/obj-", count, size)],
        contenders=contenders,
        baseline="aioflux",
        targets=[Target(f"obstore-get{conc}", 1.0), Target("aiohttp-bare", 0.85),
                 Target(f"gcs-threads{conc}", 3.0), Target(f"gcs-threads{threads}", None)],
        notes=[
            (
                "aioflux, aiohttp-bare and obstore run on uvloop when importable (the loop "
                "aioflux's bridge uses) and read the same object list at the same concurrency"
            ),
            (
                "every contender keeps only each body's length, except dataflux and gcsfs, "
                "whose APIs return all bodies at once; their RSS growth includes the data set"
            ),
        ],
        timeout_s=600.0,
        expect_items=count,
        expect_bytes=count * size,
    )
