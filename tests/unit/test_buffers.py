"""Destination buffers allocated without writing them first."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from aioflux._core import buffers
from aioflux._core.buffers import extend_unfilled, unfilled, unfilled_bytes

_MiB = 1024 * 1024


_UNTOUCHED = """
import resource
from aioflux._core.buffers import extend_unfilled, unfilled

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
