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
import sys
import sysconfig
from typing import Any

__all__ = ["GrowingBytes", "address", "extend_unfilled", "unfilled", "unfilled_bytes"]


def _cpython_api(name: str, argtypes: list[str], restype: str | None) -> Any:
    """A function of CPython's C API through ctypes (``restype`` None: it
    returns nothing); None elsewhere, or where ctypes is missing (the
    portable zero-filled ways then)."""
    if platform.python_implementation() != "CPython":
        return None
    try:
        import ctypes
    except ImportError:
        return None
    function = getattr(ctypes.pythonapi, name)
    function.argtypes = [getattr(ctypes, t) for t in argtypes]
    function.restype = None if restype is None else getattr(ctypes, restype)
    return function


# Resize: realloc, no zero fill (large blocks are remapped, their new pages
# untouched). New bytes: given no source, the object's bytes are left unset.
_resize = _cpython_api("PyByteArray_Resize", ["py_object", "c_ssize_t"], "c_int")
_new_bytes = _cpython_api("PyBytes_FromStringAndSize", ["c_void_p", "c_ssize_t"], "py_object")
_ZEROS = bytes(1 << 20)
# GrowingBytes: a bytes object's memory grown by realloc, and viewed as
# writable memory. Not on a free-threaded build, whose reference counts
# the one-owner check of _PyBytes_Resize does not read the same way.
_resize_bytes: Any = None if sysconfig.get_config_var("Py_GIL_DISABLED") else \
    _cpython_api("_PyBytes_Resize", ["c_void_p", "c_ssize_t"], "c_int")
_memory = _cpython_api("PyMemoryView_FromMemory", ["c_void_p", "c_ssize_t", "c_int"],
                       "py_object")
_incref = _cpython_api("Py_IncRef", ["py_object"], None)
_decref = _cpython_api("Py_DecRef", ["py_object"], None)
_PYBUF_WRITE = 0x200
# Where a bytes object's data starts: its fixed part's size, less the
# terminating NUL byte that part counts.
_BYTES_DATA = bytes.__basicsize__ - 1


def address(view: memoryview) -> int:
    """The address of a writable contiguous view's first byte, or 0 for a
    read-only, non-contiguous or empty one. Valid while the view's memory
    stays where it is (a view of a ``bytearray`` keeps it there; a
    :class:`GrowingBytes` view, until it grows)."""
    if view.readonly or not view.contiguous or not view.nbytes:
        return 0
    import ctypes

    holder = ctypes.c_char.from_buffer(view)
    return ctypes.addressof(holder)


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


class GrowingBytes:
    """A ``bytes`` object received into in place, grown as bytes arrive,
    and handed over without a copy.

    ``bytes`` is what reads return. One made from a ``bytearray`` once the
    body is in copies every byte (a 1 GiB read: a third of the client's
    CPU), and a ``bytearray`` doubled as the body arrives copies and
    zero-fills them again. Here the object's own block grows by
    ``realloc``, which remaps a large block's pages rather than copying
    them, and its new bytes are left unset; so a buffer may double as
    bytes arrive, never sized by what a server declares, at no cost a byte.

    The object has no other owner until :meth:`take`, and its memory is
    written through :meth:`view`; a view must not be used after the next
    :meth:`grow`, :meth:`take` or :meth:`close` (the block may move). On
    other Pythons (or free-threaded CPython) a ``bytearray`` stands in,
    copied once by :meth:`take`.

    Args:
        size: the first capacity (at least 1).

    Raises:
        MemoryError: ``size`` bytes do not fit.
    """

    __slots__ = ("_array", "_owned")

    def __init__(self, size: int) -> None:
        self._array: bytearray | None = None
        self._owned: Any = None  # ctypes.c_void_p: the address of the one reference held
        if size < 1:
            raise ValueError(f"GrowingBytes needs a capacity of at least 1, not {size}")
        if not _IN_PLACE:
            self._array = unfilled(size)
            return
        import ctypes

        obj = unfilled_bytes(size)
        _incref(obj)  # held by the address alone from here on
        self._owned = ctypes.c_void_p(id(obj))

    @property
    def capacity(self) -> int:
        """Bytes the object holds now."""
        if self._array is not None:
            return len(self._array)
        return len(self._object())

    def _object(self) -> bytes:
        import ctypes

        if self._owned is None or self._owned.value is None:
            raise ValueError("GrowingBytes already taken or closed")
        obj: bytes = ctypes.cast(self._owned.value, ctypes.py_object).value
        return obj

    def view(self) -> memoryview:
        """A writable view of all its bytes, valid until the next
        :meth:`grow`, :meth:`take` or :meth:`close`."""
        if self._array is not None:
            return memoryview(self._array)
        size = self.capacity
        view: memoryview = _memory(self._owned.value + _BYTES_DATA, size, _PYBUF_WRITE)
        return view

    def grow(self, size: int) -> None:
        """Hold ``size`` bytes (at least as many as now); the first ones kept,
        the new ones unset. No view made before may be used after.

        Raises:
            MemoryError: they do not fit (the object is then gone).
        """
        if self._array is not None:
            extend_unfilled(self._array, size)
            return
        import ctypes

        if size != self.capacity:
            # Its only reference is the one held: realloc, no copy of a
            # large block's pages.
            _resize_bytes(ctypes.addressof(self._owned), size)

    def take(self, size: int) -> bytes:
        """Its first ``size`` bytes, every one of them written, as a
        ``bytes`` object the caller alone holds; this object is empty after.
        """
        if self._array is not None:
            array, self._array = self._array, bytearray()
            return bytes(memoryview(array)[:size])
        self.grow(size)
        obj = self._object()
        self._owned = None
        _decref(obj)  # the reference the address held: ``obj``'s is the one left
        return obj

    def close(self) -> None:
        """Let go of it (not taken: its bytes are not wanted)."""
        if self._array is not None:
            self._array = bytearray()
        elif self._owned is not None and self._owned.value is not None:
            obj = self._object()
            self._owned = None
            _decref(obj)

    def __del__(self) -> None:
        self.close()


def _in_place_works() -> bool:
    """The C API in reach, and a bytes object's data where it is looked for."""
    if None in (_resize_bytes, _memory, _incref, _decref, _new_bytes):
        return False
    import ctypes

    probe = b"probe of the data offset"
    address = ctypes.cast(ctypes.c_char_p(probe), ctypes.c_void_p).value
    return address == id(probe) + _BYTES_DATA and sys.implementation.name == "cpython"


_IN_PLACE = _in_place_works()
