"""Text shards: one sample per line (JSONL, plain text).

A line's region is its bytes without the ``\\n`` (and a ``\\r`` before it);
empty lines are no samples, as JSONL readers skip them. A last line
without a newline is a sample.

Indexing finds a chunk's newlines with numpy, not a ``find`` per line,
which would be most of a cold epoch's index pass. The crc32c of the short lines (up to
:data:`SHORT` bytes) is computed in numpy too, all lines of a chunk at
once, byte position by byte position, from tables of what each byte at each
distance from a line's end adds to its crc32c (crc32c is linear): a call
a line would be most of the pass over short lines (about 7 times this
way's CPU for 9-byte lines; ``python -m perf.index_speed``). Longer lines get a
call each.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import google_crc32c

from ..._core.integrity.crc import crc32c
from ._index import Columns, new_columns

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SHORT", "LinesFormat", "line_crcs"]

#: Lines of at most this many bytes have their crc32c computed in numpy
#: (its cost grows with their bytes; a call's is ~0.3 us whatever the length).
SHORT = 64
_POLY = 0x82F63B78  # crc32c's polynomial, bits reversed


class LinesFormat:
    """Samples of newline-delimited shards (see the module)."""

    name = "lines"

    def index(self, chunks: Iterable[bytes | memoryview], where: str
              ) -> tuple[Any, Any, Any, int]:
        """Index a shard's data as it streams by.

        Args:
            chunks: the shard's data, in order.
            where: the shard's URL, for messages.

        Returns:
            ``(offsets, lengths, crcs, data_size)``.
        """
        import numpy as np  # imported where used: the CLI and demo run without it

        columns = new_columns()
        offsets, lengths, crcs = columns
        # The unfinished line is kept as its crc32c and length, not its bytes:
        # carried whole, a line of many chunks would be copied and scanned
        # again with each one (a 1 GiB line in 8 MiB chunks: 64 GiB of copies).
        # A ``\r`` at its end waits outside the crc, dropped if ``\n`` follows.
        line_at = line_len = line_crc = 0
        cr = False
        base = 0  # offset of the chunk's first byte
        for chunk in chunks:
            data = bytes(chunk)
            newlines = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
            if len(newlines):
                first = int(newlines[0])
                head = data[:first]
                if cr and head:  # the waiting \r is inside the line
                    line_crc, line_len = crc32c(b"\r", line_crc), line_len + 1
                if head.endswith(b"\r"):
                    head = head[:-1]
                if line_len + len(head):
                    offsets.append(line_at)
                    lengths.append(line_len + len(head))
                    crcs.append(crc32c(head, line_crc))
                if len(newlines) > 1:
                    _add_lines(columns, data, newlines, base)
                line_at = base + int(newlines[-1]) + 1
                line_len = line_crc = 0
                cr = False
                tail = data[int(newlines[-1]) + 1:]
            else:
                tail = data
                if cr and tail:
                    line_crc, line_len = crc32c(b"\r", line_crc), line_len + 1
                    cr = False
            if tail:
                cr = tail.endswith(b"\r")
                body = tail[:-1] if cr else tail
                line_crc, line_len = crc32c(body, line_crc), line_len + len(body)
            base += len(data)
        if cr:  # a last line without a newline keeps its \r
            line_crc, line_len = crc32c(b"\r", line_crc), line_len + 1
        if line_len:
            offsets.append(line_at)
            lengths.append(line_len)
            crcs.append(line_crc)
        return offsets, lengths, crcs, base

    def sample(self, region: bytes | memoryview, url: str, offset: int, *,
               checked: bool = False) -> bytes:
        """One line's bytes.

        Args:
            region: the line (checked against the index).
            url: the shard's URL (unused).
            offset: the line's offset (unused).
            checked: unused (a line has nothing to check).

        Returns:
            The line, without its newline.
        """
        return bytes(region)


def _add_lines(columns: Columns, data: bytes, newlines: np.ndarray, base: int) -> None:
    """Append the non-empty lines between the ``newlines`` of ``data`` (two or
    more), each without a ``\r`` before its ``\n``."""
    import numpy as np
    starts = newlines[:-1] + 1
    newlines = newlines[1:]
    ends = newlines - ((newlines > starts) & (np.frombuffer(data, np.uint8)[newlines - 1] == 13))
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    offsets, lengths, crcs = columns
    offsets.frombytes((starts + base).astype(np.uint64).tobytes())
    lengths.frombytes((ends - starts).astype(np.uint64).tobytes())
    crcs.frombytes(line_crcs(data, starts, ends).tobytes())


def line_crcs(data: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The crc32c of each ``data[start:end]`` (non-empty), as uint32.

    Args:
        data: the bytes.
        starts: each region's first byte.
        ends: each region's end (past its last byte).

    Returns:
        One crc32c per region, in order.
    """
    import numpy as np
    lengths = ends - starts
    out = np.empty(len(starts), np.uint32)
    short = lengths <= SHORT
    if short.all():
        out[:] = _short_crcs(np.frombuffer(data, np.uint8), starts, lengths)
        return out
    some = np.flatnonzero(short)
    out[some] = _short_crcs(np.frombuffer(data, np.uint8), starts[some], lengths[some])
    rest = np.flatnonzero(~short)
    # One C call a line, no Python frame between (each region is within one
    # chunk: a few MiB at most).
    regions = map(data.__getitem__, map(slice, starts[rest].tolist(), ends[rest].tolist()))
    out[rest] = np.fromiter(map(google_crc32c.value, regions), np.uint32, len(rest))
    return out


