"""The shard epoch order's structure: what the module promises, checked on the numbers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aioflux._engines.shards import Run, ShardsDone
from aioflux.torch.data._shard_order import ShardOrder, iter_runs, runs_of, shard_epoch_order


def _order(counts: list[int], sequential: list[bool] | None = None,
           **kw: int) -> Sequence[int]:
    kw.setdefault("samples_per_read", 10)
    kw.setdefault("shuffle_window", 40)
    return shard_epoch_order(counts, seed=kw.pop("seed", 3), epoch=kw.pop("epoch", 0),
                             shuffle=True, sequential=sequential or [False] * len(counts),
                             **kw)


def _starts(counts: list[int]) -> list[int]:
    out = [0]
    for c in counts:
        out.append(out[-1] + c)
    return out


@pytest.mark.parametrize("counts", [[35, 0, 1, 64, 7], [0], [], [1000]])
def test_an_epoch_is_a_permutation_read_by_read(counts: list[int]) -> None:
    order = _order(counts)
    assert sorted(order) == list(range(sum(counts)))
    # Each read's samples come together, permuted among themselves.
    runs = runs_of(order, _starts(counts), 10)
    assert sum(len(r.samples) for r in runs) == len(order)
    seen = {(r.shard, r.samples[0] // 10) for r in runs}
    assert len(seen) == len(runs)  # no read is split in two places
    for r in runs:
        assert len({s // 10 for s in r.samples}) == 1


def test_the_order_is_a_pure_function_of_seed_and_epoch() -> None:
    counts = [300, 200, 500]
    assert _order(counts) == _order(counts)
    assert _order(counts) != _order(counts, epoch=1)
    assert _order(counts) != _order(counts, seed=4)
    # Within-read order is shuffled too, not only the reads.
    runs = runs_of(_order(counts), _starts(counts), 10)
    assert any(list(r.samples) != sorted(r.samples) for r in runs)


def test_reads_mix_only_within_a_window() -> None:
    counts = [100] * 8
    order = _order(counts, samples_per_read=10, shuffle_window=40)
    runs = runs_of(order, _starts(counts), 10)
    shards = [r.shard for r in runs]
    # Four reads a window: the shard permutation's windows stay apart.
    for w in range(0, len(shards), 4):
        window = shards[w:w + 4]
        assert len(set(window)) <= 2, window


def test_a_compressed_shard_is_read_front_to_back() -> None:
    counts = [50, 50, 50]
    order = _order(counts, sequential=[False, True, False], shuffle_window=1000)
    runs = runs_of(order, _starts(counts), 10)
    firsts = [min(r.samples) for r in runs if r.shard == 1]
    assert firsts == sorted(firsts) == [0, 10, 20, 30, 40]
    assert [min(r.samples) for r in runs if r.shard == 0] != [0, 10, 20, 30, 40]


@pytest.mark.parametrize("size", [1, 3, 10, 64, 10_000])
def test_runs_cut_a_chunk_at_a_time_are_the_runs_of_the_whole(size: int) -> None:
    # A dataset iterator cuts its samples a chunk at a time: a run that goes
    # on across a chunk's end is still one run (one read), not two.
    counts = [35, 0, 1, 64, 7, 200]
    order = list(_order(counts, samples_per_read=8, shuffle_window=24))
    starts = _starts(counts)
    chunks = [order[i:i + size] for i in range(0, len(order), size)] + [[]]
    whole = runs_of(order, starts, 8)
    assert list(iter_runs(iter(chunks), starts, 8)) == whole
    assert len(whole) < len(order) // 2  # runs of many samples, many of them across chunks
    assert list(iter_runs([], starts, 8)) == runs_of([], starts, 8) == []


@pytest.mark.parametrize("counts", [[35, 0, 1, 64, 7], [0], [], [1000]])
@pytest.mark.parametrize("shuffle", [True, False])
def test_last_positions_are_where_each_shard_is_last_seen(counts: list[int],
                                                          shuffle: bool) -> None:
    order = _order(counts, [True] * len(counts))
    starts = _starts(counts)
    want = [-1] * len(counts)
    for pos, number in enumerate(order if shuffle else range(sum(counts))):
        want[max(k for k in range(len(counts)) if starts[k] <= number)] = pos
    # Computed per shard, without the order made whole.
    lazy = ShardOrder(counts, seed=3, epoch=0, shuffle=shuffle, samples_per_read=10,
                      shuffle_window=40, sequential=[True] * len(counts))
    assert lazy.ends(range(len(counts))) == want


def test_a_marker_passes_after_the_runs_before_it_and_closes_its_shard_s_open_run() -> None:
    starts = [0, 10, 20]
    got = list(iter_runs([[0, 1], [2], ShardsDone((0,)), [10, 11], ShardsDone((2,)), [12]],
                         starts, 5))
    # Shard 0's run ends at the marker; shard 1's goes on across the other one.
    assert got == [Run(0, (0, 1, 2)), ShardsDone((0,)), ShardsDone((2,)), Run(1, (0, 1, 2))]
