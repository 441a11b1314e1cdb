"""The download planner: direct GETs, composed batches, ranged chunks.

For each batch of objects the planner picks, per object:

- **ranged chunks** for objects of at least ``ranged_threshold`` bytes:
  ``range_size`` ranges read concurrently into one buffer, grown a wave of
  :data:`WAVE_RANGES` ranges at a time (never to a size the server only
  claims);
- **composed batches** for objects of at most ``compose_threshold`` bytes
  (when compose is on): see :mod:`aioflux._engines.compose`;
- **direct GETs** for everything else, all under the client's semaphore;
  with ``hedge_after`` a direct GET that is slow gets a duplicate (see
  :mod:`aioflux._engines.hedge`).
"""

from __future__ import annotations

import gc
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TypeVar

from .._core.concurrency.window import LoopSemaphore, gather_bounded
from .._core.concurrency.window import window as bounded
from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    ProtocolError,
    out_of_memory,
)
from .._core.integrity.crc import crc32c_combine, encode_crc32c
from .._core.integrity.md5 import md5_base64
from .._core.memory.buffers import extend_unfilled, unfilled
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import ObjectStore
from .compose import (
    COMPOSED_PREFIX,
    MAX_COMPOSE_SOURCES,
    ComposeMismatch,
    fetch_composed,
    plan_batches,
)
from .hedge import DEFAULT_HEDGE_BUDGET, HedgeAfter, Hedger, HedgeStats, check_hedge

__all__ = [
    "RANGE_SIZE",
    "WAVE_RANGES",
    "DEFAULT_COMPOSE_THRESHOLD",
    "DEFAULT_MAX_COMPOSITE_OBJECT_SIZE",
    "DEFAULT_PREFETCH_BYTES",
    "DEFAULT_RANGED_THRESHOLD",
    "PLAN_CHUNK",
    "Data",
    "DownloadOptions",
    "DownloadStats",
    "Downloader",
    "download_many",
]

T = TypeVar("T")
Data = bytes | bytearray

# Under the GCS-like emulator profile (20 ms TTFB, 100 MB/s a connection,
# 800 MB/s a host; perf/scenarios/loader_tiny.py at 8, 32 and 64 KiB), a
# composite (one compose, one GET, one delete per 32 objects) beats 32 direct
# GETs at each size, by less as objects grow; the threshold stops at 32 KiB
# for the writes a composite costs (below). A composite's crc32c is
# predicted from its sources' (_crc.crc32c_combine). Composing needs
# write access: on a read-only bucket the first 403 turns it off for the
# client (one wasted request); ``disable_compose=True`` skips even that.
DEFAULT_COMPOSE_THRESHOLD = 32 * 1024
# A composite costs three requests in series before its bytes arrive (the
# compose, its GET, its delete), and two of them are writes: a bucket allows
# ~5x fewer writes than reads (GCS starts at 1,000 writes/s against 5,000
# reads/s) and bills a compose as a Class A operation. A run of fewer small
# objects is read by direct GETs: an in-order stream (ObjectIterableDataset) of
# mixed sizes cut its runs into composites of 3.6 sources on average, which
# cost as many requests as they saved and twice the writes of the objects.
MIN_COMPOSE_SOURCES = 8
# dataflux's cap: a composite stays small enough to hold in memory at once.
DEFAULT_MAX_COMPOSITE_OBJECT_SIZE = 100 * 1024 * 1024
# A listed or stat-ed size is what the server claims, not bytes that arrived:
# a ranged read allocates its buffer one wave of ranges at a time, reads the
# wave into it in place (no copy) and grows it for the next only once the
# wave arrived whole (a bytearray cannot grow while ranges write into it).
# So a size that lies costs the bytes received plus one wave, and one too
# large to allocate ends in a typed error, not in a buffer of that size.
# 16 ranges: the streams a 256 MiB object had when all of its ranges started
# at once (perf/scenarios/ranged.py: 8 x 256 MiB, 16 MiB
# ranges), at 100 MB/s per connection past what two cores parse.
WAVE_RANGES = 16
# One stream tops out at the per-connection bandwidth (100 MB/s); past
# 32 MiB a single GET spends most of its time streaming, so splitting pays.
DEFAULT_RANGED_THRESHOLD = 32 * 1024 * 1024
# 16 MiB chunks: 16 streams on a 256 MiB object, each long enough (~160 ms
# at 100 MB/s) that the 20 ms TTFB costs ~10%.
RANGE_SIZE = 16 * 1024 * 1024
# What a stream holds ahead of its consumer, as ObjectMapDataset's PREFETCH_BYTES:
# 128 x 100 KiB (12.5 MiB) stay bound by the object count, while 8 MiB
# objects get 32 in flight instead of the whole data set. An ObjectIterableDataset
# streaming 160 x 8 MiB files to a slow consumer (one process) grew peak RSS
# by 1491 MiB by count alone, 546-570 MiB within this (ObjectMapDataset: 469 MiB).
DEFAULT_PREFETCH_BYTES = 256 * 1024 * 1024
# Objects a stream plans at once (composites are cut at its edges).
PLAN_CHUNK = 4096


