"""Snapshots for save_async: copies, and buffer reuse between saves."""

from __future__ import annotations

import collections
from typing import Any

import torch

from aioflux.torch._snapshot import BufferPool, snapshot, state_nbytes


def test_snapshot_is_a_copy_and_keeps_sharing() -> None:
    weight = torch.arange(6.0).reshape(2, 3)
    state = {"w": weight, "tied": weight, "meta": {"step": 3, "lr": [0.1]}}
    copy = snapshot(state)
    weight.add_(100)
    assert torch.equal(copy["w"], torch.arange(6.0).reshape(2, 3))
    assert copy["tied"] is copy["w"]
    assert copy["meta"] == {"step": 3, "lr": [0.1]}
    assert state_nbytes(state) == 6 * 4


def test_pool_reuses_buffers_of_matching_shape_and_dtype() -> None:
    pool = BufferPool()
    first = snapshot({"a": torch.ones(4, 4), "b": torch.zeros(3, dtype=torch.int64)}, pool)
    pool.refill(first)
    assert pool.nbytes == 4 * 4 * 4 + 3 * 8
    pointers = {first["a"].data_ptr(), first["b"].data_ptr()}
    new_state = {"a": torch.full((4, 4), 7.0), "b": torch.arange(3),
                 "c": torch.ones(2, dtype=torch.float16)}
    second = snapshot(new_state, pool)
    assert {second["a"].data_ptr(), second["b"].data_ptr()} == pointers  # reused, not allocated
    assert torch.equal(second["a"], new_state["a"]) and torch.equal(second["b"], torch.arange(3))
    assert second["c"].data_ptr() != new_state["c"].data_ptr()  # no match: a fresh copy
    assert pool.nbytes == 0
    new_state["a"].add_(1)
    assert torch.equal(second["a"], torch.full((4, 4), 7.0))
    pool.refill(second)
    pool.clear()
    assert pool.nbytes == 0 and pool.take((4, 4), torch.float32) is None


def test_a_snapshot_keeps_each_mapping_s_type() -> None:
    # A defaultdict became a plain dict (type(obj)(items) refuses one), so
    # save_async stored something else than save(): missing keys then raised.
    weight = torch.ones(3)
    counts: collections.defaultdict[str, Any] = collections.defaultdict(int, {"a": 1, "w": weight})
    ordered = collections.OrderedDict([("z", torch.zeros(2)), ("a", 2)])
    copy = snapshot({"counts": counts, "ordered": ordered})
    got = copy["counts"]
    assert type(got) is collections.defaultdict and got.default_factory is int
    assert got["missing"] == 0 and "missing" not in counts
    weight.add_(1)
    assert torch.equal(got["w"], torch.ones(3))  # its tensors are copied all the same
    assert type(copy["ordered"]) is collections.OrderedDict
    assert list(copy["ordered"]) == ["z", "a"]
    assert copy["ordered"]["z"] is not ordered["z"] and torch.equal(copy["ordered"]["z"],
                                                                   torch.zeros(2))
