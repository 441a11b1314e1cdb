"""Reads pinned to an ETag: how the ETag stores (S3, Azure) read a version.

On those stores a generation is an ETag as a number (:mod:`.._core.storage.etags`);
a read of one is a checked media GET (:func:`.media.read_media`) with
``If-Match`` on its ETag, and every attempt of a resumed read is pinned to
the ETag first served. A 412 then means the object changed: the pinned
generation is gone (``NotFound``, as an overwritten generation is on GCS),
or, unpinned by the caller, the object was replaced while it was read.
Bytes of two versions are never put together.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from .._core.errors import NotFound, PreconditionFailed, describe
from .._core.storage.protocol import Fetched
from .checked_reads import Answers, read_media
from .transport import Op, Transport

__all__ = ["gone", "read_pinned"]


def gone(op: Op, generation: int, *, what: str, reason: str) -> NotFound:
    """A pinned generation (ETag) that is no longer the object's.

    Args:
        op: operation, bucket, object and scheme, for the message.
        generation: the generation pinned.
        what: what the store calls an object ("blob").
        reason: the service's error code for a failed ``If-Match``.
    """
    return NotFound(f"{describe(op.operation, op.bucket, op.name, op.scheme)} failed: the "
                    f"{what} is no longer generation {generation} (its ETag changed)",
                    operation=op.operation, bucket=op.bucket, name=op.name, status=412,
                    reason=reason)


async def read_pinned(transport: Transport, op: Op, url: str, *, generation: int | None,
                      etag_for: Callable[[int], Awaitable[str | None]], what: str,
                      reason: str, start: int, end: int | None, into: memoryview | None,
                      size: int | None, crc: int | None, verify: bool, want_crc: bool,
                      headers: Mapping[str, str], answers: Answers) -> Fetched:
    """:func:`~.media.read_media` of ``generation`` (or of the version first
    served), an ETag store's ``_fetch``.

    Args:
        transport: sends the attempts.
        op: the read's operation, bucket, object and scheme.
        url: the object's URL.
        generation: the version to read, None for the current one.
        etag_for: the ETag a generation stands for, None if it is not the
            object's.
        what: what the store calls an object ("blob"), for messages.
        reason: the service's error code for a failed ``If-Match``.
        start, end, into, size, crc, verify, want_crc: as for ``read_media``.
        headers: the store's headers of every attempt (``If-Match`` added).
        answers: the store's response headers (``read_media``'s).

    Raises:
        NotFound: the generation is not (or no longer) the object's, or the
            object was replaced while it was read.
        StorageError: as ``read_media``.
    """
    pinned = dict(headers)
    if generation is not None:
        etag = await etag_for(generation)
        if etag is None:
            raise gone(op, generation, what=what, reason=reason)
        pinned["If-Match"] = etag
    try:
        return await read_media(transport, op, url, start=start, end=end, into=into, size=size,
                                crc=crc, verify=verify, want_crc=want_crc, headers=pinned,
                                answers=answers, version=generation)
    except PreconditionFailed as exc:
        # The ETag pinned (by the caller, or by the first response of a
        # resumed read) is no longer the object's.
        if generation is not None:
            raise gone(op, generation, what=what, reason=reason) from exc
        raise NotFound(f"{describe(op.operation, op.bucket, op.name, op.scheme)} failed: the "
                       f"{what} was replaced while it was read", operation=op.operation,
                       bucket=op.bucket, name=op.name, status=412, reason=reason) from exc
