"""Running sums over shards in a few bytes an entry, searched as fast as a plain array.

The shard epoch order (:mod:`aioflux.torch.data._shard_order`) searches running
sums over every shard (samples, full reads) in every process that iterates:
a DataLoader worker, a rank: as int64 they would take 8 bytes a shard each
(at 1e6 shards, 8 MB a sum in each of a node's 64 processes). A :class:`Cumulative`
keeps an int64 every :data:`SPAN` entries and, per entry, its excess over
that one in the narrowest unsigned type that holds every excess: 2 bytes
where :data:`SPAN` shards hold under 65,536 (reads, or samples of shards of
under 1,024), 4 below 2**32, and int64 only past that (a few shards of
billions of samples). An entry is two look-ups and an add; a search is a
binary search of the int64s, then of one run of :data:`SPAN` excesses.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

__all__ = ["SHIFT", "SPAN", "WHOLE_PER_VALUE", "Cumulative", "gallop"]

I64 = npt.NDArray[np.int64]

#: ``A[j]`` is ``heads[j >> SHIFT] + excess[j]``.
SHIFT = 6
#: Entries per int64 kept whole.
SPAN = 1 << SHIFT
#: Past this many entries a value (and a run) between a block's least and
#: greatest, its values are searched a binary search each (a few numpy
#: passes), not in the entries between them made whole.
WHOLE_PER_VALUE = 4


class Cumulative:
    """``A[j] = sum(values[:j])`` for ``j`` in ``[0, len(values)]``.

    Args:
        values: the terms, never negative.
    """

    def __init__(self, values: npt.NDArray[np.integer]) -> None:
        n = len(values)
        runs = n // SPAN + 1  # of the n + 1 entries
        whole = np.empty(runs * SPAN, dtype=np.int64)  # made once, then let go
        whole[0] = 0
        np.cumsum(values, out=whole[1:n + 1])
        whole[n + 1:] = whole[n]
        grid = whole.reshape(runs, SPAN)
        self.heads: I64 = grid[:, 0].copy()
        grid -= self.heads[:, None]
        most = int(grid.max())
        kind = next((t for t in (np.uint16, np.uint32) if most <= np.iinfo(t).max), np.int64)
        self.excess: npt.NDArray[np.integer] = whole[:n + 1].astype(kind)
        self.size, self._runs = n + 1, runs
        self.last = int(self.heads[-1]) + int(self.excess[-1])
        # Memoryviews for the scalar searches (and a caller's own look-ups):
        # an element is a Python int at C speed, and bisect runs over them in C.
        self.views: tuple[memoryview, memoryview] = (self.heads.data, self.excess.data)
        self._heads, self._excess = self.views

    def get(self, j: int) -> int:
        """``A[j]``."""
        return self._heads[j >> SHIFT] + self._excess[j]  # type: ignore[no-any-return]

    def take(self, j: I64) -> I64:
        """``A[j]`` of each of ``j``."""
        out: I64 = self.heads[j >> SHIFT] + self.excess[j]
        return out

    def whole(self, lo: int, hi: int) -> I64:
        """``A[lo:hi]``, made whole."""
        out: I64 = self.heads[np.arange(lo, hi) >> SHIFT] + self.excess[lo:hi]
        return out

    def seek(self, value: int, guess: int) -> int:
        """The last ``j`` with ``A[j] <= value`` (``value >= 0``), looked for
        first in ``guess``'s run (a window's shards are next to each other),
        else in the run a binary search of the heads gives: one or two
        bisects in C, faster than probes out from the guess in Python."""
        heads, excess = self._heads, self._excess
        run = guess >> SHIFT
        if not heads[run] <= value or (run + 1 < self._runs and heads[run + 1] <= value):
            run = bisect_right(heads, value) - 1
        first = run << SHIFT
        return bisect_right(excess, value - heads[run], first, min(self.size, first + SPAN)) - 1

    def bisect(self, value: int, lo: int, hi: int) -> int:
        """The last ``j`` in ``[lo, hi)`` with ``A[j] <= value``, given ``A[lo] <= value``."""
        run = lo >> SHIFT
        if (hi - 1) >> SHIFT != run:
            run = bisect_right(self._heads, value, run, ((hi - 1) >> SHIFT) + 1) - 1
        # The answer is in this run: its head is at most value, the next's is not.
        first = run << SHIFT
        return bisect_right(self._excess, value - self._heads[run], max(lo, first),
                            min(hi, first + SPAN)) - 1

    def find(self, values: I64) -> I64:
        """Per value (each at least 0), the last ``j`` with ``A[j] <= value``.

        A block's values are near each other (a few of 100,000 shards): their
        entries are made whole and searched at once. Spread wide, each value
        is searched through its run, a pass per halving.
        """
        if not values.size:
            return values.copy()
        least, most = int(values.min()), int(values.max())
        lo = self.bisect(least, 0, self.size)
        hi = self.bisect(most, lo, self.size) + 1
        if hi - lo <= WHOLE_PER_VALUE * values.size + SPAN:
            found: I64 = self.whole(lo, hi).searchsorted(values, "right") + (lo - 1)
            return found
        run = self.heads.searchsorted(values, "right") - 1
        over = values - self.heads[run]
        at: I64 = run << SHIFT
        end = self.size - 1
        step = SPAN >> 1
        while step:
            probe = np.minimum(at + step, end)
            # Past the end the probe is the last entry: taken only if the
            # answer is at least it, so the halvings still bracket the answer.
            at = np.where(self.excess[probe] <= over, probe, at)
            step >>= 1
        return at


def gallop(get: Callable[[int], int], size: int, value: int, guess: int) -> tuple[int, int]:
    """A bracket ``[lo, hi)`` of the last ``j`` with ``get(j) <= value``
    (``get`` over ``[0, size)`` from 0, never decreasing; ``value >= 0``),
    found out from ``guess``: a couple of probes when the answer is at or
    next to it (as a window's shards are), past a few the rest of that side.

    Returns:
        ``lo`` with ``get(lo) <= value``, and ``hi`` (``size``, or with
        ``get(hi) > value``).
    """
    if get(guess) <= value:
        lo, hi = guess, size
        probe, step = guess + 1, 1
        while probe < hi and step <= 8:
            if get(probe) > value:
                return lo, probe
            lo, step = probe, step * 2
            probe = lo + step
        return lo, hi
    lo, hi = 0, guess  # get(0) == 0 <= value
    probe, step = guess - 1, 1
    while probe > 0 and step <= 8:
        if get(probe) <= value:
            return probe, hi
        hi, step = probe, step * 2
        probe = hi - step
    return lo, hi
