"""A local checkpoint read straight onto its device
(``checkpoint/_device_direct.py``): torch parses it without its data, each
storage is made on the device and its bytes read through the stager, and
the loaded objects are torch.load's own, bit for bit. Run on the CPU
(pageable staging, plain copies) and, where there is one, on CUDA.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from aioflux import ChecksumMismatch
from aioflux.local._reader import FileReader
from aioflux.torch import Checkpoint
from aioflux.torch.checkpoint._device_direct import load_onto
from aioflux.torch.checkpoint._device_load import DeviceStager

DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def _state() -> dict[str, Any]:
    torch.manual_seed(11)
    module = torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.BatchNorm1d(5))
    base = torch.randn(300_000)
    return {
        "model": module.state_dict(),  # an OrderedDict with its _metadata
        "views": [base[2:50_000], base[::3]],  # one storage, two views
        "param": torch.nn.Parameter(torch.randn(4, 3)),
        "frozen": torch.nn.Parameter(torch.randn(2), requires_grad=False),
        "bf16": torch.randn(1000, 3).to(torch.bfloat16).t(),
        "empty": torch.zeros(0, 4),
        "meta": ("tuple", 3, 2.5, None, torch.Size([2, 3]), torch.float16),
        "step": 7,
    }


def _saved(tmp_path: Path, state: Any) -> Path:
    path = tmp_path / "state.pt"
    Checkpoint().save(state, "file://" + os.fspath(path))
    return path


def _reader(path: Path) -> FileReader:
    """The file's checked reader (``/<bucket>/<name>``)."""
    return FileReader(path.parts[1], os.fspath(path.relative_to("/" + path.parts[1])))


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, torch.Tensor):
        return (type(got) is type(want) and got.dtype == want.dtype
                and got.shape == want.shape and got.stride() == want.stride()
                and got.requires_grad == want.requires_grad
                and torch.equal(got.detach().cpu().view(-1).view(torch.uint8)
                                if got.numel() else got.cpu(),
                                want.detach().reshape(-1).view(torch.uint8)
                                if want.numel() else want))
    if isinstance(want, dict):
        return type(got) is type(want) and got.keys() == want.keys() and all(
            _same(got[k], want[k]) for k in want)
    if isinstance(want, (list, tuple)):
        return type(got) is type(want) and len(got) == len(want) and all(
            _same(a, b) for a, b in zip(got, want, strict=True))
    return bool(got == want)


@pytest.mark.parametrize("device", DEVICES)
def test_a_checkpoint_read_straight_onto_the_device_is_torch_loads_own(
        tmp_path: Path, device: str) -> None:
    state = _state()
    stager = DeviceStager(torch.device(device), piece=64 * 1024)
    with _reader(_saved(tmp_path, state)) as reader:
        try:
            loaded = load_onto(reader, stager)
        finally:
            stager.finish()
    assert loaded is not None
    (got,) = loaded
    contiguous = {k: v.contiguous() if isinstance(v, torch.Tensor) else v
                  for k, v in state.items()}
    assert _same(got["model"], state["model"]) and _same(got["meta"], state["meta"])
    assert _same(got["param"], state["param"]) and _same(got["frozen"], state["frozen"])
    assert got["step"] == 7 and got["empty"].shape == (0, 4)
    assert torch.equal(got["bf16"].cpu(), contiguous["bf16"])
    assert got["model"]._metadata == state["model"]._metadata
    # The views still share one storage, at their offsets.
    first, second = got["views"]
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()
    assert torch.equal(first.cpu(), state["views"][0]) and torch.equal(second.cpu(),
                                                                          state["views"][1])
    tensors = [t for t in (*got["model"].values(), first, got["param"], got["frozen"],
                           got["bf16"], got["empty"])]
    assert {t.device.type for t in tensors} == {device}
    # Each storage once through the stager: the views' one, not two.
    assert stager.nbytes == sum(t.untyped_storage().nbytes() for t in (
        *state["model"].values(), state["views"][0], state["param"], state["frozen"],
        state["bf16"], state["empty"]))


def test_a_checkpoint_it_cannot_read_straight_is_left_to_torch(tmp_path: Path) -> None:
    # A sparse tensor is no plain strided one; a set is no container it walks.
    for odd in (torch.randn(4, 4).to_sparse(), {1, 2}):
        state = {"w": torch.randn(10), "odd": odd}
        stager = DeviceStager(torch.device("cpu"))
        with _reader(_saved(tmp_path, state)) as reader:
            assert load_onto(reader, stager) is None
            assert reader.tell() == 0 and stager.nbytes == 0  # no data read
    # A dict of another kind is walked as a dict.
    stager = DeviceStager(torch.device("cpu"))
    with _reader(_saved(tmp_path, {"c": collections.Counter(a=torch.ones(2))})) as reader:
        loaded = load_onto(reader, stager)
    assert loaded is not None and type(loaded[0]["c"]) is collections.Counter
    assert torch.equal(loaded[0]["c"]["a"], torch.ones(2))


def test_a_storage_said_to_reach_past_the_files_end_is_not_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_load = torch.load

    def lying(*args: Any, **kwargs: Any) -> Any:
        loaded = real_load(*args, **kwargs)
        loaded["w"].untyped_storage()._checkpoint_offset = 1 << 40
        return loaded

    monkeypatch.setattr(torch, "load", lying)
    stager = DeviceStager(torch.device("cpu"))
    with _reader(_saved(tmp_path, {"w": torch.randn(100_000)})) as reader:
        assert load_onto(reader, stager) is None
        assert reader.tell() == 0 and stager.nbytes == 0


def test_a_flipped_byte_read_straight_fails_the_load(tmp_path: Path) -> None:
    state = {"w": torch.randn(200_000), "b": torch.randn(7)}
    path = _saved(tmp_path, state)
    raw = path.read_bytes()
    at = raw.index(state["w"].numpy().tobytes()[:64]) + 300_000
    before = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes([raw[at] ^ 0x01]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # rot, not a rewrite
    stager = DeviceStager(torch.device("cpu"))
    with _reader(path) as reader, pytest.raises(ChecksumMismatch):
        load_onto(reader, stager)
    stager.finish()


def test_checkpoint_load_onto_a_device_reads_a_local_file_straight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Checkpoint.load(map_location="cuda") as it runs on a GPU, here with
    # the CPU standing in for the device.
    from aioflux.torch.checkpoint import _checkpoint

    monkeypatch.setattr(_checkpoint, "cuda_target",
                        lambda where: torch.device("cpu") if where == "cuda" else None)
    straight: list[int] = []
    read_straight = _checkpoint.load_onto

    def counted(reader: FileReader, stager: DeviceStager) -> Any:
        straight.append(1)
        return read_straight(reader, stager)

    monkeypatch.setattr(_checkpoint, "load_onto", counted)
    state = _state()
    url = "file://" + os.fspath(_saved(tmp_path, state))
    loaded = Checkpoint().load(url, map_location="cuda")
    assert straight == [1]
    assert _same(loaded["model"], state["model"]) and _same(loaded["param"], state["param"])
    assert torch.equal(loaded["views"][1], state["views"][1])
    # Not weights_only: any object may hold tensors, so torch.load reads it.
    again = Checkpoint().load(url, map_location="cuda", weights_only=False)
    assert straight == [1] and _same(again["model"], state["model"])
