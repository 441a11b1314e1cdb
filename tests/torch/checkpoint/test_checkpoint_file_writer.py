"""Saves to local files through ``FileWriter`` (``aioflux/local/_file_writer.py``):
straight into the file, each piece read back and checked as it is
written, published all or nothing."""

from __future__ import annotations

import errno
import gc
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from aioflux import ChecksumMismatch, InvalidArgument, NotFound, StorageError
from aioflux._core.concurrency.portal import call
from aioflux._core.integrity.crc import crc32c
from aioflux.local import LocalStore, _file_writer
from aioflux.local._file_writer import FileWriter
from aioflux.torch import Checkpoint

MiB = 1 << 20


def _bucket_name(path: Path) -> tuple[str, str]:
    bucket, name = str(path).lstrip("/").split("/", 1)
    return bucket, name


def _left(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_save_goes_through_the_file_writer_bit_for_bit(tmp_path: Path) -> None:
    url = "file://" + os.fspath(tmp_path / "state.pt")
    writer = Checkpoint().writer(url)
    assert isinstance(writer, FileWriter)
    writer.abort()
    torch.manual_seed(1)
    state = {"big": torch.randn(3 * MiB // 4 + 5), "small": torch.arange(7), "step": 4}
    info = Checkpoint().save(state, url)
    data = (tmp_path / "state.pt").read_bytes()
    assert info.size == len(data) and info.crc32c == crc32c(data)
    # The crc32c recorded for the file is what a load checks.
    assert call(LocalStore().stat(*_bucket_name(tmp_path / "state.pt"))).crc32c in (
        None, crc32c(data))
    loaded = Checkpoint().load(url)
    assert torch.equal(loaded["big"], state["big"]) and torch.equal(loaded["small"],
                                                                     state["small"])
    assert _left(tmp_path) == ["state.pt"]


@pytest.mark.parametrize("sizes", [[1, 300_000, 5, 70_000, 65_535, 2 * MiB + 3, 0, 12],
                                   [64 * 1024] * 9, [10] * 30_000])
def test_writes_of_any_size_land_in_order(tmp_path: Path, sizes: list[int]) -> None:
    chunks = [os.urandom(n) for n in sizes]
    with FileWriter(*_bucket_name(tmp_path / "f")) as writer:
        for chunk in chunks:
            assert writer.write(memoryview(chunk)) == len(chunk)
        assert writer.tell() == sum(sizes)
    assert (tmp_path / "f").read_bytes() == b"".join(chunks)
    assert writer.info is not None and writer.info.crc32c == crc32c(b"".join(chunks))
    with pytest.raises(InvalidArgument, match="closed writer"):
        writer.write(b"x")


def test_an_error_in_the_block_publishes_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), FileWriter(*_bucket_name(tmp_path / "f")) as w:
        w.write(os.urandom(MiB))
        raise RuntimeError("boom")
    assert _left(tmp_path) == []


def test_a_writer_dropped_unclosed_publishes_nothing(tmp_path: Path) -> None:
    writer: Any = FileWriter(*_bucket_name(tmp_path / "f"))
    writer.write(os.urandom(300_000))
    del writer
    gc.collect()
    assert _left(tmp_path) == []


def test_a_file_cut_short_before_publishing_is_refused(tmp_path: Path) -> None:
    writer = FileWriter(*_bucket_name(tmp_path / "f"))
    writer.write(os.urandom(MiB))
    (temp,) = _left(tmp_path)
    os.truncate(tmp_path / temp, MiB - 1)
    with pytest.raises(ChecksumMismatch, match="nothing was published"):
        writer.close()
    assert _left(tmp_path) == []
    with pytest.raises(NotFound):
        call(LocalStore().stat(*_bucket_name(tmp_path / "f")))


def test_a_piece_read_back_wrong_fails_the_write(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A filesystem that hands back other bytes than it took (a faulty
    # FUSE mount, memory going bad): found at that piece, nothing published.
    preadv = os.preadv
    reads = []

    def flipping(fd: int, buffers: list[memoryview], offset: int) -> int:
        got = preadv(fd, buffers, offset)
        reads.append(offset)
        if len(reads) == 3:
            buffers[0][17] ^= 0x40
        return got

    monkeypatch.setattr(_file_writer.os, "preadv", flipping)
    state = {"w": torch.randn(MiB)}
    with pytest.raises(ChecksumMismatch, match="read back"):
        Checkpoint().save(state, "file://" + os.fspath(tmp_path / "state.pt"))
    assert _left(tmp_path) == []


def _three_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large writes cut into three spans, whatever this machine's CPUs."""
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-spans")
    monkeypatch.setattr(_file_writer, "_spare_threads", lambda: (3, pool))


def test_a_large_write_is_written_side_by_side_bit_for_bit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _three_spans(monkeypatch)
    pwrite, threads = os.pwrite, set()

    def counting(fd: int, data: Any, offset: int) -> int:
        threads.add(threading.get_ident())
        return pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", counting)
    chunks = [os.urandom(100), os.urandom(9 * MiB + 4097), os.urandom(5), os.urandom(8 * MiB)]
    with FileWriter(*_bucket_name(tmp_path / "f")) as writer:
        for chunk in chunks:
            writer.write(chunk)
        assert writer.tell() == sum(map(len, chunks))
    whole = b"".join(chunks)
    assert (tmp_path / "f").read_bytes() == whole
    assert writer.info is not None and writer.info.crc32c == crc32c(whole)
    # The caller's span and the pool's: a pool thread that finished its span
    # before the next was handed over may take that one too (2 or 3 threads).
    assert threading.get_ident() in threads and len(threads) >= 2, threads
    assert _left(tmp_path) == ["f"]


def test_a_span_read_back_wrong_in_another_thread_fails_the_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _three_spans(monkeypatch)
    preadv, caller = os.preadv, threading.get_ident()

    def flipping(fd: int, buffers: list[memoryview], offset: int) -> int:
        got = preadv(fd, buffers, offset)
        if threading.get_ident() != caller and offset > 9 * MiB:
            buffers[0][3] ^= 0x01
        return got

    monkeypatch.setattr(_file_writer.os, "preadv", flipping)
    writer = FileWriter(*_bucket_name(tmp_path / "f"))
    with pytest.raises(ChecksumMismatch, match="read back"):
        writer.write(os.urandom(12 * MiB))
    writer.close()  # after a failed write: removes the file, publishes nothing
    assert _left(tmp_path) == []


def test_a_span_the_disk_refuses_is_a_storage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _three_spans(monkeypatch)
    pwrite, caller = os.pwrite, threading.get_ident()

    def full(fd: int, data: Any, offset: int) -> int:
        if threading.get_ident() != caller:
            raise OSError(errno.ENOSPC, "No space left on device")
        return pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(StorageError, match="f") as caught:
        Checkpoint().save({"w": torch.randn(4 * MiB)}, "file://" + os.fspath(tmp_path / "f"))
    assert caught.value.name.endswith("f")
    assert _left(tmp_path) == []


def test_written_bytes_are_handed_to_the_disk_as_the_writer_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _three_spans(monkeypatch)
    handed: list[tuple[int, int]] = []

    def recording(fd: int, offset: int, length: int, flags: int) -> int:
        handed.append((offset, offset + length))
        return -1  # refused (tmpfs, FUSE): only a head start, the fsync decides

    monkeypatch.setattr(_file_writer, "_SYNC_RANGE", recording)
    small = [os.urandom(300_000) for _ in range(30)]  # 9 MB, piece by piece
    large = os.urandom(20 * MiB + 3)  # three spans
    with FileWriter(*_bucket_name(tmp_path / "f")) as writer:
        for chunk in small:
            writer.write(chunk)
        writer.write(large)
    assert (tmp_path / "f").read_bytes() == b"".join(small) + large
    assert (0, 8 * MiB) in handed
    start, end = 9_000_000, 9_000_000 + len(large)
    covered = sorted(r for r in handed if r[0] >= start)
    assert covered[0][0] == start and covered[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
