"""What a lines shard's samples decode to, checked as the data streams by.

``aioflux shards verify`` checks a shard's bytes against its crc32c and its
format; a ``.jsonl`` shard whose last line was cut (``{"id": 10, "te``)
passed both, and the dataset with ``decode="json"`` failed on it mid-epoch.
The decoders here are the dataset's choices (``"utf-8"``, ``"json"``), each
the same call, so a shard verify passes decodes in the dataset too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..._core.errors import ShardFormatError

__all__ = ["LINE_DECODES", "decode_line", "decoded_lines"]

# The ShardDataset's decode choices of a lines shard given by name.
LINE_DECODES = ("json", "utf-8")


def decode_line(kind: str, line: bytes, op: str, url: str, offset: int) -> Any:
    """One line decoded as the dataset decodes it.

    Args:
        kind: ``"utf-8"`` or ``"json"``.
        line: the line's bytes (without its newline).
        op: the operation, for the message (``read``, ``verify``).
        url: the shard's URL, for the message.
        offset: the line's offset in the shard's data, for the message.

    Returns:
        The text, or the JSON value.

    Raises:
        ShardFormatError: the line is not ``kind``, naming the shard and byte.
    """
    try:
        return line.decode() if kind == "utf-8" else json.loads(line)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError both
        what = "UTF-8" if kind == "utf-8" else "JSON"
        raise ShardFormatError(f"{op} {url}: the line at byte {offset} is not {what}: "
                               f"{exc}") from None


def decoded_lines(chunks: Iterable[bytes | memoryview], kind: str, op: str,
                  url: str) -> Iterator[bytes | memoryview]:
    """``chunks`` passed on unchanged, each line in them decoded on the way.

    The lines are those of the lines format: the bytes between newlines
    without a ``\\r`` before the ``\\n``, empty ones skipped, a last line
    without a newline kept whole (with its ``\\r``). A line is decoded once
    it is complete, before the chunk that ends it is passed on; what is held
    is the line being read.

    Args:
        chunks: a lines shard's data, in order.
        kind: ``"utf-8"`` or ``"json"``.
        op: the operation, for messages.
        url: the shard's URL, for messages.

    Yields:
        The chunks.

    Raises:
        ShardFormatError: a line is not ``kind`` (naming its byte).
    """
    pending = bytearray()  # the line read so far, from byte ``at``
    at = base = 0  # ``base``: offset of the chunk's first byte
    for chunk in chunks:
        data = bytes(chunk)
        start = 0
        while (newline := data.find(b"\n", start)) >= 0:
            line = data[start:newline]
            if pending:
                line = bytes(pending) + line
                pending.clear()
            line = line.removesuffix(b"\r")
            if line:
                decode_line(kind, line, op, url, at)
            start = newline + 1
            at = base + start
        pending += data[start:]
        base += len(data)
        yield chunk
    if pending:
        decode_line(kind, bytes(pending), op, url, at)
