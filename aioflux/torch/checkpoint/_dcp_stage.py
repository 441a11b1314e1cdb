"""Staging a DCP state into pinned host memory, torch's own cache reused.

``dcp.async_save`` returns once ``stage`` has copied the state to host
memory. torch's ``BlockingAsyncStager`` can keep that copy between saves
in pinned memory (``cache_staged_state_dict=True``), but copies each
tensor with its own synchronous ``copy_``; here the copies are queued
``non_blocking`` on the devices' current streams and waited for once, so
the transfers run back to back at the link's speed. The cache itself is
torch's (``_create_cpu_state_dict(pin_memory=True)``): no second pool.

torch copies into its cache whatever the state holds now, and the cache is
shaped by the first save: a state whose shape changed since (an
optimizer's state, empty before the first step) fails to copy, or a tensor
whose dtype or shape changed is copied converted or broadcast, in silence.
So the cache is made again whenever the state's layout (every tensor's
place, shape and dtype, every dict's keys and list's length) differs from
the one it was made for.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

from ._snapshot import accelerated

__all__ = ["cached_state", "copy_into", "fresh_copy", "layout", "staged_nbytes", "tensors",
           "wants_cache"]


def wants_cache(choice: bool | None, state_dict: dict[str, Any]) -> bool:
    """Whether to keep the staged copy: as asked, else for accelerator states."""
    return accelerated(state_dict) if choice is None else choice


def cached_state(state_dict: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """torch's host copy of ``state_dict`` to stage into, pinned where
    pinning works; else pageable, with the reason pinning failed."""
    try:
        return _create_cpu_state_dict(state_dict, pin_memory=True), None
    except RuntimeError as exc:  # a CPU-only build, a locked-memory limit
        return _create_cpu_state_dict(state_dict), str(exc)


def copy_into(state_dict: dict[str, Any], cache: dict[str, Any]) -> dict[str, Any]:
    """Copy ``state_dict`` into ``cache``; returns once every copy is done."""
    devices = {t.device for t in tensors(state_dict) if t.device.type == "cuda"}
    # type_check=False: a value of another type (numpy's RNG state) is
    # deep-copied, as torch's own staging takes it, not refused.
    staged: dict[str, Any] = _copy_state_dict(state_dict, cache, non_blocking=bool(devices),
                                              type_check=False)
    for device in devices:
        torch.cuda.current_stream(device).synchronize()
    return staged


def fresh_copy(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A host copy of ``state_dict`` in memory of its own (pageable), not
    kept: where the kept copy is still another save's."""
    return copy_into(state_dict, _create_cpu_state_dict(state_dict))


def layout(obj: Any) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Where each tensor of a state is, with its shape (a DTensor's local one
    too) and dtype, and where its dicts' keys and its lists' lengths are:
    what a cache made for one state must match to take another's copy
    (other values are taken from the state as they are). By place, so the
    order of a dict's keys does not count (torch's copy does not ask it)."""
    out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    _walk(obj, (), out)
    return out


def _walk(obj: Any, path: tuple[Any, ...], out: dict[tuple[Any, ...], tuple[Any, ...]]) -> None:
    if isinstance(obj, torch.Tensor):
        local = getattr(obj, "_local_tensor", obj)  # a DTensor's shard
        out[path] = (tuple(obj.shape), tuple(local.shape), obj.dtype)
    elif isinstance(obj, dict):
        out[path] = (frozenset(obj),)
        for key, value in obj.items():
            _walk(value, (*path, key), out)
    elif isinstance(obj, (list, tuple)):
        out[path] = (len(obj),)
        for i, value in enumerate(obj):
            _walk(value, (*path, i), out)


def staged_nbytes(cache: dict[str, Any] | None) -> int:
    """Host bytes a cached staged state holds."""
    return 0 if cache is None else sum(t.numel() * t.element_size() for t in tensors(cache))


def tensors(obj: Any) -> list[torch.Tensor]:
    """A state's tensors, in its dicts' and lists' order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors(v)]
    return []
