"""Drive samplers/datasets through DataLoaders in lockstep, as DDP ranks do, and
stop them mid-epoch as a crash would (shared by test_resume and test_elastic)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, Any

import torch.utils.data

from aioflux import DownloadOptions
from aioflux.torch import (
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
    ResumableBatchSampler,
    ResumableSampler,
)
from aioflux.torch.data._order import epoch_order

if TYPE_CHECKING:
    # Not at run time: a spawned DataLoader worker imports this module to
    # unpickle to_bytes, and the fixtures' module pulls in pytest, every
    # backend and the emulator (~0.4 s of CPU a worker).
    from tests.torch.conftest import Where

NO_COMPOSE = DownloadOptions(disable_compose=True)
Owner = ResumableBatchSampler | ResumableSampler | ObjectIterableDataset[bytes]
Part = tuple[Owner, torch.utils.data.DataLoader[Any]]


def to_bytes(data: bytes | bytearray) -> bytes:
    return bytes(data)


def seed_data(where: Where, count: int) -> dict[str, bytes]:
    """``count`` small distinct objects under ``d/``; name -> bytes."""
    data = {f"d/{i:03d}": i.to_bytes(2, "big") + os.urandom(30) for i in range(count)}
    for name, body in data.items():
        where.put(name, body)
    return data


def parts(where: Where, kind: str, ranks: int, workers: int, batch: int, seed: int,
          ctx: str | BaseContext = "fork") -> list[Part]:
    """One (sampler or dataset, DataLoader) per simulated rank, built afresh
    as a restarted job would."""
    out: list[Part] = []
    for rank in range(ranks):
        options: dict[str, Any] = {
            "num_workers": workers, "collate_fn": list,
            "multiprocessing_context": ctx if workers else None}
        owner: Owner
        if kind == "map":
            ds = ObjectMapDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                              settings=where.settings(download_options=NO_COMPOSE))
            owner = ResumableBatchSampler(ds,
                                          order=Order(batch_size=batch, seed=seed, rank=rank,
                                                      world_size=ranks))
            loader = torch.utils.data.DataLoader(ds, batch_sampler=owner, **options)
        elif kind == "sampler":  # the per-sample sampler under the DataLoader's batching
            ds = ObjectMapDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                              settings=where.settings(download_options=NO_COMPOSE))
            owner = ResumableSampler(ds,
                                     order=Order(batch_size=batch, seed=seed, rank=rank,
                                                 world_size=ranks))
            loader = torch.utils.data.DataLoader(ds, sampler=owner, batch_size=batch, **options)
        else:
            owner = ObjectIterableDataset.from_prefix(
                where.url("d/"), transform=to_bytes,
                order=Order(seed=seed, rank=rank, world_size=ranks, batch_size=batch), prefetch=8,
                settings=where.settings(download_options=NO_COMPOSE))
            loader = torch.utils.data.DataLoader(owner, batch_size=batch, **options)
        out.append((owner, loader))
    return out


def run(job: list[Part], *, stop: int | None = None,
        state: dict[str, Any] | None = None) -> tuple[list[list[bytes]], dict[str, Any] | None]:
    """Train (collect) global batches in lockstep; at step ``stop`` save the
    data state (the same on every rank, checked) and crash.

    Returns:
        The global batches (rank shares concatenated in rank order) and the
        state saved at ``stop``, round-tripped through JSON as a checkpoint would.
    """
    if state is not None:
        for owner, _ in job:
            owner.load_state_dict(state)
            owner.set_epoch(state["epoch"])  # the usual loop; keeps the position
    its: list[Iterator[list[bytes]]] = [owner.track(loader) for owner, loader in job]
    got: list[list[bytes]] = []
    saved = None
    try:
        for step, shares in enumerate(itertools.zip_longest(*its, fillvalue=[]), 1):
            got.append([s for share in shares for s in share])
            if step == stop:
                states = [owner.state_dict() for owner, _ in job]
                assert all(s == states[0] for s in states), states
                saved = json.loads(json.dumps(states[0]))
                break
    finally:
        for it in its:
            it.close()  # type: ignore[attr-defined]  # generators: stops the workers
    return got, saved


def objects_of(owner: Owner) -> list[Any]:
    """The dataset's objects, whichever kind of owner."""
    return owner.objects if isinstance(owner, ObjectIterableDataset) else \
        owner.dataset.objects  # type: ignore[attr-defined]


def expected(where: Where, data: dict[str, bytes], objects: list[Any], seed: int, epoch: int,
             global_batch: int) -> list[list[bytes]]:
    """The epoch's global batches straight from the rule: order by (seed, epoch), cut."""
    order = [data[where.rel(objects[i].name)] for i in
             epoch_order(len(objects), seed, epoch, True)]
    return [order[k:k + global_batch] for k in range(0, len(order), global_batch)]
