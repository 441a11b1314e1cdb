"""A shard dataset's shard list in columns: no Python object per shard.

A list of :class:`~aioflux._core.records.types.ObjectInfo` held ~470 bytes a shard
in every process (the record, its strings and ints) and pickled ~100 into
each ``spawn`` worker: at a million shards, 470 MB a process, 30 GB over a
node's 64 processes; and a forked worker made the pages its own as it read
the records (PyTorch issue 13246).

Here the records are an :class:`~aioflux._core.memory.object_index.ObjectIndex` (names
end to end in one buffer, sizes and versions as arrays) and the numbers the
epoch order and the reads need (each shard's first sample number, whether
it is compressed whole) one more block of 9 bytes a shard. From 1 MiB on
each block is an anonymous memory file (:mod:`aioflux._core.memory.shared_columns`):
forked workers inherit the mapping, spawned ones map it by descriptor, so
a node holds the list once and a worker neither copies nor unpickles
per-shard objects. A shard's record is built when it is asked for (about a
microsecond): by the reads, once a run of the shard is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._core.memory.object_index import ObjectIndex
from ..._core.memory.shared_columns import Block, new_block
from ..._core.records.types import ObjectInfo
from ..._engines.shards import compression_of

__all__ = ["ShardList", "shard_record"]


def shard_record(info: ObjectInfo) -> ObjectInfo:
    """What a shard's reads use of its record: bucket, name, size, version,
    crc32c (the MD5 only where there is no crc32c: a read checks it then).

    A GCS listing's ``updated`` time and MD5 alone would take ~60 bytes a
    shard in columns; content type, metadata and metageneration are read by
    nothing.

    Args:
        info: the listed or stat record.

    Returns:
        The record kept.
    """
    return ObjectInfo(info.bucket, info.name, info.size, info.generation, info.crc32c,
                      info.md5 if info.crc32c is None else None, scheme=info.scheme)


class ShardList:
    """The shards in list order, their sample counts and compression, as columns.

    Args:
        shards: the records (an :class:`ObjectIndex` is kept as it is,
            its records taken as :func:`shard_record` made them).
        counts: each shard's samples, in list order (an array is taken as it is).

    Attributes:
        infos: the records, built as they are read.
        starts: each shard's first sample number, the total last (int64).
        sequential: per shard, whether it is compressed whole (read front to back).
    """

    def __init__(self, shards: Sequence[ObjectInfo], counts: Iterable[int]) -> None:
        infos = shards if isinstance(shards, ObjectIndex) \
            else ObjectIndex(map(shard_record, shards))
        n = len(infos)
        block = new_block(8 * (n + 1) + n)
        starts = np.frombuffer(block.view, dtype=np.int64, count=n + 1)
        starts[0] = 0
        np.cumsum(counts if isinstance(counts, np.ndarray)
                  else np.fromiter(counts, dtype=np.int64, count=n), out=starts[1:])
        flags = np.frombuffer(block.view, dtype=np.bool_, count=n, offset=8 * (n + 1))
        flags[:] = np.fromiter((compression_of(name) is not None for name in infos.names()),
                               dtype=np.bool_, count=n)
        self._load(infos, block)

    def _load(self, infos: ObjectIndex, block: Block) -> None:
        n = len(infos)
        self.infos = infos
        self._block = block
        # Views of the block: a worker's are of the pages its parent wrote.
        self.starts: npt.NDArray[np.int64] = np.frombuffer(block.view, dtype=np.int64,
                                                           count=n + 1)
        self.sequential: npt.NDArray[np.bool_] = np.frombuffer(
            block.view, dtype=np.bool_, count=n, offset=8 * (n + 1))

    def __reduce__(self) -> tuple[Any, ...]:
        # Both blocks pickle as their bytes, or to a process of this node
        # (multiprocessing's pickler: spawn) as their descriptors.
        return _rebuild, (self.infos, self._block)

    def __len__(self) -> int:
        return len(self.infos)

    @property
    def total(self) -> int:
        """Samples in all shards."""
        return int(self.starts[-1])

    def count(self, k: int) -> int:
        """Samples in shard ``k``."""
        return int(self.starts[k + 1] - self.starts[k])

    def sizes(self) -> npt.NDArray[np.int64]:
        """Samples per shard, in list order (a new array)."""
        return np.diff(self.starts)

    @property
    def shared(self) -> bool:
        """Whether both blocks are memory this node's processes share."""
        return self.infos.shared and self._block.shared

    def nbytes(self) -> int:
        """Bytes the columns hold (their blocks, not the few objects around them)."""
        return self.infos.nbytes() + len(self._block)


def _rebuild(infos: ObjectIndex, block: Block) -> ShardList:
    shards = ShardList.__new__(ShardList)
    shards._load(infos, block)
    return shards
