"""Copy Blob, checked.

A Copy Blob copies the source version a HEAD saw
(``x-ms-source-if-match``) and is held to the source's size and checksums.
A pending copy is looked at until a HEAD says it succeeded (then that HEAD's
blob is the copy: the answer's ETag was the empty blob's it started with),
failed or was aborted (the empty blob it leaves is deleted, ``If-Match``),
or until the retry policy's deadline, when it is aborted and deleted.
"""

from __future__ import annotations

import asyncio
from typing import Protocol
from urllib.parse import quote

from .._core.errors import (
    Conflict,
    NotFound,
    PreconditionFailed,
    StorageError,
    as_operation,
    describe,
)
from .._core.records.types import ObjectInfo
from .._core.secrets import scrub
from .._core.storage.protocol import copy_differs
from .._net.failures import drain
from .._net.transport import HttpResponse, Op
from ._put import Writes, discard

__all__ = ["Copies", "copy_blob"]

# How long a pending copy is awaited between looks, at most.
_COPY_POLL_MAX = 2.0


class Copies(Writes, Protocol):
    """What a copy needs of its store: the writes' needs, a copy's source
    and the HEAD that looks at a pending copy."""

    def copy_source(self, container: str, name: str) -> tuple[str, dict[str, str]]:
        """The source URL of a copy, and headers authorizing it."""
        ...

    async def head(self, container: str, name: str) -> tuple[ObjectInfo, dict[str, str]]:
        """A blob's metadata and the HEAD's headers (lower-cased)."""
        ...


async def copy_blob(store: Copies, container: str, name: str, dest_container: str,
                    dest_name: str) -> ObjectInfo:
    """Copy Blob, checked: the source version a HEAD saw is copied
    (``x-ms-source-if-match``), a pending copy is awaited (within the retry
    policy's deadline), and the copy must have the source's size and
    checksums, else exactly that version of the copy is deleted.

    Raises:
        NotFound: the source, or the destination's container, is missing;
            or the copy was deleted while pending or once done.
        PreconditionFailed: the source was replaced while it was copied.
        ChecksumMismatch: the copy differs from the source (it was deleted).
        Conflict: the destination was replaced while the copy was pending.
        StorageError: the copy failed, was aborted or was still pending at
            the deadline (its blob was deleted), or any other failure.
    """
    # The request writes the destination: its errors name it (a missing
    # container is the destination's), and say the source.
    op = Op("copy", dest_container, dest_name, "az")
    try:
        src = await store.stat(container, name)
    except NotFound as exc:
        raise as_operation(exc, "copy") from None
    source, auth = store.copy_source(container, name)
    headers = {"x-ms-copy-source": source, **auth}
    pinned = await store.etag_for(container, name, src.generation)
    if pinned:
        headers["x-ms-source-if-match"] = pinned

    async def handle(resp: HttpResponse) -> tuple[str, str, str]:
        await drain(resp)
        return (resp.headers.get("x-ms-copy-status", ""), resp.headers.get("ETag", ""),
                resp.headers.get("x-ms-copy-id", ""))

    try:
        status, etag, copy_id = await store.transport.request(
            op, "PUT", store.blob_url(dest_container, dest_name), handle, headers=headers,
            ok=(202,))
    except StorageError as exc:
        exc.args = (f"{exc} (copying from az://{container}/{name})",)
        raise
    if status in ("", "success"):
        info = (await _look(store, op))[0]
        if etag and store.remember(etag) != info.generation:
            # Replaced since by another writer: theirs is not ours to check.
            return store.info(dest_container, dest_name, size=src.size, etag=etag,
                              crc=src.crc32c, content_type=src.content_type)
    else:
        # The answer's ETag is that of the empty blob a pending copy starts
        # with: the copy is what the HEAD reporting its success describes.
        info = await _completed(store, op, copy_id)
    differs = copy_differs(src, info)
    if differs:
        await discard(store, op, info,
                      f"the copy's {' and '.join(differs)} differ from the source's")
    return info


