"""The per-object epoch order and the rank batches cut from it: the same
samples as the rule of aioflux.torch.data._order, in memory that does not grow
with a copy of the epoch per process."""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Callable, Sequence

import pytest

from aioflux.torch.data._order import ORDER_VERSION, RankBatches, epoch_order, pass_samples
from aioflux.torch.data._shard_order import shard_epoch_order


def _rule(order: Sequence[int], start: int, global_batch: int, rank: int, world: int,
          drop_last: bool) -> list[list[int]]:
    """The rule written out the long way: pad or cut the rest, split each global batch."""
    size = pass_samples(len(order), start, global_batch, world, drop_last)
    rest = list(itertools.islice(itertools.chain(order[start:], itertools.cycle(order)), size))
    out = []
    for b0 in range(0, size, global_batch):
        chunk = rest[b0:b0 + global_batch]
        share = len(chunk) // world
        out.append(chunk[rank * share:(rank + 1) * share])
    return out


def test_the_order_is_the_one_positions_were_saved_in() -> None:
    # Pinned: a position saved by an earlier release of the same order
    # version (ORDER_VERSION 2, the Feistel permutation) resumes in the same
    # order. Version 1 was random.shuffle of a list; its states are refused
    # (tests/torch/data/test_order_version.py).
    assert ORDER_VERSION == 2
    assert list(epoch_order(10, 4, 3, True)) == [1, 7, 3, 5, 6, 8, 0, 9, 4, 2]
    assert list(epoch_order(12, 0, 1, True)) == [10, 9, 3, 1, 7, 8, 0, 2, 4, 11, 6, 5]
    for count, seed, epoch in ((0, 1, 0), (1, 1, 0), (97, 5, 2), (1000, 2, 7)):
        assert sorted(epoch_order(count, seed, epoch, True)) == list(range(count))
    assert list(epoch_order(5, 1, 0, False)) == [0, 1, 2, 3, 4]
    shards = shard_epoch_order([35, 0, 1, 64, 7], seed=3, epoch=1, shuffle=True,
                               samples_per_read=10, shuffle_window=40,
                               sequential=[False, True, False, False, False])
    assert list(shards[:10]) == [68, 75, 74, 70, 72, 69, 67, 73, 71, 66]


@pytest.mark.parametrize("count", [0, 1, 2, 5, 13, 50])
@pytest.mark.parametrize("world", [1, 2, 3, 64])
def test_rank_batches_follow_the_rule(count: int, world: int) -> None:
    order = epoch_order(count, 3, 1, True)
    for batch, start, drop_last in itertools.product(
            (1, 2, 5), sorted({0, 1, count // 2, count, count + 3}), (False, True)):
        for rank in range(world):
            case = (batch, start, drop_last, rank)
            want = _rule(list(order), start, batch * world, rank, world, drop_last)
            got = RankBatches(order, start, batch * world, rank, world, drop_last)
            assert len(got) == len(want), case
            assert list(got) == want, case
            assert got[1::3] == want[1::3], case
            if want:
                assert got[-1] == want[-1], case
            with pytest.raises(IndexError):
                got[len(want)]


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
@pytest.mark.parametrize("skip", [0, 1, 4])
def test_each_batch_has_one_worker_from_the_skip_on(workers: int, skip: int) -> None:
    batches = RankBatches(epoch_order(40, 1, 0, True), 0, 3, 0, 1)
    mine = [list(batches.of_worker(w, workers, skip)) for w in range(workers)]
    assert sorted(j for js in mine for j in js) == list(range(skip, len(batches)))
    for w, js in enumerate(mine):
        assert all(j % workers == w for j in js)


def _peak(make: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        kept = make()
        peak = tracemalloc.get_traced_memory()[1]
        del kept
    finally:
        tracemalloc.stop()
    return peak


def test_a_process_holds_eight_bytes_a_sample_not_a_copy_of_the_epoch() -> None:
    count = 1_000_000
    # A list of the order held about 36 bytes a sample (36 MB here).
    assert _peak(lambda: epoch_order(count, 1, 0, True)) < 9 * count
    order = epoch_order(count, 1, 0, True)
    # Cutting batches copies nothing (the rest of the epoch was copied, 8 MB
    # here): a worker makes only the batches it hands out.
    assert _peak(lambda: RankBatches(order, 10, 64, 1, 2)) < 10_000
    batches = RankBatches(order, 10, 64, 1, 2)
    assert _peak(lambda: batches[len(batches) - 1]) < 10_000
    shards = shard_epoch_order([count // 4] * 4, seed=1, epoch=0, shuffle=True,
                               samples_per_read=100, shuffle_window=10_000,
                               sequential=[False] * 4)
    assert len(shards) == count and shards.itemsize == 8
