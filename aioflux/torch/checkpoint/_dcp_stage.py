"""Staging a DCP state into pinned host memory, torch's own cache reused.

``dcp.async_save`` returns once ``stage`` has copied the state to host
memory. torch's ``BlockingAsyncStager`` can keep that copy between saves
in pinned memory (``cache_staged_state_dict=True``), but copies each
tensor with its own synchronous ``copy_``; here the copies are queued
``non_blocking`` on the devices' current streams and waited for once, so
the transfers run back to back at the link's speed. The cache itself is
torch's (``_create_cpu_state_dict(pin_memory=True)``): no second pool.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

from ._snapshot import accelerated

__all__ = ["cached_state", "copy_into", "staged_nbytes", "wants_cache"]


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
    devices = {t.device for t in _tensors(state_dict) if t.device.type == "cuda"}
    staged: dict[str, Any] = _copy_state_dict(state_dict, cache, non_blocking=bool(devices))
    for device in devices:
        torch.cuda.current_stream(device).synchronize()
    return staged


def staged_nbytes(cache: dict[str, Any] | None) -> int:
    """Host bytes a cached staged state holds."""
    return 0 if cache is None else sum(t.numel() * t.element_size() for t in _tensors(cache))


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []
