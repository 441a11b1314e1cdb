"""Object content kept as the buffers it arrived in.

A multipart upload's parts and a composite's sources are stored side by
side instead of joined: joining a 1 GiB checkpoint copied it once more and
touched 1 GiB of fresh memory, which on the 2-core perf VM cost the
emulator ~3 s of kernel time per save (page faults), time a real GCS never
takes from the client's machine. Reads are served as views into the pieces.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Iterator
from itertools import accumulate

import google_crc32c

from aioflux._core.integrity.crc import crc32c_combine

__all__ = ["Rope"]

Buffer = bytes | memoryview


class Rope:
    """Immutable content made of pieces, read without joining them.

    Attributes:
        pieces: the buffers, in order, none empty (``bytes`` or memoryviews).
        size: total length.
    """

    __slots__ = ("_crc", "_ends", "pieces", "size")

    _crc: int | None
    size: int

    def __init__(self, pieces: Iterable[Buffer | Rope]) -> None:
        flat: list[Buffer] = []
        # A rope of ropes whose checksums are known knows its own without
        # reading them: completing a 1 GiB multipart upload hashed the whole
        # object again (~0.2 s of the emulator's CPU, on the client's cores),
        # where S3 and GCS combine the parts' checksums.
        crc: int | None = 0
        for piece in pieces:
            if isinstance(piece, Rope):
                flat.extend(piece.pieces)
                crc = None if crc is None or piece._crc is None else crc32c_combine(
                    crc, piece._crc, piece.size)
            elif len(piece):
                flat.append(piece)
                crc = None
        self._crc = crc
        self.pieces: tuple[Buffer, ...] = tuple(flat)
        self._ends = list(accumulate(len(p) for p in flat))
        self.size = self._ends[-1] if flat else 0

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        if len(self.pieces) == 1 and isinstance(self.pieces[0], bytes):
            return self.pieces[0]
        return b"".join(self.pieces)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rope):
            return bytes(self) == bytes(other)
        if isinstance(other, bytes | bytearray | memoryview):
            return bytes(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rope(size={self.size}, pieces={len(self.pieces)})"

    def slice(self, start: int, end: int) -> Rope:
        """The bytes ``[start, end)`` (clamped to the content) as views into the pieces."""
        start, end = max(0, start), min(self.size, end)
        if (start, end) == (0, self.size):
            return self
        out: list[Buffer] = []
        i = bisect.bisect_right(self._ends, start)
        while start < end and i < len(self.pieces):
            piece_start = self._ends[i] - len(self.pieces[i])
            stop = min(end, self._ends[i]) - piece_start
            view = memoryview(self.pieces[i])[start - piece_start:stop]
            out.append(view)
            start += len(view)
            i += 1
        return Rope(out)

    def chunks(self, size: int, *, split_at: int | None = None) -> Iterator[memoryview]:
        """Views of at most ``size`` bytes, in order; one ends exactly at ``split_at``."""
        offset = 0
        for piece in self.pieces:
            view = memoryview(piece)
            pos = 0
            while pos < len(view):
                step = min(size, len(view) - pos)
                if split_at is not None and offset < split_at < offset + step:
                    step = split_at - offset
                yield view[pos:pos + step]
                pos += step
                offset += step

    def crc32c(self) -> int:
        """CRC32C of the content (computed once: a rope never changes)."""
        if self._crc is not None:
            return self._crc
        value = 0
        for piece in self.pieces:
            # google_crc32c takes no memoryview (a slice's pieces, a decoded
            # aws-chunked body): those are hashed from a copy.
            value = google_crc32c.extend(
                value, piece if isinstance(piece, bytes) else piece.tobytes())
        self._crc = value
        return value

    def md5(self) -> bytes:
        """MD5 digest of the content."""
        digest = hashlib.md5()
        for piece in self.pieces:
            digest.update(piece)
        return digest.digest()
