"""Reading runs of uncompressed shards in the calling thread, one after another.

Where a store reads small ranges of a file in the calling thread (a file
whose bytes are memory: ``LocalStore._held_files``), an event loop's
window buys nothing: each run's read is a few syscalls, and handing runs
between the loop's thread and the consumer's, a task a run, cost more than
the read (perf scenario workers: a DataLoader worker of N reads a run
every ``samples_per_read / N`` of its samples, so at 16 workers that cost
was paid every 3-4 samples). Here the consumer's thread reads the runs as
it gets to them, a few ahead at a time (:data:`_GROUP_RUNS`), one read a
shard among them: the same pieces (``gap``), the same checks (length,
crc32c, the shard's indexed version) as :func:`~._spans.read_runs`. A read
that would wait (bytes not in memory) is done in a thread through ``call``.
The shards' files stay open across runs (``_held_files``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ..._core.errors import InvalidArgument, NotFound, PreconditionFailed
from ..._core.records.types import ObjectInfo
from ._index import ShardIndex
from ._spans import (
    RangesReader,
    Run,
    ShardsDone,
    _alone,
    _changed,
    _checked,
    _pieces,
    _pinned,
)

__all__ = ["FilesHere", "RangesHere", "read_runs_here"]


class FilesHere(Protocol):
    """Files a reader keeps open for its reads in its thread (``HeldFiles``)."""

    def read_ranges(self, bucket: str, name: str, ranges: Sequence[tuple[int, int]], *,
                    generation: int | None = None) -> list[bytes] | None: ...

    def close(self) -> None: ...


@runtime_checkable
class RangesHere(RangesReader, Protocol):
    """A :class:`~._spans.RangesReader` that may read in the calling thread
    (``LocalStore``: files whose bytes are memory), through files it keeps open."""

    def _held_files(self) -> FilesHere: ...


# Runs read ahead together, at most this many and this many bytes (and
# ``max_bytes``): a file's reads among them are one call, one check that it
# is unchanged (a ``stat``) and one count. A worker of 16 reads 3-4 samples
# a run, and 32 runs of it fall in ~10 shards (perf scenario workers).
_GROUP_RUNS = 32
_GROUP_BYTES = 1 << 20


def read_runs_here(store: RangesHere,
                   shard_of: Callable[[int], tuple[ObjectInfo, ShardIndex]],
                   runs: Iterable[Run | ShardsDone], *, gap: int, max_bytes: int,
                   call: Callable[[Coroutine[Any, Any, list[bytes]]], list[bytes]]
                   ) -> Iterator[tuple[Run, list[bytes | memoryview]]]:
    """Read ``runs`` of uncompressed shards in order, in this thread, a few
    runs ahead (see :data:`_GROUP_RUNS`).

    Args:
        store: the shards' store.
        shard_of: shard ``k``'s record and index (what :attr:`Run.shard`
            numbers; blocks where the index is loaded).
        runs: the runs, in the order wanted (:class:`ShardsDone` markers
            are passed over: no cursor is held here).
        gap: a run is read in pieces where this many bytes or more lie
            between two of its samples (see :func:`~._spans.read_runs`).
        max_bytes: the most bytes read ahead (one run's, where it is more).
        call: runs a read that cannot be done here (in the store's threads)
            to its end.

    Yields:
        Each run with its samples' regions, in the run's order, checked.

    Raises:
        ChecksumMismatch: a sample's bytes differ from its index.
        NotFound, PreconditionFailed: a shard changed since it was indexed.
        StorageError: a read failed.
    """
    files = store._held_files()
    plans = (_plan(run, shard_of, gap) for run in runs if not isinstance(run, ShardsDone))
    try:
        for group in _groups(plans, min(_GROUP_BYTES, max_bytes)):
            _read(store, files, group, call)
            for planned in group:
                yield planned.run, planned.regions()
    finally:
        files.close()


class _Planned:
    """A run to read: its shard, its pieces, and (once read) their bytes."""

    __slots__ = ("datas", "index", "info", "nbytes", "pieces", "run")

    def __init__(self, run: Run, info: ObjectInfo, index: ShardIndex,
                 pieces: list[tuple[int, int, list[int]]]) -> None:
        self.run, self.info, self.index, self.pieces = run, info, index, pieces
        self.nbytes = sum(end - start for start, end, _ in pieces)
        self.datas: list[bytes] = []

    def regions(self) -> list[bytes | memoryview]:
        """The run's samples' regions, each checked against the index."""
        info, index, samples, pieces = self.info, self.index, self.run.samples, self.pieces
        if len(pieces) == 1:
            return _checked(info, index, self.datas[0], pieces[0][0], samples)
        regions: list[bytes | memoryview] = [b""] * len(samples)
        for (start, _, at), data in zip(pieces, self.datas, strict=True):
            if len(at) == 1 and _alone(index, samples[at[0]], data):
                regions[at[0]] = data  # a sample read alone: no list made for _checked
                continue
            got = _checked(info, index, data, start, [samples[j] for j in at])
            for j, region in zip(at, got, strict=True):
                regions[j] = region
        return regions


def _plan(run: Run, shard_of: Callable[[int], tuple[ObjectInfo, ShardIndex]],
          gap: int) -> _Planned:
    info, index = shard_of(run.shard)
    if index.compression is not None:
        raise InvalidArgument(f"read {info.url}: a compressed shard is read front to back "
                              "(read_runs), not by range here")
    return _Planned(run, info, index, _pieces(index, run.samples, gap))


def _groups(plans: Iterable[_Planned], budget: int) -> Iterator[list[_Planned]]:
    """``plans`` cut into groups of at most :data:`_GROUP_RUNS` runs and
    ``budget`` bytes (a run of more alone)."""
    group: list[_Planned] = []
    nbytes = 0
    for planned in plans:
        if group and (len(group) >= _GROUP_RUNS or nbytes + planned.nbytes > budget):
            yield group
            group, nbytes = [], 0
        group.append(planned)
        nbytes += planned.nbytes
    if group:
        yield group


def _read(store: RangesHere, files: FilesHere, group: list[_Planned],
          call: Callable[[Coroutine[Any, Any, list[bytes]]], list[bytes]]) -> None:
    """Read the pieces of ``group``'s runs, one call a shard."""
    by_shard: dict[int, list[_Planned]] = {}
    for planned in group:
        by_shard.setdefault(planned.run.shard, []).append(planned)
    for same in by_shard.values():
        info, version = same[0].info, same[0].index.version
        ranges = [(start, end) for planned in same for start, end, _ in planned.pieces]
        try:
            datas = files.read_ranges(info.bucket, info.name, ranges, generation=version)
        except (NotFound, PreconditionFailed) as exc:
            raise _changed(info, exc) from None
        if datas is None:
            datas = call(_pinned(info, store.read_ranges(info.bucket, info.name, ranges,
                                                         generation=version)))
        at = 0
        for planned in same:
            planned.datas = datas[at:at + len(planned.pieces)]
            at += len(planned.pieces)
