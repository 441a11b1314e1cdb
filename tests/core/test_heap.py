"""A dataset's process keeps its DataLoader batches in glibc's heap
(``_core/memory/heap.py``): blocks up to 16 MiB come from the heap, not
fresh mappings, once a dataset is made, and never where the threshold was
set by hand. Each case is a fresh interpreter: the threshold is per process."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="glibc 2.33 or later (mallinfo2) only")

# How many of a 4 MiB and a 12 MiB block glibc maps (mallinfo2's hblks).
_PROBE = """
import ctypes, sys
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def mapped(size):
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    got = libc.mallinfo2().hblks - before
    libc.free(block)
    return got
SETUP
print(mapped(4 << 20), mapped(12 << 20))
"""


def _mapped(setup: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", _PROBE.replace("SETUP", setup)],
                          capture_output=True, text=True, env={**os.environ, **env},
                          check=True)
    return done.stdout.strip()


def test_blocks_up_to_the_primed_threshold_come_from_the_heap() -> None:
    assert _mapped("") == "1 1"  # a fresh process maps both
    prime = "from aioflux._core.memory.heap import keep_batches_in_heap as k; k(); k()"
    assert _mapped(prime) == "0 0"


def test_a_dataset_made_in_a_process_primes_it(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    made = ("from aioflux.torch import ObjectMapDataset; "
            f"ObjectMapDataset.from_prefix({str(tmp_path)!r})")
    assert _mapped(made) == "0 0"


def test_a_threshold_set_by_hand_is_left_as_set() -> None:
    prime = "from aioflux._core.memory.heap import keep_batches_in_heap; keep_batches_in_heap()"
    assert _mapped(prime, MALLOC_MMAP_THRESHOLD_="262144") == "1 1"
