"""crc32c helpers: compute, encode as GCS does, and combine.

GCS reports crc32c as base64 of the big-endian uint32. Combining lets us
predict a composite object's crc32c from its sources' listed checksums
without reading them.
"""

from __future__ import annotations

import base64
import struct

import google_crc32c

__all__ = ["Crc32c", "crc32c", "crc32c_combine", "decode_crc32c", "encode_crc32c"]

_POLY_REVERSED = 0x82F63B78
# google_crc32c's C extension accepts only ``bytes``; other buffers are fed
# through a bounded copy of this size rather than one copy of the whole.
# Small enough that malloc serves it from the heap it just freed (a 1 MiB
# copy was a fresh mmap each time: 256 page faults per MiB).
_COPY_CHUNK = 64 * 1024


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """crc32c of ``data``, continuing from ``value``.

    Args:
        data: bytes-like.
        value: crc of the preceding bytes (0 to start).

    Returns:
        The uint32 checksum.
    """
    if isinstance(data, bytes):
        return int(google_crc32c.extend(value, data))
    view = memoryview(data).cast("B")
    for start in range(0, len(view), _COPY_CHUNK):
        value = google_crc32c.extend(value, bytes(view[start:start + _COPY_CHUNK]))
    return int(value)


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
    odd = [_POLY_REVERSED] + [1 << i for i in range(31)]  # operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)
        if length_b & 1:
            crc_a = _gf2_times(even, crc_a)
        length_b >>= 1
        if not length_b:
            break
        odd = _gf2_square(even)
        if length_b & 1:
            crc_a = _gf2_times(odd, crc_a)
        length_b >>= 1
        if not length_b:
            break
    return (crc_a ^ crc_b) & 0xFFFFFFFF
