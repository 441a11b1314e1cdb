"""Reading runs of uncompressed shards in the calling thread, one after another.

Where a store reads small ranges of a file in the calling thread (a file
whose bytes are memory: ``LocalStore._held_files``), an event loop's
window buys nothing: each run's read is a few syscalls, and handing runs
between the loop's thread and the consumer's, a task a run, cost more than
the read (perf scenario workers: a DataLoader worker of N reads a run
every ``samples_per_read / N`` of its samples, so at 16 workers that cost
was paid every 3-4 samples). Here the consumer's thread reads each run as
it gets to it: the same pieces (``gap``), the same checks (length, crc32c,
the shard's indexed version) as :func:`~._spans.read_runs`. A read that
would wait (bytes not in memory) is done in a thread through ``call``.
The shards' files stay open across runs (``_held_files``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ..._core.errors import InvalidArgument, NotFound, PreconditionFailed
from ..._core.records.types import ObjectInfo
from ._index import ShardIndex
from ._spans import RangesReader, Run, ShardsDone, _changed, _checked, _pieces, _pinned

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


def read_runs_here(store: RangesHere,
                   shard_of: Callable[[int], tuple[ObjectInfo, ShardIndex]],
                   runs: Iterable[Run | ShardsDone], *, gap: int,
                   call: Callable[[Coroutine[Any, Any, list[bytes]]], list[bytes]]
                   ) -> Iterator[tuple[Run, list[bytes | memoryview]]]:
    """Read ``runs`` of uncompressed shards in order, one at a time, in this thread.

    Args:
        store: the shards' store.
        shard_of: shard ``k``'s record and index (what :attr:`Run.shard`
            numbers; blocks where the index is loaded).
        runs: the runs, in the order wanted (:class:`ShardsDone` markers
            are passed over: no cursor is held here).
        gap: a run is read in pieces where this many bytes or more lie
            between two of its samples (see :func:`~._spans.read_runs`).
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
    try:
        yield from _read(store, files, shard_of, runs, gap, call)
    finally:
        files.close()


def _read(store: RangesHere, files: FilesHere,
          shard_of: Callable[[int], tuple[ObjectInfo, ShardIndex]],
          runs: Iterable[Run | ShardsDone], gap: int,
          call: Callable[[Coroutine[Any, Any, list[bytes]]], list[bytes]]
          ) -> Iterator[tuple[Run, list[bytes | memoryview]]]:
    for run in runs:
        if isinstance(run, ShardsDone):
            continue
        info, index = shard_of(run.shard)
        if index.compression is not None:
            raise InvalidArgument(f"read {info.url}: a compressed shard is read front to back "
                                  "(read_runs), not by range here")
        pieces = _pieces(index, run.samples, gap)
        ranges = [(start, end) for start, end, _ in pieces]
        try:
            datas = files.read_ranges(info.bucket, info.name, ranges, generation=index.version)
        except (NotFound, PreconditionFailed) as exc:
            raise _changed(info, exc) from None
        if datas is None:
            datas = call(_pinned(info, store.read_ranges(info.bucket, info.name, ranges,
                                                         generation=index.version)))
        if len(pieces) == 1:
            yield run, _checked(info, index, datas[0], pieces[0][0], run.samples)
            continue
        regions: list[bytes | memoryview] = [b""] * len(run.samples)
        for (start, _, at), data in zip(pieces, datas, strict=True):
            got = _checked(info, index, data, start, [run.samples[j] for j in at])
            for j, region in zip(at, got, strict=True):
                regions[j] = region
        yield run, regions
