"""What memory_budget counts of a state: the tensors the objects it holds
reach, as the snapshot's deep copies of them hold them."""

from __future__ import annotations

import copy
import dataclasses
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from aioflux import InvalidArgument
from aioflux.torch import CheckpointManager
from aioflux.torch.checkpoint._snapshot import _objects_nbytes, snapshot, state_nbytes


@dataclasses.dataclass
class _Holder:
    weight: torch.Tensor
    extra: Any = None


def _storage_bytes(*tensors: torch.Tensor) -> int:
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def test_a_module_s_and_a_namespace_s_tensors_are_counted() -> None:
    # Both were 0 bytes: four 16 MiB modules were in flight under a 16 MiB budget.
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    model.register_buffer("steps", torch.zeros(10, dtype=torch.int64))
    params = sum(p.numel() * 4 for p in model.parameters()) + 10 * 8
    assert state_nbytes({"model": model}) == params
    assert state_nbytes({"ns": types.SimpleNamespace(w=torch.ones(100)), "step": 3}) == 400
    assert state_nbytes([_Holder(torch.ones(5), extra={"t": (torch.ones(3),)})]) == 32
    assert state_nbytes({"ns": types.SimpleNamespace(m=torch.empty(9, device="meta"))}) == 0


def test_a_storage_objects_share_is_counted_once_and_whole() -> None:
    # Tensor.__deepcopy__ copies the whole storage a view is of, once a memo.
    flat = torch.arange(100.0)
    head, tail = flat[:10], flat[90:]
    state = {"a": types.SimpleNamespace(h=head), "b": _Holder(tail, extra=[head])}
    assert state_nbytes(state) == 400
    copied = snapshot(state)
    assert _storage_bytes(copied["a"].h, copied["b"].weight, copied["b"].extra[0]) == 400


def test_a_tensor_the_state_holds_too_is_counted_once() -> None:
    # On a host state an object's copy takes the state's copy of that tensor.
    weight = torch.ones(50)
    state = {"w": weight, "ns": types.SimpleNamespace(t=weight), "model": torch.nn.Linear(4, 2)}
    assert state_nbytes(state) == 200 + (8 + 2) * 4
    copied = snapshot(state)
    assert copied["ns"].t is copied["w"]


def test_objects_of_a_device_state_are_counted_one_by_one() -> None:
    # A device state's objects are deep-copied each with a memo of its own
    # (see _copy): a CPU tensor two of them hold is copied twice.
    shared = torch.ones(25)
    objects = [types.SimpleNamespace(t=shared), types.SimpleNamespace(t=shared)]
    on_device: Any = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))
    assert _objects_nbytes(objects, [on_device]) == 2 * 100
    assert _objects_nbytes(objects, []) == 100
    apart = [copy.deepcopy(obj, {}) for obj in objects]
    assert apart[0].t.data_ptr() != apart[1].t.data_ptr()


def test_save_async_refuses_a_module_beyond_the_budget(tmp_path: Path) -> None:
    model = torch.nn.Linear(256, 256)  # 263 kB of parameters
    with CheckpointManager(tmp_path / "run", memory_budget=100_000) as manager:
        with pytest.raises(InvalidArgument, match="memory_budget"):
            manager.save_async({"model": model}, 1)
        small = {"model": torch.nn.Linear(8, 8)}
        assert manager.save_async(small, 2).result().step == 2
