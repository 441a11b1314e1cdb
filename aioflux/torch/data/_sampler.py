"""Samplers of a map-style dataset, resumable mid-epoch at any world size.

``ResumableBatchSampler`` (``batch_sampler=``) and ``ResumableSampler``
(``sampler=``, like ``DistributedSampler``) hand out the same indices in
the same order; see :mod:`aioflux.torch.data._order` for the rule.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any, TypeVar

import torch.utils.data

from ..._core.checks.arguments import check_int
from ._map_dataset import More, ObjectMapDataset, _ahead, pull
from ._order import DataProgress, Pass, RankBatches, epoch_order, fingerprint, track
from ._order_options import Order, resolve_order

__all__ = ["ResumableBatchSampler", "ResumableSampler"]

T = TypeVar("T")


class _Resumable:
    """Settings, epoch and position shared by both samplers."""

    def __init__(self, op: str, dataset: Sized, batch_size: int | None, order: Order | None,
                 keywords: dict[str, Any]) -> None:
        # The warnings name the frame making the sampler.
        order = resolve_order(op, order, keywords, stacklevel=5,
                              given={} if batch_size is None else {"batch_size": batch_size})
        if keywords:
            raise TypeError(f"{op}() got an unexpected keyword argument {next(iter(keywords))!r}")
        self.order = order
        self.rank, self.world_size = order.placed()
        self.dataset = dataset
        self.batch_size = order.batch_size
        self.shuffle = order.shuffle
        self._progress = DataProgress(op, len(dataset), _fingerprint(dataset),
                                      order.seed, order.batch_size, self.world_size,
                                      order.drop_last, shuffle=order.shuffle)

    @property
    def seed(self) -> int:
        """Base seed of the shuffle."""
        return self._progress.seed

    @property
    def epoch(self) -> int:
        """Epoch of the next pass."""
        return self._progress.peek().epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass (keeps a restored position of that epoch).

        Args:
            epoch: epoch number.
        """
        self._progress.set_epoch(epoch)

    def _pass_batches(self) -> tuple[Iterator[list[int]], Pass]:
        """Begin a pass: this rank's share of each global batch left, and the pass."""
        progress = self._progress
        current = progress.begin()
        order = epoch_order(progress.count, progress.seed, current.epoch, self.shuffle)
        return iter(RankBatches(order, current.start, progress.global_batch, self.rank,
                                self.world_size, progress.drop_last)), current

    def _batches_left(self) -> int:
        current = self._progress.live()
        return current.total - current.skip

    def track(self, loader: Iterable[T]) -> Iterator[T]:
        """Iterate ``loader`` (built on this sampler), counting what the loop takes.

        ``for batch in sampler.track(loader): ...`` and ``state_dict()``
        inside the loop is exact even though the workers run ahead.

        Args:
            loader: the DataLoader (batches of ``batch_size``).

        Returns:
            The loader's batches.

        Raises:
            InvalidArgument: the DataLoader's ``batch_size`` is another
                (each of its batches would count as one of ours).
        """
        return track(self._progress, loader)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, seed, samples consumed (global), global batch size, dataset
        fingerprint, and the order counted in (``"order"``: ``"kind"``,
        ``"shuffle"``).

        Returns:
            A plain dict (``torch.save``-able, JSON-able).
        """
        return self._progress.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the saved epoch from the saved position on the next pass.

        Args:
            state: a ``state_dict()`` of either sampler or of an
                :class:`ObjectIterableDataset` over the same objects, saved at any
                world size and worker count (a :class:`ShardDataset`'s counts
                samples of another order: see Raises).

        Raises:
            InvalidArgument: not such a state (a number that is not an int...),
                another seed or another object list, or a place inside an
                epoch of another ``shuffle`` or (shuffled) of a
                :class:`ShardDataset`'s order.
        """
        self._progress.load_state_dict(state)


