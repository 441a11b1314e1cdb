"""az_* contender: adlfs (fsspec's Azure filesystem) on Azurite.

``--task read``: ``fs.cat(paths)``. ``--task epoch``: a map-style Dataset
whose ``__getitems__`` is ``fs.cat`` of the batch; listing (``fs.find``)
untimed. adlfs's sync ``cat`` of a list reads one blob after another (it
overrides fsspec's and takes no batch size), and its async ``_cat`` first
checks each path's existence, one after another; with ``--batch-size N``
both gather the filesystem's async ``_cat_file`` per blob instead, N at once
on its loop. ``--task save``: ``torch.save(state,
fs.open(path, "wb"))``. ``--task load``: ``fs.open(path, "rb")``,
``readinto`` 8 MiB front to back.
``AzureBlobFileSystem(connection_string=...)`` (Azurite's, account key).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from _contender import Manifest, Stopwatch, load, report, rss_mb
from adlfs import AzureBlobFileSystem
from ckpt_common import add_state_args, build_state
from fsspec.asyn import sync

FS = AzureBlobFileSystem(connection_string=os.environ["AZURE_STORAGE_CONNECTION_STRING"])


def cat(paths: list[str], batch_size: int | None) -> dict[str, bytes]:
    if batch_size is None:
        return FS.cat(paths)
    return sync(FS.loop, _cat_at_once, paths, batch_size)


async def _cat_at_once(paths: list[str], batch_size: int) -> dict[str, bytes]:
    gate = asyncio.Semaphore(batch_size)

    async def one(path: str) -> bytes:
        async with gate:
            return await FS._cat_file(path)

    return dict(zip(paths, await asyncio.gather(*map(one, paths)), strict=True))


def read(manifest: Manifest, batch_size: int | None) -> tuple[Stopwatch, int, int]:
    paths = [f"{manifest.bucket}/{name}" for name in manifest.names]
    with Stopwatch() as watch:
        got = cat(paths, batch_size)
        sizes = [len(v) for v in got.values()]
    return watch, sum(sizes), len(sizes)


class FsDataset:
    def __init__(self, root: str, batch_size: int | None) -> None:
        self.paths = sorted(FS.find(root))
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> bytes:
        return bytes(FS.cat_file(self.paths[i]))

    def __getitems__(self, indices: list[int]) -> list[bytes]:
        wanted = [self.paths[i] for i in indices]
        got = cat(wanted, self.batch_size)
        return [got[p] for p in wanted]


def epoch(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    import torch.utils.data

    ds = FsDataset(f"{manifest.bucket}/{args.prefix}", args.batch_size)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch,  # type: ignore[arg-type]
                                         num_workers=0, collate_fn=lambda b: sum(map(len, b)))
    nbytes = 0
    with Stopwatch() as watch:
        for size in loader:
            nbytes += size
    return watch, nbytes, len(ds)


def save(manifest: Manifest, state: Any) -> tuple[Stopwatch, int]:
    import torch

    path = f"{manifest.bucket}/az_ckpt_save/adlfs.pt"
    with Stopwatch() as watch:
        with FS.open(path, "wb") as f:
            torch.save(state, f)
            size = f.tell()
    return watch, size


def load_blob(manifest: Manifest, name: str) -> tuple[Stopwatch, int]:
    view = memoryview(bytearray(8 * 2**20))
    total = 0
    with Stopwatch() as watch:
        with FS.open(f"{manifest.bucket}/{name}", "rb") as f:
            while n := f.readinto(view):
                total += n
    return watch, total


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--task", choices=["read", "epoch", "save", "load"], required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--prefix", default="")
    p.add_argument("--object", default="")
    add_state_args(p)
    args = p.parse_args(rest)
    if args.task == "read":
        watch, nbytes, items = read(manifest, args.batch_size)
        report(watch, nbytes=nbytes, items=items)
    elif args.task == "epoch":
        watch, nbytes, items = epoch(manifest, args)
        report(watch, nbytes=nbytes, items=items)
    elif args.task == "save":
        state = build_state(args)
        rss_state = rss_mb()
        watch, nbytes = save(manifest, state)
        report(watch, nbytes=nbytes, items=1, rss_state_mb=round(rss_state, 1))
    else:
        watch, nbytes = load_blob(manifest, args.object)
        report(watch, nbytes=nbytes, items=1)
