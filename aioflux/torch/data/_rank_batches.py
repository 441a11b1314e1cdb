"""One rank's share of each global batch of an epoch order (the rule of
:mod:`aioflux.torch.data._order`), made a block of batches at a time."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

from ._permutation import BLOCK, LazyOrder

__all__ = ["RankBatches", "pass_samples"]

I64 = npt.NDArray[np.int64]


def pass_samples(count: int, start: int, global_batch: int, world: int,
                 drop_last: bool = False) -> int:
    """Samples (of all ranks, padding included) a pass from ``start`` hands out.

    Args:
        count: samples in the dataset.
        start: samples of the epoch order already consumed.
        global_batch: samples per global batch (a multiple of ``world``).
        world: the world size.
        drop_last: leave out a short last global batch (else pad).

    Returns:
        A multiple of ``world``: ``count - start`` rounded up to one, or
        down to a multiple of ``global_batch`` with ``drop_last``.
    """
    rest = max(0, count - start)
    if drop_last:
        return rest - rest % global_batch
    return rest + -rest % world


class RankBatches(Sequence[list[int]]):
    """One rank's share of each global batch of the rest of the epoch from ``start``.

    Every rank gets the same number of batches and of samples: the rest,
    ``order[start:]``, is padded to :func:`pass_samples` with ``order``'s
    first samples (wrapping around when the world outnumbers them), or cut
    to it with ``drop_last``. Each global batch then splits into ``world``
    equal contiguous shares: ``global_batch // world`` samples, fewer in a
    short last one.

    A batch is made when it is asked for, never the rest of the epoch at
    once: that copy would take 8 bytes a sample of the whole epoch in every
    process, each worker keeping only its own batches.

    Args:
        order: the epoch order.
        start: samples of it already consumed.
        global_batch: samples per global batch (a multiple of ``world``).
        rank: this rank.
        world: the world size.
        drop_last: leave out a short last global batch (else pad).
    """

    def __init__(self, order: Sequence[int], start: int, global_batch: int, rank: int,
                 world: int, drop_last: bool = False) -> None:
        self._order, self._start = order, start
        self._global_batch, self._rank, self._world = global_batch, rank, world
        self._samples = pass_samples(len(order), start, global_batch, world, drop_last)

    def __len__(self) -> int:
        return -(-self._samples // self._global_batch)

    @overload
    def __getitem__(self, j: int) -> list[int]: ...

    @overload
    def __getitem__(self, j: slice) -> list[list[int]]: ...

    def __getitem__(self, j: int | slice) -> list[int] | list[list[int]]:
        """The rank's batch of global batch ``j`` (none empty), or a list of them."""
        count = len(self)
        if isinstance(j, slice):
            return [self[i] for i in range(count)[j]]
        j = operator.index(j)
        if j < 0:
            j += count
        if not 0 <= j < count:
            raise IndexError(f"global batch {j} of {count}")
        share = self.share(j)
        return self._rest(j * self._global_batch + self._rank * share, share)

    def share(self, j: int) -> int:
        """Samples in the rank's batch of global batch ``0 <= j < len(self)``
        (at least one), without making the batch."""
        return min(self._global_batch, self._samples - j * self._global_batch) // self._world

    def __iter__(self) -> Iterator[list[int]]:
        # Batches a block at a time: an order computed on demand costs a
        # numpy call per block, which a batch of one sample would pay alone.
        count, j, size = len(self), 0, 1024
        while j < count:
            group = range(j, min(count, j + max(1, size // max(1, self.share(j)))))
            flat = self.flat(group)
            at = 0
            for i in group:
                share = self.share(i)
                yield flat[at:at + share]
                at += share
            j, size = group.stop, min(BLOCK, size * 2)

    def flat(self, js: Iterable[int]) -> list[int]:
        """The rank's batches of global batches ``js`` (each ``0 <= j <
        len(self)``), one after the other in one list: what ``self[j]`` for
        each would give, made in one pass over a lazy order."""
        order = self._order
        if not isinstance(order, LazyOrder):
            return [i for j in js for i in self[j]]
        # In numpy, not a batch at a time: a worker's batches of one sample
        # are its samples.
        batch = np.arange(js.start, js.stop, js.step, dtype=np.int64) if isinstance(js, range) \
            else np.asarray(list(js), dtype=np.int64)
        if not batch.size:
            return []
        count = len(self)
        outside = (batch < 0) | (batch >= count)
        if outside.any():
            raise IndexError(f"global batch {batch[outside][0]} of {count}")
        gb = self._global_batch
        sizes = np.minimum(gb, self._samples - batch * gb) // self._world  # each share
        starts = self._start + batch * gb + self._rank * sizes
        before = np.cumsum(sizes) - sizes
        positions = np.repeat(starts - before, sizes)
        positions += np.arange(int(sizes.sum()), dtype=np.int64)
        # The padded rest wraps around to the order's first samples (an
        # unsigned remainder: numpy's signed one takes 6 times as long).
        wrapped = (positions.view(np.uint64) % np.uint64(len(order))).view(np.int64)
        out: list[int] = order.at(wrapped).tolist()
        return out

    def at(self, js: I64, offsets: I64) -> I64:
        """Sample ``offsets[k]`` of the rank's batch of global batch ``js[k]``,
        for each ``k`` (each ``0 <= js[k] < len(self)``, each offset within
        that batch's :meth:`share`): what ``self[j][offset]`` gives, for a
        block of them at once.

        Args:
            js: global batches.
            offsets: positions within the rank's share of each.

        Returns:
            The dataset indices.
        """
        order = self._order
        gb = self._global_batch
        shares = np.minimum(gb, self._samples - js * gb) // self._world
        positions = self._start + js * gb + self._rank * shares + offsets
        # The padded rest wraps around to the order's first samples.
        wrapped = (positions.view(np.uint64) % np.uint64(len(order))).view(np.int64)
        if isinstance(order, LazyOrder):
            return order.at(wrapped)
        return np.asarray([order[p] for p in wrapped.tolist()], dtype=np.int64)

    def of_worker(self, worker: int, workers: int, skip: int = 0) -> range:
        """The global batches DataLoader worker ``worker`` of ``workers`` makes
        from batch ``skip`` on: every ``workers``-th, the order a DataLoader
        hands them out in."""
        return range(skip + (worker - skip) % workers, len(self), workers)

    def _rest(self, at: int, count: int) -> list[int]:
        """``count`` samples of the padded rest from its ``at``-th: the order
        from ``start``, then the order again from its first sample."""
        order = self._order
        size = len(order)
        pos = (self._start + at) % size
        out: list[int] = []
        while count > 0:
            take = min(count, size - pos)
            out.extend(order[pos:pos + take])
            count, pos = count - take, 0
        return out
