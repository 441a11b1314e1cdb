"""read_cpu contender: one of aioflux's read paths reading whole objects,
for its CPU seconds per GiB.

``--path`` picks it: ``http-read`` (``HttpStore.read`` from nginx),
``http-open`` (``aioflux.open(http URL).read()``), ``gcs-read``
(``AsyncClient.read``), ``sync-read`` (``Client.read``), ``gcs-fetch``
(``AsyncClient.fetch`` with the size and crc32c a listing gave),
``gcs-open`` (``aioflux.open(gs URL).read()``, the reader engine),
``s3-read`` (``S3Store.read`` from the emulator's S3 face),
``download-many`` (``Downloader.download_many`` of the stat'ed objects),
``stream`` (``AsyncClient.stream`` of their folder), ``az-read``
(``AzureStore.read`` from Azurite, started here), ``local-read``
(``LocalStore.read`` of nginx's copy of the file) and ``local-open``
(``aioflux.open(file URL).read()``: checkpoint and DCP loads' reads of a
file). The GCS and S3 paths read from aioflux's emulator, another
process, whose CPU is not this one's. Every path checks what it reads as it always does (length,
crc32c, version); the figure is this process's CPU, its threads
included, over the timed reads.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from _contender import Manifest, Stopwatch, load, report, run

import aioflux
from aioflux import AsyncClient, Client
from aioflux._core.records.urls import parse_url
from aioflux.azure import AzureStore
from aioflux.http import HttpStore
from aioflux.local import LocalStore


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


def _cached(path: Path) -> Path:
    """``path``, read through once untimed: in the page cache, as nginx's
    sendfile finds the floor's copy."""
    chunk = bytearray(16 << 20)
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(chunk):
            pass
    return path


async def _azure(paths: list[Path]) -> tuple[Stopwatch, int]:
    """AzureStore.read from Azurite, started here: a plan runs one emulator,
    and the floor reads nginx in the same run. The blobs are nginx's files,
    uploaded untimed (Azurite's CPU is its own process's)."""
    from tests.servers.azurite import running_azurite

    nbytes = 0
    with running_azurite() as server:
        async with AzureStore(connection_string=server.connection_string) as store:
            await store.create_bucket("read-cpu")
            for path in paths:
                await store.write("read-cpu", path.name, path.read_bytes())
            await store.stat("read-cpu", paths[0].name)  # a connection, untimed
            with Stopwatch() as watch:
                for path in paths:
                    nbytes += len(await store.read("read-cpu", path.name))
    return watch, nbytes


async def _local(paths: list[Path]) -> tuple[Stopwatch, int]:
    nbytes = 0
    async with LocalStore() as store:
        with Stopwatch() as watch:
            for path in paths:
                where = parse_url(path)
                nbytes += len(await store.read(where.bucket, where.name))
    return watch, nbytes


def _local_open(paths: list[Path]) -> tuple[Stopwatch, int]:
    nbytes = 0
    with aioflux.open(paths[0].as_uri()) as fh:  # the portal and its loop up, untimed
        fh.read(1)
    with Stopwatch() as watch:
        for path in paths:
            with aioflux.open(path.as_uri()) as fh:
                nbytes += len(fh.read())
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
    elif ARGS.path.startswith(("az-", "local-")):
        from _http_served import _mirror

        # The files nginx serves the floor, mirrored from the emulator.
        root = _mirror(manifest, [(n, s) for n, s in manifest.objects if n in names])
        paths = [_cached(root / name) for name in names]
        if ARGS.path == "az-read":
            result = run(_azure(paths), ARGS.loop)[0]
        elif ARGS.path == "local-read":
            result = run(_local(paths), ARGS.loop)[0]
        else:
            result = _local_open(paths)
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
