"""aioflux's saves leave torch's zip CRC32 out; their own crc32c still guards the bytes.

``torch.save`` spends ~0.65 s of CPU per GiB on a CRC32 of each zip record
that ``torch.load`` never reads; aioflux checksums the same bytes with
crc32c end to end (``aioflux/torch/checkpoint/_zip_crc.py``).
"""

from __future__ import annotations

import io
import os
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from aioflux import ChecksumMismatch, WriterOptions
from aioflux._core.concurrency.portal import call
from aioflux.torch import Checkpoint, CheckpointManager
from aioflux.torch.checkpoint import _zip_crc
from aioflux.torch.checkpoint._zip_crc import without_zip_crc32
from aioflux.torch.dcp import DcpReader, DcpWriter
from tests.servers.forking import in_fork
from tests.torch.conftest import Where

MiB = 1024 * 1024

pytestmark = pytest.mark.skipif(not hasattr(torch.serialization, "set_crc32_options"),
                                reason="torch < 2.5 has no switch: its saves keep the CRC32")


def _state() -> dict[str, object]:
    g = torch.Generator().manual_seed(3)
    return {"w": torch.randn(700_000, generator=g), "b": torch.arange(10), "step": 3}


def _crcs(body: bytes) -> list[int]:
    """The CRC32 each record of a torch.save archive declares."""
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        return [info.CRC for info in archive.infolist()]


def _read(where: Where, name: str) -> bytes:
    return bytes(call(where.store.read(where.bucket, where.base + name)))


def test_checkpoint_save_skips_the_zip_crc_and_loads(where: Where) -> None:
    ckpt = Checkpoint(where.client, writer=WriterOptions(part_size=5 * MiB))
    state = _state()
    ckpt.save(state, where.url("fast.pt"))
    assert set(_crcs(_read(where, "fast.pt"))) == {0}
    loaded = ckpt.load(where.url("fast.pt"))
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 3
    # Plain torch.load of the same bytes (torch never reads the zip CRC32).
    plain = torch.load(io.BytesIO(_read(where, "fast.pt")))
    assert torch.equal(plain["w"], state["w"])
    assert torch.serialization.get_crc32_options() is True  # restored
    # torch.save into a writer is left as torch does it.
    with ckpt.writer(where.url("plain.pt")) as f:
        torch.save(state, f)
    with zipfile.ZipFile(io.BytesIO(_read(where, "plain.pt"))) as archive:
        assert archive.testzip() is None  # every record's CRC32 checks


def test_manager_saves_skip_it_too(where: Where) -> None:
    with CheckpointManager(where.url("run"), client=where.client) as mgr:
        info = mgr.save(_state(), 1)
        future = mgr.save_async(_state(), 2)
        future.result(60)
        assert torch.equal(mgr.load(step=1)["w"], _state()["w"])
    for step in (1, 2):
        (name,) = [n for n in where.names() if n.endswith(f"{step:09d}/state.pt")]
        assert set(_crcs(_read(where, name))) == {0}, name
    assert info.step == 1 and torch.serialization.get_crc32_options() is True


def test_a_flipped_byte_is_still_a_checksum_mismatch(tmp_path: Path) -> None:
    # The zip CRC32 never guarded a load; the store's crc32c does.
    path = tmp_path / "c.pt"
    ckpt = Checkpoint()
    info = ckpt.save(_state(), path)
    if info.crc32c is None:
        pytest.skip("no user xattrs here: files carry no crc32c to check against")
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(before.st_size // 2)  # inside "w"
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the record still matches
    with pytest.raises(ChecksumMismatch):
        ckpt.load(path)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_dcp_items_skip_it_and_load(where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[bool] = []
    real = torch._C.PyTorchFileWriter

    def recording(target: object, compute_crc32: bool, *args: object) -> object:
        opened.append(compute_crc32)
        return real(target, compute_crc32, *args)

    # Each torch.save of an item opens one zip writer, told whether to CRC.
    monkeypatch.setattr(torch._C, "PyTorchFileWriter", recording)
    root = where.url("dcp")
    state = {"w": torch.randn(200, 50), "v": torch.arange(7)}
    dcp.save(state, storage_writer=DcpWriter(root, client=where.client))
    assert len(opened) >= 2 and not any(opened), opened
    target = {"w": torch.zeros(200, 50), "v": torch.zeros(7, dtype=torch.long)}
    dcp.load(target, storage_reader=DcpReader(root, client=where.client))
    assert torch.equal(target["w"], state["w"]) and torch.equal(target["v"], state["v"])
    assert torch.serialization.get_crc32_options() is True


def _in_a_thread_holding_the_switch(body: Callable[[], None]) -> list[bool]:
    """Run ``body`` while another thread is inside ``without_zip_crc32``;
    returns what that thread saw in its block and after it."""
    entered, leave = threading.Event(), threading.Event()
    seen: list[bool] = []

    def background() -> None:
        with without_zip_crc32():
            seen.append(torch.serialization.get_crc32_options())
            entered.set()
            leave.wait(10)
        seen.append(torch.serialization.get_crc32_options())

    thread = threading.Thread(target=background)
    thread.start()
    try:
        assert entered.wait(10)
        body()
    finally:
        leave.set()
        thread.join(10)
    return seen


def test_on_this_torch_the_switch_is_the_saving_threads_own() -> None:
    # torch keeps the setting per thread (a ContextVar): another thread's
    # save neither sees the CRC32 off nor turns it back on early.
    def meanwhile() -> None:
        assert torch.serialization.get_crc32_options() is True
        with without_zip_crc32():
            assert torch.serialization.get_crc32_options() is False
        assert torch.serialization.get_crc32_options() is True

    assert _in_a_thread_holding_the_switch(meanwhile) == [False, True]
    assert _zip_crc._per_thread is True


def _process_wide(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """torch's switch as older torch keeps it: one value for the whole
    process (the dict returned); aioflux learns the scope anew."""
    setting = {"crc32": True}
    monkeypatch.setattr(torch.serialization, "get_crc32_options", lambda: setting["crc32"])
    monkeypatch.setattr(torch.serialization, "set_crc32_options",
                        lambda value: setting.update(crc32=value))
    monkeypatch.setattr(_zip_crc, "_per_thread", None)
    return setting


def test_a_process_wide_switch_is_restored_once_the_last_save_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    setting = _process_wide(monkeypatch)

    def meanwhile() -> None:
        assert setting["crc32"] is False  # the other save turned it off for all
        with without_zip_crc32():
            pass
        assert setting["crc32"] is False  # ... and still runs

    assert _in_a_thread_holding_the_switch(meanwhile) == [False, True]
    assert _zip_crc._per_thread is False and _zip_crc._holders == 0
    setting["crc32"] = False  # a user's own choice is what is restored
    with without_zip_crc32():
        pass
    assert setting["crc32"] is False


@pytest.mark.parametrize("scope", ["per-thread", "process-wide"])
def test_a_save_in_flight_at_a_fork_does_not_keep_it_off_in_the_child(
        scope: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A DataLoader worker forked while a background save runs: that save's
    # thread does not survive the fork, so it can never turn the CRC32 back on.
    if scope == "process-wide":
        _process_wide(monkeypatch)

    def child() -> None:
        assert torch.serialization.get_crc32_options() is True
        assert _zip_crc._holders == 0
        with without_zip_crc32():
            assert torch.serialization.get_crc32_options() is False
        assert torch.serialization.get_crc32_options() is True

    _in_a_thread_holding_the_switch(lambda: in_fork(child))
    assert torch.serialization.get_crc32_options() is True