def _short_crcs(array: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """crc32c of regions of 1 to :data:`SHORT` bytes, a byte position at a time.

    A region's crc32c is that of as many zero bytes, xor what each of its
    bytes adds where it stands (``_tables``): position ``j`` of every region
    at once, shorter regions dropping out (longest first, they are a prefix).
    """
    import numpy as np
    adds, zeros = _tables()
    if not len(starts):
        return np.zeros(0, np.uint32)
    crcs = zeros[lengths]
    shortest, longest = int(lengths.min()), int(lengths.max())
    # The row of ``adds`` for the byte at j: its distance from the region's end.
    row = (lengths - 1) * 256
    at = starts.copy()
    for _ in range(shortest):
        crcs ^= adds[row + array[at]]
        row -= 256
        at += 1
    if longest > shortest:
        order = np.argsort(-lengths, kind="stable")
        crcs, row, at = crcs[order], row[order], at[order]
        # Regions still going at step j: those longer than j, a prefix.
        going = np.searchsorted(-lengths[order], -np.arange(shortest, longest), "left")
        for j in range(longest - shortest):
            k = going[j]
            crcs[:k] ^= adds[row[:k] + array[at[:k]]]
            row[:k] -= 256
            at[:k] += 1
        out = np.empty_like(crcs)
        out[order] = crcs
        crcs = out
    return crcs  # type: ignore[no-any-return]


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray]:
    """``adds[d * 256 + b]``: what byte ``b`` with ``d`` bytes after it adds
    to a crc32c; ``zeros[n]``: the crc32c of ``n`` zero bytes."""
    import numpy as np
    table: Any = np.arange(256, dtype=np.uint32)  # crc32c's one-byte step
    for _ in range(8):
        table = (table >> 1) ^ np.where(table & 1, np.uint32(_POLY), np.uint32(0))
    adds = np.empty((SHORT, 256), np.uint32)
    adds[0] = table
    for d in range(1, SHORT):  # one zero byte more after it
        adds[d] = (adds[d - 1] >> 8) ^ table[adds[d - 1] & 0xFF]
    zeros = np.empty(SHORT + 1, np.uint32)
    register = 0xFFFFFFFF
    for n in range(SHORT + 1):
        zeros[n] = register ^ 0xFFFFFFFF
        register = (register >> 8) ^ int(table[register & 0xFF])
    return adds.ravel(), zeros
