"""Reading samples of indexed shards: one ranged read per run of samples.

A *run* is a stretch of samples of one shard that a consumer wants
together (a few consecutive samples of the epoch order); its read covers
the bytes from its first sample's start to its last one's end, or, given
a ``gap``, one piece a stretch of samples no ``gap`` bytes apart (a
DataLoader worker's every Nth sample of a read unit), all in one call on
a store that reads several ranges at once (:class:`RangesReader`). Each
sample's bytes are checked against the crc32c its index recorded, and the
read is pinned to the indexed version of the shard, so a shard rewritten
since it was indexed fails instead of yielding other bytes.

With a disk cache, a run is served from its *read unit* (the
``samples_per_read`` consecutive samples it belongs to, the same every
epoch): the unit's bytes are one cache entry, keyed by the shard's version
and the unit's range, so later epochs and the other workers and ranks of
the machine read it from disk. Hedged reads send a second ranged GET for a
read that is slow to complete, as the download planner does.

A compressed shard cannot be read from the middle: its runs are served by
one cursor per shard that decompresses front to back (a run behind the
cursor starts it over), which is why the epoch order keeps each compressed
shard's runs in ascending order. A cursor holds MiBs (a compressed block,
a decompressed piece, the decoder): the runs say, with a :class:`ShardsDone`
among them, which shards no later run reads, and their cursors go once
their last runs are read (the data's end, where a cursor would go by
itself, is past the last sample, and a rank or worker that does not get a
shard's last sample never reaches it). With a disk cache it holds, a
compressed shard is decompressed once per machine into its read units
instead (see :mod:`._compressed`).

A shard's index is asked for (``index_of``) a little before the first run
of it is taken (the shards of the next ``limit`` runs together), and held
only while runs of it are in flight (or, compressed, until its cursor
goes): what the reads hold is the indexes of the shards they are reading,
and are about to, not of every shard.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from ..._core.concurrency.window import window
from ..._core.errors import ChecksumMismatch, NotFound, PreconditionFailed, StorageError
from ..._core.integrity.crc import crc32c, crc32c_spans, encode_crc32c
from ..._core.records.types import ObjectInfo
from ..._core.storage.protocol import ObjectStore
from ..cache import DiskCache
from ..hedge import Hedger
from ._compressed import Cursor, fits, unit_from_cache
from ._index import ShardIndex

__all__ = ["RangesReader", "Run", "ShardsDone", "read_runs"]

T = TypeVar("T")

# From this length a sample's region is a view of its run's bytes, its
# crc32c read in place (``crc32c_spans``); below it a bytes slice is as
# cheap (the copy is smaller than the call that avoids it).
_VIEW_FROM = 16 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """Samples of one shard read together.

    Attributes:
        shard: the shard's position in the dataset's shard list.
        samples: the shard's sample numbers, in the order they are wanted.
    """

    shard: int
    samples: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ShardsDone:
    """Among the runs: no run after this one reads these shards.

    Attributes:
        shards: positions in the dataset's shard list.
    """

    shards: tuple[int, ...]


@dataclasses.dataclass
class _Shard:
    info: ObjectInfo
    index: ShardIndex
    cursor: Cursor | None = None
    runs: int = 0  # runs handed to the window and not yet read
    done: bool = False  # no later run reads the shard: its cursor goes after them
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


def _retrieved(task: asyncio.Future[ShardIndex]) -> None:
    if not task.cancelled():
        task.exception()


@runtime_checkable
class RangesReader(Protocol):
    """A store that reads several ranges of one object in one call
    (``LocalStore``: one thread's turn for them all)."""

    async def read_ranges(self, bucket: str, name: str, ranges: Sequence[tuple[int, int]], *,
                          generation: int | None = None) -> list[bytes]: ...


async def _pinned_read(store: ObjectStore, info: ObjectInfo, version: int | None,
                       start: int, end: int, hedger: Hedger | None = None) -> bytes:
    def read() -> Awaitable[bytes]:
        return store.read(info.bucket, info.name, start=start, end=end, generation=version)

    return await _pinned(info, read() if hedger is None else hedger.run(read))


async def _pinned(info: ObjectInfo, reading: Awaitable[T]) -> T:
    """``reading``'s result; a shard changed since it was indexed said so."""
    try:
        return await reading
    except (NotFound, PreconditionFailed) as exc:
        raise _changed(info, exc) from None


def _changed(info: ObjectInfo, exc: NotFound | PreconditionFailed) -> StorageError:
    return type(exc)(f"read {info.url}: the shard changed or was deleted since it was "
                     f"indexed ({exc}); index it again", operation="read",
                     bucket=info.bucket, name=info.name, status=exc.status)


def _pieces(index: ShardIndex, samples: Sequence[int],
            gap: int) -> list[tuple[int, int, list[int]]]:
    """``(start, end, positions in samples)`` of the reads of ``samples``: by
    offset, a new read where ``gap`` bytes or more separate a sample from
    the ones before it."""
    offsets, lengths = index.offsets, index.lengths
    starts = [offsets[k] for k in samples]
    pieces: list[tuple[int, int, list[int]]] = []
    end = 0
    for j in sorted(range(len(samples)), key=starts.__getitem__):
        start = starts[j]
        if pieces and start - end < gap:
            first, _, at = pieces[-1]
            end = max(end, start + lengths[samples[j]])
            pieces[-1] = (first, end, at)
            at.append(j)
        else:
            end = start + lengths[samples[j]]
            pieces.append((start, end, [j]))
    return pieces


def _alone(index: ShardIndex, k: int, data: bytes | memoryview) -> bool:
    """Whether ``data``, read from sample ``k``'s offset, is its region as
    indexed, as it is (bytes: nothing writes it again): the common case of
    a worker among many, whose samples of a read lie apart (a quarter of the
    cost of :func:`_checked`'s general case: 1 us, not 4). False for any
    other, a mismatch among them (the general case says which)."""
    return type(data) is bytes and len(data) == index.lengths[k] and \
        crc32c(data) == index.crcs[k]


def _checked(info: ObjectInfo, index: ShardIndex, data: bytes, base: int,
             samples: Sequence[int]) -> list[bytes | memoryview]:
    if len(samples) == 1 and base == index.offsets[samples[0]] and \
            _alone(index, samples[0], data):
        return [data]
    if not isinstance(data, bytes):
        data = bytes(data)  # the views below must be of bytes that nothing writes again
    view = memoryview(data)
    regions: list[bytes | memoryview] = []
    long: list[tuple[int, int]] = []  # spans of the regions that are views
    for k in samples:
        at, length = index.offsets[k] - base, index.lengths[k]
        if length < _VIEW_FROM:
            # A bytes slice: one copy and one C call for its crc32c (a line's
            # sample is then this very object, taken as it is).
            regions.append(data[at:at + length])
        else:
            # A view of the run's bytes, not a copy of them: the format copies
            # each field out of it once, and the run's bytes are immutable, so
            # a sample handed out never changes. Checksummed in place below.
            piece = view[at:at + length]
            regions.append(piece)
            if len(piece) == length:
                long.append((at, at + length))
    crcs = iter(crc32c_spans(data, long))
    for k, region in zip(samples, regions, strict=True):
        length = index.lengths[k]
        if isinstance(region, memoryview) and len(region) == length:
            crc = next(crcs)
        else:
            crc = crc32c(region)
        if len(region) != length or crc != index.crcs[k]:
            raise _mismatch(info, index, k, crc, len(region))
    return regions


def _mismatch(info: ObjectInfo, index: ShardIndex, k: int, crc: int,
              got: int) -> ChecksumMismatch:
    return ChecksumMismatch(
        f"read {info.url}: sample {k} at byte {index.offsets[k]} does not match its index "
        f"(crc32c {encode_crc32c(crc)} != {encode_crc32c(index.crcs[k])}, "
        f"{got} of {index.lengths[k]} bytes)", operation="read",
        bucket=info.bucket, name=info.name)


async def read_runs(store: ObjectStore, shards: Sequence[ObjectInfo],
                    index_of: Callable[[int], Awaitable[ShardIndex]],
                    runs: Iterable[Run | ShardsDone], *, limit: int, max_bytes: int,
                    unit: int = 1, cache: DiskCache | None = None,
                    hedger: Hedger | None = None, gap: int | None = None
                    ) -> AsyncGenerator[tuple[Run, list[bytes | memoryview]], None]:
    """Read ``runs`` in order, a window of them in flight.

    Args:
        store: the shards' store.
        shards: the shards (what :attr:`Run.shard` numbers).
        index_of: shard ``k``'s index (asked when a run of it is taken).
        runs: the runs, in the order wanted, with :class:`ShardsDone` markers
            (optional: without them a cursor lasts until its data ends or
            the runs do).
        limit: runs in flight.
        max_bytes: bytes in flight or read and not yet yielded (one run always reads).
        unit: samples per read unit (a cache entry; see the module).
        cache: a disk cache of read units (a compressed shard's only if it
            :func:`~._compressed.fits`: decompressed once into it).
        hedger: hedges slow ranged reads (None: never).
        gap: a run's read of an uncompressed shard without a cache is split
            where this many bytes or more lie between two of its samples
            (the samples of the other workers of a read unit), one read a
            piece; None: one read a run, whatever it spans.

    Yields:
        Each run with its samples' regions, in the run's order, checked: a
        bytes, or a read-only view of the run's bytes (a long one).

    Raises:
        ChecksumMismatch: a sample's bytes differ from its index.
        NotFound, PreconditionFailed: a shard changed since it was indexed.
        ShardFormatError: a compressed shard's data is damaged.
        StorageError: a read failed after retries.
    """
    state: dict[int, _Shard] = {}
    # A run's pieces, cut once, by the run's id until it is yielded: its
    # bytes are asked for as the window takes it and as it lets it go, and
    # its read needs them (a DataLoader worker of N reads a run every
    # samples_per_read / N samples, so what a run costs grows with N).
    split: dict[int, tuple[Run, list[tuple[int, int, list[int]]]]] = {}
    # A Protocol's isinstance looks up each of its attributes: once, not a run.
    ranges = store if isinstance(store, RangesReader) else None

    def cached(index: ShardIndex) -> bool:
        return cache is not None and (index.compression is None or fits(cache, index))

    def cursor(shard: _Shard) -> Cursor:
        info, version = shard.info, shard.index.version

        def read(start: int, end: int) -> Awaitable[bytes]:
            return _pinned_read(store, info, version, start, end)

        return Cursor(read, info.size, shard.index.compression or "gzip", info.url)

    def span(run: Run) -> tuple[int, int]:
        index = state[run.shard].index
        if cached(index):
            first = min(run.samples) // unit * unit
            return index.span(first, min(len(index), first + unit) - 1)
        offsets, lengths = index.offsets, index.lengths
        start = min(offsets[k] for k in run.samples)
        return start, max(offsets[k] + lengths[k] for k in run.samples)

    async def counted(items: Iterable[Run | ShardsDone]) -> AsyncIterator[Run]:
        # The indexes of the shards of the next ``limit`` items are asked for
        # ahead, together: asked one at a time as the window takes their first
        # runs, each (5-60 ms in a DataLoader worker, a thread's turn at the
        # GIL) would hold up every read behind it.
        source = iter(items)
        ahead: collections.deque[Run | ShardsDone] = collections.deque()
        loading: dict[int, asyncio.Future[ShardIndex]] = {}
        try:
            while True:
                while len(ahead) < limit:
                    item = next(source, None)
                    if item is None:
                        break
                    ahead.append(item)
                    if isinstance(item, Run) and item.shard not in state and \
                            item.shard not in loading:
                        loading[item.shard] = asyncio.ensure_future(index_of(item.shard))
                if not ahead:
                    return
                item = ahead.popleft()
                if isinstance(item, Run):
                    shard = state.get(item.shard)
                    if shard is None:
                        task = loading.pop(item.shard, None)
                        index = await (index_of(item.shard) if task is None else task)
                        shard = state[item.shard] = _Shard(shards[item.shard], index)
                    shard.runs += 1  # as the window takes it, until it is yielded
                    shard.done = False  # read again (a padded pass wraps around)
                    yield item
                    continue
                for k in item.shards:
                    if k in state:
                        state[k].done = True
                        release(k)
        finally:
            for task in loading.values():
                task.cancel()
                # Its failure is the run's, which is no longer read: not
                # "never retrieved".
                task.add_done_callback(_retrieved)

    def release(k: int) -> None:
        """Forget shard ``k`` (its index, its cursor) once nothing holds it."""
        shard = state[k]
        if shard.runs:
            return
        if shard.done or shard.index.compression is None:
            # A compressed shard not done keeps its cursor (it reads on from there).
            del state[k]

    async def job(run: Run) -> list[bytes | memoryview]:
        return await read(state[run.shard], run)

    async def read(shard: _Shard, run: Run) -> list[bytes | memoryview]:
        if shard.index.compression is None and cache is None and gap is not None:
            pieces = pieces_of(shard.index, run)
            if len(pieces) > 1:
                return await _read_pieces(shard, run, pieces)
        start, end = span(run)
        if shard.index.compression is None:
            if cache is None:
                data = await _pinned_read(store, shard.info, shard.index.version, start, end,
                                          hedger)
            else:
                data = await _cached(shard, start, end)
            return _checked(shard.info, shard.index, data, start, run.samples)
        # One unit of a compressed shard at a time, in the order asked (the
        # lock is first come, first served): a cursor never passes a unit
        # that a job asked for earlier still wants, and a fill goes on ahead
        # of the units this process wants next.
        async with shard.lock:
            if cached(shard.index):
                assert cache is not None
                found = await unit_from_cache(cache, shard.info, shard.index, unit, start,
                                              end, lambda: cursor(shard))
                if found is not None:
                    return _checked(shard.info, shard.index, found, start, run.samples)
            if shard.cursor is None or shard.cursor.data_pos > start:
                shard.cursor = cursor(shard)
            data = await shard.cursor.take(start, end)
            if shard.cursor.data_pos >= shard.index.data_size:
                shard.cursor = None
        return _checked(shard.info, shard.index, data, start, run.samples)

    async def _read_pieces(shard: _Shard, run: Run,
                           pieces: list[tuple[int, int, list[int]]]
                           ) -> list[bytes | memoryview]:
        info, version = shard.info, shard.index.version
        datas: Sequence[bytes]
        if ranges is not None:
            datas = await _pinned(info, ranges.read_ranges(
                info.bucket, info.name, [(start, end) for start, end, _ in pieces],
                generation=version))
        else:
            datas = await asyncio.gather(*(_pinned_read(store, info, version, start, end,
                                                        hedger) for start, end, _ in pieces))
        regions: list[bytes | memoryview | None] = [None] * len(run.samples)
        for (start, _, at), data in zip(pieces, datas, strict=True):
            got = _checked(shard.info, shard.index, data, start, [run.samples[j] for j in at])
            for j, region in zip(at, got, strict=True):
                regions[j] = region
        return regions  # type: ignore[return-value]  # every position is a piece's

    async def _cached(shard: _Shard, start: int, end: int) -> bytes:
        # The entry's name carries the range; size and version keep it to this shard's bytes.
        entry = shard.info._replace(name=f"{shard.info.name}#bytes={start}-{end}",
                                    size=end - start, crc32c=None, md5=None)

        async def fetch(objects: list[ObjectInfo]) -> list[bytes | bytearray]:
            return [await _pinned_read(store, shard.info, shard.index.version, start, end,
                                       hedger) for _ in objects]

        assert cache is not None
        return bytes(await cache.get(entry, fetch))

    def pieces_of(index: ShardIndex, run: Run) -> list[tuple[int, int, list[int]]]:
        found = split.get(id(run))
        if found is None:
            found = split[id(run)] = (run, _pieces(index, run.samples, gap or 0))
        return found[1]

    def nbytes(run: Run) -> int:
        index = state[run.shard].index
        if index.compression is None and cache is None and gap is not None:
            return sum(end - start for start, end, _ in pieces_of(index, run))
        start, end = span(run)
        return end - start

    async for run, regions in window(counted(runs), job, limit=limit, ordered=True,
                                     max_bytes=max_bytes, nbytes=nbytes):
        # Counted out once the window let it go (its bytes are measured by
        # the shard's index until then).
        state[run.shard].runs -= 1
        release(run.shard)
        split.pop(id(run), None)
        yield run, regions
