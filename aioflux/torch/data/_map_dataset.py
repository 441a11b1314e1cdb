"""``ObjectMapDataset``: one sample per object, indexable, batches downloaded ahead.

Objects may be on any store (``gs://``, ``file://`` or a path); see
:mod:`aioflux.torch.data._source` for the per-process store.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

import torch.utils.data

from ..._core.checks.arguments import as_int, check_int
from ..._core.concurrency.portal import Portal, get_portal
from ..._core.concurrency.window import REORDER
from ..._core.errors import InvalidArgument
from ..._core.memory.object_index import ObjectIndex
from ..._core.metrics import BatchStats
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import parse_url
from ..._core.settings.config import ClientConfig
from ..._core.storage.protocol import ReadsHere
from ..._engines.download import Data, DownloadStats
from ..._engines.listing import DEFAULT_LIST_CONCURRENCY
from ._objects import ObjectsProperty
from ._order_options import Order, resolve_order
from ._rank_listing import Listing, agreed, check_listing, objects_summary, objects_target
from ._settings import DatasetSettings, object_settings, refuse_unknown
from ._source import (
    Sample,
    Transform,
    build_source,
    check_objects,
    objects_scheme,
    transformed,
)

__all__ = ["PREFETCH_BYTES", "ObjectMapDataset", "PrefetchBatchSampler"]

# Most bytes an ObjectMapDataset downloads ahead of the batch being consumed
# (readahead and the samplers' default ``ahead``), by the listed sizes of
# the very batches announced: 3 batches of 64 x 100 KiB fit many times over,
# 64 x 100 MB objects do not get a second batch in memory.
PREFETCH_BYTES = 256 * 1024 * 1024


class ObjectMapDataset(ObjectsProperty, torch.utils.data.Dataset[Sample]):
    """A map-style dataset: one sample per object, indexable.

    The objects may be on any store: their URL scheme picks the store each
    process builds from ``settings`` (``gs://``: a ``GcsStore``; ``file://``
    or a path: a ``LocalStore``).

    ``__getitems__`` downloads a whole DataLoader batch concurrently (the
    DataLoader calls it when present).

    To resume mid-epoch, or train the same epoch order at any world size,
    use ``batch_sampler=ResumableBatchSampler(ds, order=Order(batch_size=...))``
    or ``sampler=ResumableSampler(ds, order=Order(batch_size=...))``
    (:class:`~aioflux.torch.ResumableBatchSampler`).

    Args:
        objects: the objects, one sample each (see also :meth:`from_prefix`).
        transform: ``bytes -> sample``; default returns the bytes.
        settings: the store, download planner, hedging and disk cache
            (:class:`~aioflux.torch.DatasetSettings`; default: all defaults).
        **deprecated: the settings' fields as keywords (``endpoint=``,
            ``cache_dir=``...), the planner's ``disable_compose``,
            ``max_composite_object_size`` and ``compose_threshold``, and
            ``data_format_fn`` (dataflux's ``transform``): each warns and
            goes in aioflux 0.3.0.

    Raises:
        InvalidArgument: a setting of the wrong type (checked at once).
        InvalidURL: a malformed ``endpoint``.
    """

    _op = "ObjectMapDataset"

    def __init__(self, objects: Sequence[ObjectInfo], *, transform: Transform[Sample] | None = None,
                 settings: DatasetSettings | None = None, **deprecated: Any) -> None:
        self._transform: Transform[Sample] | None
        settings, self._transform = object_settings("ObjectMapDataset", settings, transform,
                                                    deprecated)
        self._source = build_source("ObjectMapDataset", objects, settings)
        self._objects = check_objects("ObjectMapDataset", self._source, objects)
        # Set by PrefetchBatchSampler: the batches that follow the one it is
        # handing out. Downloads started for them, in order, with this pid.
        self._announced: list[list[int]] | None = None
        # The batches past the announced ones, where a sampler or the
        # strided readahead knows them: what reads on behind a late batch.
        self._more: More | None = None
        self._prefetched: list[_Prefetch] = []
        self._prefetch_pid = os.getpid()
        # Batches read from several threads at once (a thread-pool loader)
        # share the batches read ahead: unlocked, one thread could take a
        # batch another has just cancelled as a wrong guess, or pop the
        # batch after the one it matched.
        self._queue_lock = threading.Lock()
        self._last_run: tuple[int, int] | None = None  # (start, length) of the last batch
        # Set by a resumable sampler (num_workers=0): the batch it just
        # counted as consumed, and how to take that back (see __getitems__).
        self._handing: tuple[int, list[int], Callable[[], None]] | None = None
        self._batch_stats = (os.getpid(), BatchStats())
        # The store last asked, and whether it is ``ReadsHere``: a protocol's
        # ``isinstance`` walks its members (~10 us), asked once a store.
        self._reads_here_of: tuple[object, bool] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # Hints and downloads in flight belong to this process's loop.
        state["_announced"] = state["_last_run"] = state["_handing"] = state["_more"] = None
        state["_reads_here_of"] = None
        state["_prefetched"] = []
        del state["_queue_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._queue_lock = threading.Lock()

    @classmethod
    def from_prefix(cls, url: str, *, list_concurrency: int = DEFAULT_LIST_CONCURRENCY,
                    transform: Transform[Sample] | None = None,
                    settings: DatasetSettings | None = None, listing: Listing = "each",
                    **deprecated: Any) -> ObjectMapDataset[Sample]:
        """List a folder in parallel (sorted by name) and wrap its objects.

        ``gs://b/data`` means the folder ``data/`` and an object named
        exactly ``data``, as the CLI reads it; ``gs://b/data/`` the folder
        alone; never ``data2/``; ``gs://b`` is the whole bucket.

        Under DDP every rank must hold the same listing (a sampler splits one
        order of it). ``listing="each"`` (the default) lists on every rank,
        with no collective: a folder written to while the ranks list can
        give them different listings. ``"rank0"`` lists on rank 0 only and
        broadcasts its listing (or its error) to the others; ``"check"``
        lists on every rank and compares the listings (one small
        all-gather). Both are collectives: every rank of the default
        process group must call this, or those that did wait until the
        group's timeout. Without an initialized process group both just list.

        Args:
            url: ``gs://bucket[/folder]``, ``file:///dir`` or a path.
            list_concurrency: parallel listers.
            transform: ``bytes -> sample``.
            settings: see the class docstring.
            listing: ``"each"``, ``"rank0"`` or ``"check"`` (above).
            **deprecated: the old keywords (see the class docstring).

        Returns:
            The dataset.

        Raises:
            InvalidURL: a malformed URL.
            InvalidArgument: a setting of the wrong type.
            NotFound: the folder holds no objects.
            StorageError: listing failed (with ``"rank0"``, on rank 0: every
                rank raises it).
            Conflict: (``"check"``) the ranks listed different objects.
        """
        op = "ObjectMapDataset.from_prefix"
        check_int(op, "list_concurrency", list_concurrency, minimum=1)
        check_listing(op, listing)
        settings, transform = object_settings(op, settings, transform, deprecated)
        self = cls([], transform=transform, settings=settings)
        self.objects = agreed(
            op, listing, str(url),
            lambda: self._source.list_prefix(url, list_concurrency),
            objects_summary)
        return self

    @classmethod
    def from_objects(cls, objects: Iterable[str | ObjectInfo], *,
                     transform: Transform[Sample] | None = None,
                     settings: DatasetSettings | None = None, listing: Listing = "each",
                     **deprecated: Any) -> ObjectMapDataset[Sample]:
        """Wrap given objects; URLs are ``stat``-ed concurrently for their sizes.

        Under DDP every rank must hold the same objects, at the same
        versions and sizes (a sampler splits one order of them, and the
        cache and large ranged reads are keyed to the version found). ``listing="each"``
        (the default) stats every URL on every rank, with no collective:
        ranks x URLs requests, and an object replaced between two ranks'
        stats gives them different versions and sizes. ``"rank0"`` stats on
        rank 0 only and broadcasts what it found (or its error) to the
        others, which make no request; ``"check"`` stats on every rank and
        compares the results (one small all-gather). Both are collectives:
        every rank of the default process group must call this, or those
        that did wait until the group's timeout. Without an initialized
        process group both just stat. ObjectInfo given are kept as they are.

        Args:
            objects: object URLs (``gs://``, ``file://``, paths; all on one
                store) or ObjectInfo.
            transform: ``bytes -> sample``.
            settings: see the class docstring.
            listing: ``"each"``, ``"rank0"`` or ``"check"`` (above).
            **deprecated: the old keywords (see the class docstring).

        Returns:
            The dataset.

        Raises:
            InvalidURL: a malformed URL.
            InvalidArgument: a setting of the wrong type, or objects on
                more than one store.
            NotFound: a URL names no object (with ``"rank0"``, on rank 0: every rank raises it).
            StorageError: a stat failed (with ``"rank0"``, on rank 0: every rank raises it).
            Conflict: (``"check"``) the ranks found different versions or sizes.
        """
        op = "ObjectMapDataset.from_objects"
        check_listing(op, listing)
        settings, transform = object_settings(op, settings, transform, deprecated)
        self = cls([], transform=transform, settings=settings)
        items = list(objects)
        schemes, places = [], []
        for item in items:
            if isinstance(item, str):
                # every URL, before any request
                parsed = parse_url(item, require_object=True)
                schemes.append(parsed.scheme)
                places.append((parsed.bucket, parsed.name))
            elif isinstance(item, ObjectInfo):
                schemes.append(item.scheme)
                places.append((item.bucket, item.name))
            else:
                raise InvalidArgument(f"{op}: objects must be object URLs "
                                      f"or ObjectInfo, got {type(item).__name__}")
        scheme = self._source.scheme = objects_scheme(op, schemes) or "gs"
        urls = [o for o in items if isinstance(o, str)]

        def stat() -> ObjectIndex:
            stats = iter(self._source.stat_all(urls) if urls else [])
            return ObjectIndex([next(stats) if isinstance(o, str) else o for o in items])

        self.objects = agreed(op, listing, objects_target(scheme, places), stat,
                              objects_summary, operation="stat")
        return self

    def __len__(self) -> int:
        return len(self._objects)

    def _apply(self, data: Data, index: int) -> Sample:
        return transformed("ObjectMapDataset", self._transform, data, lambda: self._objects[index])

    def _applied(self, datas: list[Data], wanted: list[int]) -> list[Sample]:
        """A batch's samples (its bytes as they are, without a transform)."""
        if self._transform is None:
            return datas  # type: ignore[return-value]  # Sample defaults to Data
        return [self._apply(d, i) for d, i in zip(datas, wanted, strict=True)]

    def __getitem__(self, index: int) -> Sample:
        """Download one sample.

        Args:
            index: its position (negative counts from the end, as in a list).

        Returns:
            The sample.

        Raises:
            InvalidArgument: ``index`` is not an integer.
            IndexError: ``index`` is out of range.
            StorageError: the download failed.
            Exception: what ``transform`` raised, with a note naming the object.
        """
        index = _position(index)
        here = self._read_here([index])
        if here is not None:
            return self._apply(here[0], index)
        obj = self.objects[index]
        return self._apply(get_portal().call(self._source.downloader.download(obj)), index)

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """Download a batch concurrently (composed, direct or ranged per object).

        Args:
            indices: dataset indices.

        Returns:
            Samples in ``indices`` order.

        Raises:
            InvalidArgument: an index is not an integer.
            IndexError: an index is out of range.
            StorageError: a download failed.
            Exception: what ``transform`` raised, with a note naming the object.
        """
        handing, self._handing = self._handing, None
        try:
            return self._read_batch(indices)
        except BaseException:
            # The sampler counted this batch when it handed it out, and the
            # loop never gets it: a state saved in an ``except`` would point
            # past it, and a resume would skip it.
            if handing is not None and handing[0] == os.getpid() and \
                    handing[1] == list(indices):
                handing[2]()
            raise

    def _handed(self, indices: list[int], undo: Callable[[], None]) -> None:
        """A sampler in this process handed ``indices`` out as a batch and
        counted it; ``undo`` un-counts it should its read here fail."""
        self._handing = (os.getpid(), indices, undo)

    def _read_batch(self, indices: Sequence[int]) -> list[Sample]:
        started = time.perf_counter()
        wanted = [_position(i) for i in indices]
        if self._prefetch_pid != os.getpid():  # a forked copy: none of it is its own
            self._prefetched, self._prefetch_pid = [], os.getpid()
            self._queue_lock = threading.Lock()
        here = None if self._prefetched else self._read_here(wanted)
        if here is not None:
            self._announced = self._more = None  # nothing is read ahead here
            self._record(started, len(here))
            return self._applied(here, wanted)
        # Only now: a worker whose batches all read here starts no loop's thread.
        portal = get_portal()
        with self._queue_lock:
            current, more = self._start(portal, wanted)
        datas = self._await(current, portal, more)
        self._record(started, len(datas))
        return self._applied(datas, wanted)

    def _record(self, started: float, samples: int) -> None:
        # Under the lock: threads reading batches at once would lose counts
        # in the histogram's unlocked increments.
        with self._queue_lock:
            self.stats.record(time.perf_counter() - started, samples)

    def _start(self, portal: Portal, wanted: list[int]
               ) -> tuple[concurrent.futures.Future[list[Data]], More | None]:
        """``wanted``'s download (taken from those read ahead, or started),
        and the batches read ahead of it started; with the queue's lock."""
        queue = self._prefetched
        current = queue.pop(0).future if queue and queue[0].indices == wanted else None
        if current is None:
            current = self._submit(portal, wanted)
        # Start the batches the sampler announced (or that a strided scan
        # predicts) before waiting for this one, so they download while the
        # caller trains on this one.
        announced, self._announced = self._announced, None
        more, self._more = self._more, None
        if announced is None:
            announced = self._readahead(wanted, len(queue))
            more = self._more
        self._prefetched = []
        for upcoming in announced or ():
            if queue and queue[0].indices == upcoming:
                self._prefetched.append(queue.pop(0))
            else:
                self._prefetched.append(_Prefetch(upcoming, self._submit(portal, upcoming)))
        for wrong in queue:
            wrong.future.cancel()  # a hint that did not come true
        return current, more

    def _await(self, current: concurrent.futures.Future[list[Data]], portal: Portal,
               more: More | None) -> list[Data]:
        """``current``'s objects. While it is late, each batch read ahead that
        ends lets the next one ``more`` knows start, so ``more.ahead`` keep
        downloading behind it: up to :data:`REORDER` times that many read
        ahead, within :data:`PREFETCH_BYTES` by their listed sizes: one late
        GET holds back its own batch, not the ones behind it."""
        if more is None or current.done():
            return current.result()
        size = self._objects.size
        with self._queue_lock:
            held = sum(size(i) for ahead in self._prefetched for i in ahead.indices)
        while not current.done():
            with self._queue_lock:
                queue = self._prefetched
                if _downloading(queue) < more.ahead and len(queue) < REORDER * more.ahead:
                    upcoming = more.next()
                    if upcoming is None:
                        break
                    nbytes = sum(size(i) for i in upcoming)
                    if held + nbytes > PREFETCH_BYTES:
                        break  # it waits for its turn to be announced
                    queue.append(_Prefetch(upcoming, self._submit(portal, upcoming)))
                    held += nbytes
                    continue
                running = [ahead.future for ahead in queue if not ahead.future.done()]
            concurrent.futures.wait([current, *running],
                                    return_when=concurrent.futures.FIRST_COMPLETED)
        return current.result()

    def _read_here(self, wanted: list[int]) -> list[Data] | None:
        """The objects at ``wanted`` read in this thread, where their store
        reads small files whose bytes are in memory so (``ReadsHere``: no
        hand-off to a thread and back a file, nothing to read ahead); those
        it cannot are downloaded together. None: not such a store, or a
        filesystem (NFS) whose reads it leaves to threads."""
        client = self._source.downloader.client
        objects = self._objects
        known = self._reads_here_of
        if known is None or known[0] is not client:
            known = self._reads_here_of = (client, isinstance(client, ReadsHere))
        # Threads, and batches read ahead, overlap a server's waits; a
        # cache the user asked for is read and filled by the planner.
        if not wanted or self._source.cache is not None or not known[1]:
            return None
        store = cast(ReadsHere, client)
        if not store._reads_here(*objects.place(wanted[0])):
            return None
        # Objects the planner reads in ranges are pinned to their listing
        # there (a file cut or replaced since fails): they go to it. The
        # rest are read a bucket at a time (one in all, as a rule).
        ranged = self._source.downloader.options.ranged_threshold
        read: dict[str, tuple[list[int], list[str], list[tuple[int, Any, Any]]]] = {}
        for position, i in enumerate(wanted):
            # Its place and version, not its record: a tenth of a local read.
            version = objects.version(i)
            if ranged and version[0] >= ranged:
                continue
            bucket, name = objects.place(i)
            batch = read.get(bucket)
            if batch is None:
                batch = read[bucket] = ([], [], [])
            batch[0].append(position)
            batch[1].append(name)
            batch[2].append(version)
        datas: list[Data | None] = [None] * len(wanted)
        for bucket, (positions, names, listed) in read.items():
            for position, data in zip(positions,
                                      store._read_small_many(bucket, names, listed),
                                      strict=True):
                datas[position] = data
        missed = [position for position, data in enumerate(datas) if data is None]
        nbytes = sum(len(data) for data in datas if data is not None)
        downloads = self._source.downloader.stats
        downloads.direct += len(wanted) - len(missed)
        downloads.bytes += nbytes
        if missed:
            got = get_portal().call(self._source.downloader.download_many(
                [objects[wanted[p]] for p in missed]))
            for position, fetched in zip(missed, got, strict=True):
                datas[position] = fetched
        return datas  # type: ignore[return-value]  # every None filled

    def _readahead(self, wanted: list[int], least: int = 0) -> list[list[int]]:
        """Predict the next batches of a strided scan of contiguous runs.

        A DataLoader without shuffle asks for [0, 64), [64, 128), ... (with
        ``num_workers=N`` each worker gets every Nth run). Once two runs of
        the same length follow each other at a fixed forward step, the next
        ones are predicted like an OS readahead; anything else (a shuffled
        sampler) predicts nothing, and a wrong guess is cancelled. At least
        ``least`` are predicted (those read on behind a late batch, kept);
        the ones after them are ``_more``'s.
        """
        run = (wanted[0], len(wanted)) if wanted and \
            wanted == list(range(wanted[0], wanted[0] + len(wanted))) else None
        previous, self._last_run = self._last_run, run
        if run is None or previous is None or previous[1] != run[1]:
            return []
        (start, length), step = run, run[0] - previous[0]
        if step < length:
            return []
        ahead = _ahead(self._source.config, length)
        count = len(self.objects)
        starts = range(start + step, min(count, start + step * (max(ahead, least) + 1)), step)
        batches = self._fitting([list(range(s, min(s + length, count))) for s in starts])
        following = iter(range(start + step * (len(batches) + 1), count, step))
        self._more = More(lambda: next((list(range(s, min(s + length, count)))
                                        for s in following), None), ahead)
        return batches

    def _fitting(self, batches: list[list[int]]) -> list[list[int]]:
        """The leading ``batches`` whose listed bytes fit PREFETCH_BYTES (at
        least one), as a new list.

        Counted on the batches themselves: an ``ahead`` sized once on the
        first batch (a 1-byte file, then 4 MiB ones) put 512 MiB in flight.
        """
        total = 0
        for n, batch in enumerate(batches):
            total += sum(map(self._objects.size, batch))
            if n and total > PREFETCH_BYTES:
                return batches[:n]
        return list(batches)

    def _submit(self, portal: Portal, indices: list[int]) -> concurrent.futures.Future[list[Data]]:
        objs = [self.objects[i] for i in indices]
        return portal.submit(self._source.downloader.download_many(objs))

    def batch_sampler(self, batch_size: int | None = None, *, order: Order | None = None,
                      generator: torch.Generator | None = None, ahead: int | None = None,
                      **deprecated: Any) -> PrefetchBatchSampler:
        """A ``batch_sampler`` for ``DataLoader`` that downloads batches ahead.

        ``DataLoader(ds, batch_sampler=ds.batch_sampler(order=Order(batch_size=64)))``.
        With ``num_workers=0`` each batch waits for its slowest object; this
        sampler tells the dataset the next batches' indices as it hands out
        the current one, so ``__getitems__`` starts those downloads before
        waiting on its own. With workers the DataLoader already keeps
        ``prefetch_factor`` batches per worker in flight and the hints are
        never used (they only reach the main process's copy). Like torch's
        own samplers it neither splits by rank nor resumes: for that, use
        :class:`ResumableBatchSampler`.

        Args:
            batch_size: deprecated (goes in aioflux 0.3.0): ``order=Order(batch_size=...)``.
            order: ``batch_size``, ``shuffle`` (a new order every pass,
                ``RandomSampler``'s), ``seed`` (of the shuffle's generator,
                made with the sampler) and ``drop_last`` (:class:`Order`;
                its ``rank`` and ``world_size`` are refused).
            generator: RNG of the shuffle, in place of one seeded with ``order.seed``.
            ahead: batches downloading ahead of the current one; default
                enough to keep the client's concurrency busy, and of those
                only the next ones whose listed bytes fit ``PREFETCH_BYTES``
                (at least 1). Each holds a batch in memory.
            **deprecated: ``shuffle=`` and ``drop_last=`` (with ``batch_size``,
                unshuffled by default, as before): each warns and goes in
                aioflux 0.3.0.

        Returns:
            The batch sampler.

        Raises:
            InvalidArgument: ``ahead`` below 1, an order field out of range,
                an order with a rank, or both ``order`` and an old keyword.
            TypeError: an unknown keyword.
        """
        op = "ObjectMapDataset.batch_sampler"
        old: dict[str, Any] = {name: deprecated.pop(name) for name in ("shuffle", "drop_last")
                               if name in deprecated}
        refuse_unknown(op, deprecated)
        given = {} if batch_size is None else {"batch_size": batch_size}
        if order is not None and (order.rank is not None or order.world_size is not None):
            raise InvalidArgument(f"{op}: this sampler hands every rank the same batches; "
                                  "ResumableBatchSampler splits them by order.rank")
        was_old = bool(old or given)
        order = resolve_order(op, order, old, given=given, defaults={"shuffle": False})
        check_int(op, "ahead", ahead, minimum=1, optional=True)
        bounded = ahead is None
        if ahead is None:
            ahead = _ahead(self._source.config, order.batch_size)
        if order.shuffle and generator is None and not was_old:
            # The old form drew each sampler's shuffle from fresh entropy.
            generator = torch.Generator().manual_seed(order.seed)
        sampler: torch.utils.data.Sampler[int] = (
            torch.utils.data.RandomSampler(self, generator=generator) if order.shuffle
            else torch.utils.data.SequentialSampler(self))
        return PrefetchBatchSampler(self, sampler, order.batch_size, order.drop_last,
                                    ahead=ahead, bounded=bounded)

    def close(self) -> None:
        """Close this process's connections (reopened on next use)."""
        prefetched, self._prefetched = self._prefetched, []
        for batch in prefetched:
            batch.future.cancel()
        self._source.close()

    @property
    def download_stats(self) -> DownloadStats:
        """This process's planner counters."""
        return self._source.downloader.stats

    @property
    def stats(self) -> BatchStats:
        """This process's batch latencies (``stats.summary()``: p50/p95/p99):
        each ``__getitems__`` from its call until its bytes are ready. Each
        DataLoader worker keeps its own (BatchStats in aioflux._core.metrics)."""
        pid, stats = self._batch_stats
        if pid != os.getpid():  # a worker's copy starts empty
            stats = BatchStats()
            self._batch_stats = (os.getpid(), stats)
        return stats


def _ahead(config: ClientConfig, batch_len: int) -> int:
    """Batches to download ahead: enough to keep every permit busy (one more
    than fill them, so they stay full while the consumer takes a batch).
    Bytes bound them as they are announced (:meth:`ObjectMapDataset._fitting`)."""
    return config.max_concurrency // max(1, batch_len) + 1


def _position(index: object) -> int:
    """A dataset index as an int: what stands for one is taken (numpy's
    integers, a 0-d tensor from a sampler); anything else (``ds["a"]``) is
    named, not a ``TypeError`` from comparing it deep inside. Out of range
    stays an IndexError, as in a list (iteration by index stops on it)."""
    if type(index) is int:  # most are: as_int's protocol check is ~2 us
        return index
    return as_int("ObjectMapDataset[]", "index", index, minimum=None)


def _downloading(batches: list[_Prefetch]) -> int:
    """The batches read ahead still downloading, less those a later one
    overtook: such a batch waits for a late object or two, its other reads
    done, so it holds few of the client's permits."""
    count = 0
    for ahead in batches:
        if ahead.future.done():
            count = 0  # the ones before it were overtaken
        else:
            count += 1
    return count


class More:
    """The batches past those announced, one at a time (``next``: None when
    there are none), and how many of them to keep downloading (``ahead``)."""

    def __init__(self, pull: Callable[[], list[int] | None], ahead: int) -> None:
        self.next, self.ahead = pull, ahead


@dataclasses.dataclass
class _Prefetch:
    indices: list[int]
    future: concurrent.futures.Future[list[Data]]


class PrefetchBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches of ``sampler``'s indices; announces the next ``ahead`` batches
    to the dataset before handing out each one (see :meth:`ObjectMapDataset.batch_sampler`).

    Args:
        dataset: the ObjectMapDataset to announce batches to.
        sampler: the index order.
        batch_size: samples per batch.
        drop_last: drop a last, incomplete batch.
        ahead: batches announced ahead of the current one.
        bounded: announce only the next of them whose listed bytes fit
            ``PREFETCH_BYTES`` (at least one), as the default ``ahead`` does.
    """

    def __init__(self, dataset: ObjectMapDataset[Any], sampler: torch.utils.data.Sampler[int],
                 batch_size: int, drop_last: bool = False, *, ahead: int = 1,
                 bounded: bool = False) -> None:
        self.dataset = dataset
        self.batches = torch.utils.data.BatchSampler(sampler, batch_size, drop_last)
        self.ahead = ahead
        self.bounded = bounded

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        it = iter(self.batches)
        window = list(itertools.islice(it, self.ahead + 1))
        more = More(functools.partial(pull, it, window), self.ahead)
        while window:
            current = window.pop(0)
            self.dataset._announced = (self.dataset._fitting(window) if self.bounded
                                       else list(window))
            self.dataset._more = more
            yield current
            window.extend(itertools.islice(it, max(0, self.ahead + 1 - len(window))))


def pull(batches: Iterator[list[int]], window: list[list[int]]) -> list[int] | None:
    """A sampler's next batch past its ``window``, taken into it (it is
    announced, then handed out, in turn); None at the pass's end."""
    batch = next(batches, None)
    if batch is not None:
        window.append(batch)
    return batch