@dataclass(frozen=True)
class DownloadOptions:
    """How the planner downloads.

    Args:
        disable_compose: never compose (``max_composite_object_size=0`` or
            ``compose_threshold=0`` do the same).
        max_composite_object_size: most bytes per composite.
        compose_threshold: objects up to this size may be composed (default 32 KiB).
        max_sources: most sources per composite (1-32).
        min_sources: fewest sources worth a composite (2-32, default 8);
            a shorter run of small objects is read by direct GETs.
        ranged_threshold: objects at least this large are read in chunks.
        range_size: bytes per ranged chunk.
        composed_prefix: the folder composites are created in (ends in ``/``).
        hedge_after: send a second GET for a direct read not complete after
            this many seconds and use the first answer (the other is
            cancelled); ``"auto"``: after the p95 of this downloader's read
            latencies, once 20 reads completed, never sooner than 10 ms;
            None (default): never. See ``aioflux._engines.hedge``.
        hedge_budget: duplicates per read, at most (default 0.05).
        prefetch_bytes: most bytes a stream (``Downloader.stream``,
            ``AsyncClient.stream``, ``ObjectIterableDataset``) holds downloading or
            downloaded ahead of its consumer, by listed size (default
            256 MiB); one object always downloads, however large.

    Raises:
        InvalidArgument: a setting of the wrong type, a size negative,
            ``max_sources`` outside 1-32, ``min_sources`` outside 2-32,
            ``prefetch_bytes`` below 1, or a hedge setting out of range.
    """

    disable_compose: bool = False
    max_composite_object_size: int = DEFAULT_MAX_COMPOSITE_OBJECT_SIZE
    compose_threshold: int = DEFAULT_COMPOSE_THRESHOLD
    max_sources: int = MAX_COMPOSE_SOURCES
    min_sources: int = MIN_COMPOSE_SOURCES
    ranged_threshold: int = DEFAULT_RANGED_THRESHOLD
    range_size: int = RANGE_SIZE
    composed_prefix: str = COMPOSED_PREFIX
    hedge_after: HedgeAfter = None
    hedge_budget: float = DEFAULT_HEDGE_BUDGET
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES

    def __post_init__(self) -> None:
        try:
            check_hedge("DownloadOptions", self.hedge_after, self.hedge_budget)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        if not isinstance(self.disable_compose, bool):
            raise InvalidArgument(f"DownloadOptions.disable_compose must be True or False, "
                                  f"got {self.disable_compose!r}")
        for name in ("max_composite_object_size", "compose_threshold", "max_sources",
                     "min_sources", "ranged_threshold", "range_size", "prefetch_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgument(f"DownloadOptions.{name} must be an integer, got {value!r}")
        for name in ("max_composite_object_size", "compose_threshold", "ranged_threshold"):
            if getattr(self, name) < 0:
                raise InvalidArgument(f"DownloadOptions.{name} must be >= 0")
        if self.range_size < 1:
            raise InvalidArgument("DownloadOptions.range_size must be >= 1")
        if self.prefetch_bytes < 1:
            raise InvalidArgument("DownloadOptions.prefetch_bytes must be >= 1")
        if not 1 <= self.max_sources <= MAX_COMPOSE_SOURCES:
            raise InvalidArgument(f"DownloadOptions.max_sources must be 1-{MAX_COMPOSE_SOURCES}")
        if not 2 <= self.min_sources <= MAX_COMPOSE_SOURCES:
            raise InvalidArgument(f"DownloadOptions.min_sources must be 2-{MAX_COMPOSE_SOURCES}")
        if not isinstance(self.composed_prefix, str) or not self.composed_prefix.endswith("/"):
            # A folder: clean_bucket (and `aioflux clean`) find composites in
            # it by the URL rule, which a bare name prefix would escape.
            raise InvalidArgument(f"DownloadOptions.composed_prefix must be a folder ending in "
                                  f"'/', got {self.composed_prefix!r}")

    @property
    def compose_enabled(self) -> bool:
        """Whether any object may be composed."""
        return not self.disable_compose and self.max_composite_object_size > 0 \
            and self.compose_threshold > 0 and self.max_sources > 1


@dataclass
class DownloadStats:
    """Counters of one Downloader.

    Every object counts once in ``direct``/``composed_objects``/
    ``ranged_objects`` and ``bytes``, however many GETs it took; ``hedge``
    counts the duplicates (``hedge.sent``, ``hedge.won``) and, when
    ``hedge_after`` is set, holds the direct reads' latency histogram
    (``hedge.latency``).

    Attributes:
        direct: objects read by plain GETs.
        composed_batches: composite objects made and read (GCS compose).
        composed_objects: objects read through a composite.
        compose_fallbacks: batches read by direct GETs instead (compose
            refused, mismatched, a source changed, or off for the bucket).
        compose_mismatches: composites whose size or crc32c did not match
            their sources.
        compose_denied: compose requests, or deletes of a composite,
            refused for lack of permission (compose is then off for that
            bucket).
        ranged_objects: large objects read in parallel ranges.
        ranged_chunks: the ranged GETs of those.
        bytes: object bytes delivered.
        denied_buckets: buckets where compose is off after a refusal.
        hedge: what hedged reads did (duplicates sent and won, latency).
    """

    direct: int = 0
    composed_batches: int = 0
    composed_objects: int = 0
    compose_fallbacks: int = 0
    compose_mismatches: int = 0
    compose_denied: int = 0
    ranged_objects: int = 0
    ranged_chunks: int = 0
    bytes: int = 0
    denied_buckets: set[str] = field(default_factory=set)
    hedge: HedgeStats = field(default_factory=HedgeStats)


class Downloader:
    """Downloads lists of objects with the best method per object.

    Args:
        client: the client (its semaphore bounds every request).
        options: planner settings.
    """

    def __init__(self, client: ObjectStore, options: DownloadOptions | None = None) -> None:
        self.client = client
        self.options = options or DownloadOptions()
        self.stats = DownloadStats()
        self._hedger = Hedger(self.options.hedge_after, self.options.hedge_budget,
                              self.stats.hedge, max_concurrency=client.config.max_concurrency)
        # Direct reads wait for a permit here, before the store's layers
        # start: a waiter wakes one frame deep, where behind the transport's
        # semaphore it woke ~9 frames deep. A map dataset's batches queue 256
        # reads on 128 permits, and the deep waits cost ~30 us a read (2.14 s
        # against 1.78 s of CPU for 10k x 100 KiB). Hedged reads have the
        # hedger's gate.
        self._direct_gate = LoopSemaphore(client.config.max_concurrency)

    # -- planning -------------------------------------------------------------

    def plan(self, objects: Sequence[ObjectInfo], *, in_order: bool = False,
             max_bytes: int = 0) -> list[tuple[str, list[int]]]:
        """Split ``objects`` into units of work.

        Args:
            objects: what to download.
            in_order: compose only objects next to each other, so that the
                units' indices, unit after unit, run in input order (a
                stream's ``ordered=True``).
            max_bytes: most bytes of one composite, when below
                ``options.max_composite_object_size`` (0: that).

        Returns:
            ``(kind, indices)`` with kind ``"direct"``, ``"ranged"`` or
            ``"composed"``, ordered by their first index.
        """
        opts = self.options
        # The store's own limit; 0 (no server-side compose): direct reads.
        max_sources = min(opts.max_sources, self.client.features.compose)
        compose = opts.compose_enabled and max_sources > 1
        most = min(max_bytes or opts.max_composite_object_size, opts.max_composite_object_size)
        units: list[tuple[str, list[int]]] = []
        runs: list[list[int]] = [[]]  # the objects to compose, in runs
        for i, obj in enumerate(objects):
            if opts.ranged_threshold and obj.size >= opts.ranged_threshold:
                units.append(("ranged", [i]))
            elif (compose and 0 < obj.size <= opts.compose_threshold
                  and obj.crc32c is not None and obj.bucket not in self.stats.denied_buckets):
                runs[-1].append(i)
                continue
            else:
                units.append(("direct", [i]))
            if in_order and runs[-1]:
                # A composite of the objects on both sides of this one would
                # hand out the later ones before it.
                runs.append([])
        for run in runs:
            for batch in plan_batches([objects[i] for i in run], max_sources, most):
                idx = [run[j] for j in batch]
                if len(idx) >= opts.min_sources:
                    units.append(("composed", idx))
                else:
                    units.extend(("direct", [i]) for i in idx)
        units.sort(key=lambda u: u[1][0])
        return units

    # -- one unit -------------------------------------------------------------

    async def _direct(self, obj: ObjectInfo) -> bytes:
        # Not checked against the listed size and crc32c: the object may
        # have been replaced since the listing, and a direct read returns
        # what is there now (checked against its own x-goog-hash). A hedged
        # duplicate is the same checked read.
        if self.options.hedge_after is None:
            async with self._direct_gate.get():
                data = await self.client.read(obj.bucket, obj.name)
        else:
            data = await self._hedger.run(lambda: self.client.read(obj.bucket, obj.name))
        self.stats.direct += 1
        self.stats.bytes += len(data)
        return data

    async def _ranged(self, obj: ObjectInfo) -> bytearray:
        checking = self.client.config.verify_crc32c
        if checking and obj.crc32c is None:
            # An S3 listing names no checksum: the object's HEAD may (its
            # crc32c, or the MD5 a plain single-part ETag is).
            obj = await self._checksummed(obj)
        step = self.options.range_size
        gen = obj.generation or None
        verify = checking and obj.crc32c is not None
        # Every chunk is pinned to the listed generation: an overwrite midway
        # fails (404) instead of stitching two versions together. Each
        # chunk's length and Content-Range are checked against the listed
        # size; their crc32c, combined, against the listed crc32c (no second
        # pass over the bytes). The listed size is only a claim: the buffer
        # grows a wave of ranges at a time (see WAVE_RANGES).
        buf = bytearray()
        actual = 0
        while len(buf) < obj.size:
            start = len(buf)
            buf = _grown(buf, min(obj.size, start + step * WAVE_RANGES), obj)
            with memoryview(buf) as view:
                # Every range starts below the listed size, given as
                # ``size``: a store finding the object shorter (a range of it
                # refused as past the end included) raises its error naming
                # that size, never the InvalidRequest of a start past the end.
                parts = await gather_bounded(
                    self.client.fetch(obj.bucket, obj.name, start=s,
                                      end=min(s + step, len(view)), into=view[s:s + step],
                                      generation=gen, size=obj.size, want_crc=verify)
                    for s in range(start, len(view), step))
            for s, part in zip(range(start, len(buf), step), parts, strict=True):
                # The wave's memory was not zero-filled: every byte is a range's.
                if part.count != min(step, len(buf) - s):
                    raise ProtocolError(f"read {obj.url} failed: bytes [{s}, "
                                        f"{min(s + step, len(buf))}) came back as "
                                        f"{part.count} bytes", operation="read",
                                        bucket=obj.bucket, name=obj.name)
                actual = crc32c_combine(actual, part.crc or 0, part.count)
        if verify:
            if actual != obj.crc32c:
                raise ChecksumMismatch(
                    f"read {obj.url}: crc32c {encode_crc32c(actual)} != "
                    f"listed {encode_crc32c(obj.crc32c or 0)}", operation="read",
                    bucket=obj.bucket, name=obj.name)
        elif checking and obj.md5 is not None:
            # MD5 does not combine: one pass over the assembled bytes.
            digest = await md5_base64(memoryview(buf))
            if digest != obj.md5:
                raise ChecksumMismatch(f"read {obj.url}: MD5 {digest} of the bytes read != "
                                       f"{obj.md5}", operation="read", bucket=obj.bucket,
                                       name=obj.name)
        self.stats.ranged_objects += 1
        self.stats.ranged_chunks += -(-obj.size // step)
        self.stats.bytes += obj.size
        return buf

    async def _checksummed(self, obj: ObjectInfo) -> ObjectInfo:
        """``obj`` as its stat gives it, which must be the same version."""
        info = await self.client.stat(obj.bucket, obj.name)
        if obj.generation and info.generation != obj.generation:
            raise NotFound(f"read {obj.url} failed: the object was replaced since it was "
                           "listed", operation="read", bucket=obj.bucket, name=obj.name,
                           status=412, reason="PreconditionFailed")
        return info

    async def _composed(self, objs: list[ObjectInfo]) -> list[Data]:
        bucket = objs[0].bucket
        if bucket not in self.stats.denied_buckets:
            try:
                parts = await fetch_composed(self.client, objs,
                                             prefix=self.options.composed_prefix)
            except PermissionDenied:
                # Read-only bucket, or one where composites cannot be deleted
                # (each would stay): remember, and never try compose there again.
                self.stats.denied_buckets.add(bucket)
                self.stats.compose_denied += 1
            except ComposeMismatch:
                self.stats.compose_mismatches += 1
            except (PreconditionFailed, NotFound):
                pass  # a source changed or vanished since listing: read what is there now
            else:
                self.stats.composed_batches += 1
                self.stats.composed_objects += len(objs)
                self.stats.bytes += sum(len(p) for p in parts)
                return list(parts)
        self.stats.compose_fallbacks += 1
        return list(await gather_bounded(self._direct(o) for o in objs))

    async def _unit(self, kind: str, objs: list[ObjectInfo]) -> list[Data]:
        if kind == "ranged":
            return [await self._ranged(objs[0])]
        if kind == "composed":
            return await self._composed(objs)
        return [await self._direct(objs[0])]

    # -- public ---------------------------------------------------------------

    async def download(self, obj: ObjectInfo) -> Data:
        """Download one object (ranged if large).

        Args:
            obj: the object (from a listing or ``stat``).

        Returns:
            Its bytes (a ``bytearray`` when read in ranged chunks).

        Raises:
            StorageError: the download failed after retries, or the object
                does not fit in memory.
        """
        return (await self._unit("ranged" if self.options.ranged_threshold
                                 and obj.size >= self.options.ranged_threshold
                                 else "direct", [obj]))[0]

    async def download_many(self, objects: Sequence[ObjectInfo]) -> list[Data]:
        """Download all ``objects`` concurrently.

        Args:
            objects: what to download.

        Returns:
            The bytes of each object, in input order.

        Raises:
            StorageError: a download failed (the others are cancelled first).
        """
        units = self.plan(objects)
        results = await gather_bounded(
            self._unit(kind, [objects[i] for i in idx]) for kind, idx in units)
        out: list[Data] = [b""] * len(objects)
        for (_, idx), datas in zip(units, results, strict=True):
            for i, data in zip(idx, datas, strict=True):
                out[i] = data
        return out

    async def stream(self, objects: Sequence[ObjectInfo], *, window: int = 64,
                     ordered: bool = True) -> AsyncGenerator[tuple[ObjectInfo, Data], None]:
        """Download ``objects`` keeping about ``window`` objects in flight,
        and at most ``options.prefetch_bytes`` downloading or downloaded and
        not yet yielded (by listed size, or the size read once known; one
        object always downloads).

        Args:
            objects: what to download.
            window: objects in flight (a composed batch counts all its sources).
            ordered: yield in input order; else as downloads complete.

        Yields:
            ``(ObjectInfo, bytes)`` for every object once.

        Raises:
            StorageError: a download failed (pending ones are cancelled first).
        """
        # A composite is held whole until its last object is yielded: at most
        # an eighth of the budget each (as CachedDownloader's groups), so no
        # composite of 32 x 30 KiB is held ahead of a budget of a quarter of that.
        most = max(1, self.options.prefetch_bytes // 8)

        def units() -> Iterator[tuple[str, list[int]]]:
            # Planned a chunk at a time, as the window takes units: a plan of
            # a whole epoch's share held a unit per object (~156 bytes each).
            for base in range(0, len(objects), PLAN_CHUNK):
                for kind, idx in self.plan(objects[base:base + PLAN_CHUNK], in_order=ordered,
                                           max_bytes=most):
                    yield kind, [base + i for i in idx]

        def nbytes(unit: tuple[str, list[int]]) -> int:
            return sum([objects[i].size for i in unit[1]])

        # A composed batch counts all its sources against the window.
        async with aclosing(bounded(
                units(), lambda unit: self._unit(unit[0], [objects[i] for i in unit[1]]),
                limit=window, ordered=ordered, weight=lambda unit: len(unit[1]),
                max_bytes=self.options.prefetch_bytes, nbytes=nbytes,
                measure=_total_len)) as done:
            async for (_, idx), datas in done:
                for i, data in zip(idx, datas, strict=True):
                    yield objects[i], data


def _grown(buf: bytearray, size: int, obj: ObjectInfo) -> bytearray:
    """``buf`` grown to ``size`` bytes for the next wave of ranges, the new
    ones unset (the wave writes every one of them, checked).

    In place: a bytearray cannot grow while a view of it lives, and a wave
    whose ranges were retried leaves views of it in reference cycles (an
    error, its traceback, the frames that held them), so the collector runs
    first when one is in the way. A view held for good (by a store keeping
    its buffers) gets a copy instead, the old buffer freed with that view.

    Raises:
        StorageError: ``size`` bytes do not fit in memory.
    """
    try:
        if not buf:
            return unfilled(size)
        for collect in (False, True):
            if collect:
                gc.collect()
            try:
                extend_unfilled(buf, size)
            except BufferError:
                continue
            return buf
        copy = bytearray(buf)
        extend_unfilled(copy, size)
        return copy
    except MemoryError as exc:
        raise out_of_memory("read", obj.bucket, obj.name, obj.scheme, size) from exc


def _total_len(datas: list[Data]) -> int:
    return sum(map(len, datas))


async def download_many(client: ObjectStore, objects: Sequence[ObjectInfo], *,
                        options: DownloadOptions | None = None) -> list[Data]:
    """Download ``objects`` concurrently with the planner.

    Args:
        client: the client.
        objects: ObjectInfo from a listing (sizes and crc32c drive the plan).
        options: planner settings.

    Returns:
        Each object's bytes, in input order.

    Raises:
        StorageError: a download failed (the others are cancelled first).
    """
    return await Downloader(client, options).download_many(objects)
