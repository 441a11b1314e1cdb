"""Telling a server that reports CRC-32 for CRC-32C from one that stored other bytes.

moto without the ``crc32c`` package computes plain CRC-32 wherever S3
computes CRC-32C: a multipart upload's full-object checksum above all, so
every upload of more than one part fails against it. The write is still
refused (a checksum of another algorithm checks nothing), but the error
then says what happened instead of pointing at corrupt bytes.
"""

from __future__ import annotations

import zlib

from .._core.errors import StorageError
from .._core.integrity.crc import crc32c
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import ObjectStore

__all__ = ["PLAIN_CRC32", "crc32_note", "stored_crc32_note"]

PLAIN_CRC32 = ("that is the data's CRC-32, not its CRC-32C: the server computes the wrong "
               "checksum (moto does without the crc32c package: pip install crc32c)")

# Reading an object back only to word an error is worth it for a test
# server's objects, not for a checkpoint of many GiB; bounded memory either way.
_READ_BACK_LIMIT = 1 << 30
_CHUNK = 8 << 20


def crc32_note(stored: int, data: memoryview) -> str:
    """``"; " + PLAIN_CRC32`` if ``stored`` is the CRC-32 of ``data``, else ``""``.

    Args:
        stored: the crc32c the server reported.
        data: the bytes sent.

    Returns:
        The note to append to the mismatch's reason.
    """
    return f"; {PLAIN_CRC32}" if zlib.crc32(data) == stored else ""


async def stored_crc32_note(store: ObjectStore, info: ObjectInfo, stored: int,
                            expected: int) -> str:
    """Like :func:`crc32_note` for an object the server assembled (multipart):
    its bytes are read back, pinned to ``info``'s version, and the note is
    given only if they are the bytes sent (their crc32c is ``expected``)
    and ``stored`` is their CRC-32.

    Args:
        store: the store holding the object.
        info: the object as the HEAD after the upload saw it.
        stored: the crc32c the server reported.
        expected: the crc32c of the bytes sent.

    Returns:
        The note to append to the mismatch's reason; ``""`` also when the
        object is too large to read back or cannot be read (the mismatch is
        raised regardless).
    """
    if not 0 < info.size <= _READ_BACK_LIMIT:
        return ""
    buffer = bytearray(min(_CHUNK, info.size))
    # No range is the whole object: a whole read is checked against the
    # server's crc32c, the very value in question, and would fail.
    step = min(_CHUNK, max(1, info.size // 2))
    plain = castagnoli = 0
    try:
        for start in range(0, info.size, step):
            end = min(start + step, info.size)
            view = memoryview(buffer)[:end - start]
            await store.read(info.bucket, info.name, start=start, end=end, into=view,
                             generation=info.generation)
            plain = zlib.crc32(view, plain)
            castagnoli = crc32c(view, castagnoli)
    except StorageError:
        return ""
    return f"; {PLAIN_CRC32}" if (castagnoli, plain) == (expected, stored) else ""
