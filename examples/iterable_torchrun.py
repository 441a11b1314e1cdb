"""Iterable streaming under ``torchrun``: ``ObjectIterableDataset.from_prefix`` with
DDP on gloo, each sample seen once per epoch across all ranks, and every rank
training as many steps.

``ObjectIterableDataset`` shuffles the object list per epoch (seeded by
``seed`` and the epoch, so every rank computes the same permutation), gives
rank ``r`` every ``world_size``-th object, and splits that among the
DataLoader workers of the rank; ``set_epoch`` selects the epoch. At the end
of every epoch the ranks ``all_gather`` the sample ids they trained on and
rank 0 checks that each id appears, and that the ranks' counts are equal (an
uneven last batch is padded with the epoch's first samples).

Single process, on the bundled emulator::

    python examples/iterable_torchrun.py

Two ranks need one emulator they can all reach, so start it first
(``python -m aioflux emulator`` is the same command)::

    aioflux emulator --port 9023 --bucket demo &
    STORAGE_EMULATOR_HOST=http://127.0.0.1:9023 \\
        torchrun --nproc_per_node 2 examples/iterable_torchrun.py --url gs://demo/data

On a real bucket, leave out the emulator and ``STORAGE_EMULATOR_HOST``::

    torchrun --nproc_per_node 2 examples/iterable_torchrun.py --url gs://my-bucket/data

Rank 0 writes the dataset under the URL, the other ranks wait at a barrier.
Needs numpy (``pip install numpy``): ``all_gather_object`` pickles through it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

try:
    # torch.distributed's object collectives (all_gather_object here) pickle
    # through numpy; the CPU torch wheel does not bring it. Say so before
    # torch fails deep inside with "Numpy is not available".
    import numpy  # noqa: F401
except ImportError as exc:
    raise SystemExit(f"iterable_torchrun.py needs numpy (torch.distributed.all_gather_object "
                     f"uses it), which did not import ({exc}): `pip install numpy`") from exc

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from aioflux import AsyncClient, Conflict, parse_url
from aioflux.torch import ObjectIterableDataset, Order

FEATURES, CLASSES = 8, 3


def encode(sample_id: int, features: torch.Tensor, label: int) -> bytes:
    """float32 features, then int32 label and int32 sample id."""
    return struct.pack(f"<{FEATURES}fii", *features.tolist(), label, sample_id)


def decode(data: bytes | bytearray) -> tuple[torch.Tensor, int, int]:
    """The dataset's ``transform``: bytes -> (features, label, sample id)."""
    features = torch.frombuffer(bytearray(data[: 4 * FEATURES]), dtype=torch.float32)
    label, sample_id = struct.unpack("<ii", data[4 * FEATURES:])
    return features, label, sample_id


async def write_dataset(url: str, samples: int) -> None:
    bucket, prefix = parse_url(url)
    weights = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(0))
    rows = torch.randn(samples, FEATURES, generator=torch.Generator().manual_seed(1))
    async with AsyncClient() as client:
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            try:  # an emulator may not have the bucket yet; a real bucket exists
                await client.create_bucket(bucket)
            except Conflict:
                pass
        await asyncio.gather(*(
            client.write(bucket, f"{prefix}sample-{i:06d}",
                         encode(i, x, int((x @ weights).argmax())))
            for i, x in enumerate(rows)))


def train(url: str, samples: int, epochs: int, batch_size: int, workers: int) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    data_url = url.rstrip("/") + "/samples/"
    if rank == 0:
        asyncio.run(write_dataset(data_url, samples))
    dist.barrier()  # nobody lists before rank 0 finished writing

    # Rank and world size come from the process group, here, at construction:
    # DataLoader workers have no process group of their own.
    dataset = ObjectIterableDataset.from_prefix(data_url, transform=decode, order=Order(seed=0))
    # Workers started from a fork server, not forked from this process: its
    # threads (aioflux's event loop, gloo's, the last epoch's queue feeders)
    # may hold an interpreter lock at the fork, which deadlocks the child in
    # CPython 3.8-3.11.7 (gh-112275); Python 3.14 makes it the default.
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, num_workers=workers,
        multiprocessing_context="forkserver" if workers else None)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DistributedDataParallel(nn.Linear(FEATURES, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    loss = torch.tensor(float("nan"))

    for epoch in range(epochs):
        # A new permutation each epoch; without set_epoch every iter() would
        # advance it too, but set_epoch keeps all ranks in step explicitly.
        dataset.set_epoch(epoch)
        seen: list[int] = []
        # Every rank yields as many batches: when the samples do not split
        # evenly, the last ones are padded with the epoch's first few (as
        # DistributedSampler does), so each gradient all-reduce has all ranks.
        for features, labels, ids in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(features), labels)
            loss.backward()
            optimizer.step()
            seen.extend(ids.tolist())

        everyone: list[list[int] | None] = [None] * world
        dist.all_gather_object(everyone, seen)
        if rank == 0:
            counts = [len(part or []) for part in everyone]
            all_ids = [i for part in everyone for i in part or []]
            # (The prefix may hold more samples than --samples from an earlier run.)
            total = len(dataset.objects)
            assert len(set(counts)) == 1, f"ranks saw different numbers of samples: {counts}"
            assert len(set(all_ids)) == total, "a sample was missed"
            assert len(all_ids) - total < world, "more padding than the last batch needs"
            print(f"iterable_torchrun: epoch {epoch}: all {total} samples seen across {world} "
                  f"ranks x {workers} workers ({' + '.join(map(str, counts))}, "
                  f"{len(all_ids) - total} padded), loss {loss.item():.3f}", flush=True)


@contextmanager
def storage(url: str | None, world: int) -> Iterator[str]:
    """Yield the gs:// URL to use, starting the bundled emulator if needed."""
    if url is not None:
        yield url
        return
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        yield "gs://aioflux-examples/iterable-torchrun"
        return
    assert world == 1  # main() refuses to start several ranks without a shared emulator
    from aioflux.testing import GCS_LIKE_PROFILE, running_emulator

    with running_emulator(profile=GCS_LIKE_PROFILE) as emu:
        emu.create_bucket("aioflux-examples")
        # Inherited by DataLoader workers; every aioflux client honours it.
        os.environ["STORAGE_EMULATOR_HOST"] = emu.endpoint
        try:
            yield "gs://aioflux-examples/iterable-torchrun"
        finally:
            del os.environ["STORAGE_EMULATOR_HOST"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="gs://bucket/prefix (default: the bundled emulator)")
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    args = parser.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and args.url is None and not os.environ.get("STORAGE_EMULATOR_HOST"):
        parser.error("with several ranks, pass --url, or start `aioflux emulator` and set "
                     "STORAGE_EMULATOR_HOST so that all ranks share it (see --help)")
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")  # torchrun set RANK, MASTER_ADDR, ...
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with storage(args.url, world) as url:
            train(url, args.samples, args.epochs, args.batch_size, args.workers)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
