"""Snapshots for save_async: copies, and buffer reuse between saves."""

from __future__ import annotations

import collections
import io
import types
from pathlib import Path
from typing import Any

import torch

from aioflux.torch.checkpoint._snapshot import BufferPool, snapshot, state_nbytes


def test_snapshot_is_a_copy_and_keeps_sharing() -> None:
    weight = torch.arange(6.0).reshape(2, 3)
    state = {"w": weight, "tied": weight, "meta": {"step": 3, "lr": [0.1]}}
    copy = snapshot(state)
    weight.add_(100)
    assert torch.equal(copy["w"], torch.arange(6.0).reshape(2, 3))
    assert copy["tied"] is copy["w"]
    assert copy["meta"] == {"step": 3, "lr": [0.1]}
    assert state_nbytes(state) == 6 * 4


def test_a_tensor_an_object_holds_stays_shared_with_the_state_s_copy() -> None:
    # As torch.save keeps it, whichever the state reaches first: each object
    # was deep-copied with a memo of its own, its tensor a second copy.
    weight = torch.arange(4.0)
    for state in ({"w": weight, "ns": types.SimpleNamespace(t=weight)},
                  {"ns": types.SimpleNamespace(t=weight), "w": weight}):
        before = weight.clone()
        copy = snapshot(state)
        weight.add_(1)
        assert copy["ns"].t is copy["w"] and copy["w"] is not weight
        assert torch.equal(copy["w"], before)


def test_a_plain_tensor_that_requires_grad_keeps_it_through_the_pool() -> None:
    # As save() keeps it (a learnable tensor that is no Parameter); the
    # pooled buffer under the copy does not, or the next copy_ into it fails.
    pool = BufferPool()
    state = {"log_alpha": torch.zeros(3, requires_grad=True), "p": torch.nn.Parameter(
        torch.ones(2))}
    for round_ in range(3):
        copy = snapshot(state, pool)
        assert copy["log_alpha"].requires_grad and copy["log_alpha"].is_leaf
        assert type(copy["p"]) is torch.nn.Parameter and copy["p"].requires_grad
        assert torch.equal(copy["log_alpha"].detach(), torch.full((3,), float(round_)))
        pool.refill(copy)
        with torch.no_grad():
            state["log_alpha"].add_(1)


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


def _tied_state() -> dict[str, Any]:
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(64, 16)
    model.head = torch.nn.Linear(16, 64, bias=False)
    model.head.weight = model.embed.weight  # tied, as language models tie them
    return model.state_dict()


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def test_tied_weights_of_a_state_dict_stay_one_copy() -> None:
    # state_dict() hands out a new detached tensor per name, so tied weights
    # are two objects over one storage: the snapshot copied each, holding
    # and writing the embedding twice (save() wrote it once, and its load
    # kept the two tied).
    state = _tied_state()
    assert state["embed.weight"] is not state["head.weight"]
    assert _same_storage(state["embed.weight"], state["head.weight"])
    assert state_nbytes(state) == 64 * 16 * 4
    copy = snapshot(state)
    assert _same_storage(copy["embed.weight"], copy["head.weight"])
    assert not _same_storage(copy["embed.weight"], state["embed.weight"])
    assert torch.equal(copy["head.weight"], state["head.weight"])
    state["embed.weight"].add_(1)
    assert not torch.equal(copy["head.weight"], state["head.weight"])  # still a copy
    saved, direct = io.BytesIO(), io.BytesIO()
    torch.save(copy, saved)
    torch.save(state, direct)
    assert len(saved.getvalue()) < len(direct.getvalue()) + 4096  # the embedding once


def test_views_of_one_buffer_stay_views_of_one_copy() -> None:
    flat = torch.arange(40.0)
    state = {"a": flat[:10].view(2, 5), "b": flat[10:40].view(5, 6).t(), "flat": flat}
    assert state_nbytes(state) == 40 * 4
    copy = snapshot(state)
    flat.zero_()
    assert all(_same_storage(copy["flat"], copy[k]) for k in ("a", "b"))
    assert torch.equal(copy["a"], torch.arange(10.0).view(2, 5))
    assert torch.equal(copy["b"], torch.arange(10.0, 40.0).view(5, 6).t())
    assert copy["b"].stride() == (1, 6)


def test_a_small_view_of_a_large_buffer_is_copied_alone() -> None:
    # Sharing would hold the whole span between them: two small views at
    # the ends of a large buffer are copied apart, as before.
    big = torch.arange(100_000.0)
    state = {"head": big[:4], "tail": big[-4:]}
    assert state_nbytes(state) == 8 * 4
    copy = snapshot(state)
    assert copy["head"].untyped_storage().nbytes() == 16
    assert torch.equal(copy["tail"], big[-4:])


def test_the_pool_never_hands_out_two_buffers_over_one_storage() -> None:
    pool = BufferPool()
    first = snapshot({"x": torch.ones(4, 4), "y": torch.ones(4, 4), **_tied_state()}, pool)
    pool.refill(first)
    second = snapshot({"p": torch.full((64, 16), 1.0), "q": torch.full((64, 16), 2.0),
                       "x": torch.full((4, 4), 3.0), "y": torch.full((4, 4), 4.0)}, pool)
    assert torch.equal(second["p"], torch.full((64, 16), 1.0))
    assert torch.equal(second["q"], torch.full((64, 16), 2.0))
    assert torch.equal(second["x"], torch.full((4, 4), 3.0))
    assert torch.equal(second["y"], torch.full((4, 4), 4.0))


def test_save_async_stores_tied_weights_once_and_loads_them_tied(tmp_path: Path) -> None:
    from aioflux.torch import CheckpointManager

    state = _tied_state()
    with CheckpointManager(tmp_path / "run") as manager:
        direct = manager.save(state, 1)
        background = manager.save_async(state, 2).result()
        loaded = manager.load(step=2)
    assert background.size == direct.size  # the embedding once, as save() stores it
    assert _same_storage(loaded["embed.weight"], loaded["head.weight"])
    assert torch.equal(loaded["head.weight"], state["embed.weight"])



def test_objects_share_the_tensors_copies_on_a_host_state_only() -> None:
    # A module beside its own weight on a CUDA state: with the tensors'
    # memo its copy held the weight's host copy and its other tensors'
    # device clones. An object of a device's state is copied apart.
    from aioflux.torch.checkpoint._snapshot import _objects_share

    def on(kind: str) -> Any:
        return types.SimpleNamespace(device=types.SimpleNamespace(type=kind))

    assert _objects_share([on("cpu"), on("meta")]) and _objects_share([])
    assert not _objects_share([on("cpu"), on("cuda")])
