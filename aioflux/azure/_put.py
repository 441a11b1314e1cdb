"""Put Blob and Copy Blob, checked, and the preconditions they carry.

A Put Blob sends the body's MD5 (``Content-MD5``: the service refuses a
body that does not match it, ``Md5Mismatch``) and stores aioflux's crc32c
in the metadata; the answer's ``Content-MD5`` must be the one sent, else
exactly that version is deleted (``If-Match``) before ``ChecksumMismatch``.
``if_generation_match=0`` is ``If-None-Match: *`` (which Azure answers
409 ``BlobAlreadyExists``), another generation ``If-Match`` on its ETag. A
write retried after its answer was lost, failing its own precondition,
succeeds only if the blob holds exactly the bytes sent.

A Copy Blob copies the source version a HEAD saw
(``x-ms-source-if-match``) and is held to the source's size and checksums.
A pending copy is looked at until a HEAD says it succeeded (then that HEAD's
blob is the copy: the answer's ETag was the empty blob's it started with),
failed or was aborted (the empty blob it leaves is deleted, ``If-Match``),
or until the retry policy's deadline, when it is aborted and deleted.
"""

from __future__ import annotations

import asyncio
import re
from typing import Protocol
from urllib.parse import quote

from .._core.crc import crc32c, encode_crc32c
from .._core.errors import (
    ChecksumMismatch,
    Conflict,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StorageError,
    as_operation,
    describe,
)
from .._core.md5 import md5_base64
from .._core.store import copy_differs
from .._core.types import ObjectInfo
from .._net.failures import drain
from .._net.heads import check_header
from .._net.transport import HttpResponse, Op, Transport
from ._auth import scrub
from ._xml import CRC_KEY, precondition_failed
from ._xml import md5_base64 as answer_md5

__all__ = ["Writes", "copy_blob", "discard", "metadata_headers", "precondition_headers",
           "put_blob"]

# Azure metadata names are C# identifiers; taken in lower case, as HTTP
# headers (and so every GET and HEAD) do not keep case.
_META_NAME = re.compile(r"[a-z_][a-z0-9_]*")
# How long a pending copy is awaited between looks, at most.
_COPY_POLL_MAX = 2.0


class Writes(Protocol):
    """What the writes need of their store."""

    @property
    def transport(self) -> Transport:
        """The store's transport."""
        ...

    def blob_url(self, container: str, name: str) -> str:
        """A blob's URL."""
        ...

    def copy_source(self, container: str, name: str) -> tuple[str, dict[str, str]]:
        """The source URL of a copy, and headers authorizing it."""
        ...

    def remember(self, etag: str) -> int:
        """The generation of ``etag`` (remembered if hashed)."""
        ...

    def info(self, container: str, name: str, *, size: int, etag: str, crc: int | None,
             md5: str | None = None, content_type: str | None = None,
             updated: str | None = None,
             metadata: dict[str, str] | None = None) -> ObjectInfo:
        """An ObjectInfo of this store."""
        ...

    async def etag_for(self, container: str, name: str, generation: int) -> str | None:
        """The ETag ``generation`` stands for, or None if it is not the blob's."""
        ...

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        """A blob's metadata."""
        ...

    async def head(self, container: str, name: str) -> tuple[ObjectInfo, dict[str, str]]:
        """A blob's metadata and the HEAD's headers (lower-cased)."""
        ...

    async def delete_request(self, container: str, name: str, etag: str | None) -> None:
        """Delete a blob (that ETag only, if given)."""
        ...


def metadata_headers(op: str, container: str, name: str,
                     metadata: dict[str, str] | None) -> dict[str, str]:
    """``metadata`` as ``x-ms-meta-*`` headers.

    Raises:
        InvalidArgument: a name that is no lower-case C# identifier (Azure's
            rule), aioflux's own crc32c name, or a value an HTTP header cannot carry.
    """
    headers = {}
    for key, value in (metadata or {}).items():
        where = f"{op} az://{container}/{name}: custom metadata {key!r}"
        if not _META_NAME.fullmatch(key) or key == CRC_KEY:
            raise InvalidArgument(f"{where}: Azure metadata names are identifiers "
                                  "(lower-case letters, digits and '_', not first a digit); "
                                  f"{CRC_KEY!r} is aioflux's own")
        try:
            check_header(f"x-ms-meta-{key}", value)
            value.encode("ascii")
        except (InvalidArgument, UnicodeEncodeError) as exc:
            raise InvalidArgument(f"{where} cannot go in an Azure header ({exc})") from None
        headers[f"x-ms-meta-{key}"] = value
    return headers


async def precondition_headers(store: Writes, op: Op,
                               if_generation_match: int | None) -> dict[str, str]:
    """``If-None-Match: *`` for 0, ``If-Match`` on the ETag of another generation.

    Raises:
        PreconditionFailed: the generation is not the blob's (nor known).
    """
    if if_generation_match is None:
        return {}
    if if_generation_match == 0:
        return {"If-None-Match": "*"}
    etag = await store.etag_for(op.bucket, op.name, if_generation_match)
    if etag is None:
        raise precondition_failed(op, if_generation_match)
    return {"If-Match": etag}


