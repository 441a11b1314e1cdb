"""az_* contender: aioflux on ``az://`` (Azurite), one task per run.

``--task read``: ``AzureStore.read`` of every manifest blob, all submitted
at once (the store's ``max_concurrency`` bounds them). ``--task epoch``:
``ObjectMapDataset.from_prefix('az://...')`` (listing untimed) through a
DataLoader. ``--task save``: ``Checkpoint(store).save(state, url)``.
``--task load``: ``aioflux.open(url, "rb")``, ``readinto`` 8 MiB front to
back. The store comes from ``AZURE_STORAGE_CONNECTION_STRING`` (Azurite's
development account: account-key SAS tokens).
"""

from __future__ import annotations

import argparse
import asyncio

from _contender import Manifest, Stopwatch, load, report, rss_mb, run
from ckpt_common import add_state_args, build_state

import aioflux
from aioflux import ClientConfig, ReaderOptions, WriterOptions
from aioflux.azure import AzureStore
from aioflux.torch import DatasetSettings


async def read(manifest: Manifest, concurrency: int) -> tuple[Stopwatch, int, int]:
    async with AzureStore(ClientConfig(max_concurrency=concurrency)) as store:
        async def one(name: str) -> int:
            return len(await store.read(manifest.bucket, name))

        with Stopwatch() as watch:
            sizes = await asyncio.gather(*(one(name) for name in manifest.names))
    return watch, sum(sizes), len(sizes)


def epoch(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    import torch.utils.data

    from aioflux.torch import ObjectMapDataset

    ds = ObjectMapDataset.from_prefix(f"az://{manifest.bucket}/{args.prefix}",
                                      settings=DatasetSettings(config=ClientConfig(max_concurrency=args.concurrency)))
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                         collate_fn=lambda b: sum(map(len, b)))
    nbytes = 0
    with Stopwatch() as watch:
        for size in loader:
            nbytes += size
    return watch, nbytes, len(ds)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--task", choices=["read", "epoch", "save", "load"], required=True)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--prefix", default="")
    p.add_argument("--part-mib", type=int, default=8)
    p.add_argument("--in-flight", type=int, default=16)
    p.add_argument("--object", default="")
    add_state_args(p)
    args = p.parse_args(rest)
    if args.task == "read":
        (watch, nbytes, items), loop = run(read(manifest, args.concurrency))
        report(watch, nbytes=nbytes, items=items, loop=loop)
    elif args.task == "epoch":
        watch, nbytes, items = epoch(manifest, args)
        report(watch, nbytes=nbytes, items=items, workers=args.workers)
    elif args.task == "save":
        from aioflux.torch import Checkpoint

        state = build_state(args)
        rss_state = rss_mb()
        options = WriterOptions(part_size=args.part_mib * 2**20, max_in_flight=args.in_flight)
        store = AzureStore()
        with Stopwatch() as watch:
            size = Checkpoint(store, writer=options).save(
                state, f"az://{manifest.bucket}/az_ckpt_save/aioflux.pt").size
        report(watch, nbytes=size, items=1, part_mib=args.part_mib, in_flight=args.in_flight,
               rss_state_mb=round(rss_state, 1))
    else:
        view = memoryview(bytearray(8 * 2**20))
        total = 0
        options = ReaderOptions(block_size=args.part_mib * 2**20, read_ahead=args.in_flight)
        with Stopwatch() as watch:
            with aioflux.open(f"az://{manifest.bucket}/{args.object}", "rb",
                              reader=options) as f:
                while n := f.readinto(view):
                    total += n
        report(watch, nbytes=total, items=1, chunk_mib=args.part_mib, read_ahead=args.in_flight)
