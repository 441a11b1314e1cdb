"""DCP loads from local files read each whole tensor item straight into
the state dict's tensor (``checkpoint/_dcp_direct.py``): no fresh copy
loaded and then copied, each byte of the data file read once, and every
byte still held to its item's crc32c.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from aioflux import ChecksumMismatch
from aioflux.torch.dcp import DcpReader, DcpWriter
from tests.torch.checkpoint._cpu_ring import cpu_ring

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

MiB = 1 << 20


def _state() -> dict[str, Any]:
    torch.manual_seed(5)
    return {
        "f32": torch.randn(MiB // 4),
        "bf16": torch.randn(300, 700).to(torch.bfloat16),
        "i8": torch.randint(-128, 127, (MiB,), dtype=torch.int8),
        "bool": torch.rand(4099) > 0.5,
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "step": 7,
    }


def _zeros(state: dict[str, Any]) -> dict[str, Any]:
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in state.items()}


def _same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    return (
        got.dtype == want.dtype
        and got.shape == want.shape
        and torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))
    )


class _Counts:
    """The tensor copies made and the file bytes read while a load runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.copies: list[int] = []
        self.read = 0
        real_copy: Callable[..., torch.Tensor] = torch.Tensor.copy_
        real_preadv = os.preadv

        def copy_(tensor: torch.Tensor, src: torch.Tensor, *args: Any, **kw: Any) -> torch.Tensor:
            self.copies.append(src.nbytes)
            return real_copy(tensor, src, *args, **kw)

        def preadv(fd: int, buffers: Any, offset: int, *args: Any) -> int:
            got = real_preadv(fd, buffers, offset, *args)
            self.read += got
            return got

        monkeypatch.setattr(torch.Tensor, "copy_", copy_)
        monkeypatch.setattr(os, "preadv", preadv)


def _data_file(root: Path) -> Path:
    (data,) = [p for p in root.iterdir() if p.suffix == ".distcp"]
    return data


