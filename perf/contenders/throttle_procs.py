"""throttle contender: N processes (or threads) each reading their own folder
of small objects through one capped server.

``--client``: ``aioflux`` (``AsyncClient.stream`` of the folder at default
settings; ``--rate off`` sets ``ClientConfig(request_rate='off')``),
``aioflux-s3`` (``S3Store.stream`` of the folder on the S3 face: 503
``SlowDown``; the store is made before the go line, as the botocore
clients are), ``aioflux-az`` (``AzureStore.stream`` of the folder on
Azurite, through a capping proxy this process runs: 503 ``ServerBusy``;
made before the go line too). ``--burst SECONDS`` puts the tests' capping
proxy (``tests/servers/capping_proxy.py``, the GCS dialect: 429) at ``--cap``
requests/s holding that many seconds of tokens in front of the emulator's
JSON API, for ``aioflux`` (a service's burst is unknown and may be small;
the emulator's own bucket holds a second), and the figures are its counts,
``gcsfs`` (``cat`` of the folder's paths), ``s3fs`` (the same on the S3
face), ``botocore`` (GetObject per object, ``Config(retries={'mode':
'adaptive'})``, 8 threads a process on one client; ``--threads`` runs all
N folders as N threads of one process on one client instead). The result
line adds the targets' figures (``_throttle.summarize``), each worker's
error, and, through a capping proxy, ``served_3s_of_cap``: the requests it
admitted a second from 2 to 3 s after its first refusal, over the cap.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any
from urllib.parse import urlsplit

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from _contender import Manifest, Stopwatch, load, report
from _throttle import counted, emulator_counts, fresh_rate, gather, summarize, worker_main

#: the environment variable naming the capping proxy's endpoint (``--burst``)
_PROXIED = "AIOFLUX_THROTTLE_PROXY"


def folder_names(manifest: Manifest, folder: str) -> list[str]:
    return [n for n in manifest.names if n.startswith(folder)]


def folder_of(prefix: str, i: int) -> str:
    return f"{prefix}p{i:02d}/"


def aioflux_work(manifest: Manifest, folder: str, rate: str):  # type: ignore[no-untyped-def]
    import asyncio

    from aioflux import AsyncClient, ClientConfig

    config = ClientConfig() if rate == "adaptive" else ClientConfig(request_rate="off")
    endpoint = os.environ.get(_PROXIED, manifest.endpoint)

    def work() -> tuple[int, int]:
        async def go() -> tuple[int, int]:
            async with AsyncClient(config, endpoint=endpoint) as client:
                items = nbytes = 0
                async for item in client.stream(f"gs://{manifest.bucket}/{folder}"):
                    items += 1
                    nbytes += len(item.data)
                return items, nbytes
        return asyncio.run(go())
    return work


def store_work(made: Any, bucket: str, folder: str):  # type: ignore[no-untyped-def]
    """The work of reading ``folder`` with ``made.stream``, a store made
    before the go line, as the botocore contenders make their clients:
    S3Store() loads botocore and its credential chain, a few tenths of a
    second of CPU, and 16 processes doing it after the go on two cores
    started their reads seconds apart (slowest / fastest up to 5 from that
    alone)."""
    import asyncio

    def work() -> tuple[int, int]:
        async def go() -> tuple[int, int]:
            async with made as store:
                items = nbytes = 0
                async for item in store.stream(bucket, folder):
                    items += 1
                    nbytes += len(item.data)
                return items, nbytes
        return asyncio.run(go())
    return work


def aioflux_s3_work(manifest: Manifest, folder: str, rate: str):  # type: ignore[no-untyped-def]
    from aioflux_s3_common import s3_store

    from aioflux import ClientConfig

    config = ClientConfig() if rate == "adaptive" else ClientConfig(request_rate="off")
    return store_work(s3_store(manifest, config), manifest.bucket, folder)


def aioflux_az_work(manifest: Manifest, folder: str, rate: str):  # type: ignore[no-untyped-def]
    from aioflux import ClientConfig
    from aioflux.azure import AzureStore

    config = ClientConfig() if rate == "adaptive" else ClientConfig(request_rate="off")
    # The parent's proxy, in the connection string it handed down.
    made = AzureStore(config, connection_string=os.environ["AZURE_STORAGE_CONNECTION_STRING"])
    return store_work(made, manifest.bucket, folder)


def fsspec_work(manifest: Manifest, folder: str, kind: str):  # type: ignore[no-untyped-def]
    if kind == "gcsfs":
        from gcsfs.core import GCSFileSystem
        fs = GCSFileSystem(project="perf", token="anon", endpoint_url=manifest.endpoint)
    else:
        from s3fs import S3FileSystem
        fs = S3FileSystem(endpoint_url=manifest.s3, client_kwargs={"region_name": "us-east-1"},
                          key="x", secret="x")
    paths = [f"{manifest.bucket}/{n}" for n in folder_names(manifest, folder)]

    def work() -> tuple[int, int]:
        bodies = fs.cat(paths)
        return len(bodies), sum(len(b) for b in bodies.values())
    return work


def botocore_client(manifest: Manifest, pool: int):  # type: ignore[no-untyped-def]
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    return session.create_client(
        "s3", endpoint_url=manifest.s3, region_name="us-east-1",
        aws_access_key_id="x", aws_secret_access_key="x",
        config=Config(retries={"mode": "adaptive"}, s3={"addressing_style": "path"},
                      max_pool_connections=pool))


def botocore_read(client, bucket: str, names: list[str]) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    nbytes = 0
    for name in names:
        nbytes += len(client.get_object(Bucket=bucket, Key=name)["Body"].read())
    return len(names), nbytes


def botocore_work(manifest: Manifest, folder: str, threads: int):  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    client = botocore_client(manifest, threads)
    names = folder_names(manifest, folder)

    def work() -> tuple[int, int]:
        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(lambda k: botocore_read(client, manifest.bucket,
                                                          names[k::threads]), range(threads)))
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    return work


def botocore_threads(manifest: Manifest, prefix: str, procs: int) -> list[dict[str, object]]:
    """N folders as N threads of this process, one adaptive client."""
    import threading

    client = botocore_client(manifest, procs)
    results: list[dict[str, object]] = [{} for _ in range(procs)]
    go = threading.Event()

    def one(i: int) -> None:
        go.wait()
        start = time.monotonic()
        try:
            items, nbytes = botocore_read(client, manifest.bucket,
                                          folder_names(manifest, folder_of(prefix, i)))
            error = None
        except Exception as exc:
            items = nbytes = 0
            error = f"{type(exc).__name__}: {str(exc)[:300]}"
        results[i] = {"start": start, "end": time.monotonic(), "items": items,
                      "bytes": nbytes, "error": error}

    workers = [threading.Thread(target=one, args=(i,)) for i in range(procs)]
    for w in workers:
        w.start()
    go.set()
    for w in workers:
        w.join()
    return results


def make_work(manifest: Manifest, args: argparse.Namespace, folder: str):  # type: ignore[no-untyped-def]
    if args.client == "aioflux":
        return aioflux_work(manifest, folder, args.rate)
    if args.client == "aioflux-s3":
        return aioflux_s3_work(manifest, folder, args.rate)
    if args.client == "aioflux-az":
        return aioflux_az_work(manifest, folder, args.rate)
    if args.client in ("gcsfs", "s3fs"):
        return fsspec_work(manifest, folder, args.client)
    return botocore_work(manifest, folder, 8)


def azure_capped(manifest: Manifest, cap: float) -> Any:
    """Azurite behind a capping proxy of ``cap`` requests/s (503
    ``ServerBusy`` past it), run on a thread of this process for the
    workers: their connection string names the proxy. Azurite has no cap
    of its own; the proxy is the one the tests put in front of it."""
    from tests.servers.capping_proxy import CappingProxy

    assert manifest.azure is not None, "an Azurite scenario gives its connection string"
    parts = urlsplit(manifest.endpoint)  # http://127.0.0.1:PORT/devstoreaccount1
    upstream = f"{parts.scheme}://{parts.netloc}"
    proxy = CappingProxy(upstream, cap, "azure")
    endpoint = proxy.__enter__()
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = manifest.azure.replace(
        f"{upstream}/", f"{endpoint}/")
    return proxy


def gcs_capped(manifest: Manifest, cap: float, burst: float) -> Any:
    """The emulator's JSON API behind a capping proxy of ``cap`` requests/s
    holding ``burst`` seconds of tokens (429 past it), run on a thread of
    this process; the workers find it in the environment."""
    from tests.servers.capping_proxy import CappingProxy

    proxy = CappingProxy(manifest.endpoint, cap, "gcs", burst=max(1.0, cap * burst))
    os.environ[_PROXIED] = proxy.__enter__()
    return proxy


def main(manifest: Manifest, args: argparse.Namespace) -> None:
    proxy = azure_capped(manifest, args.cap) if args.client == "aioflux-az" else None
    if args.burst is not None:
        assert args.client == "aioflux", "--burst: the aioflux client on the JSON API"
        proxy = gcs_capped(manifest, args.cap, args.burst)
    if args.client in ("aioflux", "aioflux-s3"):
        # Before any worker starts: the node meets the cap afresh, not at
        # the rate an earlier row or round left (the proxy's endpoint is
        # new each run: a key of its own).
        fresh_rate(manifest.endpoint if args.client == "aioflux" else manifest.s3,
                   manifest.bucket)

    def counts() -> dict[str, tuple[int, int]]:
        if proxy is None:
            return emulator_counts(manifest.endpoint)
        return {"requests": (proxy.stats["requests"], proxy.stats["throttled"])}

    before = counts()
    try:
        with Stopwatch() as watch:
            if args.threads:
                lines = botocore_threads(manifest, args.prefix, args.procs)
            else:
                argv = [sys.executable, sys.argv[0], sys.argv[1], *sys.argv[2:]]
                lines = gather(argv, args.procs)
        after = counts()
        # The proxy's rows: what the node was served in the third second
        # after the first throttle (the target: 0.85 of the cap within 3 s).
        served = None if proxy is None else proxy.served_after_throttle(2.0, 3.0)
    finally:
        if proxy is not None:
            proxy.__exit__(None, None, None)
    errors = [str(line["error"]) for line in lines if line.get("error")]
    spans = [(float(line["start"]), float(line["end"]))  # type: ignore[arg-type]
             for line in lines if line.get("start") is not None]
    figures = summarize(spans, failures=len(errors), kinds=counted(before, after),
                        cap=args.cap)
    if served is not None:
        figures["served_3s_of_cap"] = round(served / args.cap, 3)
    watch.seconds = float(figures["wall_s"])
    print(f"throttle {args.client} {figures} errors={errors[:3]}", file=sys.stderr)
    report(watch, nbytes=sum(int(line["bytes"]) for line in lines),  # type: ignore[call-overload]
           items=sum(int(line["items"]) for line in lines),  # type: ignore[call-overload]
           procs=args.procs, client=args.client, rate=args.rate, **figures,
           errors=errors[:3])


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--client", required=True, choices=("aioflux", "aioflux-s3", "aioflux-az",
                                                         "gcsfs", "s3fs", "botocore"))
    p.add_argument("--rate", default="adaptive", choices=("adaptive", "off"))
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--cap", type=float, default=200.0)
    p.add_argument("--prefix", default="throttle/")
    p.add_argument("--threads", action="store_true")
    p.add_argument("--burst", type=float, default=None, metavar="SECONDS")
    p.add_argument("--worker", type=int, default=None)
    args = p.parse_args(rest)
    if args.worker is None:
        main(manifest, args)
    else:
        worker_main(make_work(manifest, args, folder_of(args.prefix, args.worker)))
