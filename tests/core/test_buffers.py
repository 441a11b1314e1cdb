"""Destination buffers allocated without writing them first."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from aioflux._core.memory import buffers
from aioflux._core.memory.buffers import GrowingBytes, extend_unfilled, unfilled, unfilled_bytes

_MiB = 1024 * 1024


_UNTOUCHED = """
import resource
from aioflux._core.memory.buffers import extend_unfilled, unfilled

def faults():
    # This thread's page faults only.
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt

size = 64 * 1024 * 1024  # 16,384 pages: bytearray(size) faults in every one
before = faults()
buf = unfilled(size)
extend_unfilled(buf, 2 * size)  # a second wave: remapped, not copied or zeroed
print(faults() - before, len(buf))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RUSAGE_THREAD is Linux's")
def test_a_buffer_is_not_touched_until_written() -> None:
    # In a new interpreter: in a long-lived one, malloc may serve the first
    # wave from a heap it already holds, and growing it then copies.
    out = subprocess.run([sys.executable, "-c", _UNTOUCHED], check=True, capture_output=True,
                         text=True).stdout.split()
    assert int(out[1]) == 128 * _MiB
    assert int(out[0]) < 1_000, out


def test_growth_keeps_what_was_written_and_refuses_a_live_view() -> None:
    buf = unfilled(5)
    buf[:] = b"hello"
    extend_unfilled(buf, 3 * _MiB)
    assert len(buf) == 3 * _MiB and buf[:5] == b"hello"
    with memoryview(buf), pytest.raises(BufferError):
        extend_unfilled(buf, 4 * _MiB)
    assert len(buf) == 3 * _MiB
    extend_unfilled(buf, 4 * _MiB)
    assert len(buf) == 4 * _MiB and buf[:5] == b"hello"


def test_a_size_that_does_not_fit_is_a_memory_error() -> None:
    with pytest.raises(MemoryError):
        unfilled(sys.maxsize // 2)


def test_without_cpythons_resize_the_buffer_is_zero_filled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buffers, "_resize", None)
    buf = unfilled(3)
    extend_unfilled(buf, 2 * _MiB + 5)
    assert buf == bytes(2 * _MiB + 5)


@pytest.mark.parametrize("native", [True, False])
def test_unset_bytes_are_received_into_in_place(monkeypatch: pytest.MonkeyPatch,
                                                native: bool) -> None:
    # What the lean client does with a body it hands over as bytes: the
    # BytesIO lends the object's own buffer, and gives the same object back.
    if not native:
        monkeypatch.setattr(buffers, "_new_bytes", None)  # bytes(n) where ctypes is missing
    for size in (0, 1, 100 * 1024 + 3):
        made = unfilled_bytes(size)
        assert type(made) is bytes and len(made) == size
        made_id = id(made)
        sink = io.BytesIO(made)
        del made
        view = sink.getbuffer()
        view[:] = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
        del view
        out = sink.getvalue()
        assert out == bytes(range(256)) * (size // 256) + bytes(range(size % 256))
        assert size <= 1 or id(out) == made_id  # (BytesIO copies out 0 or 1 byte)


def _pattern(size: int, seed: int = 0) -> bytes:
    return bytes((seed + i) % 251 for i in range(size))


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "bytearray"])
def test_growing_bytes_keep_what_was_written_and_hand_over_bytes(
        monkeypatch: pytest.MonkeyPatch, in_place: bool) -> None:
    # As the lean client fills a body: a view, written, the object grown,
    # a new view past what was written, and the bytes taken at the end.
    if not in_place:
        monkeypatch.setattr(buffers, "_IN_PLACE", False)
    want = _pattern(5 * _MiB + 7)
    body = GrowingBytes(_MiB)
    got = 0
    while got < len(want):
        if got == body.capacity:
            body.grow(min(len(want), 2 * got))
        view = body.view()
        n = min(len(view) - got, 300_001)
        view[got:got + n] = want[got:got + n]
        got += n
        del view
    out = body.take(got)
    assert type(out) is bytes and out == want
    assert sys.getrefcount(out) == 2  # ``out`` and the call's argument: no other owner
    assert hash(out) == hash(bytes(want))


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "bytearray"])
def test_growing_bytes_taken_short_or_dropped(monkeypatch: pytest.MonkeyPatch,
                                              in_place: bool) -> None:
    if not in_place:
        monkeypatch.setattr(buffers, "_IN_PLACE", False)
    body = GrowingBytes(3 * _MiB)
    view = body.view()
    view[:10] = b"0123456789"
    del view
    assert body.take(4) == b"0123"  # a body cut short: what arrived
    empty = GrowingBytes(1)
    assert empty.take(0) == b""
    dropped = GrowingBytes(2 * _MiB)
    dropped.close()
    dropped.close()  # twice is once
    with pytest.raises(ValueError):
        GrowingBytes(0)


_GROWN_IN_PLACE = """
import resource, tracemalloc
from aioflux._core.memory.buffers import _IN_PLACE, GrowingBytes

def faults():
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt

assert _IN_PLACE
size = 1 << 20
body = GrowingBytes(size)
before = faults()
while size < 256 << 20:  # 1 MiB to 256 MiB, never copied or filled
    size *= 2
    body.grow(size)
grown = faults() - before
out = body.take(size)
tracemalloc.start()
for _ in range(100):  # none left behind: every one freed with its taker
    b = GrowingBytes(1 << 20)
    b.grow(4 << 20)
    b.take(3 << 20)
    GrowingBytes(2 << 20).close()
print(grown, len(out), tracemalloc.get_traced_memory()[0])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RUSAGE_THREAD is Linux's")
def test_growing_bytes_grow_without_touching_their_pages() -> None:
    out = subprocess.run([sys.executable, "-c", _GROWN_IN_PLACE], check=True,
                         capture_output=True, text=True).stdout.split()
    assert int(out[1]) == 256 * _MiB
    assert int(out[0]) < 1_000, out  # 65,536 pages if copied or zero-filled
    assert int(out[2]) < 64 * 1024, out
