"""Mid-epoch resume: every sample of an epoch exactly once across a crash,
for both datasets, 0 and 2 workers, fork and spawn, simulated and real DDP
ranks; the position saved with a checkpoint; StatefulDataLoader's protocol."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.utils.data

from aioflux import InvalidArgument, NotFound
from aioflux.torch import (
    CheckpointManager,
    DatasetSettings,
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
    ResumableBatchSampler,
    ResumableSampler,
)
from aioflux.torch.data._order import RankBatches, epoch_order
from tests.torch._forkserver import forkserver
from tests.torch._resume_util import expected, objects_of, parts, run, seed_data, to_bytes
from tests.torch.conftest import Where

RANKS = 2
BATCH = 3  # per rank: global batches of 6


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["map", "sampler", "iterable"])
def test_every_sample_once_across_a_crash_at_random_steps(where: Where, kind: str,
                                                          workers: int) -> None:
    data = seed_data(where, 40)  # 7 global batches, the last one short (4 of 6)
    rng = random.Random(f"{kind}{workers}")
    for seed in (1, 2, 3):
        first = parts(where, kind, RANKS, workers, BATCH, seed)
        want = expected(where, data, objects_of(first[0][0]), seed, 0, RANKS * BATCH)
        stop = rng.randrange(1, len(want))
        before, state = run(first, stop=stop)
        assert state is not None
        assert state["epoch"] == 0 and state["samples"] == stop * RANKS * BATCH
        assert state["global_batch_size"] == RANKS * BATCH and state["seed"] == seed
        after, _ = run(parts(where, kind, RANKS, workers, BATCH, seed), state=state)
        # The very batches of the uninterrupted epoch: nothing twice, nothing lost.
        assert before + after == want, (seed, stop)
        got = [s for batch in before + after for s in batch]
        assert sorted(got) == sorted(data.values())


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_resumed_epoch_then_the_next_one_and_the_state_at_an_epoch_end(where: Where,
                                                                       kind: str) -> None:
    data = seed_data(where, 20)
    job = parts(where, kind, 1, 0, 4, 7)
    objects = objects_of(job[0][0])
    _, state = run(job, stop=2)
    assert state is not None and state["samples"] == 8
    again = parts(where, kind, 1, 0, 4, 7)
    owner = again[0][0]
    rest, _ = run(again, state=state)
    assert rest == expected(where, data, objects, 7, 0, 4)[2:]
    # A finished epoch is saved as the start of the next one...
    assert owner.state_dict()["epoch"] == 1 and owner.state_dict()["samples"] == 0
    # ...and the next pass is epoch 1, whole.
    whole, _ = run(again)
    assert whole == expected(where, data, objects, 7, 1, 4) != expected(where, data, objects,
                                                                         7, 0, 4)
    # A state from a crash right at an epoch's end resumes at the next epoch.
    assert owner.state_dict()["epoch"] == 2


@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_the_length_after_a_resumed_epoch_tracked_through_workers(where: Where) -> None:
    # The pass ran in the workers, and the main process's copy of it stayed
    # "under way" once track() had taken its last batch: len() went on
    # counting what the resumed epoch had left (8 samples) instead of the
    # next epoch's 20, and a progress bar or an LR schedule built on
    # len(loader) got 2 steps of 5.
    seed_data(where, 20)
    (owner, loader), = parts(where, "iterable", 1, 2, 4, 7)
    _, state = run(parts(where, "iterable", 1, 0, 4, 7), stop=3)
    assert state is not None
    owner.load_state_dict(state)
    assert len(owner) == 8 and len(loader) == 2
    assert [len(batch) for batch in owner.track(loader)] == [4, 4]
    assert (len(owner), len(loader), owner.epoch) == (20, 5, 1)
    assert len(list(owner.track(loader))) == len(loader) == 5


@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_a_tracked_pass_left_early_through_workers_moves_on_to_the_next_epoch(
        where: Where) -> None:
    # A loop of a few steps per epoch (``break``), without set_epoch: the
    # pass ran in the workers only, and the main process's copy stayed at
    # epoch 0, so every "epoch" trained the same first batches of epoch 0
    # (with num_workers=0, or a sampler, each pass moved on).
    data = seed_data(where, 20)
    (owner, loader), = parts(where, "iterable", 1, 2, 4, 7)
    objects = objects_of(owner)
    for epoch in range(3):
        got = []
        for step, batch in enumerate(owner.track(loader), 1):
            got.append(batch)
            if step == 2:
                break
        # The state still says where this pass stopped...
        assert (owner.state_dict()["epoch"], owner.state_dict()["samples"]) == (epoch, 8)
        assert got == expected(where, data, objects, 7, epoch, 4)[:2], epoch
        # ...and the next pass is the next epoch.
        assert owner.epoch == epoch + 1


@pytest.mark.parametrize("set_epoch", [True, False])
@pytest.mark.parametrize("kind", ["map", "sampler", "iterable"])
def test_a_plain_epoch_after_a_tracked_one_counts_by_itself(where: Where, kind: str,
                                                            set_epoch: bool) -> None:
    # With num_workers=0 a plain loop counts by itself; the last track()'s
    # count (a whole epoch 0) made a state of epoch 1 read "epoch 2, 0
    # samples", and a resume from it dropped the rest of epoch 1.
    data = seed_data(where, 20)
    job = parts(where, kind, 1, 0, 4, 7)
    (owner, loader), = job
    run(job)  # epoch 0, tracked to its end
    if set_epoch:
        owner.set_epoch(1)
    before = []
    for step, batch in enumerate(loader, 1):
        before.append(batch)
        if step == 2:
            break
    state = owner.state_dict()
    assert (state["epoch"], state["samples"]) == (1, 8)
    after, _ = run(parts(where, kind, 1, 0, 4, 7), state=state)
    assert before + after == expected(where, data, objects_of(owner), 7, 1, 4)


@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_track_refuses_a_dataloader_of_another_batch_size(where: Where) -> None:
    # Each loader batch counts as one of the owner's: a dataset left at
    # batch_size=1 under DataLoader(batch_size=4) saved 2 samples after 8,
    # and a resume trained 6 of them again.
    seed_data(where, 12)
    stream = ObjectIterableDataset.from_prefix(where.url("d/"), order=Order(seed=0))
    with pytest.raises(InvalidArgument, match=re.escape(
            "ObjectIterableDataset.track: the DataLoader's batch_size is 4 but this "
            "ObjectIterableDataset's is 1")) as caught:
        stream.track(torch.utils.data.DataLoader(stream, batch_size=4))
    assert "DataLoader(..., batch_size=1)" in str(caught.value)
    assert "ObjectIterableDataset with batch_size=4" in str(caught.value)
    ds = ObjectMapDataset.from_prefix(where.url("d/"))
    sampler = ResumableSampler(ds, order=Order(batch_size=3))
    with pytest.raises(InvalidArgument, match=re.escape(
            "ResumableSampler.track: the DataLoader's batch_size is 4 but this "
            "ResumableSampler's is 3")):
        sampler.track(torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=4))
    # The same batch_size, or a batch_sampler's batches (the loader has none), count.
    stream = ObjectIterableDataset.from_prefix(where.url("d/"), order=Order(seed=0, batch_size=4))
    tracked = stream.track(torch.utils.data.DataLoader(stream, batch_size=4, collate_fn=list))
    assert len(next(tracked)) == 4 and stream.state_dict()["samples"] == 4
    batches = ResumableBatchSampler(ds, order=Order(batch_size=4))
    tracked = batches.track(torch.utils.data.DataLoader(ds, batch_sampler=batches,
                                                        collate_fn=list))
    assert len(next(tracked)) == 4 and batches.state_dict()["samples"] == 4
    # batch_size=None hands out one sample at a time: 8 of them saved 32 (each
    # counted as a batch of 4), and a resume skipped 24 samples.
    for owner, loader in ((stream, torch.utils.data.DataLoader(stream, batch_size=None)),
                          (sampler, torch.utils.data.DataLoader(ds, sampler=sampler,
                                                                batch_size=None))):
        with pytest.raises(InvalidArgument, match=re.escape(
                f"the DataLoader's batch_size is None (one sample at a time) but this "
                f"{type(owner).__name__}'s is {owner.batch_size}")):
            owner.track(loader)
    single = ObjectIterableDataset.from_prefix(where.url("d/"), order=Order(seed=0))
    tracked = single.track(torch.utils.data.DataLoader(single, batch_size=None))
    next(tracked), next(tracked)
    assert single.state_dict()["samples"] == 2


@pytest.mark.timeout(240)
@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_resume_with_spawned_workers(where: Where) -> None:
    # Workers that get the dataset by pickle (a forkserver's, as spawn's
    # but without importing torch anew in each).
    data = seed_data(where, 24)
    first = parts(where, "iterable", 1, 2, 4, 5, ctx=forkserver())
    want = expected(where, data, first[0][0].objects, 5, 0, 4)  # type: ignore[union-attr]
    before, state = run(first, stop=3)
    after, _ = run(parts(where, "iterable", 1, 2, 4, 5, ctx=forkserver()), state=state)
    assert before + after == want


def _gloo_rank(rank: int, world: int, init: str, kwargs: dict[str, Any], root: str,
               out: str, stop: int) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        def job() -> tuple[ObjectIterableDataset[bytes], torch.utils.data.DataLoader[Any]]:
            # Rank and world size come from the process group.
            ds = ObjectIterableDataset.from_prefix(f"{root}/d/", transform=to_bytes,
                                                   order=Order(seed=3, batch_size=2), prefetch=4,
                                                   settings=DatasetSettings(**kwargs))
            return ds, torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=list)

        ds, loader = job()
        before: list[list[bytes]] = []
        state: dict[str, Any] = {}
        for step, batch in enumerate(ds.track(loader), 1):
            before.append(batch)
            if step == stop:
                state = ds.state_dict()
                break
        states: list[Any] = [None] * world
        dist.all_gather_object(states, state)
        assert all(s == states[0] for s in states)
        ds, loader = job()
        ds.load_state_dict(state)
        after = list(ds.track(loader))
        Path(out, f"{rank}.json").write_text(json.dumps(
            [[b.hex() for b in batch] for batch in before + after]))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_two_gloo_ranks_resume_the_epoch(where: Where, tmp_path: Path) -> None:
    data = seed_data(where, 22)
    ds = ObjectIterableDataset.from_prefix(where.url("d/"),
                                           order=Order(seed=3, batch_size=2, world_size=2, rank=0))
    want = expected(where, data, ds.objects, 3, 0, 4)
    # The ranks start from the tests' forkserver: torch imported once, not once a rank.
    forkserver()
    mp.start_processes(_gloo_rank, args=(2, str(tmp_path / "init"), where.kwargs, where.root,
                                         str(tmp_path), 2),
                       nprocs=2, join=True, start_method="forkserver")
    ranks = [[[bytes.fromhex(s) for s in batch] for batch in
              json.loads((tmp_path / f"{r}.json").read_text())] for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(want)
    assert [a + b for a, b in zip(*ranks, strict=True)] == want


def test_order_ignores_world_size_and_states_are_checked(where: Where) -> None:
    order = random.Random(0).sample(range(50), 50)
    for world in (1, 2, 5):
        shares = [RankBatches(order, 10, 10, r, world) for r in range(world)]
        steps = zip(*shares, strict=True)
        assert [i for step in steps for share in step for i in share] == order[10:]
    seed_data(where, 10)
    ds = ObjectMapDataset.from_prefix(where.url("d/"), settings=where.settings())
    sampler = ResumableBatchSampler(ds, order=Order(batch_size=2, seed=4))
    state = sampler.state_dict()
    assert state == {"epoch": 0, "seed": 4, "samples": 0, "global_batch_size": 2,
                     "fingerprint": state["fingerprint"],
                     "order": {"kind": "permutation", "shuffle": True}}
    with pytest.raises(InvalidArgument, match="seed must stay fixed"):
        ResumableBatchSampler(ds, order=Order(batch_size=2, seed=5)).load_state_dict(state)
    fewer = ObjectMapDataset(ds.objects[:-1], settings=where.settings())
    with pytest.raises(InvalidArgument, match="another object list"):
        ResumableBatchSampler(fewer, order=Order(batch_size=2, seed=4)).load_state_dict(state)
    with pytest.raises(InvalidArgument, match="expected a dict"):
        sampler.load_state_dict({"epoch": 1})
    with pytest.raises(InvalidArgument, match="rank 2 outside"):
        ResumableBatchSampler(ds, order=Order(batch_size=2, rank=2, world_size=2))
    # A dataset's state moves to a sampler over the same objects.
    stream = ObjectIterableDataset.from_prefix(where.url("d/"), order=Order(seed=4, batch_size=2),
                                               settings=where.settings())
    sampler.load_state_dict({**stream.state_dict(), "samples": 4, "epoch": 3})
    assert sampler.epoch == 3 and len(sampler) == 3
    assert list(sampler) == list(RankBatches(epoch_order(10, 4, 3, True), 4, 2, 0, 1))
    assert sampler.state_dict()["epoch"] == 4 and sampler.epoch == 4
    # drop_last leaves out the short last global batch (2 ranks x 2: 10 -> 8 samples).
    ranks = [ResumableBatchSampler(ds,
                                   order=Order(batch_size=2, seed=4, rank=r, world_size=2,
                                               drop_last=True))
             for r in range(2)]
    assert [len(r) for r in ranks] == [2, 2]
    order = list(epoch_order(10, 4, 0, True))
    assert [list(r) for r in ranks] == [[order[0:2], order[4:6]], [order[2:4], order[6:8]]]
    assert ranks[0].state_dict()["epoch"] == 1 and ranks[0].state_dict()["samples"] == 0


def test_data_state_is_saved_beside_the_model_state(where: Where) -> None:
    seed_data(where, 12)
    ds = ObjectIterableDataset.from_prefix(where.url("d/"), order=Order(seed=2, batch_size=3),
                                           settings=where.settings())
    loader = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=list)
    with CheckpointManager(where.url("ckpt"), client=where.client) as manager:
        manager.save({"w": torch.ones(3)}, 1)
        assert manager.load_data_state() is None  # saved without one
        it = ds.track(loader)
        next(it)
        state = ds.state_dict()
        info = manager.save({"w": torch.ones(3)}, 2, data_state=state)
        assert set(info.objects) == {"state.pt", "data_state.pt"}
        assert manager.latest() == info
        assert manager.load_data_state() == state == {**state, "samples": 3}
        next(it)
        moving = ds.state_dict()
        future = manager.save_async({"w": torch.zeros(3)}, 3, data_state=moving)
        moving["samples"] = 999  # after the call: the save keeps what it was given
        future.result()
        assert manager.load_data_state(3)["samples"] == 6  # type: ignore[index]
        assert manager.load_data_state(2) == state
        assert torch.equal(manager.load(3)["w"], torch.zeros(3))
        with pytest.raises(NotFound, match="step 9"):
            manager.load_data_state(9)
        with pytest.raises(InvalidArgument, match="data_state"):
            manager.save({"w": torch.ones(1)}, 4, data_state=[1])  # type: ignore[arg-type]
        # The manifest vouches for the data state too: without it, no checkpoint.
        name = f"{where.base}ckpt/step-{3:012d}/data_state.pt"
        if where.client is not None:
            where.client.delete(where.bucket, name)
        else:
            Path("/" + where.bucket, name).unlink()
        assert manager.latest() is not None and manager.latest().step == 2  # type: ignore[union-attr]
    resumed = ObjectIterableDataset.from_prefix(where.url("d/"), order=Order(seed=2, batch_size=3),
                                                settings=where.settings())
    resumed.load_state_dict(state)
    assert len(list(resumed)) == 9


# torchdata 0.11 touches torch.set_vital at import, which torch 2.13 deprecates.
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["map", "sampler", "iterable"])
def test_stateful_dataloader_carries_the_position(where: Where, kind: str, workers: int) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = seed_data(where, 26)

    def job() -> tuple[Any, StatefulDataLoader[Any]]:
        options: dict[str, Any] = {"num_workers": workers, "collate_fn": list,
                                   "multiprocessing_context": "fork" if workers else None}
        if kind == "map":
            ds = ObjectMapDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                              settings=where.settings())
            sampler = ResumableBatchSampler(ds, order=Order(batch_size=4, seed=6))
            return ds.objects, StatefulDataLoader(ds, batch_sampler=sampler, **options)
        if kind == "sampler":  # through StatefulDataLoader's own BatchSampler
            ds = ObjectMapDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                              settings=where.settings())
            return ds.objects, StatefulDataLoader(ds, sampler=ResumableSampler(ds,
                                                                               order=Order(batch_size=4,
                                                                                           seed=6)),
                                                  batch_size=4, **options)
        stream = ObjectIterableDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                                   order=Order(seed=6, batch_size=4), prefetch=4,
                                                   settings=where.settings())
        return stream.objects, StatefulDataLoader(stream, batch_size=4, **options)

    objects, loader = job()
    want = expected(where, data, objects, 6, 0, 4)
    it = iter(loader)
    before = [next(it) for _ in range(3)]
    saved = loader.state_dict()
    del it
    if kind == "map":
        ours = saved["_index_sampler_state"] if workers == 0 else \
            saved["_snapshot"]["_main_snapshot"]["_index_sampler_state"]
        assert ours["samples"] == 12 and ours["epoch"] == 0
    # Through a checkpoint's data_state: torch.save and a weights_only load.
    with CheckpointManager(where.url("ckpt"), client=where.client) as manager:
        manager.save({"step": 3}, 3, data_state=saved)
        restored = manager.load_data_state()
    assert restored is not None
    _, loader = job()
    loader.load_state_dict(restored)
    after = list(loader)
    assert before + after == want
