"""A typed array that grows in an anonymous mapping of its own.

The columns of an :class:`~aioflux._core.memory.object_index.ObjectIndex` grow a listing
page at a time to tens of MB. In a ``bytearray`` or an ``array`` they grew
through ``realloc``: a growth copies the whole buffer where it cannot extend
it in place (twice its size for a moment), and what is freed stays with
glibc's heap of the thread that grew it (the listing's loop thread): a
listing of a million files held 7 MB more than its columns after it was
done, and peaked at twice its columns (1e6 files: 77 bytes an object held
and 135 at the peak, 35 and 53 now, with the names past their folder).
Here a buffer is its own mapping, grown by ``mremap`` (pages move, nothing
is copied; the capacity beyond the bytes written is never touched, so never
resident) and unmapped when it is freed, every page back to the kernel.

tracemalloc does not see a mapping, so the bytes written to those alive are
counted here (:func:`mapped`): a test bounds a listing's memory with both.
"""

from __future__ import annotations

import mmap
import weakref
from array import array
from collections.abc import Iterator
from typing import Any

__all__ = ["Grown", "mapped", "reset_mapped"]

# The first mapping's size (it only reserves addresses; pages are touched
# as bytes are written).
_FIRST = 1 << 16
# [bytes written to the buffers alive now, the most since reset_mapped()].
_TALLY = [0, 0]


def mapped() -> tuple[int, int]:
    """Bytes written to the :class:`Grown` buffers alive now, and the most
    at any time since :func:`reset_mapped` (their resident size).

    Returns:
        ``(now, peak)``.
    """
    return _TALLY[0], _TALLY[1]


def reset_mapped() -> None:
    """Start the peak of :func:`mapped` over from the bytes alive now."""
    _TALLY[1] = _TALLY[0]


def _release(counted: list[int]) -> None:
    _TALLY[0] -= counted[0]


class Grown:
    """Numbers of one ``array`` type code, appended to, in a mapping (see the
    module doc). Read back a chunk at a time, or as one view when done.

    Args:
        code: the ``array`` type code (``"B"`` for bytes).
    """

    def __init__(self, code: str) -> None:
        self.code = code
        self.itemsize = array(code).itemsize
        self.nbytes = 0
        self._map: mmap.mmap | None = None
        self._counted = [0]  # bytes of this buffer in _TALLY

    def __len__(self) -> int:
        return self.nbytes // self.itemsize

    def extend(self, data: Any) -> None:
        """Append the items of ``data`` (a buffer of this type, or bytes).

        Args:
            data: an ``array`` of this code, ``bytes``, or another buffer.
        """
        raw = memoryview(data).cast("B")
        end = self.nbytes + raw.nbytes
        if self._map is None or end > len(self._map):
            self._grow(end)
        assert self._map is not None
        self._map[self.nbytes:end] = raw
        self.nbytes = end
        added = end - self._counted[0]
        self._counted[0] = end
        _TALLY[0] += added
        _TALLY[1] = max(_TALLY[1], _TALLY[0])

    def _grow(self, end: int) -> None:
        capacity = max(_FIRST, end, 2 * len(self._map) if self._map is not None else 0)
        capacity = -(-capacity // mmap.PAGESIZE) * mmap.PAGESIZE
        if self._map is None:
            # Private: a shared anonymous mapping is a file of the first
            # size, and its pages past that fault (SIGBUS) once it grows.
            self._map = mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE)
            weakref.finalize(self._map, _release, self._counted)
        else:
            self._map.resize(capacity)  # mremap: the pages move, no copy

    def __getitem__(self, i: int) -> int:
        at = i * self.itemsize
        if not 0 <= at < self.nbytes:
            raise IndexError(f"item {i} of {len(self)}")
        item: int = self.chunk(i, i + 1)[0]
        return item

    def last(self) -> int:
        """The last item (the buffer holds one or more)."""
        return self[len(self) - 1]

    def chunk(self, start: int, stop: int) -> array[Any]:
        """Items ``start`` to ``stop`` (within the buffer) as a new ``array``."""
        out = array(self.code)
        if self._map is not None and stop > start:
            out.frombytes(self._map[start * self.itemsize:stop * self.itemsize])
        return out

    def chunks(self, size: int = 1 << 16) -> Iterator[array[Any]]:
        """Every item, ``size`` at a time, as new arrays (no view is held
        between them: the buffer may grow meanwhile)."""
        for start in range(0, len(self), size):
            yield self.chunk(start, min(len(self), start + size))

    def bytes_at(self, start: int, stop: int) -> bytes:
        """Bytes ``start`` to ``stop`` of the buffer."""
        return b"" if self._map is None else self._map[start:stop]

    def view(self) -> memoryview:
        """The bytes written, as a view (the buffer cannot grow while it lives)."""
        if self._map is None:
            return memoryview(b"")
        return memoryview(self._map)[:self.nbytes]
