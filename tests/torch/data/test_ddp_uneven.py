"""Every DDP rank runs the same number of steps when the object count does not
split evenly: DDP all-reduces gradients at every step, so a rank with one
batch more waits forever at the epoch's end. As with ``DistributedSampler``
the short last global batch is padded with the epoch's first samples, or
left out with ``drop_last``; ``len()`` is what each rank yields."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.utils.data

from aioflux.torch import (
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
    ResumableBatchSampler,
    ResumableSampler,
)
from aioflux.torch.data._order import epoch_order
from tests.torch._forkserver import forkserver
from tests.torch._resume_util import objects_of, parts, run, seed_data, to_bytes
from tests.torch.conftest import Where


def padded(order: list[Any], start: int, world: int) -> list[Any]:
    """``order[start:]`` padded as DistributedSampler pads: to a multiple of
    ``world`` with the order's first items, wrapping around."""
    rest = order[start:]
    return rest + (order * world)[:-len(rest) % world]


def cut(items: list[Any], size: int) -> list[list[Any]]:
    return [items[k:k + size] for k in range(0, len(items), size)]


@pytest.mark.parametrize("drop_last", [False, True])
def test_samplers_give_every_rank_as_many_batches_and_samples(drop_last: bool) -> None:
    for count in (0, 1, 2, 3, 5, 7, 13, 23, 97, 100):
        dataset = list(range(count))
        order = list(epoch_order(count, 1, 0, True))
        for world in range(1, 6):
            for batch in (1, 2, 3, 4, 16):
                case = (count, world, batch)
                shares, samples = [], []
                for rank in range(world):
                    ranked = Order(batch_size=batch, seed=1, rank=rank, world_size=world,
                                   drop_last=drop_last)
                    batches = ResumableBatchSampler(dataset, order=ranked)
                    promised = len(batches)
                    shares.append(list(batches))
                    assert promised == len(shares[-1]), case
                    sampler = ResumableSampler(dataset, order=ranked)
                    promised = len(sampler)
                    samples.append(list(sampler))
                    assert promised == len(samples[-1]), case
                    assert samples[-1] == [i for b in shares[-1] for i in b], case
                    loader = torch.utils.data.DataLoader(dataset, sampler=sampler,
                                                         batch_size=batch, collate_fn=list)
                    assert len(loader) == len(list(loader)) == len(shares[-1]), case
                    # The same count as torch's own: its sampler pads to ceil(N / W);
                    # drop_last here is its drop_last plus the DataLoader's (full
                    # batches only, every one of them on every rank).
                    theirs = torch.utils.data.DistributedSampler(
                        dataset, num_replicas=world, rank=rank, drop_last=drop_last).num_samples
                    assert len(samples[-1]) == (theirs // batch * batch if drop_last
                                                else theirs), case
                steps = list(zip(*shares, strict=True))  # as many batches on every rank
                for step in steps:  # and as many samples at every step
                    assert len({len(share) for share in step}) == 1, case
                merged = [i for step in steps for share in step for i in share]
                if drop_last:
                    assert merged == order[:count - count % (world * batch)], case
                    assert all(len(share) == batch for share in shares[0]), case
                else:
                    assert merged == padded(order, 0, world), case


@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["file"], indirect=True)
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_dataset_ranks_and_workers_yield_as_many_batches(where: Where,
                                                                   drop_last: bool) -> None:
    data = seed_data(where, 23)
    combos = [(2, 1, 0), (2, 4, 0), (3, 3, 0), (4, 2, 0), (2, 4, 2), (3, 2, 2), (4, 1, 2)]
    objects: list[Any] = []
    for world, batch, workers in combos:
        case = (world, batch, workers)
        ranks = []
        for rank in range(world):
            ds = ObjectIterableDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                                   order=Order(seed=5, rank=rank, world_size=world,
                                                               batch_size=batch,
                                                               drop_last=drop_last), prefetch=4)
            objects = ds.objects
            loader = torch.utils.data.DataLoader(
                ds, batch_size=batch, collate_fn=list, num_workers=workers,
                multiprocessing_context="fork" if workers else None)
            promised, steps = len(ds), len(loader)
            got = list(loader)
            assert promised == sum(len(b) for b in got), case
            assert steps == len(got) == math.ceil(promised / batch), case
            ranks.append(got)
        order = [data[where.rel(objects[i].name)] for i in epoch_order(23, 5, 0, True)]
        steps_ = list(zip(*ranks, strict=True))  # as many batches on every rank
        for step in steps_:
            assert len({len(share) for share in step}) == 1, case
        # Workers took whole global batches in turn: together, the epoch in order.
        merged = [s for step in steps_ for share in step for s in share]
        global_batch = world * batch
        assert merged == (order[:23 - 23 % global_batch] if drop_last
                          else padded(order, 0, world)), case


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_padding_repeats_objects_in_a_composed_download(where: Where) -> None:
    # 5 tiny objects on 4 ranks: 3 of them twice, composed by default on GCS.
    data = seed_data(where, 5)
    ranks = []
    for rank in range(4):
        ds = ObjectIterableDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                               order=Order(seed=2, rank=rank, world_size=4),
                                               settings=where.settings())
        ranks.append(list(ds))
        objects = ds.objects
    order = [data[where.rel(objects[i].name)] for i in epoch_order(5, 2, 0, True)]
    assert [s for step in zip(*ranks, strict=True) for s in step] == order + order[:3]
    assert where.names() == [f"d/{i:03d}" for i in range(5)]  # no composite left