async def _completed(store: Copies, op: Op, copy_id: str) -> ObjectInfo:
    """The copy's metadata, once a HEAD says it succeeded (looked at again,
    less and less often, until the retry policy's deadline; none, no end).

    Raises:
        NotFound: the blob was deleted meanwhile.
        Conflict: the blob is no longer this copy's (another writer's).
        StorageError: the copy failed or was aborted, or was still pending
            at the deadline (aborted): its blob was deleted.
    """
    deadline = store.transport.config.retry.deadline
    clock = asyncio.get_running_loop().time
    started = clock()
    wait = 0.05
    while True:
        info, headers = await _look(store, op)
        state = headers.get("x-ms-copy-status", "")
        if not _ours(headers, copy_id):
            # Written over while pending: not this copy to check or delete.
            raise Conflict(f"{describe(op.operation, op.bucket, op.name, 'az')} failed: the "
                           "destination was replaced while the copy was pending",
                           operation=op.operation, bucket=op.bucket, name=op.name,
                           reason="CopyReplaced")
        if state == "success":
            return info
        if state != "pending":
            # A failed copy leaves an empty blob with the source's metadata.
            note = await _drop(store, op, headers.get("etag", ""))
            why = scrub(headers.get("x-ms-copy-status-description", ""))[:200]
            raise StorageError(f"{describe(op.operation, op.bucket, op.name, 'az')} failed: "
                               f"the copy ended {state[:40]!r}"
                               f"{f' ({why})' if why else ''}; {note}",
                               operation=op.operation, bucket=op.bucket, name=op.name,
                               reason=state[:40])
        if deadline is not None and clock() - started + wait > deadline:
            note = await _abort(store, op, copy_id)
            raise StorageError(f"{describe(op.operation, op.bucket, op.name, 'az')} failed: "
                               f"the copy was still pending at RetryPolicy.deadline "
                               f"({deadline:g} s) and was aborted; {note}",
                               operation=op.operation, bucket=op.bucket, name=op.name,
                               reason="CopyPending")
        await asyncio.sleep(wait)
        wait = min(wait * 2, _COPY_POLL_MAX)


async def _look(store: Copies, op: Op) -> tuple[ObjectInfo, dict[str, str]]:
    """The destination's HEAD; its NotFound (the copy deleted meanwhile) is
    the copy's error, not the HEAD's."""
    try:
        return await store.head(op.bucket, op.name)
    except NotFound as exc:
        raise as_operation(exc, op.operation) from None


def _ours(headers: dict[str, str], copy_id: str) -> bool:
    """Whether a HEAD's blob is still the copy ``copy_id`` started: a write
    drops a copy's properties, another copy brings its own id (an id either
    side does not name is no evidence)."""
    if not headers.get("x-ms-copy-status"):
        return False
    found = headers.get("x-ms-copy-id")
    return not copy_id or found is None or found == copy_id


async def _abort(store: Copies, op: Op, copy_id: str) -> str:
    """Abort Copy Blob, then delete what it leaves; says what became of the blob."""
    url = (f"{store.blob_url(op.bucket, op.name)}?comp=copy"
           f"&copyid={quote(copy_id, safe='')}")
    try:
        await store.transport.request(op, "PUT", url, drain, ok=(204,),
                                      headers={"x-ms-copy-action": "abort"})
        # An abort may change the ETag: the blob is looked at again.
        _, headers = await store.head(op.bucket, op.name)
    except StorageError as exc:
        return f"aborting it failed too ({exc}), the blob was left"
    if not _ours(headers, copy_id):
        return "a newer version had replaced it and was left alone"
    return await _drop(store, op, headers.get("etag", ""))


async def _drop(store: Writes, op: Op, etag: str) -> str:
    """Delete the blob a copy left (``If-Match`` ``etag``); says whether it was."""
    if not etag:
        return "the blob it left has no ETag to delete it by and was left"
    try:
        await store.delete_request(op.bucket, op.name, etag)
    except (NotFound, PreconditionFailed):
        return "a newer version had replaced it and was left alone"
    except StorageError as exc:
        return f"deleting it failed too ({exc})"
    return "the blob it left was deleted"
