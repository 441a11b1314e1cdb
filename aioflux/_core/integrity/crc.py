"""crc32c helpers: compute, encode as GCS does, and combine.

GCS reports crc32c as base64 of the big-endian uint32. Combining lets us
predict a composite object's crc32c from its sources' listed checksums
without reading them, and gives a writer the whole stream's checksum from
its parts' without reading them again.
"""

from __future__ import annotations

import base64
import ctypes
import struct
from collections.abc import Callable, Sequence

import google_crc32c

__all__ = ["Crc32c", "crc32c", "crc32c_at", "crc32c_combine", "crc32c_spans",
           "decode_crc32c", "encode_crc32c"]

_POLY_REVERSED = 0x82F63B78
# google_crc32c's C extension accepts only ``bytes``; other buffers are fed
# through a bounded copy of this size rather than one copy of the whole.
# Small enough that malloc serves it from the heap it just freed (a 1 MiB
# copy would be a fresh mmap each time: 256 page faults per MiB).
_COPY_CHUNK = 64 * 1024


def _extend_at(holding_gil: bool) -> Callable[[int, int, int], int] | None:
    """google's crc32c library's ``crc32c_extend(crc, address, length)``.

    It is the C function google_crc32c's extension calls, reached through the
    extension's own handle, so it is the very same code. Called through ctypes
    it takes any address (no copy into ``bytes``). Through ``CDLL`` it runs
    without the GIL: on a 1 GiB save the writer's checksums held the GIL
    ~0.2 s that the event loop thread, sending the parts, was waiting for.
    Through ``PyDLL`` it keeps the GIL (for buffers too small to be worth
    a thread switch). None where google_crc32c has no C extension (its
    pure-Python fallback).
    """
    try:
        from google_crc32c import _crc32c  # type: ignore[attr-defined]

        library = ctypes.PyDLL if holding_gil else ctypes.CDLL
        function = library(_crc32c.__file__).crc32c_extend
    except (ImportError, OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t)
    function.restype = ctypes.c_uint32
    return function  # type: ignore[no-any-return]


_EXTEND_AT = _extend_at(holding_gil=False)
_EXTEND_HOLDING_GIL = _extend_at(holding_gil=True)
# Below this a buffer is hashed with the GIL held: a thread that lets go of
# the GIL for a few microseconds may wait a whole switch interval (5 ms) to
# get it back (google_crc32c keeps it below 1 MiB for that reason).
_IN_PLACE_FROM = 1 << 20


def _address(view: memoryview) -> tuple[int, object]:
    """The address of a contiguous view's first byte, and what keeps it valid.

    ctypes gives it for writable buffers only; a read-only one (a view of
    ``bytes``, as streamed reads hand over) goes through numpy, which takes
    any buffer.
    """
    if not view.readonly:
        holder = ctypes.c_char.from_buffer(view)
        return ctypes.addressof(holder), holder
    import numpy  # a dependency already; imported only on this path

    array = numpy.frombuffer(view, numpy.uint8)
    return int(array.ctypes.data), array


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """crc32c of ``data``, continuing from ``value``.

    A buffer other than ``bytes`` of 64 KiB or more is read in place, not
    copied; from 1 MiB (``bytes`` too) without the GIL. It must not change
    meanwhile.

    Args:
        data: bytes-like.
        value: crc of the preceding bytes (0 to start).

    Returns:
        The uint32 checksum.
    """
    if isinstance(data, bytes) and (len(data) < _IN_PLACE_FROM or _EXTEND_AT is None):
        return int(google_crc32c.extend(value, data))
    view = memoryview(data).cast("B")
    extend = _EXTEND_AT if len(view) >= _IN_PLACE_FROM else _EXTEND_HOLDING_GIL
    if extend is not None and len(view) >= _COPY_CHUNK:
        address, holder = _address(view)
        result = int(extend(value, address, len(view)))
        del holder  # the buffer stays exported until the call returned
        return result
    for start in range(0, len(view), _COPY_CHUNK):
        value = google_crc32c.extend(value, bytes(view[start:start + _COPY_CHUNK]))
    return int(value)


def crc32c_at(address: int, length: int, value: int = 0) -> int:
    """crc32c of the ``length`` bytes at ``address``, continuing from
    ``value``, holding the GIL (a body's pieces, summed in the event loop's
    thread as they land: see :func:`_extend_at`). The memory must stay
    valid and unchanged meanwhile."""
    if _EXTEND_HOLDING_GIL is not None:
        return int(_EXTEND_HOLDING_GIL(value, address, length))
    return crc32c(memoryview((ctypes.c_char * length).from_address(address)).cast("B"), value)


