"""Host-memory snapshots of state dicts for background saving.

``save_async`` must return as soon as training may mutate its tensors
again, so every tensor is copied to CPU host memory first; containers are
rebuilt around the copies and a tensor reached twice is copied once (shared
tensors stay shared in the saved file, as ``torch.save`` would keep them).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["BufferPool", "snapshot", "state_nbytes"]

_Key = tuple[tuple[int, ...], torch.dtype]


class BufferPool:
    """Host buffers of a finished snapshot, reused by the next one.

    Copying a state into memory that is already mapped measured ~3x faster
    than into fresh allocations (1 GiB: ~0.2 s vs 0.3-0.85 s, the rest being
    page faults), and that copy is all of ``save_async``'s blocking time.
    The pool holds at most one snapshot's tensors: each refill replaces the
    previous content.
    """

    def __init__(self) -> None:
        self._free: dict[_Key, list[torch.Tensor]] = {}
        self._lock = threading.Lock()
        self.nbytes = 0

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """A free buffer of this shape and dtype, or None.

        Args:
            shape: tensor shape.
            dtype: tensor dtype.

        Returns:
            A contiguous CPU tensor now owned by the caller, or None.
        """
        with self._lock:
            free = self._free.get((shape, dtype))
            if not free:
                return None
            buf = free.pop()
            self.nbytes -= buf.numel() * buf.element_size()
            return buf

    def refill(self, state: Any) -> None:
        """Keep the plain CPU tensors of a finished snapshot for reuse.

        Args:
            state: the snapshot (no one else may use its tensors any more).
        """
        free: dict[_Key, list[torch.Tensor]] = {}
        nbytes = 0
        for tensor in _plain_tensors(state, set()):
            free.setdefault((tuple(tensor.shape), tensor.dtype), []).append(tensor)
            nbytes += tensor.numel() * tensor.element_size()
        with self._lock:
            self._free, self.nbytes = free, nbytes

    def clear(self) -> None:
        """Release every pooled buffer."""
        with self._lock:
            self._free, self.nbytes = {}, 0


def _reusable(tensor: torch.Tensor) -> bool:
    return (type(tensor) is torch.Tensor and tensor.layout == torch.strided
            and tensor.device.type == "cpu" and tensor.is_contiguous())


def _plain_tensors(obj: Any, seen: set[int]) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        if id(obj) in seen or not _reusable(obj):
            return []
        seen.add(id(obj))
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in _plain_tensors(v, seen)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _plain_tensors(v, seen)]
    return []


def _tensors(obj: Any, seen: set[int]) -> int:
    if isinstance(obj, torch.Tensor):
        key = id(obj)
        if key in seen:
            return 0
        seen.add(key)
        return int(obj.numel() * obj.element_size())
    if isinstance(obj, Mapping):
        return sum(_tensors(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensors(v, seen) for v in obj)
    return 0


def state_nbytes(state: Any) -> int:
    """Bytes of tensor data reachable from ``state`` (each tensor once).

    Args:
        state: nested dicts / lists / tuples of tensors and plain values.

    Returns:
        The byte count a snapshot of it takes.
    """
    return _tensors(state, set())


def snapshot(state: Any, pool: BufferPool | None = None) -> Any:
    """Copy ``state`` so later in-place updates of its tensors cannot leak in.

    Args:
        state: nested dicts / lists / tuples of tensors and plain values.
        pool: reuse host buffers from here where shape and dtype match.

    Returns:
        The same structure with every tensor cloned into CPU memory and other
        leaves deep-copied.
    """
    return _copy(state, {}, pool)


def _copy(obj: Any, memo: dict[int, Any], pool: BufferPool | None) -> Any:
    key = id(obj)
    if key in memo:
        return memo[key]
    result: Any
    if isinstance(obj, torch.Tensor):
        buf = None
        if pool is not None and type(obj) is torch.Tensor and obj.layout == torch.strided:
            buf = pool.take(tuple(obj.shape), obj.dtype)
        if buf is not None:
            result = buf.copy_(obj.detach())
        else:
            # detach + copy to CPU; a CPU tensor still gets its own storage.
            result = obj.detach().to("cpu", copy=True)
    elif isinstance(obj, dict):
        # A shallow copy keeps the type and what it holds beyond its items
        # (a defaultdict's default_factory: type(obj)(items) raised
        # TypeError for it, and save_async stored a plain dict where save()
        # stored the defaultdict); then every value is copied in place.
        result = copy.copy(obj)
        for k, v in obj.items():
            result[k] = _copy(v, memo, pool)
    elif isinstance(obj, Mapping):
        items = {k: _copy(v, memo, pool) for k, v in obj.items()}
        try:
            result = type(obj)(items)  # type: ignore[call-arg]
        except TypeError:
            result = items
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        result = type(obj)(*(_copy(v, memo, pool) for v in obj))
    elif isinstance(obj, (list, tuple)):
        result = type(obj)(_copy(v, memo, pool) for v in obj)
    else:
        result = copy.deepcopy(obj)
    memo[key] = result
    return result
