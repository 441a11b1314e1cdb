"""Destination buffers allocated without writing them first."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aioflux._core import buffers
from aioflux._core.buffers import extend_unfilled, unfilled

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
