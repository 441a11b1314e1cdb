"""Fresh destination memory made present just before a read lands in it.

A read into memory never touched (the tensors ``torch.load`` has just
allocated for a checkpoint's storages) takes a page fault for each 4 KiB
page while the kernel copies into it. ``madvise(MADV_POPULATE_WRITE)``
(Linux 5.14+) makes a range's pages present in one call, without a fault
each: 256 MiB read from the page cache into fresh memory in 256 KiB pieces
took 0.12 s of CPU with each piece populated first, against 0.145 s (a
disk file's cold read: 0.143 s against 0.17 s). Done a piece at a time,
right before the piece's read, so a cold file's reads keep the kernel's
read-ahead going (populating a whole 16 MiB tensor first stalled it:
0.22 s). Memory already present costs populate a walk anyway (~55 ns a
page: 14 ms for 256 MiB), so a piece is populated only if its first page
is not yet resident (``mincore``). Off Linux, on older kernels and for
memory the kernel refuses (device mappings), nothing happens: the read
faults its pages in as ever.

Used by the local reads (``local/_reader.py``, ``local/_files.py``) and
by the lean HTTP client, a body's next MiB ahead of the socket's bytes
(``_net/connection.py``).
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from typing import Any

from .buffers import address

__all__ = ["populatable_address", "prefault"]

_MADV_POPULATE_WRITE = 23  # linux/mman.h (5.14)
_PAGE = mmap.PAGESIZE
# Below this a piece is not worth two system calls.
_LEAST = 16 * _PAGE


def _libc() -> tuple[Any, Any, Any] | None:
    """libc's ``madvise`` (without the GIL, and holding it) and ``mincore``
    (holding it: it returns at once), where populating works (probed once
    on a page of this module's own), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None).madvise
        madvise_holding, mincore = ctypes.PyDLL(None).madvise, ctypes.PyDLL(None).mincore
    except (OSError, AttributeError):
        return None
    for function in (madvise, madvise_holding):
        function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        function.restype = ctypes.c_int
    mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    mincore.restype = ctypes.c_int
    probe = mmap.mmap(-1, _PAGE)
    try:
        holder = ctypes.c_char.from_buffer(probe)
        try:
            works = madvise(ctypes.addressof(holder), _PAGE, _MADV_POPULATE_WRITE) == 0
        finally:
            del holder
    finally:
        probe.close()
    return (madvise, madvise_holding, mincore) if works else None


_CALLS = _libc()


def populatable_address(view: memoryview) -> int:
    """The address of a writable contiguous view's first byte where
    populating may help it, else 0 (off Linux, an older kernel, a
    read-only view, one too small). Valid while the view is."""
    if _CALLS is None or view.nbytes < _LEAST:
        return 0
    return address(view)


def prefault(address: int, length: int, *, holding_gil: bool = False) -> bool:
    """Make the whole pages of ``[address, address + length)`` present,
    unless the first of them already is.

    Args:
        address: the range's start (from :func:`populatable_address`).
        length: its length in bytes.
        holding_gil: keep the GIL meanwhile (an event loop's thread: one
            that lets go of it may wait a switch interval to get it back).

    Returns:
        Whether pages were populated (False: too small, already present,
        refused, or not supported here).
    """
    if _CALLS is None:
        return False
    start = -(-address // _PAGE) * _PAGE
    end = (address + length) // _PAGE * _PAGE
    if end - start < _LEAST:
        return False
    madvise, madvise_holding, mincore = _CALLS
    resident = ctypes.c_ubyte(0)
    if mincore(start, _PAGE, ctypes.byref(resident)) != 0 or resident.value & 1:
        return False
    # Refused (a hole in the range, a mapping populate does not take):
    # the read that follows faults its pages in, or says what is wrong.
    populate = madvise_holding if holding_gil else madvise
    return bool(populate(start, end - start, _MADV_POPULATE_WRITE) == 0)
