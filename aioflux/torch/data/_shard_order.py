"""The epoch order of a sharded dataset: a pure function of (seed, epoch) and the shards.

Samples are numbered across the shards in list order (shard ``i``'s sample
``k`` is ``starts[i] + k``). An epoch's order (order version 2, see
:data:`aioflux.torch.data._order.ORDER_VERSION`):

1. the shards, permuted;
2. each shard cut into *reads* of ``samples_per_read`` consecutive samples
   (the unit fetched with one ranged GET), its last read shorter when the
   read size does not divide its samples;
3. the full reads, in the order of the permuted shards, cut into *windows*
   of ``max(1, shuffle_window // samples_per_read)`` reads, so a stretch of
   training mixes about ``shuffle_window`` samples from several shards; a
   shard's short last read goes with the window of its last full read (the
   first window if it has none). A window's full reads are permuted, and
   its short reads follow them in shard order. A compressed shard's reads
   keep their ascending order (it is read front to back), taking the
   window positions its reads were given;
4. the samples of each read permuted among themselves.

The result is a permutation of every sample, so the global batches, rank
shares, padding and resume of :mod:`aioflux.torch.data._order` apply unchanged:
a position is a count of samples of this order, valid at any world size
and worker count. The shuffle costs no sample memory (reads are ranged);
the window bounds how many shards an epoch reads from at once.

No part of the order is made whole: :class:`ShardOrder` computes a
position's sample when it is asked for, each permutation a keyed Feistel
network (:mod:`aioflux.torch.data._permutation`). What it holds is three running
sums over the shards (the shards' first samples in list order; samples and
full reads over the permuted shards), made at the epoch's start in one numpy
pass, each a :class:`~aioflux.torch.data._cumulative.Cumulative` of 2 or 4 bytes
a shard (8 only past 2**32 samples in 64 shards): 6 bytes a shard at 1e6
shards of 1,000 samples, 10 at 1e5 of 10,000, at most 12.4. The permuted
shards are permuted again when asked for, and a shard's short read's
samples are its samples less its full reads': held as int64 and int32 they
would take 36 bytes a shard in every DataLoader worker and rank, 2.3 GB on
a node of 64 processes at 1e6 shards. A position then costs a few searches
over the shards (each out from a guess: its share of the samples, the
window's shards next to it) and three Feistel permutations (of the window's
reads, of the shards to find its shard, and of the read's samples); a
compressed shard's read also counts its own reads in the window. No
process holds the order's samples: an order made whole would take 8 bytes a
sample in every process.
"""

from __future__ import annotations

import array
import itertools
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from ..._engines.shards import Run, ShardsDone
from ._cumulative import SHIFT, SPAN, WHOLE_PER_VALUE, Cumulative, gallop
from ._permutation import (
    BLOCK,
    I64,
    U64,
    LazyOrder,
    order_key,
    pair_key,
    pair_keys,
    permute,
    permute_one,
    sub_key,
    unit_key,
    unit_keys,
)

__all__ = ["ShardOrder", "iter_runs", "runs_of", "shard_epoch_order"]

# Per-shard numbers as a list or a shard list's columns (numpy views).
Ints = Sequence[int] | npt.NDArray[np.int64]
Flags = Sequence[bool] | npt.NDArray[np.bool_]


