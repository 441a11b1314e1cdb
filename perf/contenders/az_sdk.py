"""az_* contender: Microsoft's azure-storage-blob, its asyncio client, on Azurite.

``--task read``: ``ContainerClient.download_blob(name).readall()`` for every
manifest blob, at most C at once (an ``asyncio.Semaphore``), one client.
``--task epoch``: a map-style Dataset whose ``__getitems__`` downloads a
batch concurrently on one event loop kept for the epoch; listing untimed.
``--task save``: ``torch.save`` into memory, then ``upload_blob(...,
max_concurrency=M)`` (its block upload). ``--task load``:
``download_blob(max_concurrency=M).readinto`` a sink (``--max-concurrency``
M, 8 unless given). The client comes from
``BlobServiceClient.from_connection_string`` (Azurite's, account key).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
from typing import Any

from _contender import Manifest, Stopwatch, load, report, rss_mb, run
from azure.storage.blob.aio import BlobServiceClient
from ckpt_common import add_state_args, build_state

CONN = os.environ["AZURE_STORAGE_CONNECTION_STRING"]


async def read(manifest: Manifest, concurrency: int) -> tuple[Stopwatch, int, int]:
    async with BlobServiceClient.from_connection_string(CONN) as service:
        container = service.get_container_client(manifest.bucket)
        sem = asyncio.Semaphore(concurrency)

        async def one(name: str) -> int:
            async with sem:
                return len(await (await container.download_blob(name)).readall())

        with Stopwatch() as watch:
            sizes = await asyncio.gather(*(one(name) for name in manifest.names))
    return watch, sum(sizes), len(sizes)


class BlobDataset:
    """A map-style dataset over listed blobs; a batch is fetched at once."""

    def __init__(self, container: str, prefix: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.service = BlobServiceClient.from_connection_string(CONN)
        self.container = self.service.get_container_client(container)

        async def listed() -> list[str]:
            return [b.name async for b in self.container.list_blobs(name_starts_with=prefix)]

        self.names = self.loop.run_until_complete(listed())

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> bytes:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: list[int]) -> list[bytes]:
        async def get(name: str) -> bytes:
            return bytes(await (await self.container.download_blob(name)).readall())

        async def batch() -> list[bytes]:
            return list(await asyncio.gather(*(get(self.names[i]) for i in indices)))

        return self.loop.run_until_complete(batch())

    def close(self) -> None:
        self.loop.run_until_complete(self.service.close())
        self.loop.close()


def epoch(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    import torch.utils.data

    ds = BlobDataset(manifest.bucket, args.prefix)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch,  # type: ignore[arg-type]
                                         num_workers=0, collate_fn=lambda b: sum(map(len, b)))
    nbytes = 0
    with Stopwatch() as watch:
        for size in loader:
            nbytes += size
    ds.close()
    return watch, nbytes, len(ds)


class Sink(io.RawIOBase):
    """Counts what is written; seekable, as a parallel download wants."""

    def __init__(self) -> None:
        self.count = 0
        self.at = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.at = offset if whence == 0 else self.at + offset
        return self.at

    def tell(self) -> int:
        return self.at

    def write(self, b: Any) -> int:
        n = len(memoryview(b))
        self.count += n
        self.at += n
        return n


async def save(manifest: Manifest, state: Any, in_flight: int) -> tuple[Stopwatch, int]:
    import torch

    async with BlobServiceClient.from_connection_string(CONN) as service:
        blob = service.get_blob_client(manifest.bucket, "az_ckpt_save/sdk.pt")
        with Stopwatch() as watch:
            buf = io.BytesIO()
            torch.save(state, buf)
            size = buf.tell()
            buf.seek(0)
            await blob.upload_blob(buf, length=size, overwrite=True, max_concurrency=in_flight)
    return watch, size


async def load_blob(manifest: Manifest, name: str, in_flight: int) -> tuple[Stopwatch, int]:
    async with BlobServiceClient.from_connection_string(CONN) as service:
        blob = service.get_blob_client(manifest.bucket, name)
        sink = Sink()
        with Stopwatch() as watch:
            downloader = await blob.download_blob(max_concurrency=in_flight)
            await downloader.readinto(sink)
    return watch, sink.count


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--task", choices=["read", "epoch", "save", "load"], required=True)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    p.add_argument("--object", default="")
    p.add_argument("--max-concurrency", type=int, default=8)
    add_state_args(p)
    args = p.parse_args(rest)
    if args.task == "read":
        (watch, nbytes, items), loop = run(read(manifest, args.concurrency))
        report(watch, nbytes=nbytes, items=items, loop=loop)
    elif args.task == "epoch":
        watch, nbytes, items = epoch(manifest, args)
        report(watch, nbytes=nbytes, items=items)
    elif args.task == "save":
        state = build_state(args)
        rss_state = rss_mb()
        (watch, nbytes), _ = run(save(manifest, state, args.max_concurrency))
        report(watch, nbytes=nbytes, items=1, rss_state_mb=round(rss_state, 1))
    else:
        (watch, nbytes), _ = run(load_blob(manifest, args.object, args.max_concurrency))
        report(watch, nbytes=nbytes, items=1)
