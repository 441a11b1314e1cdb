"""Destination buffers that are not written before the bytes land in them.

``bytearray(n)`` zero-fills its memory: every page is touched by the thread
that allocates it, the event loop's, before the first request goes out. A
ranged download's 256 MiB wave spent 0.1 to 0.2 s there (a first touch
costs 2 to 9 us a page on this project's VMs), its GETs waiting on it. Left
untouched, the pages are faulted in as the bytes arrive, while the other
ranges wait on the network (perf scenario ``ranged``, 8 x 256 MiB: 2.55 s
to 1.83 s).

The memory's contents are undefined until written, so these are only for a
destination every byte of which the caller writes, and checks that it
wrote, before anyone reads it.
"""

from __future__ import annotations

import platform
from typing import Any

__all__ = ["extend_unfilled", "unfilled", "unfilled_bytes"]


def _cpython_api(name: str, argtypes: list[str], restype: str) -> Any:
    """A function of CPython's C API through ctypes; None elsewhere, or
    where ctypes is missing (the portable zero-filled ways then)."""
    if platform.python_implementation() != "CPython":
        return None
    try:
        import ctypes
    except ImportError:
        return None
    function = getattr(ctypes.pythonapi, name)
    function.argtypes = [getattr(ctypes, t) for t in argtypes]
    function.restype = getattr(ctypes, restype)
    return function


# Resize: realloc, no zero fill (large blocks are remapped, their new pages
# untouched). New bytes: given no source, the object's bytes are left unset.
_resize = _cpython_api("PyByteArray_Resize", ["py_object", "c_ssize_t"], "c_int")
_new_bytes = _cpython_api("PyBytes_FromStringAndSize", ["c_void_p", "c_ssize_t"], "py_object")
_ZEROS = bytes(1 << 20)


def unfilled(size: int) -> bytearray:
    """A ``bytearray`` of ``size`` bytes whose contents are not set.

    Args:
        size: its length.

    Returns:
        The buffer; the caller writes every byte before any is read.

    Raises:
        MemoryError: ``size`` bytes do not fit.
    """
    buf = bytearray()
    extend_unfilled(buf, size)
    return buf


def extend_unfilled(buf: bytearray, size: int) -> None:
    """Grow ``buf`` in place to ``size`` bytes; the new ones are not set.

    Args:
        buf: the buffer (no view of it may be alive).
        size: its new length, at least its length now.

    Raises:
        BufferError: a view of ``buf`` is alive (it cannot move).
        MemoryError: ``size`` bytes do not fit.
    """
    if _resize is not None:
        # ctypes raises the error the call set (BufferError, MemoryError).
        _resize(buf, size)
        return
    while len(buf) < size:
        buf += memoryview(_ZEROS)[:size - len(buf)]


def unfilled_bytes(size: int) -> bytes:
    """A ``bytes`` of ``size`` bytes whose contents are not set, for a body
    received in place (``io.BytesIO(it).getbuffer()``) and handed over only
    once every byte arrived: ``bytes(size)`` zero-filled it first (about 6%
    of a DataLoader worker's CPU reading 1 MiB ranges over the lean client).

    Args:
        size: its length.

    Returns:
        The object, referenced by the caller alone; the caller writes every
        byte before any is read.

    Raises:
        MemoryError: ``size`` bytes do not fit.
    """
    if _new_bytes is None:
        return bytes(size)
    out: bytes = _new_bytes(None, size)
    return out