class ShardOrder(LazyOrder):
    """The global order of an epoch (see the module), computed a position at a time.

    Args:
        counts: samples per shard, in list order.
        seed: base seed.
        epoch: epoch number.
        shuffle: permute (else every sample in list order).
        samples_per_read: samples per read.
        shuffle_window: samples per window of permuted reads.
        sequential: per shard, whether it must be read front to back.
    """

    def __init__(self, counts: Ints, *, seed: int, epoch: int, shuffle: bool,
                 samples_per_read: int, shuffle_window: int, sequential: Flags) -> None:
        sizes = np.asarray(counts, dtype=np.int64).reshape(-1)
        self._starts = Cumulative(sizes)
        self._count = self._starts.last
        self._shards = shards = len(sizes)
        self._shuffled = shuffle and self._count > 0
        if not self._shuffled:
            return
        self._read = read = samples_per_read
        self._window = max(1, shuffle_window // read)
        key = order_key("aioflux-shards-v2", seed, epoch)
        self._shard_key, self._window_key, self._read_key = (sub_key(key, k) for k in (1, 2, 3))
        # Running samples and full reads over the shards in the epoch's order.
        # The shard at each place of it (:meth:`_shard_at`) is permuted again
        # when asked for, and a shard's short read's samples are its samples
        # less its full reads': neither is held (12 of 36 bytes a shard).
        permuted = np.empty(shards, dtype=np.int64)
        for lo in range(0, shards, BLOCK):  # a block's temporaries at a time
            hi = min(shards, lo + BLOCK)
            permuted[lo:hi] = sizes[permute(np.arange(lo, hi), shards, self._shard_key)]
        self._samples = Cumulative(permuted)
        self._fulls = Cumulative(permuted // read)
        self._all_fulls = self._fulls.last
        flags = np.asarray(sequential, dtype=bool).reshape(-1)
        self._sequential = flags if flags.any() else None
        # For :meth:`one`: an element of a memoryview is a Python int (or
        # bool) at C speed, where a numpy scalar and its int() cost as much
        # as a round of the network.
        self._sequential_view = None if self._sequential is None else flags.data

    def at(self, positions: npt.NDArray[np.integer]) -> I64:
        p = np.asarray(positions).astype(np.int64, copy=False)
        if not self._shuffled:
            return p.copy()
        read, samples, fulls = self._read, self._samples, self._fulls
        place = samples.find(p)
        local = p - samples.take(place)
        first_full, end_full = fulls.take(place), fulls.take(place + 1)
        in_full = local < (end_full - first_full) * read
        # The window: its full read's, or for a short read its last full read's.
        full_read = np.where(in_full, first_full + _div(local, read), np.maximum(end_full - 1, 0))
        window = _div(full_read, self._window)
        # A block's positions fall in a few windows: each one's geometry and
        # key are made once.
        distinct, which = _units(window)
        geometry = self._window_geometry(distinct)
        first, start, shorts_before, reads = (column[which] for column in geometry)
        keys = unit_keys(self._window_key, distinct)[which]
        offset = p - start
        in_window_reads = offset < reads * read
        picked = np.flatnonzero(in_window_reads)
        if picked.size == p.size:  # the usual block: no short read (no gathers)
            return self._sample_in_full_reads(offset, window, keys, first, reads)
        out = np.empty_like(p)
        if picked.size:
            out[picked] = self._sample_in_full_reads(
                offset[picked], window[picked], keys[picked], first[picked], reads[picked])
        picked = np.flatnonzero(~in_window_reads)
        out[picked] = self._sample_in_short_reads(
            shorts_before[picked] + offset[picked] - reads[picked] * read)
        return out

    def _shard_at(self, place: I64) -> I64:
        """The shard (list order) at each ``place`` of the epoch's shard order."""
        if not place.size:
            return place.copy()
        lo, hi = int(place.min()), int(place.max()) + 1
        if hi - lo < place.size:
            # A block's reads are of a few shards next to each other in the
            # epoch: each is permuted once.
            shards: I64 = permute(np.arange(lo, hi), self._shards, self._shard_key)[place - lo]
            return shards
        return permute(place, self._shards, self._shard_key)

    def _short(self, place: int) -> int:
        """The samples of the short reads of the epoch's first ``place`` shards."""
        return self._samples.get(place) - self._fulls.get(place) * self._read

    def _seek_short(self, value: int, guess: int) -> int:
        """The last ``place`` with ``_short(place) <= value``, searched out from ``guess``."""
        lo, hi = gallop(self._short, self._shards + 1, value, guess)
        return bisect_right(range(hi), value, lo, hi, key=self._short) - 1

    def _window_geometry(self, window: I64) -> tuple[I64, I64, I64, I64]:
        """Of each ``window``: the first full read, the first position, the short
        reads' samples before it, and its full reads."""
        first = window * self._window
        # The shard that holds full read ``first`` (a window's first position
        # is that read's place in the shards' own order).
        place = self._fulls.find(first)
        head = window > 0
        fulls, samples = self._fulls.take(place), self._samples.take(place)
        start = np.where(head, samples + (first - fulls) * self._read, 0)
        shorts_before = np.where(head, samples - fulls * self._read, 0)
        reads = np.clip(self._all_fulls - first, 0, self._window)
        return first, start, shorts_before, reads

    def _sample_in_full_reads(self, offset: I64, window: I64, keys: U64, first: I64,
                              reads: I64) -> I64:
        read = self._read
        slot = _div(offset, read)
        inner = offset - slot * read
        full = first + permute(slot, reads, keys)
        place = self._fulls.find(full)
        shard = self._shard_at(place)
        if self._sequential is not None:
            seq = np.flatnonzero(self._sequential[shard])
            if seq.size:
                full[seq] = self._ascending(slot[seq], window[seq], first[seq], reads[seq],
                                            place[seq])
        number = full - self._fulls.take(place)
        keys = pair_keys(self._read_key, shard, number)
        return self._starts.take(shard) + number * read + permute(inner, read, keys)

    def _ascending(self, slot: I64, window: I64, first: I64, reads: I64, place: I64) -> I64:
        """The full read each of ``slot`` holds when the reads of the shard at
        ``place`` in ``window`` are put in ascending order on the slots they
        were given."""
        lo = np.maximum(self._fulls.take(place), first)
        hi = np.minimum(self._fulls.take(place + 1), first + reads)
        # One row per (window, shard): its reads' slots, sorted.
        pairs, where = _units(window * (self._shards + 1) + place)
        pick = np.zeros(len(pairs), dtype=np.int64)
        pick[where] = np.arange(len(where))
        seg_lo, seg_hi = lo[pick], hi[pick]
        sizes = seg_hi - seg_lo
        before = np.cumsum(sizes) - sizes
        row = np.repeat(np.arange(len(sizes)), sizes)
        reads_of = np.repeat(seg_lo, sizes) + np.arange(int(sizes.sum())) - before[row]
        win = window[pick][row]
        slots = permute(reads_of - win * self._window, reads[pick][row],
                        unit_keys(self._window_key, win), inverse=True)
        ranked = np.sort(row * self._window + slots)
        rank = np.searchsorted(ranked, where * self._window + slot) - before[where]
        result: I64 = seg_lo[where] + rank
        return result

    def _sample_in_short_reads(self, short_sample: I64) -> I64:
        read = self._read
        place = self._find_short(short_sample)
        fulls, end_fulls = self._fulls.take(place), self._fulls.take(place + 1)
        shorts = self._samples.take(place) - fulls * read
        width = self._samples.take(place + 1) - end_fulls * read - shorts
        number = end_fulls - fulls
        shard = self._shard_at(place)
        keys = pair_keys(self._read_key, shard, number)
        inner = permute(short_sample - shorts, width, keys)
        return self._starts.take(shard) + number * read + inner

    def _find_short(self, short_sample: I64) -> I64:
        """Per sample of the short reads (numbered across them), the last
        ``place`` with ``_short(place) <= short_sample``."""
        lo = self._seek_short(int(short_sample.min()), 0)
        hi = self._seek_short(int(short_sample.max()), lo) + 1
        if hi - lo <= WHOLE_PER_VALUE * short_sample.size + SPAN:
            # A block's short reads are of a few windows' shards: made whole.
            shorts = self._samples.whole(lo, hi) - self._fulls.whole(lo, hi) * self._read
            found: I64 = shorts.searchsorted(short_sample, "right") + (lo - 1)
            return found
        # Spread wide: a binary search per value, a pass per halving
        # (``_short(at) <= short_sample < _short(end)`` throughout).
        at, end = np.full(short_sample.shape, lo), np.full(short_sample.shape, hi)
        while True:
            middle = (at + end) >> 1
            if not (middle > at).any():
                return at
            shorts = self._samples.take(middle) - self._fulls.take(middle) * self._read
            below = shorts <= short_sample
            at, end = np.where(below, middle, at), np.where(below, end, middle)

    def one(self, position: int) -> int:
        if not self._shuffled:
            return position
        read, size = self._read, self._window
        samples, fulls = self._samples, self._fulls
        # A running sum's entry j is heads[j >> SHIFT] + excess[j]
        # (:class:`Cumulative`), looked up here: a call costs as much.
        s_heads, s_excess = samples.views
        f_heads, f_excess = fulls.views
        # Shards of about the same samples (the usual dataset) put the
        # position's shard at its share of the samples, or next to it; each
        # search checks its guess before it calls (a call costs as much).
        place = position * self._shards // self._count
        here = s_heads[place >> SHIFT] + s_excess[place]
        if not here <= position < s_heads[(place + 1) >> SHIFT] + s_excess[place + 1]:
            place = samples.seek(position, place)
            here = s_heads[place >> SHIFT] + s_excess[place]
        local = position - here
        lo_full = f_heads[place >> SHIFT] + f_excess[place]
        hi_full = f_heads[(place + 1) >> SHIFT] + f_excess[place + 1]
        if local < (hi_full - lo_full) * read:
            window = (lo_full + local // read) // size
        else:
            window = max(hi_full - 1, 0) // size
        first = window * size
        start = shorts_before = 0
        # The window's shards are near position's own (a window holds a
        # few): each is looked for from the one before it.
        if window:
            if not lo_full <= first < hi_full:
                place = fulls.seek(first, place)
                lo_full = f_heads[place >> SHIFT] + f_excess[place]
                hi_full = f_heads[(place + 1) >> SHIFT] + f_excess[place + 1]
                here = s_heads[place >> SHIFT] + s_excess[place]
            start = here + (first - lo_full) * read
            shorts_before = here - lo_full * read
        near = place
        reads = min(max(self._all_fulls - first, 0), size)
        offset = position - start
        if offset < reads * read:
            slot, inner = divmod(offset, read)
            full = first + permute_one(slot, reads, unit_key(self._window_key, window))
            if not lo_full <= full < hi_full:
                place = fulls.seek(full, near)
                lo_full = f_heads[place >> SHIFT] + f_excess[place]
                hi_full = f_heads[(place + 1) >> SHIFT] + f_excess[place + 1]
            shard = permute_one(place, self._shards, self._shard_key)
            sequential = self._sequential_view
            if sequential is not None and sequential[shard]:
                lo = max(lo_full, first)
                hi = min(hi_full, first + reads)
                slots = permute(np.arange(lo - first, hi - first), reads,
                                unit_key(self._window_key, window), inverse=True)
                full = lo + int(np.count_nonzero(slots < slot))
            number, width = full - lo_full, read
        else:
            short_sample = shorts_before + offset - reads * read
            short = self._short
            if not short(place) <= short_sample < short(place + 1):
                place = self._seek_short(short_sample, near)
            lo_short = short(place)
            number = fulls.get(place + 1) - fulls.get(place)
            inner, width = short_sample - lo_short, short(place + 1) - lo_short
            shard = permute_one(place, self._shards, self._shard_key)
        heads, excess = self._starts.views
        first_sample = heads[shard >> SHIFT] + excess[shard]
        key = pair_key(self._read_key, shard, number)
        return first_sample + number * read + permute_one(inner, width, key)

    def ends(self, shards: Sequence[int]) -> list[int]:
        """Where each of ``shards`` (list order) has its last sample in the
        order (-1: a shard with none), without going through the order.

        Args:
            shards: shard numbers.

        Returns:
            Per shard, a position.
        """
        k = np.asarray(shards, dtype=np.int64).reshape(-1)
        if not self._shuffled:
            lo, hi = self._starts.take(k), self._starts.take(k + 1)
            return [int(x) for x in np.where(hi > lo, hi - 1, -1).tolist()]
        read = self._read
        place = permute(k, self._shards, self._shard_key, inverse=True)
        fulls, end_fulls = self._fulls.take(place), self._fulls.take(place + 1)
        samples, end_samples = self._samples.take(place), self._samples.take(place + 1)
        shorts, end_shorts = samples - fulls * read, end_samples - end_fulls * read
        window = np.maximum(end_fulls - 1, 0) // self._window
        first, start, shorts_before, reads = self._window_geometry(window)
        # A short last read ends its share of the window's tail.
        out = start + reads * read + end_shorts - shorts_before - 1
        # Else the shard's last read is the one at the latest of its slots.
        whole = np.flatnonzero((end_shorts == shorts) & (end_samples > samples))
        if whole.size:
            lo = np.maximum(fulls[whole], first[whole]) - first[whole]
            sizes = end_fulls[whole] - first[whole] - lo
            before = np.cumsum(sizes) - sizes
            row = np.repeat(np.arange(len(sizes)), sizes)
            slots = permute(np.repeat(lo, sizes) + np.arange(int(sizes.sum())) - before[row],
                            np.repeat(reads[whole], sizes),
                            unit_keys(self._window_key, np.repeat(window[whole], sizes)),
                            inverse=True)
            last = np.maximum.reduceat(slots, before)
            out[whole] = start[whole] + (last + 1) * read - 1
        out[end_samples == samples] = -1
        return [int(x) for x in out.tolist()]


def _div(values: I64, by: int) -> I64:
    """``values // by`` for values that are never negative: unsigned division
    takes a sixth of the time of numpy's signed floor division."""
    quotient: I64 = (values.view(np.uint64) // np.uint64(by)).view(np.int64)
    return quotient


def _units(values: I64) -> tuple[I64, I64]:
    """The distinct values of ``values`` and, per element, which one it is."""
    if values.size and bool((values[1:] >= values[:-1]).all()):
        # Sorted (the usual block): no sort needed.
        change = np.flatnonzero(values[1:] != values[:-1]) + 1
        which = np.zeros(values.size, dtype=np.int64)
        which[change] = 1
        return values[np.r_[0, change]], np.cumsum(which)
    distinct, which = np.unique(values, return_inverse=True)
    return distinct, which.reshape(-1)


def shard_epoch_order(counts: Sequence[int], *, seed: int, epoch: int, shuffle: bool,
                      samples_per_read: int, shuffle_window: int,
                      sequential: Sequence[bool]) -> array.array[int]:
    """The whole order of an epoch (see :class:`ShardOrder`, which the datasets
    iterate without making it whole), 8 bytes a sample.

    Args:
        counts: samples per shard, in list order.
        seed: base seed.
        epoch: epoch number.
        shuffle: permute (else every sample in list order).
        samples_per_read: samples per read.
        shuffle_window: samples per window of permuted reads.
        sequential: per shard, whether it must be read front to back.

    Returns:
        Sample numbers in epoch order.
    """
    order = ShardOrder(counts, seed=seed, epoch=epoch, shuffle=shuffle,
                       samples_per_read=samples_per_read, shuffle_window=shuffle_window,
                       sequential=sequential)
    out = array.array("q")
    for lo in range(0, len(order), BLOCK):
        out.frombytes(order.at(np.arange(lo, min(len(order), lo + BLOCK))).tobytes())
    return out


def runs_of(samples: Sequence[int], starts: Ints, samples_per_read: int) -> list[Run]:
    """Cut samples into runs: consecutive samples of one read.

    Args:
        samples: sample numbers, in the order wanted.
        starts: each shard's first sample number (the total last).
        samples_per_read: samples per read.

    Returns:
        The runs, in order.
    """
    return [run for run in iter_runs([samples], starts, samples_per_read)
            if isinstance(run, Run)]  # no markers among plain samples


def iter_runs(chunks: Iterable[Sequence[int] | ShardsDone], starts: Ints,
              samples_per_read: int) -> Iterator[Run | ShardsDone]:
    """:func:`runs_of` over ``chunks`` joined, cut a chunk at a time.

    A worker's samples of an epoch are cut a chunk at a time and hold a
    chunk's memory; made whole before the first read they would take 90 to
    190 bytes a sample in every DataLoader worker (a list of ints, its runs'
    tuples). A run that
    goes on past the end of a chunk is held until the next one shows
    whether it goes on there, so the runs are the very same.

    Args:
        chunks: sample numbers, in the order wanted, a few at a time, and
            :class:`ShardsDone` markers between them (passed on after the
            runs before them).
        starts: each shard's first sample number (the total last).
        samples_per_read: samples per read.

    Yields:
        The runs, in order, and the markers.
    """
    import numpy as np

    firsts = np.asarray(starts, dtype=np.int64)
    held: tuple[int, int, list[int]] | None = None  # shard, read, samples of the open run
    for chunk in chunks:
        if isinstance(chunk, ShardsDone):
            # A run held open is of a shard with samples to come, or it ends here.
            if held is not None and held[0] in chunk.shards:
                yield Run(held[0], tuple(held[2]))
                held = None
            yield chunk
            continue
        if not len(chunk):
            continue
        numbers = np.asarray(chunk, dtype=np.int64)
        shard = np.searchsorted(firsts, numbers, side="right") - 1
        local = numbers - firsts[shard]
        read = local // samples_per_read
        cuts = np.flatnonzero((shard[1:] != shard[:-1]) | (read[1:] != read[:-1])) + 1
        bounds = [0, *cuts.tolist(), len(numbers)]
        shards, locals_, reads = shard.tolist(), local.tolist(), read.tolist()
        for a, b in itertools.pairwise(bounds):
            if held is not None and held[:2] == (shards[a], reads[a]):
                held[2].extend(locals_[a:b])  # the open run goes on in this chunk
                continue
            if held is not None:
                yield Run(held[0], tuple(held[2]))
            held = (shards[a], reads[a], locals_[a:b])
    if held is not None:
        yield Run(held[0], tuple(held[2]))