def _flip_a_byte_of(root: Path, tensor: torch.Tensor) -> None:
    """One bit of ``tensor``'s saved bytes flipped in the data file, its
    times kept: rot, not a rewrite."""
    data = _data_file(root)
    raw = data.read_bytes()
    at = raw.index(tensor.numpy().tobytes()[:64]) + tensor.nbytes // 2
    before = os.stat(data)
    with open(data, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes([raw[at] ^ 0x01]))
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize("writer", ["aioflux", "torch"])
def test_a_dcp_load_from_files_reads_each_tensor_into_its_destination(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    state = _state()
    root = tmp_path / "dcp"
    storage = DcpWriter(str(root)) if writer == "aioflux" else dcp.FileSystemWriter(str(root))
    dcp.save(state, storage_writer=storage)
    target = _zeros(state)
    where = {k: v.data_ptr() for k, v in target.items() if isinstance(v, torch.Tensor)}
    counts = _Counts(monkeypatch)
    dcp.load(target, storage_reader=DcpReader(str(root)))
    monkeypatch.undo()
    assert all(_same_bits(target[k], v) for k, v in state.items() if isinstance(v, torch.Tensor))
    assert target["step"] == 7
    assert {k: target[k].data_ptr() for k in where} == where
    assert counts.copies == []  # none loaded elsewhere and copied in
    # Each byte of the data file read once (each item's zip directory
    # twice, by torch's parse and the check, and the small metadata files).
    size = _data_file(root).stat().st_size
    assert size <= counts.read < size + 16 * 1024 * len(where)


def test_a_destination_that_cannot_take_the_bytes_as_they_are_is_copied_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not contiguous, another dtype (copy_ converts, as torch's reader
    # does), or a saved view: loaded into fresh memory and copied.
    torch.manual_seed(6)
    state = {
        "t": torch.randn(64, 32),
        "cast": torch.randn(1000),
        "view": torch.randn(40, 30)[::3, 1::2],
        "whole": torch.randn(500),
    }
    root = tmp_path / "dcp"
    dcp.save(state, storage_writer=DcpWriter(str(root)))
    target = {
        "t": torch.zeros(32, 64).t(),
        "cast": torch.zeros(1000, dtype=torch.float64),
        "view": torch.zeros(14, 15),
        "whole": torch.zeros(500),
    }
    counts = _Counts(monkeypatch)
    dcp.load(target, storage_reader=DcpReader(str(root)))
    monkeypatch.undo()
    assert torch.equal(target["t"], state["t"])
    assert torch.equal(target["cast"], state["cast"].double())
    assert torch.equal(target["view"], state["view"])
    assert torch.equal(target["whole"], state["whole"])
    # "t" and "cast" loaded elsewhere and copied in; "view" (DCP saves a
    # view's own elements) and "whole" read straight in.
    assert sorted(counts.copies) == [1000 * 4, 64 * 32 * 4]


@pytest.mark.parametrize("writer", ["aioflux", "torch"])
def test_a_conjugate_or_negative_view_saved_loads_as_torch_s_reader_loads_it(
        tmp_path: Path, writer: str) -> None:
    # Its bytes are the plain tensor's, flagged: read straight into the
    # destination they came back un-conjugated, and their crc32c held.
    z = torch.tensor([1 + 2j, 3 - 4j])
    state = {"conj": z.conj(), "neg": torch._neg_view(torch.tensor([1.0, -2.0]))}
    root = tmp_path / "dcp"
    dcp.save(state, storage_writer=DcpWriter(str(root)) if writer == "aioflux"
             else dcp.FileSystemWriter(str(root)))
    ours = {"conj": torch.zeros(2, dtype=torch.complex64), "neg": torch.zeros(2)}
    torch_s = {"conj": torch.zeros(2, dtype=torch.complex64), "neg": torch.zeros(2)}
    dcp.load(ours, storage_reader=DcpReader(str(root)))
    dcp.load(torch_s, storage_reader=dcp.FileSystemReader(str(root)))
    assert torch.equal(torch_s["conj"], torch.tensor([1 - 2j, 3 + 4j]))
    assert all(torch.equal(ours[k], torch_s[k]) for k in ours), (ours, torch_s)


def test_a_flipped_byte_in_a_tensor_read_into_its_destination_fails_the_load(
    tmp_path: Path,
) -> None:
    state = _state()
    root = tmp_path / "dcp"
    dcp.save(state, storage_writer=DcpWriter(str(root)))
    _flip_a_byte_of(root, state["i8"])
    with pytest.raises(BaseException, match="the item was saved with") as caught:
        dcp.load(_zeros(state), storage_reader=DcpReader(str(root)))
    assert ChecksumMismatch.__name__ in repr(caught.value)


def test_a_staged_destination_takes_its_bytes_through_the_staging_ring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A CUDA destination loads through a DeviceStager, here on the CPU.
    state = _state()
    root = tmp_path / "dcp"
    dcp.save(state, storage_writer=DcpWriter(str(root)))
    made = cpu_ring(monkeypatch)
    target = _zeros(state)
    where = {k: v.data_ptr() for k, v in target.items() if isinstance(v, torch.Tensor)}
    counts = _Counts(monkeypatch)
    dcp.load(target, storage_reader=DcpReader(str(root)))
    assert all(_same_bits(target[k], v) for k, v in state.items() if isinstance(v, torch.Tensor))
    assert {k: target[k].data_ptr() for k in where} == where
    tensors = sum(v.nbytes for v in state.values() if isinstance(v, torch.Tensor))
    (stager,) = made
    assert stager.nbytes == tensors  # every tensor through the ring, several pieces each
    assert not stager._buffers  # finished: the transfers waited for, the ring released
    assert counts.copies == []  # the ring's host copies are numpy's, on this thread
    size = _data_file(root).stat().st_size
    assert size <= counts.read < size + 16 * 1024 * len(where)
    # A flipped byte read through the ring still fails the load.
    _flip_a_byte_of(root, state["i8"])
    with pytest.raises(BaseException, match="the item was saved with"):
        dcp.load(_zeros(state), storage_reader=DcpReader(str(root)))
