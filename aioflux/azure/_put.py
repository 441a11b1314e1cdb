"""Put Blob, checked, and what every write shares: custom metadata as
headers, preconditions, and the delete of a version that came out wrong.

A Put Blob sends the body's MD5 (``Content-MD5``: the service refuses a
body that does not match it, ``Md5Mismatch``) and stores aioflux's crc32c
in the metadata; the answer's ``Content-MD5`` must be the one sent, else
exactly that version is deleted (``If-Match``) before ``ChecksumMismatch``.
``if_generation_match=0`` is ``If-None-Match: *`` (which Azure answers
409 ``BlobAlreadyExists``), another generation ``If-Match`` on its ETag. A
write retried after its answer was lost, failing its own precondition,
succeeds only if the blob holds exactly the bytes sent.
"""

from __future__ import annotations

import re
from typing import Protocol

from .._core.errors import Conflict, InvalidArgument, NotFound, PreconditionFailed, StorageError
from .._core.integrity.crc import crc32c, encode_crc32c
from .._core.integrity.md5 import md5_base64
from .._core.records.types import ObjectInfo
from .._net.etag_writes import discard_version
from .._net.etag_writes import precondition_headers as etag_preconditions
from .._net.failures import drain
from .._net.heads import check_header
from .._net.transport import HttpResponse, Op, Transport
from ._xml import CRC_KEY, precondition_failed
from ._xml import md5_base64 as answer_md5

__all__ = ["Writes", "discard", "metadata_headers", "precondition_headers", "put_blob"]

# Azure metadata names are C# identifiers; taken in lower case, as HTTP
# headers (and so every GET and HEAD) do not keep case.
_META_NAME = re.compile(r"[a-z_][a-z0-9_]*")


class Writes(Protocol):
    """What the writes need of their store."""

    @property
    def transport(self) -> Transport:
        """The store's transport."""
        ...

    def blob_url(self, container: str, name: str) -> str:
        """A blob's URL."""
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
    return await etag_preconditions(op, if_generation_match, store.etag_for,
                                    precondition_failed)


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


async def discard(store: Writes, op: Op, info: ObjectInfo, why: str) -> None:
    """Delete exactly the version ``info`` names (``If-Match``), then raise.

    Raises:
        ChecksumMismatch: always, saying whether the delete happened.
    """

    async def delete() -> None:
        etag = await store.etag_for(op.bucket, op.name, info.generation)
        await store.delete_request(op.bucket, op.name, etag)

    await discard_version(op, "blob", why, delete)
