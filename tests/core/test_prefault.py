"""Fresh destination memory populated before a read lands in it
(``_core/memory/prefault.py``), and the local reads that do so: a file's
checked reader (checkpoint loads), its spans read side by side, and a
whole-file read."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from pathlib import Path

import pytest

from aioflux._core.concurrency.portal import call
from aioflux._core.memory import prefault as prefault_mod
from aioflux._core.memory.prefault import populatable_address, prefault
from aioflux.local import LocalStore, _files, _reader
from aioflux.local._reader import FileReader

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

MiB = 1 << 20
PAGE = mmap.PAGESIZE

supported = pytest.mark.skipif(
    prefault_mod._CALLS is None,
    reason="MADV_POPULATE_WRITE: Linux 5.14 or later")


def _resident(memory: mmap.mmap) -> list[bool]:
    """Whether each page of ``memory`` is present (``mincore``)."""
    libc = ctypes.CDLL(None)
    pages = len(memory) // PAGE
    vector = (ctypes.c_ubyte * pages)()
    holder = ctypes.c_char.from_buffer(memory)
    try:
        assert libc.mincore(ctypes.c_void_p(ctypes.addressof(holder)),
                            ctypes.c_size_t(len(memory)), vector) == 0
    finally:
        del holder
    return [bool(v & 1) for v in vector]


@supported
def test_fresh_pages_are_populated_once_and_keep_their_bytes() -> None:
    memory = mmap.mmap(-1, 64 * PAGE)
    memory[:5] = b"kept!"  # the first page present: nothing to do
    view = memoryview(memory)
    at = populatable_address(view)
    assert at
    assert not prefault(at, len(memory))
    assert _resident(memory)[1:] == [False] * 63
    # From the second page on, none present: every whole page populated.
    assert prefault(at + PAGE, len(memory) - PAGE)
    assert all(_resident(memory))
    assert not prefault(at + PAGE, len(memory) - PAGE)  # present now
    assert memory[:5] == b"kept!" and memory[5:] == bytes(len(memory) - 5)
    view.release()
    memory.close()


@supported
def test_only_whole_pages_inside_the_range_and_not_a_small_one() -> None:
    memory = mmap.mmap(-1, 64 * PAGE)
    view = memoryview(memory)
    at = populatable_address(view)
    assert at
    assert not prefault(at, 8 * PAGE)  # too few pages to be worth it
    # Starting one byte into a page: that page is the caller's to fault.
    assert prefault(at + 1, 40 * PAGE)
    assert _resident(memory)[:42] == [False] + [True] * 39 + [False, False]
    view.release()
    memory.close()


def test_nothing_for_read_only_or_small_views() -> None:
    assert not populatable_address(memoryview(bytes(1 * MiB)))
    assert not populatable_address(memoryview(bytearray(PAGE)))


def test_nothing_where_populating_is_not_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefault_mod, "_CALLS", None)
    assert not populatable_address(memoryview(bytearray(4 * MiB)))
    assert not prefault(0, 4 * MiB)


def _file(tmp_path: Path, size: int) -> tuple[str, str, bytes]:
    path = tmp_path / "f.bin"
    body = os.urandom(size)
    bucket, name = str(path).lstrip("/").split("/", 1)
    call(LocalStore().write(bucket, name, body))
    return bucket, name, body


def _counting(monkeypatch: pytest.MonkeyPatch, module: object) -> list[int]:
    """The lengths ``module``'s reads asked to populate (and populated)."""
    asked: list[int] = []

    def counted(address: int, length: int) -> bool:
        asked.append(length)
        return prefault(address, length)

    monkeypatch.setattr(module, "prefault", counted)
    return asked


@supported
@pytest.mark.parametrize("disk", [True, False], ids=["one-stream", "spans"])
def test_a_checked_read_into_fresh_memory_populates_it_piece_by_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: bool
) -> None:
    bucket, name, body = _file(tmp_path, 12 * MiB + 123)
    monkeypatch.setattr(_reader, "on_disk", lambda st: disk)
    asked = _counting(monkeypatch, _reader)
    memory = mmap.mmap(-1, len(body))
    with FileReader(bucket, name) as reader:
        assert reader.readinto(memory) == len(body)
        reader.verify()
    assert memory[:] == body
    assert sum(asked) == len(body) and max(asked) <= MiB  # in pieces, right before each
    memory.close()


@supported
def test_a_read_into_memory_already_present_populates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, name, body = _file(tmp_path, 2 * MiB)
    monkeypatch.setattr(_reader, "on_disk", lambda st: True)
    populated: list[bool] = []
    monkeypatch.setattr(_reader, "prefault",
                        lambda address, length: populated.append(prefault(address, length)))
    buf = bytearray(b"x" * len(body))  # every page written already
    with FileReader(bucket, name) as reader:
        assert reader.readinto(buf) == len(body)
    assert buf == body and populated and not any(populated)


@supported
def test_a_whole_file_read_populates_the_bytes_it_hands_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, name, body = _file(tmp_path, 3 * MiB + 5)
    asked = _counting(monkeypatch, _files)
    fetched = _files.read_file(bucket, name, 0, None, None, None, None, None, True, True)
    assert fetched.data == body and sum(asked) == len(body)


def test_reads_are_whole_where_populating_is_not_supported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prefault_mod, "_CALLS", None)
    bucket, name, body = _file(tmp_path, 9 * MiB)
    buf = bytearray(len(body))
    with FileReader(bucket, name) as reader:
        assert reader.readinto(buf) == len(body)
        reader.verify()
    assert buf == body
    assert _files.read_file(bucket, name, 0, None, None, None, None, None, True, True).data \
        == body

