"""The shard epoch order computed a position at a time (order version 2):
for any counts, seeds, windows and compressed shards, a permutation of
every sample with the structure the module documents; and at 1e9 samples,
memory and work that do not grow with the samples."""

from __future__ import annotations

import bisect
import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aioflux.torch.data._permutation as permutation
from aioflux._engines.shards import ShardsDone
from aioflux.torch.data._cumulative import Cumulative
from aioflux.torch.data._order import RankBatches
from aioflux.torch.data._shard_order import ShardOrder

COUNTS = st.lists(st.one_of(st.just(0), st.integers(min_value=1, max_value=4),
                            st.integers(min_value=0, max_value=90)), max_size=9)


def _make(counts: list[int], sequential: list[bool], seed: int, read: int,
          window: int) -> ShardOrder:
    return ShardOrder(counts, seed=seed, epoch=seed % 3, shuffle=True, samples_per_read=read,
                      shuffle_window=window, sequential=sequential)


def _windows(counts: list[int], shards: list[int], read: int,
             per_window: int) -> list[tuple[set[tuple[int, int]], list[tuple[int, int]]]]:
    """The module's step 3 written out: each window's full reads, and its
    short reads in shard order, from the permuted shards alone."""
    out: list[tuple[set[tuple[int, int]], list[tuple[int, int]]]] = []
    fulls = 0
    for s in shards:
        for q in range(counts[s] // read):
            while len(out) <= (fulls + q) // per_window:
                out.append((set(), []))
            out[(fulls + q) // per_window][0].add((s, q))
        fulls += counts[s] // read
        if counts[s] % read:
            w = max(fulls - 1, 0) // per_window
            while len(out) <= w:
                out.append((set(), []))
            out[w][1].append((s, counts[s] // read))
    return out


@settings(max_examples=250, deadline=None)
@given(counts=COUNTS, data=st.data(), seed=st.integers(min_value=-5, max_value=1 << 40),
       read=st.integers(min_value=1, max_value=12), window=st.integers(min_value=1, max_value=90))
def test_the_order_is_a_permutation_with_the_documented_structure(
        counts: list[int], data: st.DataObject, seed: int, read: int, window: int) -> None:
    sequential = data.draw(st.lists(st.booleans(), min_size=len(counts), max_size=len(counts)))
    order = _make(counts, sequential, seed, read, window)
    total = sum(counts)
    got = order.at(np.arange(total)).tolist()
    assert sorted(got) == list(range(total))
    assert got == list(_make(counts, sequential, seed, read, window))  # a pure function
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + c)

    def read_of(number: int) -> tuple[int, int]:
        shard = bisect.bisect_right(starts, number) - 1
        return shard, (number - starts[shard]) // read

    if not total:
        return
    shards = order._shard_at(np.arange(len(counts))).tolist()
    assert sorted(shards) == list(range(len(counts)))
    at = 0
    for fulls, shorts in _windows(counts, shards, read, max(1, window // read)):
        # The window's full reads, permuted, each read's samples together...
        seen: list[tuple[int, int]] = []
        for _ in fulls:
            piece = got[at:at + read]
            assert len({read_of(x) for x in piece}) == 1, piece
            seen.append(read_of(piece[0]))
            at += read
        assert set(seen) == fulls and len(seen) == len(fulls)
        # ... a compressed shard's in ascending order...
        for k in {s for s, _ in seen if sequential[s]}:
            mine = [q for s, q in seen if s == k]
            assert mine == sorted(mine)
        # ... then its short reads, in shard order.
        for shard, q in shorts:
            size = counts[shard] % read
            piece = got[at:at + size]
            assert {read_of(x) for x in piece} == {(shard, q)} and len(set(piece)) == size
            at += size
    assert at == total
    # One position alone is the same sample, and each shard's last position
    # is where the whole order has it last.
    picks = data.draw(st.lists(st.integers(min_value=0, max_value=total - 1), max_size=20))
    assert [order.one(p) for p in picks] == [got[p] for p in picks]
    last = [-1] * len(counts)
    for pos, number in enumerate(got):
        last[bisect.bisect_right(starts, number) - 1] = pos
    assert order.ends(range(len(counts))) == last


# Shard sizes far apart (a position's shard far from its share of the
# samples) and windows over many shards: one() searches out from guesses.
SKEWED = st.lists(st.one_of(st.just(0), st.integers(min_value=1, max_value=70),
                            st.integers(min_value=0, max_value=6000)), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(counts=SKEWED, data=st.data(), seed=st.integers(min_value=0, max_value=1 << 62),
       read=st.integers(min_value=1, max_value=70),
       window=st.integers(min_value=1, max_value=20_000))
def test_one_position_is_the_block_s_sample(counts: list[int], data: st.DataObject, seed: int,
                                            read: int, window: int) -> None:
    # one() (Python ints, searches out from guesses) is the numpy block
    # path's twin: the very same sample at every position, full reads and
    # short, compressed shards or not.
    sequential = data.draw(st.lists(st.booleans(), min_size=len(counts), max_size=len(counts)))
    order = _make(counts, sequential, seed, read, window)
    total = len(order)
    if not total:
        return
    picks = [0, total - 1, *data.draw(st.lists(st.integers(min_value=0, max_value=total - 1),
                                               min_size=1, max_size=40))]
    assert [order.one(p) for p in picks] == order.at(np.array(picks)).tolist()


def test_one_position_of_a_billion_is_the_order_s_sample() -> None:
    # The order is versioned (saved positions resume on it): what one()
    # gave before it searched memoryviews, at 1e9 samples.
    order = _billion()
    positions = [0, 123_456_789, 500_000_000, 999_999_999]
    expected = [112_753_477, 873_595_796, 289_210_137, 964_919_995]
    assert [order.one(p) for p in positions] == expected == order.at(np.array(positions)).tolist()


# Terms from zero to past 2**32: a running sum's excesses held in 2, 4 and 8 bytes.
TERMS = st.lists(st.one_of(st.just(0), st.integers(min_value=0, max_value=50),
                           st.integers(min_value=0, max_value=3 << 31)), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(sizes=TERMS, data=st.data())
def test_a_running_sum_is_its_int64_array(sizes: list[int], data: st.DataObject) -> None:
    whole = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=whole[1:])
    sums = Cumulative(np.array(sizes, dtype=np.int64))
    assert sums.last == int(whole[-1])
    assert [sums.get(j) for j in range(len(whole))] == whole.tolist()
    assert sums.take(np.arange(len(whole))).tolist() == whole.tolist()
    # A search from a guess, and a block's (near values, then spread wide),
    # are binary searches.
    values = data.draw(st.lists(st.integers(min_value=0, max_value=int(whole[-1]) + 3),
                                min_size=1, max_size=400))
    expected = [bisect.bisect_right(whole.tolist(), v) - 1 for v in values]
    guess = data.draw(st.integers(min_value=0, max_value=len(sizes)))
    assert [sums.seek(v, guess) for v in values] == expected
    assert sums.find(np.array(values, dtype=np.int64)).tolist() == expected
    assert sums.find(np.array(values[:1], dtype=np.int64)).tolist() == expected[:1]


@pytest.mark.parametrize("most", [50, 5000, 3 << 31])
def test_values_spread_over_many_runs_are_searched_through_their_runs(most: int) -> None:
    # A few values over 20,000 entries: each is searched in its run of
    # excesses (not the entries between them made whole); runs of zeros too.
    k = np.arange(20_000, dtype=np.int64)
    sizes = np.where(k % 7 == 0, 0, k * 2_654_435_761 % 1_000_003 % most)
    sizes[5000:5300] = 0
    whole = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=whole[1:])
    sums = Cumulative(sizes)
    values = np.array([0, 1, int(whole[5000]), int(whole[-1]) // 3, int(whole[-1]) - 1,
                       int(whole[-1]), int(whole[-1]) + 9], dtype=np.int64)
    assert sums.find(values).tolist() == (whole.searchsorted(values, "right") - 1).tolist()


def test_not_shuffled_is_the_list_order() -> None:
    order = ShardOrder([3, 0, 5], seed=1, epoch=0, shuffle=False, samples_per_read=2,
                       shuffle_window=4, sequential=[False, True, False])
    assert list(order) == list(range(8)) and order.one(6) == 6
    assert order.ends([0, 1, 2]) == [2, -1, 7]


def test_epochs_and_seeds_give_other_orders_within_reads_too() -> None:
    def order(seed: int, epoch: int) -> list[int]:
        return list(ShardOrder([300, 200, 500], seed=seed, epoch=epoch, shuffle=True,
                               samples_per_read=10, shuffle_window=40,
                               sequential=[False] * 3))

    assert order(3, 0) == order(3, 0)
    assert len({tuple(order(3, 0)), tuple(order(3, 1)), tuple(order(4, 0))}) == 3
    got = order(3, 0)
    assert any(got[i:i + 10] != sorted(got[i:i + 10]) for i in range(0, 1000, 10))


# 1e9 samples: 100,000 shards of 10,000 (the order needs no data).
BILLION = [10_000] * 100_000


def _peak(make: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        kept = make()
        peak = tracemalloc.get_traced_memory()[1]
        del kept
    finally:
        tracemalloc.stop()
    return peak


def _billion() -> ShardOrder:
    return ShardOrder(BILLION, seed=7, epoch=3, shuffle=True, samples_per_read=64,
                      shuffle_window=8192, sequential=[k % 10 == 0 for k in range(100_000)])


def test_a_billion_samples_take_memory_per_shard_not_per_sample() -> None:
    # The order made whole took 8 bytes a sample (8 GB here), its making
    # 44 (44 GB); this one holds ~10 bytes a shard (1 MB).
    assert _peak(_billion) < 16 << 20
    order = _billion()
    assert len(order) == 10**9
    middle = np.arange(500_000_000, 500_000_000 + 65_536)
    assert _peak(lambda: order.at(middle)) < 32 << 20
    # A rank of 1,000 (batch 256) makes its batches in a block's memory.
    batches = RankBatches(order, 1234 * 256_000, 256_000, 999, 1000)
    assert len(batches) == 2673
    assert _peak(lambda: batches.flat(range(len(batches) - 250, len(batches)))) < 32 << 20
    assert _peak(lambda: order.ends(range(0, 100_000, 10))) < 16 << 20


def test_one_position_is_a_few_permutations_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # Proxies of the time a position takes: Feistel networks run and
    # binary searches over the shards, counted, never a loop over samples.
    order = _billion()
    networks = 0
    network = permutation._network

    def counted(*args: int | bool) -> int:
        nonlocal networks
        networks += 1
        return network(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(permutation, "_network", counted)
    positions = range(0, 10**9, 10**9 // 1000 + 7)
    samples = [order.one(p) for p in positions]
    assert samples == order.at(np.array(positions)).tolist()
    # Three permutations a position (the window's reads, the shards, the
    # read's samples), each under 2 passes on average (a domain is under
    # twice its size): 3.3 here.
    assert networks < 4.5 * len(positions), networks / len(positions)
    assert len(set(samples)) == len(samples)


@settings(max_examples=100, deadline=None)
@given(count=st.integers(min_value=0, max_value=60), world=st.integers(min_value=1, max_value=9),
       batch=st.integers(min_value=1, max_value=5), data=st.data())
def test_batches_made_a_block_at_a_time_are_the_batches_one_at_a_time(
        count: int, world: int, batch: int, data: st.DataObject) -> None:
    # The padded rest wraps around the order (the world may outnumber it).
    order = ShardOrder([count // 2, count - count // 2], seed=count, epoch=0, shuffle=True,
                       samples_per_read=3, shuffle_window=7, sequential=[True, False])
    start = data.draw(st.integers(min_value=0, max_value=count))
    drop_last = data.draw(st.booleans())
    rank = data.draw(st.integers(min_value=0, max_value=world - 1))
    lazy = RankBatches(order, start, batch * world, rank, world, drop_last)
    whole = RankBatches(list(order), start, batch * world, rank, world, drop_last)
    assert list(lazy) == list(whole) == [lazy[j] for j in range(len(lazy))]
    js = data.draw(st.lists(st.integers(min_value=0, max_value=max(0, len(lazy) - 1)),
                            max_size=6)) if len(lazy) else []
    assert lazy.flat(js) == [i for j in js for i in whole[j]]
    with pytest.raises(IndexError):
        lazy.flat([len(lazy)])
    every = range(data.draw(st.integers(min_value=0, max_value=3)), len(lazy),
                  data.draw(st.integers(min_value=1, max_value=4)))
    assert lazy.flat(every) == [i for j in every for i in whole[j]]


def _chunks_one_batch_at_a_time(batches: RankBatches, mine: range,
                                ends: list[tuple[int, int]], start: int,
                                global_batch: int) -> list[object]:
    """What ``_chunks`` must give, as its first form gave it: each batch's
    samples, and before each batch the shards done by then."""
    out: list[object] = []
    k = 0
    for j in mine:
        done = k
        while done < len(ends) and ends[done][0] < start + j * global_batch:
            done += 1
        if done > k:
            out.append(ShardsDone(tuple(shard for _, shard in ends[k:done])))
            k = done
        out.extend(batches[j])
    return out


@settings(max_examples=150, deadline=None)
@given(counts=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=6),
       world=st.integers(min_value=1, max_value=4), batch=st.integers(min_value=1, max_value=5),
       workers=st.integers(min_value=1, max_value=5), data=st.data())
def test_a_worker_s_chunks_are_its_batches_with_the_shards_done_before_them(
        counts: list[int], world: int, batch: int, workers: int, data: st.DataObject) -> None:
    # Cut a slice of batches at a time, at each compressed shard's end: the
    # same samples, and each marker before the same sample, as batch by batch.
    from aioflux.torch.data import _shard_dataset

    sequential = data.draw(st.lists(st.booleans(), min_size=len(counts),
                                    max_size=len(counts)))
    order = ShardOrder(counts, seed=len(counts), epoch=0, shuffle=True, samples_per_read=3,
                       shuffle_window=7, sequential=sequential)
    start = data.draw(st.integers(min_value=0, max_value=len(order)))
    batches = RankBatches(order, start, batch * world,
                          data.draw(st.integers(min_value=0, max_value=world - 1)), world)
    compressed = [k for k, on in enumerate(sequential) if on]
    ends = sorted((at, k) for at, k in zip(order.ends(compressed), compressed, strict=True)
                  if at >= 0)
    mine = batches.of_worker(data.draw(st.integers(min_value=0, max_value=workers - 1)),
                             workers, data.draw(st.integers(min_value=0, max_value=3)))
    chunk = data.draw(st.sampled_from([1, 2, 7, 4096]))
    original = _shard_dataset._CHUNK_SAMPLES
    _shard_dataset._CHUNK_SAMPLES = chunk
    try:
        got: list[object] = []
        for part in _shard_dataset._chunks(batches, mine, ends, start, batch * world):
            assert isinstance(part, ShardsDone) or 0 < len(part) <= max(chunk, batch)
            got.extend([part] if isinstance(part, ShardsDone) else part)
    finally:
        _shard_dataset._CHUNK_SAMPLES = original
    assert got == _chunks_one_batch_at_a_time(batches, mine, ends, start, batch * world)
