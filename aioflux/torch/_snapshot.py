"""Host-memory snapshots of state dicts for background saving.

``save_async`` must return as soon as training may mutate its tensors
again, so every tensor is copied to CPU host memory first; containers are
rebuilt around the copies and a tensor reached twice is copied once (shared
tensors stay shared in the saved file, as ``torch.save`` would keep them).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["snapshot", "state_nbytes"]


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


def snapshot(state: Any) -> Any:
    """Copy ``state`` so later in-place updates of its tensors cannot leak in.

    Args:
        state: nested dicts / lists / tuples of tensors and plain values.

    Returns:
        The same structure with every tensor cloned into CPU memory and other
        leaves deep-copied.
    """
    return _copy(state, {})


def _copy(obj: Any, memo: dict[int, Any]) -> Any:
    key = id(obj)
    if key in memo:
        return memo[key]
    result: Any
    if isinstance(obj, torch.Tensor):
        # detach + copy to CPU; a CPU tensor still gets its own storage.
        result = obj.detach().to("cpu", copy=True)
    elif isinstance(obj, Mapping):
        items = {k: _copy(v, memo) for k, v in obj.items()}
        try:
            result = type(obj)(items)  # type: ignore[call-arg]
        except TypeError:
            result = items
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        result = type(obj)(*(_copy(v, memo) for v in obj))
    elif isinstance(obj, (list, tuple)):
        result = type(obj)(_copy(v, memo) for v in obj)
    else:
        result = copy.deepcopy(obj)
    memo[key] = result
    return result
