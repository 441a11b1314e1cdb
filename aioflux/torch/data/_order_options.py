"""``Order``: how a dataset or sampler walks an epoch, declared once.

Given as ``order=`` to :class:`ObjectIterableDataset`, :class:`ShardDataset`
and the two resumable samplers. Their old keywords (``shuffle=``,
``seed=``...) still work, each use warning (:func:`resolve_order`), until
aioflux 0.3.0.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch.distributed as dist

from ..._core.checks.arguments import check_bool, check_instance, check_int
from ..._core.deprecation import warn_deprecated
from ..._core.errors import InvalidArgument

__all__ = ["DEFAULT_SHUFFLE_WINDOW", "ORDER_KEYWORDS", "Order", "resolve_order"]

# Samples whose reads are permuted together (see _shard_order).
DEFAULT_SHUFFLE_WINDOW = 8192


@dataclasses.dataclass(frozen=True)
class Order:
    """The epoch order of a dataset or sampler: shuffle, seed, the global
    batches it is cut into and this process's rank; it pickles for
    ``spawn`` workers.

    ``Order(seed=1, batch_size=64)`` is given as ``order=`` to
    :class:`ObjectIterableDataset`, :class:`ShardDataset`,
    :class:`ResumableBatchSampler` and :class:`ResumableSampler`. It is not
    part of :class:`DatasetSettings`: a training and a validation set share
    one store and cache but walk their epochs differently, and the map
    datasets have no order at all (their sampler has it).

    Args:
        shuffle: shuffle each epoch (else the objects' or shards' order).
        seed: base seed of the shuffle; the epoch order is a function of
            ``(seed, epoch)`` and the dataset alone.
        batch_size: samples per rank per step: the DataLoader's
            ``batch_size``. The global batches are ``batch_size *
            world_size`` samples; rank ``r`` takes the ``r``-th share of each.
        drop_last: leave out a short last global batch (else pad it with
            the epoch's first samples, as ``DistributedSampler`` does).
        rank: DDP rank (default: torch.distributed, else ``$RANK``, else 0),
            resolved when the dataset is made, because DataLoader workers
            have no process group.
        world_size: DDP world size (same defaults).
        shuffle_window: (:class:`ShardDataset` only) samples whose reads are
            permuted together; the others refuse another value.
    """

    shuffle: bool = True
    seed: int = 0
    batch_size: int = 1
    drop_last: bool = False
    rank: int | None = None
    world_size: int | None = None
    shuffle_window: int = DEFAULT_SHUFFLE_WINDOW

    def check(self, op: str, *, window: bool = False) -> Order:
        """Check the fields and resolve ``rank`` and ``world_size``.

        Args:
            op: the dataset or sampler, for messages.
            window: the caller reads ``shuffle_window`` (else a value other
                than the default is refused).

        Returns:
            This order with ``rank`` and ``world_size`` set.

        Raises:
            InvalidArgument: a field of the wrong type or range, a
                ``shuffle_window`` the caller does not use, or ``rank``
                outside ``world_size``.
        """
        check_bool(op, "order.shuffle", self.shuffle)
        check_int(op, "order.seed", self.seed, minimum=None)
        check_int(op, "order.batch_size", self.batch_size, minimum=1)
        check_bool(op, "order.drop_last", self.drop_last)
        check_int(op, "order.rank", self.rank, minimum=0, optional=True)
        check_int(op, "order.world_size", self.world_size, minimum=1, optional=True)
        check_int(op, "order.shuffle_window", self.shuffle_window, minimum=1)
        if not window and self.shuffle_window != DEFAULT_SHUFFLE_WINDOW:
            raise InvalidArgument(f"{op}: order.shuffle_window is ShardDataset's (the reads "
                                  "it permutes together); this one reads no shards")
        rank, world = _dist_rank()
        rank = rank if self.rank is None else self.rank
        world = world if self.world_size is None else self.world_size
        if not 0 <= rank < world:
            raise InvalidArgument(f"{op}: rank {rank} outside world size {world}")
        return dataclasses.replace(self, rank=rank, world_size=world)

    def placed(self) -> tuple[int, int]:
        """The rank and world size of an order :meth:`check` returned.

        Returns:
            ``(rank, world_size)``.

        Raises:
            InvalidArgument: an order not checked (its rank not resolved).
        """
        if self.rank is None or self.world_size is None:
            raise InvalidArgument("Order: rank and world_size are resolved by check()")
        return self.rank, self.world_size


def _dist_rank() -> tuple[int, int]:
    """``(rank, world)`` from torch.distributed, else ``$RANK``/``$WORLD_SIZE``, else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


#: The old keywords, each a field of :class:`Order`.
ORDER_KEYWORDS = frozenset(f.name for f in dataclasses.fields(Order))


def resolve_order(op: str, order: Order | None, keywords: dict[str, Any], *,
                  window: bool = False, given: dict[str, Any] | None = None,
                  defaults: dict[str, Any] | None = None, stacklevel: int = 4) -> Order:
    """``order``, or one made of the old keywords in ``keywords``, checked
    and with its rank resolved.

    Each old keyword found is removed from ``keywords`` and warns, naming
    its place in ``order=``; what is left is not the order's.

    Args:
        op: the call as the user wrote it, for messages.
        order: the ``order=`` given, or None.
        keywords: the call's other keywords (the old ones are taken out).
        window: the caller reads ``shuffle_window``.
        given: old keywords the caller took itself (a sampler's positional
            ``batch_size``), which warn likewise.
        defaults: the old form's defaults where they are not Order's
            (applied only when an old keyword is given).
        stacklevel: the frame the warnings name (the caller's caller).

    Returns:
        The order, checked (:meth:`Order.check`).

    Raises:
        InvalidArgument: ``order`` is not an Order, both ``order`` and an
            old keyword were given, or as :meth:`Order.check`.
    """
    check_instance(op, "order", order, Order, optional=True)
    old = dict(given or {})
    old.update((name, keywords.pop(name)) for name in [k for k in keywords
                                                        if k in ORDER_KEYWORDS])
    for name in old:
        warn_deprecated(f"{op}({name}=...)", f"order=Order({name}=...)", stacklevel=stacklevel)
    if old and order is not None:
        raise InvalidArgument(f"{op}: pass order=Order(...) or the old keywords "
                              f"({', '.join(old)}), not both")
    if order is None:
        order = Order(**{**(defaults or {}), **old} if old else {})
    return order.check(op, window=window)
