"""A DCP load from local files asks the kernel to read the plan's items
ahead (``DcpReader._hint``): a disk's reads overlap torch's copies."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from aioflux.local._reader import FileReader
from aioflux.torch.dcp import DcpReader, DcpWriter

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

KiB = 1024


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    hinted: list[tuple[str, int, int]] = []
    read_ahead = FileReader.read_ahead

    def recording(self: FileReader, offset: int, length: int) -> None:
        hinted.append((self.name.rsplit("/", 1)[-1], offset, offset + length))
        read_ahead(self, offset, length)  # the real call too: it must not fail

    monkeypatch.setattr(FileReader, "read_ahead", recording)
    return hinted


def _state() -> dict[str, Any]:
    torch.manual_seed(3)
    return {f"t{i}": torch.randn(16 * KiB) for i in range(10)} | {"step": 5}


def test_a_full_load_hints_every_item_once_within_bytes_ahead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path / "ck")
    state = _state()
    dcp.save(state, storage_writer=DcpWriter(root))
    hinted = _recording(monkeypatch)
    target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
              for k, v in state.items()}
    item = 64 * KiB  # one tensor's bytes (its item: those and a few KiB of framing)
    dcp.load(target, storage_reader=DcpReader(root, bytes_ahead=3 * item))
    assert all(torch.equal(target[k], v) for k, v in state.items() if k != "step")
    assert target["step"] == 5
    (data,) = [p.name for p in Path(root).iterdir() if p.suffix == ".distcp"]
    ranges = sorted((lo, hi) for name, lo, hi in hinted if name == data)
    # Each byte of the items hinted once: the ranges never overlap...
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
    covered = sum(hi - lo for lo, hi in ranges)
    assert covered >= 10 * item
    # ... and the first call went no further than bytes_ahead past the first item.
    first = min(hi for name, lo, hi in hinted if name == data and lo == ranges[0][0])
    assert first - ranges[0][0] <= 5 * (item + 8 * KiB)
    assert len(hinted) >= 3  # step by step, not all at once


def test_a_partial_load_hints_only_the_items_it_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path / "ck")
    state = _state()
    dcp.save(state, storage_writer=DcpWriter(root))
    hinted = _recording(monkeypatch)
    target = {"t7": torch.zeros(16 * KiB)}
    dcp.load(target, storage_reader=DcpReader(root))
    assert torch.equal(target["t7"], state["t7"])
    data = [h for h in hinted if h[0].endswith(".distcp")]
    # t7's item alone (its tensor's bytes and torch.save's framing of them).
    assert len(data) == 1 and 64 * KiB < data[0][2] - data[0][1] < 72 * KiB