async def precondition_outcome(store: Writes, op: Op, exc: StorageError,
                               if_generation_match: int | None, size: int,
                               checksum: int) -> ObjectInfo:
    """What a conditional publish (Put Blob, Put Block List) that failed means.

    A retried publish whose first attempt landed (its answer lost) fails its
    own precondition: it is ours if the blob holds these bytes. Azure
    answers ``If-None-Match: *`` with 409 ``BlobAlreadyExists`` and a blob
    gone under ``If-Match`` with 404: both are ``PreconditionFailed``.

    Returns:
        The stored blob, when it is this publish's.

    Raises:
        PreconditionFailed: the condition did not hold.
        StorageError: ``exc``, when it is no precondition's.
    """
    if isinstance(exc, NotFound):
        if if_generation_match is None or "container" in exc.reason.lower():
            raise exc
        raise precondition_failed(op, if_generation_match) from exc
    if isinstance(exc, Conflict) and if_generation_match != 0:
        raise exc
    if exc.attempts >= 2:
        try:
            stored = await store.stat(op.bucket, op.name)
        except NotFound:
            stored = None
        if stored is not None and stored.size == size and stored.crc32c == checksum:
            return stored
    if isinstance(exc, Conflict):
        raise precondition_failed(op, 0) from exc
    raise exc


async def put_blob(store: Writes, container: str, name: str, view: memoryview,
                   content_type: str, if_generation_match: int | None,
                   metadata: dict[str, str] | None) -> ObjectInfo:
    """Put Blob ``view``, checked (see the module doc).

    Returns:
        ObjectInfo of the new blob.

    Raises:
        PreconditionFailed: ``if_generation_match`` did not hold.
        ChecksumMismatch: the service stored other bytes (that version was deleted).
        StorageError: any other failure.
    """
    checksum = crc32c(view)
    md5 = await md5_base64(view)
    op = Op("write", container, name, "az")
    headers = {"x-ms-blob-type": "BlockBlob", "x-ms-blob-content-type": content_type,
               "Content-Type": "application/octet-stream", "Content-MD5": md5,
               f"x-ms-meta-{CRC_KEY}": encode_crc32c(checksum)}
    headers.update(metadata_headers("write", container, name, metadata))
    headers.update(await precondition_headers(store, op, if_generation_match))

    async def handle(resp: HttpResponse) -> ObjectInfo:
        await drain(resp)
        lowered = {k.lower(): v for k, v in resp.headers.items()}
        return store.info(container, name, size=len(view), etag=lowered.get("etag", ""),
                          crc=checksum, md5=answer_md5(lowered), content_type=content_type,
                          metadata=metadata)

    try:
        info = await store.transport.request(op, "PUT", store.blob_url(container, name),
                                             handle, headers=headers, data=view, ok=(201,))
    except (PreconditionFailed, Conflict, NotFound) as exc:
        return await precondition_outcome(store, op, exc, if_generation_match,
                                          len(view), checksum)
    if info.md5 is not None and info.md5 != md5:
        await discard(store, op, info, f"the service stored MD5 {info.md5}; sent {md5}")
    return info


async def copy_blob(store: Writes, container: str, name: str, dest_container: str,
                    dest_name: str) -> ObjectInfo:
    """Copy Blob, checked: the source version a HEAD saw is copied
    (``x-ms-source-if-match``), a pending copy is awaited (within the retry
    policy's deadline), and the copy must have the source's size and
    checksums, else exactly that version of the copy is deleted.

    Raises:
        NotFound: the source, or the destination's container, is missing.
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
        info = await store.stat(dest_container, dest_name)
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


async def _completed(store: Writes, op: Op, copy_id: str) -> ObjectInfo:
    """The copy's metadata, once a HEAD says it succeeded (looked at again,
    less and less often, until the retry policy's deadline; none, no end).

    Raises:
        Conflict: the blob is no longer this copy's (another writer's).
        StorageError: the copy failed or was aborted, or was still pending
            at the deadline (aborted): its blob was deleted.
    """
    deadline = store.transport.config.retry.deadline
    clock = asyncio.get_running_loop().time
    started = clock()
    wait = 0.05
    while True:
        info, headers = await store.head(op.bucket, op.name)
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


def _ours(headers: dict[str, str], copy_id: str) -> bool:
    """Whether a HEAD's blob is still the copy ``copy_id`` started: a write
    drops a copy's properties, another copy brings its own id (an id either
    side does not name is no evidence)."""
    if not headers.get("x-ms-copy-status"):
        return False
    found = headers.get("x-ms-copy-id")
    return not copy_id or found is None or found == copy_id


async def _abort(store: Writes, op: Op, copy_id: str) -> str:
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


async def discard(store: Writes, op: Op, info: ObjectInfo, why: str) -> None:
    """Delete exactly the version ``info`` names (``If-Match``), then raise.

    Raises:
        ChecksumMismatch: always, saying whether the delete happened.
    """
    note = "the blob was deleted"
    try:
        await store.delete_request(op.bucket, op.name,
                                   await store.etag_for(op.bucket, op.name, info.generation))
    except (NotFound, PreconditionFailed):
        note = "a newer version had replaced it and was left alone"
    except StorageError as exc:
        note = f"deleting it failed too ({exc})"
    raise ChecksumMismatch(f"{describe(op.operation, op.bucket, op.name, 'az')}: {why}; "
                           f"{note}", operation=op.operation, bucket=op.bucket, name=op.name)


def quote_name(name: str) -> str:
    """A blob name as a URL path (every byte but the unreserved and ``/`` encoded)."""
    return quote(name, safe="/-_.~")
