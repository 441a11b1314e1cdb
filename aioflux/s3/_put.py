"""One-request writes (PUT), checked, and the preconditions they carry.

A PUT sends its crc32c (``x-amz-checksum-crc32c``); the answer's crc32c,
or without one the MD5 an unencrypted object's ETag is, must be the
data's, else exactly that version is deleted (``If-Match``) before
``ChecksumMismatch``. ``if_generation_match=0`` is ``If-None-Match: *``,
another generation ``If-Match`` on the ETag it stands for. A PUT retried
after its answer was lost, failing its own precondition, succeeds only if
the object holds exactly the bytes sent. Copies are in ``_copy.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.errors import InvalidArgument, NotFound, PreconditionFailed
from .._core.integrity.crc import crc32c, encode_crc32c
from .._core.integrity.md5 import md5_base64
from .._core.records.types import ObjectInfo
from .._net.etag_writes import discard_version
from .._net.etag_writes import precondition_headers as etag_preconditions
from .._net.failures import drain
from .._net.heads import check_header
from .._net.transport import HttpResponse, Op
from ._crc32_note import crc32_note
from ._xml import content_md5_base64, etag_of, full_object_crc32c, precondition_failed

if TYPE_CHECKING:
    from ._store import S3Store

__all__ = ["discard", "metadata_headers", "precondition_headers", "put_object"]


def metadata_headers(op: str, bucket: str, name: str,
                     metadata: dict[str, str] | None) -> dict[str, str]:
    """``metadata`` as ``x-amz-meta-*`` headers (S3 keeps the keys in lower case).

    Raises:
        InvalidArgument: a key or value an HTTP header cannot carry (a
            control character, CR or LF above all).
    """
    headers = {}
    for key, value in (metadata or {}).items():
        try:
            check_header(f"x-amz-meta-{key}", value)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{op} s3://{bucket}/{name}: custom metadata {key!r} cannot "
                                  f"go in an S3 header ({exc})") from None
        headers[f"x-amz-meta-{key}"] = value
    return headers


async def put_object(store: S3Store, bucket: str, name: str, view: memoryview,
                     content_type: str, if_generation_match: int | None,
                     metadata: dict[str, str] | None) -> ObjectInfo:
    """PUT ``view`` as the object, checked (see the module doc).

    Returns:
        ObjectInfo of the new object.

    Raises:
        PreconditionFailed: ``if_generation_match`` did not hold.
        ChecksumMismatch: the server stored other bytes (that version was deleted).
        StorageError: any other failure.
    """
    checksum = crc32c(view)
    op = Op("write", bucket, name, "s3")
    headers = {"Content-Type": content_type, "x-amz-checksum-crc32c": encode_crc32c(checksum),
               "x-amz-sdk-checksum-algorithm": "CRC32C"}
    headers.update(metadata_headers("write", bucket, name, metadata))
    headers.update(await precondition_headers(store, op, if_generation_match))

    async def handle(resp: HttpResponse) -> ObjectInfo:
        await drain(resp)
        lowered = {k.lower(): v for k, v in resp.headers.items()}
        return store._info(bucket, name, size=len(view), etag=lowered.get("etag", ""),
                           crc=full_object_crc32c(lowered), md5=content_md5_base64(lowered),
                           content_type=content_type, metadata=metadata)

    try:
        info = await store.transport.request(
            op, "PUT", store.object_url(bucket, name), handle, headers=headers, data=view)
    except NotFound as exc:
        if if_generation_match is None or "bucket" in exc.reason.lower():
            raise
        raise precondition_failed(op, if_generation_match) from exc
    except PreconditionFailed as exc:
        # A retried PUT whose first attempt landed (answer lost) fails its
        # own precondition: it is ours if the object holds these bytes.
        if exc.attempts < 2 or if_generation_match is None:
            raise
        try:
            stored = await store.stat(bucket, name)
        except NotFound:
            raise exc from None
        if stored.size != len(view):
            raise
        if stored.crc32c is not None:
            if stored.crc32c != checksum:
                raise
        elif stored.md5 is None or stored.md5 != await md5_base64(view):
            # A store that keeps no crc32c: a plain ETag's MD5 says whose
            # bytes these are (taken for another writer's, the write failed).
            raise
        return stored
    return await _verify(store, op, info, view, checksum)


async def precondition_headers(store: S3Store, op: Op,
                               if_generation_match: int | None) -> dict[str, str]:
    """``If-None-Match: *`` for 0, ``If-Match`` on the ETag of another generation.

    Raises:
        PreconditionFailed: the generation is not the object's (nor known).
    """
    return await etag_preconditions(op, if_generation_match, store._etag_for,
                                    precondition_failed)


async def _verify(store: S3Store, op: Op, info: ObjectInfo, view: memoryview,
                  checksum: int) -> ObjectInfo:
    """Check a PUT's answer: the crc32c the server reports (or, without one,
    the MD5 its ETag promises, see content_md5) must be the data's."""
    stored = info.crc32c
    if stored is None:
        if info.md5 is not None:
            if info.md5 != await md5_base64(view):
                await discard(store, op, info, f"its ETag {etag_of(info.generation)} is not "
                                               f"the MD5 of the {len(view)} bytes sent")
        return info.replace(crc32c=checksum)
    if stored != checksum:
        await discard(store, op, info, f"the server stored crc32c {encode_crc32c(stored)}; "
                                       f"sent {encode_crc32c(checksum)}"
                                       f"{crc32_note(stored, view)}")
    return info


async def discard(store: S3Store, op: Op, info: ObjectInfo, why: str) -> None:
    """Delete exactly the version ``info`` names (``If-Match``), then raise.

    Raises:
        ChecksumMismatch: always, saying whether the delete happened.
    """
    await discard_version(op, "object", why, lambda: store._delete_request(
        op.bucket, op.name, store._known_etag(info.generation)))