@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["file"], indirect=True)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["map", "sampler", "iterable"])
def test_resume_on_another_world_size_pads_only_the_rest(where: Where, kind: str,
                                                         workers: int) -> None:
    data = seed_data(where, 41)  # global batches of 6: 6 full, then 5 of them
    first = parts(where, kind, 2, workers, 3, 4)
    objects = objects_of(first[0][0])
    order = [data[where.rel(objects[i].name)] for i in epoch_order(41, 4, 0, True)]
    before, state = run(first, stop=3)
    assert state is not None and state["samples"] == 18
    second = parts(where, kind, 3, workers, 2, 4)  # the same global batch of 6
    for owner, _ in second:
        owner.load_state_dict(state)
        # Every rank is told the same of what is left: 23 samples padded to 24.
        assert len(owner) == (4 if kind == "map" else 8)
    after, _ = run(second, state=state)
    # Each sample once, then the first of the epoch again to even out 3 ranks.
    assert before + after == cut(order, 6)[:3] + cut(padded(order, 18, 3), 6)
    after_once, _ = run(parts(where, kind, 2, workers, 3, 4), state=state)
    assert before + after_once == cut(padded(order, 0, 2), 6)


def _gloo_rank(rank: int, world: int, init: str, root: str, out: str) -> None:
    # A hang in all_reduce ends as an error well within the test's timeout.
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    try:
        def steps(loader: torch.utils.data.DataLoader[Any]) -> list[int]:
            promised, done = len(loader), 0
            for batch in loader:
                total = torch.tensor([float(len(batch))])
                dist.all_reduce(total)  # what DDP does at every backward
                assert total.item() == world * len(batch)  # equal shares at every step
                done += 1
            return [promised, done]

        root_ = f"{root}/d/"
        iterable = ObjectIterableDataset.from_prefix(root_, transform=to_bytes,
                                                     order=Order(batch_size=4))
        report = [steps(torch.utils.data.DataLoader(iterable, batch_size=4, collate_fn=list))]
        dropping = ObjectIterableDataset.from_prefix(root_, transform=to_bytes,
                                                     order=Order(batch_size=4, drop_last=True))
        report.append(steps(torch.utils.data.DataLoader(
            dropping, batch_size=4, collate_fn=list, num_workers=2,
            multiprocessing_context="fork")))
        mapped = ObjectMapDataset.from_prefix(root_, transform=to_bytes)
        report.append(steps(torch.utils.data.DataLoader(
            mapped, collate_fn=list, batch_sampler=ResumableBatchSampler(mapped,
                                                                         order=Order(batch_size=4)))))
        Path(out, f"{rank}.json").write_text(json.dumps(report))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_two_gloo_ranks_all_reduce_every_step_to_the_epochs_end(where: Where,
                                                                 tmp_path: Path) -> None:
    seed_data(where, 17)  # 2 global batches of 8, then 1 sample: 3 steps vs 2 unpadded
    forkserver()  # the ranks start from it: torch imported once, not once a rank
    mp.start_processes(_gloo_rank, args=(2, str(tmp_path / "init"), where.root, str(tmp_path)),
                       nprocs=2, join=True, start_method="forkserver")
    reports = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(2)]
    # Padded: 3 steps (the last of 1 sample); drop_last: 2; the sampler pads.
    assert reports[0] == reports[1] == [[3, 3], [2, 2], [3, 3]]