class ResumableBatchSampler(_Resumable, torch.utils.data.Sampler[list[int]]):
    """A ``batch_sampler`` whose epoch order ignores world size and workers,
    and whose position can be saved and restored mid-epoch.

    ``DataLoader(ds, batch_sampler=ResumableBatchSampler(ds, order=Order(batch_size=64)))``.
    The epoch's global order depends only on ``(seed, epoch)`` and the
    dataset's object list; it is cut into global batches of ``batch_size *
    world_size`` and this rank's batch is its contiguous share of each (see
    :mod:`aioflux.torch.data._order`). DataLoader workers get whole batches, as
    for any batch sampler. Every rank gets the same number of batches, so
    DDP's per-step all-reduce never waits on a rank that ran out: as with
    ``DistributedSampler``, a short last global batch is padded with the
    epoch's first samples to split evenly (or left out with ``drop_last``).

    Resume: ``state_dict()`` is ``{epoch, seed, samples, global_batch_size,
    fingerprint, order}`` (``samples``: of the epoch's global order, consumed by all
    ranks together; the same on every rank; ``order``: its kind and
    ``shuffle``, checked). ``load_state_dict(state)`` on a
    new sampler, with any world size and worker count, continues that epoch
    from there: every sample exactly once (plus the padding). Keep the seed
    (checked) and the global batch size (``batch_size * world_size``) fixed:
    another global batch size still yields each sample once, but in other
    batches.

    Counting: with ``num_workers=0`` the sampler counts the batches it hands
    out, which is what the loop took (on a :class:`ObjectMapDataset`, a batch whose
    download or transform failed is not counted). A DataLoader with workers asks for
    batches ahead, so iterate ``sampler.track(loader)`` (it counts what the
    loop took), or use torchdata's ``StatefulDataLoader`` (without
    ``track()``: it asks for this state as it sends batches out), whose
    ``state_dict()`` carries this sampler's state, taken in step with its
    batches; it restores the same worker count only.

    On a :class:`ObjectMapDataset` with ``num_workers=0`` it also announces the
    next ``ahead`` batches so they download while this one trains (as
    :meth:`ObjectMapDataset.batch_sampler` does).

    Args:
        dataset: the dataset (an ObjectMapDataset, or anything with a length).
        batch_size: deprecated: ``order=Order(batch_size=...)``.
        order: shuffle (else the dataset's order), seed, batch size (samples
            per rank per step), ``drop_last`` and rank (:class:`Order`).
        ahead: batches announced ahead (default: enough to keep the
            client's concurrency busy, and of those only the next ones whose
            listed bytes fit ``PREFETCH_BYTES``, at least one; 0 announces
            nothing).
        **deprecated: ``order``'s fields as keywords (``shuffle=``,
            ``seed=``...), and ``batch_size`` given here: each warns and
            goes in aioflux 0.3.0.

    Raises:
        InvalidArgument: a setting of the wrong type or range.
        TypeError: an unknown keyword.
    """

    def __init__(self, dataset: Sized, batch_size: int | None = None, *,
                 order: Order | None = None, ahead: int | None = None,
                 **deprecated: Any) -> None:
        op = "ResumableBatchSampler"
        super().__init__(op, dataset, batch_size, order, deprecated)
        check_int(op, "ahead", ahead, minimum=0, optional=True)
        self._bounded = ahead is None
        if ahead is None:
            ahead = 0
            if isinstance(dataset, ObjectMapDataset) and len(dataset):
                ahead = _ahead(dataset._source.config, self.batch_size)
        self.ahead = ahead

    def __len__(self) -> int:
        return self._batches_left()

    def __iter__(self) -> Iterator[list[int]]:
        batches, current = self._pass_batches()
        dataset = self.dataset if isinstance(self.dataset, ObjectMapDataset) else None
        announce = dataset if self.ahead else None
        handed = current.handed
        window = list(itertools.islice(batches, self.ahead + 1))
        more = More(functools.partial(pull, batches, window), self.ahead)
        while window:
            batch = window.pop(0)
            handed += 1
            current.handed = handed  # before the yield: a state taken now includes it
            if dataset is not None:
                dataset._handed(batch, functools.partial(_unhand, current, handed))
            if announce is not None:
                announce._announced = (announce._fitting(window) if self._bounded
                                       else list(window))
                announce._more = more  # past the window: read on behind a late batch
            yield batch
            window.extend(itertools.islice(batches, max(0, self.ahead + 1 - len(window))))
        self._progress.finish(current)


class ResumableSampler(_Resumable, torch.utils.data.Sampler[int]):
    """A ``sampler`` (like ``DistributedSampler``) with the order and resume
    of :class:`ResumableBatchSampler`.

    ``DataLoader(ds, sampler=ResumableSampler(ds, order=Order(batch_size=64)),
    batch_size=64)``: it
    yields this rank's indices of each global batch in turn, so the
    DataLoader's batches of ``batch_size`` (which must be this
    ``batch_size``) are exactly the batch sampler's. ``state_dict()``,
    ``load_state_dict()``, ``set_epoch()``, ``track()`` and the rules are
    the batch sampler's; under torchdata's ``StatefulDataLoader`` its batch
    sampler asks this one for its state.

    Args:
        dataset: the dataset (an ObjectMapDataset, or anything with a length).
        batch_size: deprecated: ``order=Order(batch_size=...)``.
        order: as for :class:`ResumableBatchSampler`; its ``batch_size`` is
            the DataLoader's.
        **deprecated: ``order``'s fields as keywords (``shuffle=``,
            ``seed=``...): each warns and goes in aioflux 0.3.0.

    Raises:
        InvalidArgument: a setting of the wrong type or range.
        TypeError: an unknown keyword.
    """

    def __init__(self, dataset: Sized, batch_size: int | None = None, *,
                 order: Order | None = None, **deprecated: Any) -> None:
        super().__init__("ResumableSampler", dataset, batch_size, order, deprecated)

    def __len__(self) -> int:
        return self._progress.rank_samples()

    def __iter__(self) -> Iterator[int]:
        batches, current = self._pass_batches()
        dataset = self.dataset if isinstance(self.dataset, ObjectMapDataset) else None
        handed = current.handed
        for share in batches:
            for i, index in enumerate(share, 1):
                if i == len(share):
                    handed += 1
                    current.handed = handed  # the share's last index: that batch is out
                    if dataset is not None:
                        dataset._handed(share, functools.partial(_unhand, current, handed))
                yield index
        self._progress.finish(current)


def _unhand(current: Pass, handed: int) -> None:
    """Un-count the ``handed``-th batch of ``current``, whose read failed,
    unless a later one was handed out since (the loop skipped it and went
    on: the pass counts it then, and a resume repeats nothing)."""
    if current.handed == handed:
        current.handed = handed - 1


def _fingerprint(dataset: Sized) -> str:
    """What a saved position is over: a dataset's own digest of its shards
    (``ShardMapDataset``), else of its objects' names, else its length."""
    own = getattr(dataset, "_position_fingerprint", None)
    if own is not None:
        return str(own())
    objects = getattr(dataset, "objects", None)
    return fingerprint(objects if objects is not None else len(dataset))
