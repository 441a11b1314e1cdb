"""read_cpu contender: one of aioflux's read paths reading whole objects,
for its CPU seconds per GiB.

``--path`` picks it: ``http-read`` (``HttpStore.read`` from nginx),
``http-open`` (``aioflux.open(http URL).read()``), ``gcs-read``
(``AsyncClient.read``), ``sync-read`` (``Client.read``), ``gcs-fetch``
(``AsyncClient.fetch`` with the size and crc32c a listing gave),
``gcs-open`` (``aioflux.open(gs URL).read()``, the reader engine),
``s3-read`` (``S3Store.read`` from the emulator's S3 face),
``download-many`` (``Downloader.download_many`` of the stat'ed objects) and
``stream`` (``AsyncClient.stream`` of their folder). The GCS and S3 paths
read from aioflux's emulator, another process, whose CPU is not this
one's. Every path checks what it reads as it always does (length,
crc32c, version); the figure is this process's CPU, its threads
included, over the timed reads.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from _contender import Manifest, Stopwatch, load, report, run

import aioflux
from aioflux import AsyncClient, Client
from aioflux.http import HttpStore


async def _gcs(manifest: Manifest, names: list[str]) -> tuple[Stopwatch, int]:
    bucket, path = manifest.bucket, ARGS.path
    nbytes = 0
    async with AsyncClient(endpoint=manifest.endpoint) as client:
        infos = [await client.stat(bucket, name) for name in names]
        with Stopwatch() as watch:
            if path == "gcs-read":
                for name in names:
                    nbytes += len(await client.read(bucket, name))
            elif path == "gcs-fetch":
                for info in infos:
                    fetched = await client.fetch(bucket, info.name, size=info.size,
                                                 crc=info.crc32c, generation=info.generation)
                    nbytes += len(fetched.data or b"")
            elif path == "download-many":
                got = await aioflux.Downloader(client).download_many(infos)
                nbytes += sum(map(len, got))
            elif path == "stream":
                async for item in client.stream(bucket, ARGS.prefix):
                    nbytes += len(item.data)
            else:
                raise SystemExit(f"unknown --path {path}")
    return watch, nbytes


async def _s3(manifest: Manifest, names: list[str]) -> tuple[Stopwatch, int]:
    from aioflux_s3_common import s3_store

    nbytes = 0
    async with s3_store(manifest) as s3:
        await s3.stat(manifest.bucket, names[0])  # credentials and a connection, untimed
        with Stopwatch() as watch:
            for name in names:
                nbytes += len(await s3.read(manifest.bucket, name))
    return watch, nbytes


def _sync(manifest: Manifest, names: list[str]) -> tuple[Stopwatch, int]:
    """Client.read, or aioflux.open(gs URL).read() through the reader."""
    nbytes = 0
    with Client(endpoint=manifest.endpoint) as client:
        client.stat(manifest.bucket, names[0])  # the portal and its loop up, untimed
        with Stopwatch() as watch:
            for name in names:
                if ARGS.path == "sync-read":
                    nbytes += len(client.read(manifest.bucket, name))
                else:
                    with aioflux.open(f"gs://{manifest.bucket}/{name}", client=client) as fh:
                        nbytes += len(fh.read())
    return watch, nbytes


async def _http(urls: list[str]) -> tuple[Stopwatch, int]:
    nbytes = 0
    async with HttpStore(scheme="http") as store:
        with Stopwatch() as watch:
            for url in urls:
                bucket, _, name = url.split("://", 1)[1].partition("/")
                nbytes += len(await store.read(bucket, name))
    return watch, nbytes


def _http_open(urls: list[str]) -> tuple[Stopwatch, int]:
    nbytes = 0
    with aioflux.open(urls[0]) as fh:  # the portal and its loop up, untimed
        fh.read(1)
    with Stopwatch() as watch:
        for url in urls:
            with aioflux.open(url) as fh:
                nbytes += len(fh.read())
    return watch, nbytes


def main(manifest: Manifest) -> tuple[Stopwatch, int, int]:
    names = [n for n in manifest.names if n.startswith(ARGS.prefix)]
    result: Any
    if ARGS.path.startswith("http-"):
        from _http_served import served

        os.environ["PERF_PROFILE"] = "none"  # nginx unshaped, as the floor reads it
        with served(manifest, ARGS.prefix) as urls:
            result = (run(_http(urls), ARGS.loop)[0] if ARGS.path == "http-read"
                      else _http_open(urls))
    elif ARGS.path in ("sync-read", "gcs-open"):
        result = _sync(manifest, names)
    elif ARGS.path == "s3-read":
        result = run(_s3(manifest, names), ARGS.loop)[0]
    else:
        result = run(_gcs(manifest, names), ARGS.loop)[0]
    watch, nbytes = result
    return watch, nbytes, len(names)


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--loop", default="uvloop")
    ARGS = parser.parse_args(rest)
    watch, nbytes, items = main(manifest)
    report(watch, nbytes=nbytes, items=items, path=ARGS.path,
           cpu_s_per_gib=round((watch.cpu_user_s + watch.cpu_sys_s) / (nbytes / 2**30), 4))
