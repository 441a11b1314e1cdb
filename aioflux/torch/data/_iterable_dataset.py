"""``ObjectIterableDataset``: every object once per epoch across ranks and workers.

Objects may be on any store (``gs://``, ``file://`` or a path); see
:mod:`aioflux.torch.data._source` for the per-process store.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import torch.utils.data

from ..._core.checks.arguments import check_bool, check_int
from ..._core.concurrency.portal import iterate
from ..._core.metrics import BatchStats
from ..._core.records.types import ObjectInfo
from ..._core.settings.config import DEFAULT_MAX_CONCURRENCY
from ..._engines.download import Data
from ..._engines.listing import DEFAULT_LIST_CONCURRENCY
from ._objects import ObjectsProperty
from ._order import DataProgress, Pass, RankBatches, epoch_order, fingerprint, track
from ._order_options import Order, resolve_order
from ._rank_listing import Listing, agreed, check_listing, objects_summary
from ._settings import DatasetSettings, object_settings
from ._source import Sample, Transform, build_source, check_objects, transformed
from ._worker_share import WorkerShare

__all__ = ["DEFAULT_PREFETCH", "ObjectIterableDataset"]

T = TypeVar("T")

# Objects in flight per iterator: the client's default concurrency, so an
# iterator alone keeps every permit busy (see DEFAULT_MAX_CONCURRENCY).
DEFAULT_PREFETCH = DEFAULT_MAX_CONCURRENCY


class ObjectIterableDataset(ObjectsProperty, torch.utils.data.IterableDataset[Sample]):
    """An iterable dataset (objects on any store, as for :class:`ObjectMapDataset`):
    each epoch yields every object once across all
    DDP ranks and DataLoader workers, shuffled per epoch, with a window of
    downloads in flight.

    The epoch's global order (``order=``, an :class:`Order`) is a
    permutation seeded by ``(seed, epoch)`` alone, cut into global batches
    of ``batch_size * world_size``: rank ``r`` of ``w`` takes the ``r``-th
    contiguous share of each (``batch_size`` samples), and DataLoader
    worker ``k`` of ``n`` the ``j``-th of those with ``j % n == k``,
    which is the order the DataLoader hands batches out in when its
    ``batch_size`` is this ``batch_size`` (see
    :mod:`aioflux.torch.data._order`). Every rank yields the same number of
    samples and batches, so DDP's per-step all-reduce never waits on a rank
    that ran out (given the same objects on every rank: see ``listing`` in
    :meth:`from_prefix`): as with ``DistributedSampler``, a short last global batch
    is padded with the epoch's first samples to split evenly (or left out
    with ``Order(drop_last=True)``); ``len()`` is this rank's samples of the pass.
    ``set_epoch(e)`` selects the epoch; without it, each ``iter()`` in a
    process advances the epoch by one, which also keeps
    ``persistent_workers`` (whose dataset copies do not see ``set_epoch``)
    on a new order every epoch. Workers that are not persistent iterate a
    new copy of the main process's dataset each epoch, which no ``iter()``
    advanced: with them call ``set_epoch`` (or iterate ``track(loader)``),
    or every epoch repeats the same order.

    Resume mid-epoch: ``state_dict()`` is ``{epoch, seed, samples,
    global_batch_size, fingerprint, order}`` (``samples`` of the global order
    consumed by all ranks together; ``order``: its kind and ``shuffle``);
    ``load_state_dict(state)`` before the next ``iter()`` continues that
    epoch there, with any world size and worker count, each sample exactly
    once (plus the padding). Keep the seed, ``shuffle`` (both checked) and
    the global batch size fixed (the same batches then), give the
    DataLoader ``batch_size=`` this ``batch_size`` and keep
    ``ordered=True``. Counting what was consumed: with ``num_workers=0`` the
    dataset counts itself; with workers iterate ``ds.track(loader)``, or use
    torchdata's ``StatefulDataLoader`` (its ``state_dict()`` carries each
    worker's state; the same worker count only).

    Args:
        objects: the objects, one sample each (see also :meth:`from_prefix`).
        transform: ``bytes -> sample``; default returns the bytes.
        settings: the store, download planner, hedging and disk cache
            (:class:`~aioflux.torch.DatasetSettings`; default: all defaults).
        order: shuffle, seed, batch size (the DataLoader's ``batch_size``:
            it sets the global batches, above), ``drop_last`` and rank
            (:class:`Order`; default: all defaults).
        prefetch: objects downloading ahead of the consumer.
        ordered: yield in shuffled order; ``False`` yields as completed.
        **deprecated: the settings' fields as keywords (``endpoint=``,
            ``cache_dir=``...), the order's (``shuffle=``, ``seed=``,
            ``batch_size=``...), the planner's ``disable_compose``,
            ``max_composite_object_size`` and ``compose_threshold``, and
            ``data_format_fn`` (dataflux's ``transform``): each warns and
            goes in aioflux 0.3.0.

    Raises:
        InvalidArgument: a setting of the wrong type, or ``rank`` outside
            ``world_size`` (checked at once).
        InvalidURL: a malformed ``endpoint``.
    """

    _op = "ObjectIterableDataset"

    def __init__(self, objects: Sequence[ObjectInfo], *, transform: Transform[Sample] | None = None,
                 settings: DatasetSettings | None = None, order: Order | None = None,
                 prefetch: int = DEFAULT_PREFETCH, ordered: bool = True,
                 **deprecated: Any) -> None:
        op = "ObjectIterableDataset"
        order = resolve_order(op, order, deprecated)
        self._transform: Transform[Sample] | None
        settings, self._transform = object_settings(op, settings, transform, deprecated)
        self._source = build_source(op, objects, settings)
        check_int(op, "prefetch", prefetch, minimum=1)
        check_bool(op, "ordered", ordered)
        self._objects = check_objects(op, self._source, objects)
        self.order = order
        self.shuffle, self.seed = order.shuffle, order.seed
        self.prefetch = prefetch
        self.ordered = ordered
        self.rank, self.world_size = order.placed()
        self.batch_size, self.drop_last = order.batch_size, order.drop_last
        self._progress = self._new_progress()
        self._batch_stats = (os.getpid(), BatchStats())

    @classmethod
    def from_prefix(cls, url: str, *, list_concurrency: int = DEFAULT_LIST_CONCURRENCY,
                    transform: Transform[Sample] | None = None,
                    settings: DatasetSettings | None = None, order: Order | None = None,
                    prefetch: int = DEFAULT_PREFETCH, ordered: bool = True,
                    listing: Listing = "each", **deprecated: Any) -> ObjectIterableDataset[Sample]:
        """List a folder in parallel (sorted by name) and wrap its objects.

        ``gs://b/data`` means the folder ``data/`` and an object named
        exactly ``data``; ``gs://b/data/`` the folder alone; never ``data2/``.

        Every rank must hold the same listing: the epoch order is a function
        of it, and so is each rank's batch count. ``listing="each"`` (the
        default) lists on every rank, with no collective: a folder written
        to while the ranks list can give them different listings (samples
        repeated or skipped, and a DDP all-reduce waiting forever when
        their batch counts differ). ``"rank0"`` and ``"check"`` make the
        ranks agree, as for :meth:`ObjectMapDataset.from_prefix`.

        Args:
            url: ``gs://bucket[/folder]``, ``file:///dir`` or a path.
            list_concurrency: parallel listers.
            transform: ``bytes -> sample``.
            settings: see the class docstring.
            order: see the class docstring.
            prefetch: objects downloading ahead of the consumer.
            ordered: yield in shuffled order; ``False`` yields as completed.
            listing: ``"each"``, ``"rank0"`` or ``"check"`` (above).
            **deprecated: the old keywords (see the class docstring).

        Returns:
            The dataset.

        Raises:
            InvalidURL, InvalidArgument, NotFound, StorageError, Conflict: as
                for :meth:`ObjectMapDataset.from_prefix`.
        """
        op = "ObjectIterableDataset.from_prefix"
        check_int(op, "list_concurrency", list_concurrency, minimum=1)
        check_listing(op, listing)
        order = resolve_order(op, order, deprecated)
        settings, transform = object_settings(op, settings, transform, deprecated)
        self = cls([], transform=transform, settings=settings, order=order, prefetch=prefetch,
                   ordered=ordered)
        self.objects = agreed(
            op, listing, str(url),
            lambda: self._source.list_prefix(url, list_concurrency),
            objects_summary)
        return self

    def close(self) -> None:
        """Close this process's connections (reopened on next use)."""
        self._source.close()

    def _objects_set(self) -> None:
        self._progress = self._new_progress()

    def _new_progress(self) -> DataProgress:
        return DataProgress("ObjectIterableDataset", len(self._objects), fingerprint(self._objects),
                            self.seed, self.batch_size, self.world_size, self.drop_last,
                            shuffle=self.shuffle)

    def __len__(self) -> int:
        """This rank's samples in the pass under way, else in the next one.

        The same on every rank; with the DataLoader's ``batch_size`` this
        ``batch_size``, ``len(loader)`` is the pass's steps.
        """
        return self._progress.rank_samples()

    @property
    def epoch(self) -> int:
        """Epoch of the next ``iter()`` in this process."""
        return self._progress.peek().epoch

    @property
    def stats(self) -> BatchStats:
        """This process's batch latencies (``stats.summary()``: p50/p95/p99).
        A batch here is one hand-off of up to 64 samples from the download
        loop; its latency is the time the consumer waited for them. Each
        DataLoader worker keeps its own (BatchStats in aioflux._core.metrics)."""
        pid, stats = self._batch_stats
        if pid != os.getpid():  # a worker's copy starts empty
            stats = BatchStats()
            self._batch_stats = (os.getpid(), stats)
        return stats

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next ``iter()`` uses.

        A position restored by :meth:`load_state_dict` for this same epoch
        is kept.

        Args:
            epoch: epoch number.
        """
        self._progress.set_epoch(epoch)

    def _batches(self, epoch: int, start: int) -> RankBatches:
        progress = self._progress
        order = epoch_order(len(self.objects), self.seed, epoch, self.shuffle)
        return RankBatches(order, start, progress.global_batch, self.rank, self.world_size,
                           self.drop_last)

    def shard(self, epoch: int, worker: int = 0, num_workers: int = 1) -> list[ObjectInfo]:
        """The objects one worker of this rank yields in ``epoch`` from its start, in order.

        Args:
            epoch: epoch number.
            worker: DataLoader worker id.
            num_workers: DataLoader worker count (at least 1).

        Returns:
            The shard.
        """
        batches = self._batches(epoch, 0)
        return [self.objects[i] for j in batches.of_worker(worker, max(1, num_workers))
                for i in batches[j]]

    def __iter__(self) -> Iterator[Sample]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        current = self._progress.begin(worker, workers)
        batches = self._batches(current.epoch, current.start)
        # This worker's samples, computed a block at a time as they are read
        # (the share made whole would take 8 bytes a sample, and 16 a batch).
        share = WorkerShare(batches, batches.of_worker(worker, workers, current.skip))
        yield from self._stream(current, share)
        self._progress.finish(current)

    def _stream(self, current: Pass, share: WorkerShare) -> Iterator[Sample]:
        # A view: records are built as the downloader reads them.
        objs = self._objects.select(share)
        agen = self._source.downloader.stream(objs, window=self.prefetch, ordered=self.ordered)
        # Ready samples cross from the loop thread in batches: a hand-off per
        # sample costs a thread wake-up a sample (perf/scenarios/loader_small.py). Leaving
        # early cancels the downloads in flight; their finally blocks delete
        # composites. A hand-off waiting in the queue and the one being
        # consumed hold samples beyond the downloader's prefetch_bytes: a hop
        # is an eighth of that budget by mean listed size, so 100 KiB objects
        # still go 64 a hop and 8 MiB objects 4 a hop, and the two hold a
        # quarter of it at most by the bytes read, one sample always passing
        # (a bound by the mean alone let 1 MiB objects after 3,000 of 100
        # bytes go 34 a hop: 17 times a 2 MiB budget read ahead).
        listed = sum(map(self._objects.size, share))
        typical = max(1, listed // max(1, len(objs)))
        budget = self._source.downloader.options.prefetch_bytes
        hand_off = max(1, min(64, self.prefetch, budget // 8 // typical))
        timed = _timed(iterate(agen, batch=hand_off, nbytes=_read_bytes,
                               max_bytes=max(1, budget // 4)), self.stats, hand_off)
        k = 0  # the next batch to complete (each has a sample or more)
        end, after = share.batch_end(0) if share.batches() else (-1, 0)
        try:
            for count, (obj, data) in enumerate(timed, 1):
                # The transform first: a batch whose last sample it refused was
                # never handed out, and a state taken after the error (a save
                # in an ``except``) must not count it, or a resume skips it.
                sample: Sample = transformed("ObjectIterableDataset", self._transform, data,
                                             lambda: obj)  # noqa: B023  # called at once
                if count == end:
                    current.handed = after  # before the yield: a state taken now includes it
                    k += 1
                    end, after = share.batch_end(k) if k < share.batches() else (-1, 0)
                yield sample
        finally:
            # Stop the downloads in flight before an error leaves: the
            # traceback keeps this frame, and with it the pump, alive for
            # as long as the caller holds the exception.
            timed.close()

    def track(self, loader: Iterable[T]) -> Iterator[T]:
        """Iterate ``loader`` (a DataLoader over this dataset), counting what the loop takes.

        ``for batch in ds.track(loader): ...`` makes ``state_dict()`` inside
        the loop exact even though DataLoader workers run ahead.

        Args:
            loader: the DataLoader (``batch_size`` = this dataset's).

        Returns:
            The loader's batches.

        Raises:
            InvalidArgument: the DataLoader's ``batch_size`` is another
                (each of its batches would count as one of ours).
        """
        return track(self._progress, loader)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, seed, samples consumed (global), global batch size, fingerprint,
        and the order counted in (``"order"``: ``"kind"``, ``"shuffle"``).

        Returns:
            A plain dict (``torch.save``-able, JSON-able).
        """
        return self._progress.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the saved epoch from the saved position on the next ``iter()``.

        Args:
            state: a :meth:`state_dict` (or a :class:`ResumableBatchSampler`'s over
                the same objects), saved at any world size and worker count.

        Raises:
            InvalidArgument: not such a state (a number that is not an int...),
                another seed or another object list, or a place inside an
                epoch of another ``shuffle`` or (shuffled) of a
                :class:`ShardDataset`'s order.
        """
        self._progress.load_state_dict(state)


def _read_bytes(item: tuple[ObjectInfo, Data]) -> int:
    return len(item[1])


def _timed(items: Iterator[T], stats: BatchStats, every: int) -> Generator[T, None, None]:
    """``items``, recording into ``stats`` the time spent waiting for each
    ``every`` of them (the consumer's time between them is not counted)."""
    waited, count = 0.0, 0
    try:
        while True:
            started = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                break
            waited += time.perf_counter() - started
            count += 1
            if count == every:
                stats.record(waited, count)
                waited, count = 0.0, 0
            yield item
        if count:
            stats.record(waited, count)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # leaving early cancels the downloads in flight, as before
