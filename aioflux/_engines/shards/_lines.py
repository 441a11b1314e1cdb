"""Text shards: one sample per line (JSONL, plain text).

A line's region is its bytes without the ``\\n`` (and a ``\\r`` before it);
empty lines are no samples, as JSONL readers skip them. A last line
without a newline is a sample.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..._core.crc import crc32c
from ._index import new_columns

__all__ = ["LinesFormat"]


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
        offsets, lengths, crcs = new_columns()
        carry = b""  # the unfinished line
        base = 0  # offset of carry[0]
        for chunk in chunks:
            data = carry + bytes(chunk) if carry else bytes(chunk)
            pos = 0
            find = data.find
            while True:
                nl = find(b"\n", pos)
                if nl < 0:
                    break
                end = nl - 1 if nl > pos and data[nl - 1] == 13 else nl
                if end > pos:
                    offsets.append(base + pos)
                    lengths.append(end - pos)
                    crcs.append(crc32c(data[pos:end]))
                pos = nl + 1
            carry = data[pos:]
            base += pos
        if carry:
            offsets.append(base)
            lengths.append(len(carry))
            crcs.append(crc32c(carry))
        return offsets, lengths, crcs, base + len(carry)

    def sample(self, region: bytes | memoryview, url: str, offset: int) -> bytes:
        """One line's bytes.

        Args:
            region: the line (checked against the index).
            url: the shard's URL (unused).
            offset: the line's offset (unused).

        Returns:
            The line, without its newline.
        """
        return bytes(region)
