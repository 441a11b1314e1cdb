"""The samples one DataLoader worker of a rank reads in a pass, in order,
computed a block at a time from the epoch order.

A position's index is computed when the downloader asks for it, a block of
:data:`SPAN` at a time, and the few latest blocks are kept (the downloader
plans a chunk ahead and yields a window behind): a worker's memory does not
grow with its share, which made whole would take 8 bytes a sample and 16 a
batch (as much again at batch size 1) in every worker.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

from ._rank_batches import RankBatches

__all__ = ["SPAN", "WorkerShare"]

#: Positions computed at once (128 KiB of indices a block, kept as numpy's).
SPAN = 1 << 14
# Blocks kept: the one planned ahead, the ones still being read.
_KEPT = 4


class WorkerShare(Sequence[int]):
    """The dataset indices of ``batches[j]`` for each ``j`` in ``mine``, one
    batch after the other (what ``RankBatches.flat(mine)`` gives), each
    computed when asked for.

    Every batch but the rank's last holds the same share, so position ``k``
    is in batch ``k // share`` of ``mine``: no table of where batches end.

    Args:
        batches: the rank's batches of the pass.
        mine: the global batches this worker makes, in order (a range).
    """

    def __init__(self, batches: RankBatches, mine: range) -> None:
        self._batches, self._mine = batches, mine
        count = len(mine)
        # Only the rank's last batch may be short, and it is the last of any
        # worker's that holds it.
        self.share = batches.share(mine[0]) if count else 0
        self._len = (count - 1) * self.share + batches.share(mine[-1]) if count else 0
        self._blocks: dict[int, npt.NDArray[np.int64]] = {}

    def __len__(self) -> int:
        return self._len

    def batches(self) -> int:
        """Batches in the share."""
        return len(self._mine)

    def batch_end(self, k: int) -> tuple[int, int]:
        """Where batch ``k`` of the share ends: its samples up to and with
        it, and the global batch after it (relative to the pass)."""
        end = self._len if k == len(self._mine) - 1 else (k + 1) * self.share
        return end, self._mine[k] + 1

    def __iter__(self) -> Iterator[int]:
        # Block after block, none kept: a pass over the share beside the reads.
        for b in range(-(-self._len // SPAN)):
            yield from self._compute(b).tolist()

    def _compute(self, b: int) -> npt.NDArray[np.int64]:
        k = np.arange(b * SPAN, min(self._len, (b + 1) * SPAN), dtype=np.int64)
        nth = np.minimum(k // self.share, len(self._mine) - 1)
        js = self._mine.start + nth * self._mine.step
        return self._batches.at(js, k - nth * self.share)

    def _block(self, b: int) -> npt.NDArray[np.int64]:
        found = self._blocks.get(b)
        if found is not None:
            return found
        block = self._compute(b)
        if len(self._blocks) >= _KEPT:
            del self._blocks[min(self._blocks)]  # the reads move forward
        self._blocks[b] = block
        return block

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            picked = range(self._len)[i]
            if picked.step == 1:
                out: list[int] = []
                at = picked.start
                while at < picked.stop:
                    block = self._block(at // SPAN)
                    take = min(picked.stop, (at // SPAN + 1) * SPAN)
                    out += block[at % SPAN:at % SPAN + take - at].tolist()
                    at = take
                return out
            return [self[p] for p in picked]
        i = operator.index(i)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"position {i} of a worker's share of {self._len}")
        index: int = self._block(i // SPAN).item(i % SPAN)
        return index
