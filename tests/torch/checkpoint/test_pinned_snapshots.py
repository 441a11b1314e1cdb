"""Pinned snapshots and staged loads (issue 61, items 1 and 2).

The snapshot pool's accounting, reuse, cap and pinning fallback; DCP's
kept staged copy; loads through the staging ring. On a machine without
CUDA, pinning fails (a CPU-only build has no pinned allocator) and the
fallback is what runs; with CUDA the same tests check the pinned path and
round trips of CUDA states.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from aioflux.torch import Checkpoint, CheckpointManager
from aioflux.torch.checkpoint._device_load import DeviceStager, cuda_target
from aioflux.torch.checkpoint._snapshot import (
    BufferPool,
    accelerated,
    mapped_like,
    process_pool,
    snapshot,
)
from aioflux.torch.dcp import DcpReader, DcpWriter

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", "cuda"] if CUDA else ["cpu"]


def _state(device: str = "cpu") -> dict[str, Any]:
    torch.manual_seed(7)
    return {"w": torch.randn(64, 32, device=device),
            "b": torch.randn(1000, device=device).to(torch.bfloat16),
            "i": torch.randint(0, 9, (77,), device=device),
            "nested": {"m": torch.randn(5, 3, device=device)[:, 1]}, "step": 3}


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _nbytes(state: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in (state["w"], state["b"], state["i"]))


def test_a_refill_of_a_device_state_pins_or_falls_back_to_pageable() -> None:
    pool = BufferPool()
    first = snapshot(_state(), pool)
    pool.refill(first, pinned=True)
    # w, b and i are whole storages; the strided view's copy is one too.
    assert pool.nbytes == _nbytes(first) + 5 * 4
    if CUDA:
        assert pool.pinned_nbytes == pool.nbytes and pool.pin_error is None
    else:
        # A CPU-only build cannot pin: the pageable buffers are kept and reused.
        assert pool.pinned_nbytes == 0 and "pin" in (pool.pin_error or "").lower()
    held = {t.data_ptr() for t in (pool.take((64, 32), torch.float32),) if t is not None}
    assert len(held) == 1 and pool.nbytes == _nbytes(first) + 5 * 4 - 64 * 32 * 4
    pool.refill(first, pinned=True)
    again = _state()
    again["w"].add_(1)
    second = snapshot(again, pool)
    assert _equal(second, again)
    assert pool.nbytes == 0 and pool.pinned_nbytes == 0  # all taken
    pool.clear()
    assert pool.pin_error is None  # tried again after a clear


def test_a_refill_of_a_host_state_never_pins() -> None:
    pool = BufferPool()
    pool.refill(snapshot(_state(), pool), pinned=False)
    assert pool.pinned_nbytes == 0 and pool.pin_error is None and pool.nbytes > 0


def test_pinning_can_be_turned_off() -> None:
    pool = BufferPool(pin=False)
    pool.refill(snapshot(_state(), pool), pinned=True)
    assert pool.pinned_nbytes == 0 and pool.pin_error is None and pool.nbytes > 0


def test_the_pool_keeps_no_more_than_its_cap() -> None:
    state = {"a": torch.ones(1000), "b": torch.ones(100), "c": torch.ones(2000)}
    pool = BufferPool(max_bytes=4400)
    first = snapshot(state, pool)
    # Pageable (with CUDA a pinned refill would swap each buffer for a pinned one).
    pool.refill(first, pinned=False)
    assert pool.nbytes == 4400  # a and b; c would pass the cap
    assert pool.take((2000,), torch.float32) is None
    second = snapshot(state, pool)
    assert second["a"].data_ptr() == first["a"].data_ptr()  # reused
    assert second["c"].data_ptr() != first["c"].data_ptr()  # fresh
    assert _equal(second, state)
    pool.max_bytes = 0
    pool.refill(second, pinned=False)
    assert pool.nbytes == 0


def test_managers_share_the_process_pool_and_can_opt_out(tmp_path: Path) -> None:
    state = _state()
    with CheckpointManager(tmp_path / "a") as first, CheckpointManager(tmp_path / "b") as second:
        assert first.buffers is second.buffers is process_pool()
        first.save_async(state, 1).result()
        # One snapshot's buffers, held between saves.
        assert process_pool().nbytes == _nbytes(state) + 5 * 4
        second.save_async(state, 1).result()
        assert process_pool().nbytes == _nbytes(state) + 5 * 4
        assert _equal(second.load(1), state)
    assert process_pool().nbytes == 0  # close() released them
    with CheckpointManager(tmp_path / "c", reuse_buffers=False) as alone:
        assert alone.buffers is None
        alone.save_async(state, 1).result()
        assert process_pool().nbytes == 0


@pytest.mark.parametrize("device", DEVICES)
def test_save_async_round_trips_bit_for_bit(tmp_path: Path, device: str) -> None:
    state = _state(device)
    assert accelerated(state) == (device == "cuda")
    with CheckpointManager(tmp_path / "run") as manager:
        for step in (1, 2, 3):  # fresh buffers, then the pool's
            kept = state["w"].clone()
            future = manager.save_async(state, step)
            state["w"].add_(1)  # after save_async returned: not in the checkpoint
            future.result()
            state["w"].copy_(kept)
            assert _equal(manager.load(step), state)
            if device == "cuda":
                assert manager.buffers is not None
                assert manager.buffers.pinned_nbytes == manager.buffers.nbytes > 0
        on_device = manager.load(3, map_location=device)
    assert _equal(on_device, state)
    assert on_device["w"].device.type == device


def test_meta_tensors_are_no_accelerator_state() -> None:
    assert not accelerated({"w": torch.empty(3, device="meta"), "x": 1})


@pytest.mark.parametrize("choice", [None, True, False])
def test_dcp_keeps_its_staged_copy_for_device_states_or_when_asked(
        tmp_path: Path, choice: bool | None) -> None:
    for device in DEVICES:
        state = _state(device)
        del state["nested"]  # DCP takes no views of other storages' bytes
        writer = DcpWriter(tmp_path / f"{device}-{choice}", cache_staged_state_dict=choice)
        dcp.async_save(state, storage_writer=writer).result()
        kept = choice if choice is not None else device == "cuda"
        assert writer.staged_nbytes == (_nbytes(state) if kept else 0)
        if kept:
            cached = writer.state_dict_cache
            assert cached is not None
            pointer = cached["w"].data_ptr()
            state["w"].add_(2)
            dcp.async_save(state, storage_writer=writer,
                           checkpoint_id=tmp_path / f"{device}-{choice}-2").result()
            assert writer.state_dict_cache["w"].data_ptr() == pointer  # torch's cache, reused
            assert (writer.pin_error is None) == CUDA
            assert cached["w"].is_pinned() == CUDA
        target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
                  for k, v in state.items()}
        where = tmp_path / (f"{device}-{choice}-2" if kept else f"{device}-{choice}")
        dcp.load(target, storage_reader=DcpReader(where))
        assert _equal(target, state)


@pytest.mark.parametrize("kept", [True, False])
def test_dcp_s_staged_copy_takes_values_of_any_type_as_torch_s_writer_does(
        tmp_path: Path, kept: bool) -> None:
    # numpy's RNG state, a common entry: torch's copy refused it
    # ("Unexpected value type"), where torch's own writer stages it.
    import numpy as np

    state = {"w": torch.randn(4), "rng": np.random.default_rng(3).bit_generator.state,
             "legacy": np.random.RandomState(5).get_state()}
    writer = DcpWriter(tmp_path / "ck", cache_staged_state_dict=kept)
    dcp.async_save(state, storage_writer=writer, checkpoint_id=tmp_path / "ck").result()
    target: dict[str, Any] = {"w": torch.zeros(4),
                              "rng": np.random.default_rng(9).bit_generator.state,
                              "legacy": np.random.RandomState(0).get_state()}
    dcp.load(target, storage_reader=DcpReader(tmp_path / "ck"))
    assert torch.equal(target["w"], state["w"]) and target["rng"] == state["rng"]
    assert all(np.array_equal(a, b) for a, b in zip(target["legacy"], state["legacy"],
                                                    strict=True))


@pytest.mark.parametrize("device", DEVICES)
def test_dcp_s_kept_copy_is_made_again_when_the_state_changes_shape(tmp_path: Path,
                                                                     device: str) -> None:
    # An optimizer's state is empty before its first step: torch's cache,
    # shaped by the first save, refused the second's copy (CompanionMismatch),
    # and a tensor whose dtype changed was copied into the old one's dtype.
    writer = DcpWriter(tmp_path / "0", cache_staged_state_dict=True)
    state: dict[str, Any] = {"w": torch.randn(8, 4, device=device), "opt": {}, "step": 0}
    saves = [dict(state), {**state, "opt": {"m": torch.randn(8, 4, device=device)}, "step": 1},
             {**state, "w": state["w"].to(torch.bfloat16), "step": 2},
             {"step": 3, "w": state["w"].to(torch.bfloat16) + 1, "opt": {}}]  # keys reordered
    pointers = []
    for n, saved in enumerate(saves):
        where = tmp_path / str(n)
        dcp.async_save(saved, storage_writer=writer, checkpoint_id=where).result()
        cached = writer.state_dict_cache
        assert cached is not None and cached.keys() == saved.keys()
        pointers.append(cached["w"].data_ptr())
        assert writer.staged_nbytes == sum(t.numel() * t.element_size() for t in
                                           (saved["w"], *saved["opt"].values()))
        metadata = DcpReader(where).read_metadata().state_dict_metadata
        assert metadata["w"].properties.dtype == saved["w"].dtype
        target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else
                  {m: torch.zeros_like(t) for m, t in v.items()} if isinstance(v, dict) else 0
                  for k, v in saved.items()}
        dcp.load(target, storage_reader=DcpReader(where))
        assert _equal(target, saved)
    # Made again for each change of shape or dtype; kept when only the order changed.
    assert pointers[3] == pointers[2]


def _saved(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    state = _state()
    state["big"] = torch.randn(300_001)  # several staging pieces
    state["empty"] = torch.zeros(0, 3)
    url = "file://" + os.fspath(tmp_path / "state.pt")
    Checkpoint().save(state, url)
    return url, state


def test_a_staged_load_is_bit_identical_and_copies_on_its_own_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, state = _saved(tmp_path)
    # torch's copy_ between host tensors runs on its intra-op threads, which
    # then spin between the load's reads: the stager's host copies are its own.
    host_copies = []
    copy = torch.Tensor.copy_

    def watched(self: torch.Tensor, source: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if self.device.type == "cpu" and source.device.type == "cpu":
            host_copies.append(self.numel())
        return copy(self, source, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "copy_", watched)
    stager = DeviceStager(torch.device("cpu"), piece=64 * 1024)
    try:
        loaded = Checkpoint().load(url, map_location=stager)
    finally:
        stager.finish()
    assert _equal(loaded, state)
    assert stager.nbytes >= 300_001 * 4 and stager.pin_error is None
    assert host_copies == []
    # Each tensor owns storage of its own, not the staging ring's.
    assert loaded["big"].untyped_storage().nbytes() == 300_001 * 4


@pytest.mark.parametrize("device", DEVICES)
def test_a_dcp_load_into_device_tensors_is_bit_identical(tmp_path: Path, device: str) -> None:
    # On CUDA each whole tensor item goes through the pinned staging ring
    # (several 4 MiB pieces for "big"); one that cannot take the bytes as
    # they are (another dtype) is loaded and copied, as torch's reader does.
    torch.manual_seed(3)
    state = {**_state(), "big": torch.randn(3 * 1024 * 1024 + 5)}
    where = tmp_path / "dcp"
    dcp.save(state, storage_writer=DcpWriter(os.fspath(where)))
    target = {k: torch.zeros_like(v, device=device) if isinstance(v, torch.Tensor) else
              {m: torch.zeros_like(t, device=device) for m, t in v.items()}
              if isinstance(v, dict) else 0 for k, v in state.items()}
    target["w"] = target["w"].double()
    dcp.load(target, storage_reader=DcpReader(os.fspath(where)))
    assert torch.equal(target.pop("w").cpu(), state.pop("w").double())
    assert _equal(target, state)  # bit for bit, each tensor on the device
    assert {t.device.type for t in (target["big"], target["nested"]["m"])} == {device}


def test_only_a_cuda_map_location_is_staged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cuda_target("cuda") == torch.device("cuda")
    assert cuda_target(torch.device("cuda", 1)) == torch.device("cuda", 1)
    for other in (None, "cpu", torch.device("cpu"), {"cuda:0": "cpu"}, "not a device",
                  lambda storage, location: storage, "cuda:2"):
        assert cuda_target(other) is None


def test_a_cuda_map_location_without_cuda_fails_as_torch_load_does(tmp_path: Path) -> None:
    # Left to torch.load: its RuntimeError says to map elsewhere, where the
    # staging buffers' allocation failed with an AssertionError.
    if torch.cuda.is_available():
        pytest.skip("CUDA is here")
    url, _ = _saved(tmp_path)
    with pytest.raises(RuntimeError) as torch_said:
        torch.load(url.removeprefix("file://"), map_location="cuda")
    for device in ("cuda", "cuda:1", torch.device("cuda", 0)):
        with pytest.raises(RuntimeError) as failed:
            Checkpoint().load(url, map_location=device)
        assert str(failed.value) == str(torch_said.value)


@pytest.mark.parametrize("device", DEVICES)
def test_a_load_onto_a_device_matches_torch_load(tmp_path: Path, device: str) -> None:
    url, state = _saved(tmp_path)
    loaded = Checkpoint().load(url, map_location=device)
    assert _equal(loaded, state)
    assert {t.device.type for t in loaded.values() if isinstance(t, torch.Tensor)} == {device}


def test_a_first_snapshots_buffers_are_mapped_ahead_only_where_it_pays() -> None:
    big = torch.randn(1 << 19).to(torch.bfloat16)  # 1 MiB
    buf = mapped_like(big)
    assert buf is not None and buf.shape == big.shape and buf.dtype == big.dtype
    assert buf.device.type == "cpu" and not bool(buf.any())
    assert buf.untyped_storage().data_ptr() != big.untyped_storage().data_ptr()
    for dtype in (torch.float8_e4m3fn, torch.bits8, torch.complex64):
        odd = mapped_like(torch.empty(1 << 20, dtype=dtype))
        assert odd is not None and odd.dtype == dtype
        assert not bool(odd.view(torch.uint8).any())
    # Small, strided, conjugated or subclassed: torch's own .to("cpu") copies those.
    assert mapped_like(big[:100]) is None
    assert mapped_like(torch.randn(1024, 1024).t()) is None
    assert mapped_like(torch.randn(1 << 18, dtype=torch.complex64).conj()) is None
    assert mapped_like(torch.nn.Parameter(torch.randn(1 << 18))) is None
