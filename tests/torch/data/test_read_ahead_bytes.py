"""Read-ahead bounded by bytes, not only by count: ObjectIterableDataset (its
downloader's ``prefetch_bytes`` and hand-offs) and the DCP reader
(``bytes_ahead``).

The stores count what they are asked to read; the consumer compares that
with what it has taken, so the bound is checked on what was in flight or
waiting, not on RSS.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from aioflux import AsyncClient, Client, DownloadOptions, InvalidArgument
from aioflux.local import LocalStore
from aioflux.torch import DatasetSettings, ObjectIterableDataset, Order
from aioflux.torch.dcp import DEFAULT_BYTES_AHEAD, DcpReader, DcpWriter

KIB = 1024
MIB = 1024 * KIB


class Reads:
    """What a store's ``read`` (or ``fetch``) was asked for: reads and bytes
    started, and the most reads inside it at once."""

    def __init__(self, delay: float = 0.0) -> None:
        self.started = self.bytes = self.inside = self.peak_inside = 0
        self.delay = delay
        self._lock = threading.Lock()

    def patch(self, monkeypatch: pytest.MonkeyPatch, method: str = "read",
              suffix: str = "", store_class: type = LocalStore) -> None:
        real = getattr(store_class, method)
        reads = self

        async def read(store: Any, bucket: str, name: str, **kw: Any) -> Any:
            if not name.endswith(suffix):
                return await real(store, bucket, name, **kw)
            with reads._lock:
                reads.started += 1
                reads.bytes += kw.get("end", 0) - kw.get("start", 0)
                reads.inside += 1
                reads.peak_inside = max(reads.peak_inside, reads.inside)
            try:
                await asyncio.sleep(reads.delay)
                return await real(store, bucket, name, **kw)
            finally:
                with reads._lock:
                    reads.inside -= 1

        monkeypatch.setattr(store_class, method, read)


def write_files(root: Path, count: int, size: int) -> list[bytes]:
    root.mkdir()
    bodies = [os.urandom(size) for _ in range(count)]
    for i, body in enumerate(bodies):
        (root / f"s-{i:04d}").write_bytes(body)
    return bodies


def test_iterable_dataset_holds_its_prefetch_bytes_and_small_hand_offs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = write_files(tmp_path / "d", 120, 256 * KIB)
    options = DownloadOptions(prefetch_bytes=2 * MIB)
    ds = ObjectIterableDataset.from_prefix(str(tmp_path / "d"), transform=bytes,
                                           order=Order(shuffle=False),
                                           settings=DatasetSettings(download_options=options))
    reads = Reads()
    reads.patch(monkeypatch)
    got: list[bytes] = []
    most = 0
    for sample in ds:
        most = max(most, reads.started - len(got))
        got.append(sample)
        time.sleep(0.002)  # a training step: the loop thread reads ahead meanwhile
    assert got == bodies
    # The downloader holds 8 objects (2 MiB), the one it yielded last among
    # them; hand-offs are of 1 object (an eighth of the budget): one queued,
    # one being consumed. By count alone (prefetch 128, hand-offs of 64) all
    # 120 were read ahead.
    assert most <= 8 + 2


def test_iterable_dataset_keeps_every_permit_busy_on_small_objects(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # perf loader / s3_loader's objects (100 KiB) with the default prefetch
    # (128) and budget: the byte bound never binds.
    bodies = write_files(tmp_path / "d", 300, 100 * KIB)
    ds = ObjectIterableDataset.from_prefix(str(tmp_path / "d"), transform=bytes,
                                           order=Order(shuffle=False))
    reads = Reads(delay=0.02)
    reads.patch(monkeypatch)
    assert list(ds) == bodies
    assert reads.peak_inside == 128


def _state(items: int, floats: int) -> dict[str, torch.Tensor]:
    return {f"t{i}": torch.full((floats,), float(i)) for i in range(items)}


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
@pytest.mark.parametrize(("bytes_ahead", "items_ahead", "most_items"), [
    (3 * MIB, 8, 2),      # 2 items of 1 MiB and their headers fit in 3 MiB
    (1, 8, 1),            # an item larger than the budget still loads, alone
    (DEFAULT_BYTES_AHEAD, 3, 4),  # the count bound still holds: 3 ahead and the one loading
])
def test_dcp_reader_holds_at_most_bytes_ahead(sync_client: Client, bucket: str,
                                              monkeypatch: pytest.MonkeyPatch,
                                              bytes_ahead: int, items_ahead: int,
                                              most_items: int) -> None:
    # An object store's: a local file's items are read by torch straight
    # from the file, nothing fetched ahead (the kernel reads ahead).
    root = f"gs://{bucket}/ckpt"
    state = _state(10, 256 * KIB)  # 10 items of 1 MiB of float32
    dcp.save(state, storage_writer=DcpWriter(root, client=sync_client))
    reads = Reads()
    # The DCP reader fetches (it wants each range's crc32c); only data files count.
    reads.patch(monkeypatch, "fetch", ".distcp", AsyncClient)
    handed = 0
    most = 0
    real = DcpReader._fetched_item

    def fetched_item(self: DcpReader, file: Any, sinfo: Any) -> Any:
        nonlocal handed, most
        got = real(self, file, sinfo)
        most = max(most, reads.bytes - handed)
        handed += sinfo.length
        return got

    monkeypatch.setattr(DcpReader, "_fetched_item", fetched_item)
    target = {k: torch.zeros_like(v) for k, v in state.items()}
    dcp.load(target, storage_reader=DcpReader(root, client=sync_client,
                                                     bytes_ahead=bytes_ahead,
                                                     items_ahead=items_ahead))
    assert all(torch.equal(target[k], state[k]) for k in state)
    item = 1 * MIB + 4 * KIB  # the tensor and torch.save's header
    assert MIB < most <= most_items * item
    assert reads.bytes == handed  # nothing read twice, nothing read in vain


def test_dcp_reader_checks_bytes_ahead(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="bytes_ahead"):
        DcpReader(str(tmp_path), bytes_ahead=0)