def crc32c_spans(data: bytes | bytearray | memoryview,
                 spans: Sequence[tuple[int, int]]) -> list[int]:
    """crc32c of each ``data[start:end]``, every span read in place.

    One address serves them all: a shard's samples out of one ranged read
    were each sliced (a copy) before their checksum, about 8% of a
    DataLoader worker's CPU, and a view of each paid for its address (2 us
    through numpy) every time. Worth it from ~16 KiB a span: below that the
    ctypes call costs more than a slice's copy.

    Args:
        data: a contiguous buffer, not changed meanwhile.
        spans: ``(start, end)`` pairs inside it.

    Returns:
        The checksums, in the order of ``spans``.

    Raises:
        ValueError: a span that is not inside ``data``.
    """
    view = memoryview(data).cast("B")
    for start, end in spans:
        if not 0 <= start <= end <= len(view):
            raise ValueError(f"crc32c of bytes [{start}, {end}) of a {len(view)}-byte buffer")
    if _EXTEND_AT is None or _EXTEND_HOLDING_GIL is None:
        return [crc32c(view[start:end]) for start, end in spans]
    holder: object
    if isinstance(data, bytes):
        # The bytes object's own buffer (c_char_p takes it without a copy).
        address, holder = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0, data
    else:
        address, holder = _address(view)
    out = []
    for start, end in spans:
        extend = _EXTEND_AT if end - start >= _IN_PLACE_FROM else _EXTEND_HOLDING_GIL
        out.append(int(extend(0, address + start, end - start)))
    del holder  # the buffer stays exported until the calls returned
    return out


class Crc32c:
    """Running crc32c over a stream of chunks."""

    __slots__ = ("length", "value")

    def __init__(self) -> None:
        self.value = 0
        self.length = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Feed more bytes.

        Args:
            data: the next chunk.
        """
        self.value = crc32c(data, self.value)
        self.length += len(data)

    def append(self, crc: int, length: int) -> None:
        """Count ``length`` more bytes whose own crc32c is ``crc``.

        Args:
            crc: crc32c of the next chunk alone.
            length: its length in bytes.
        """
        self.value = crc32c_combine(self.value, crc, length)
        self.length += length


def encode_crc32c(value: int) -> str:
    """Encode a uint32 as GCS's base64 big-endian form."""
    return base64.b64encode(struct.pack(">I", value & 0xFFFFFFFF)).decode("ascii")


def decode_crc32c(text: str) -> int:
    """Decode GCS's base64 big-endian crc32c.

    Raises:
        ValueError: not 4 bytes of base64.
    """
    raw = base64.b64decode(text)
    if len(raw) != 4:
        raise ValueError(f"crc32c must be 4 bytes, got {len(raw)}")
    return int(struct.unpack(">I", raw)[0])


def _gf2_times(matrix: list[int], vector: int) -> int:
    total = 0
    i = 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, row) for row in matrix]


# _ZEROS[k]: the GF(2) matrix that feeds 2**k zero bytes through a crc32c
# register, built once by squaring (zlib's method). Appending n zero bytes
# is then one matrix-vector product per set bit of n: ~3 us for a 16 MiB
# part, where rebuilding the squares on every call (as zlib does) cost ~1 ms.
_ZEROS: tuple[list[int], ...] = ()


def _zeros(k: int) -> list[int]:
    global _ZEROS
    table = _ZEROS
    if len(table) <= k:
        # Grown on a copy and published whole: threads may race here, and a
        # table they built side by side is the same table.
        grown = list(table)
        if not grown:
            step = [_POLY_REVERSED] + [1 << i for i in range(31)]  # one zero bit
            for _ in range(3):
                step = _gf2_square(step)  # 2, 4, then 8 zero bits: one zero byte
            grown.append(step)
        while len(grown) <= k:
            grown.append(_gf2_square(grown[-1]))
        table = _ZEROS = tuple(grown)
    return table[k]


def _shift(crc: int, length: int) -> int:
    """``crc`` after ``length`` zero bytes."""
    k = 0
    while length:
        if length & 1:
            crc = _gf2_times(_zeros(k), crc)
        length >>= 1
        k += 1
    return crc


def crc32c_combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """crc32c of ``A + B`` from crc(A), crc(B) and len(B) (zlib's algorithm).

    Args:
        crc_a: crc32c of the first part.
        crc_b: crc32c of the second part.
        length_b: byte length of the second part.

    Returns:
        crc32c of the concatenation.
    """
    if length_b <= 0:
        return crc_a
    return (_shift(crc_a, length_b) ^ crc_b) & 0xFFFFFFFF
