"""Snapshots of tensors that are not one dense storage: nested, meta and
sparse ones, which save() stores, so save_async must store them alike."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from aioflux.torch import CheckpointManager
from aioflux.torch.checkpoint._snapshot import BufferPool, mapped_like, snapshot, state_nbytes

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*[Nn]ested:UserWarning", "ignore:Sparse:UserWarning")


def _nested() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype
        return torch.nested.nested_tensor([torch.arange(2.0), torch.arange(3.0, 6.0)])


def _same_meta(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (type(a) is type(b) and a.device == b.device and a.dtype == b.dtype
            and a.shape == b.shape and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset() and a.requires_grad == b.requires_grad)


def test_a_nested_tensor_is_copied_whole_also_through_the_pool() -> None:
    # Its shape raised ("NestedTensorImpl doesn't support sizes") before
    # anything was copied, in state_nbytes and at the pool alike.
    pool = BufferPool()
    state = {"n": _nested(), "w": torch.ones(4)}
    assert state_nbytes(state) == 5 * 4 + 4 * 4
    for _ in range(2):  # fresh buffers, then the pool's
        copy = snapshot(state, pool)
        state["n"].values().add_(10)
        assert copy["n"].is_nested
        assert copy["n"].untyped_storage().data_ptr() != state["n"].untyped_storage().data_ptr()
        assert all(torch.equal(a, b - 10) for a, b in zip(copy["n"].unbind(),
                                                           state["n"].unbind(), strict=True))
        pool.refill(copy)
    assert mapped_like(torch.nested.nested_tensor([torch.ones(1 << 19)] * 2)) is None


def test_a_meta_tensor_is_kept_as_it_is() -> None:
    # "Cannot copy out of meta tensor": it holds no data, and save() stores
    # its shape, dtype and strides.
    base = torch.empty(4, 6, device="meta")
    state = {"m": base, "t": base.t()[1:], "p": torch.nn.Parameter(torch.empty(3, device="meta")),
             "g": torch.empty(2, device="meta", requires_grad=True)}
    assert state_nbytes(state) == 0
    copy = snapshot(state, BufferPool())
    assert all(_same_meta(copy[k], state[k]) for k in state)
    assert copy["m"].untyped_storage().nbytes() == base.untyped_storage().nbytes()


def _sparse() -> dict[str, torch.Tensor]:
    dense = torch.zeros(8, 6)
    dense[0, 1], dense[7, 4] = 1.0, 2.0
    dense[2:4, 2:4] = 3.0
    rows = torch.tensor([[0, 0, 9_999]])  # uncoalesced: row 0 twice
    return {"coo": torch.sparse_coo_tensor(rows, torch.ones(3, 4), (10_000, 4)),
            "csr": dense.to_sparse_csr(), "csc": dense.to_sparse_csc(),
            "bsr": dense.to_sparse_bsr((2, 2)), "bsc": dense.to_sparse_bsc((2, 2))}


_PARTS: dict[str, Callable[[torch.Tensor], tuple[torch.Tensor, ...]]] = {
    "coo": lambda t: (t._indices(), t._values()),
    "csr": lambda t: (t.crow_indices(), t.col_indices(), t.values()),
    "bsr": lambda t: (t.crow_indices(), t.col_indices(), t.values()),
    "csc": lambda t: (t.ccol_indices(), t.row_indices(), t.values()),
    "bsc": lambda t: (t.ccol_indices(), t.row_indices(), t.values()),
}


def test_a_sparse_tensor_counts_and_copies_its_indices_and_values_only() -> None:
    # Counted as dense, a 10_000 x 4 COO tensor of three rows was 160 kB.
    state = _sparse()
    for name, tensor in state.items():
        parts = _PARTS[name](tensor)
        assert state_nbytes({name: tensor}) == sum(p.numel() * p.element_size() for p in parts)
    assert state_nbytes({"coo": state["coo"]}) < 200
    copy = snapshot(state, BufferPool())
    for name, tensor in state.items():
        assert copy[name].layout == tensor.layout
        assert torch.equal(copy[name].to_dense(), tensor.to_dense())
        _PARTS[name](tensor)[-1].add_(1)  # the copy is its own
        assert not torch.equal(copy[name].to_dense(), tensor.to_dense())


def _equal(a: Any, b: Any) -> bool:
    if a.device.type == "meta":
        return _same_meta(a, b)
    if a.is_nested:
        return all(torch.equal(x, y) for x, y in zip(a.unbind(), b.unbind(), strict=True))
    return bool(a.layout == b.layout and torch.equal(a.to_dense(), b.to_dense()))


def test_save_async_stores_what_save_stores(tmp_path: Path) -> None:
    # A 1 kB budget: a sparse tensor's dense size (160 kB) was refused.
    state: dict[str, Any] = {"nested": _nested(), "meta": torch.empty(3, 2, device="meta").t(),
                             "meta_p": torch.nn.Parameter(torch.empty(2, device="meta")),
                             **_sparse()}
    with CheckpointManager(tmp_path / "run", memory_budget=1000) as manager:
        manager.save(state, 1)
        manager.save_async(state, 2).result()
        direct, background = (manager.load(step, weights_only=False) for step in (1, 2))
    assert direct.keys() == background.keys() == state.keys()
    assert all(_equal(direct[k], background[k]) and _equal(state[k], background[k])
               for k in state)
