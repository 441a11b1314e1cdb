"""Server-side copies, checked: CopyObject, and UploadPartCopy past its limit.

The version copied is the one a HEAD saw: every request names its ETag
(``x-amz-copy-source-if-match``), so the copy can be held to that
version's size and checksums, else exactly the version the copy made is
deleted (``If-Match``) before ``ChecksumMismatch``.

CopyObject copies at most 5 GiB. A larger object is copied as a multipart
upload whose parts are ranges of the source (UploadPartCopy), with
full-object crc32c like every upload of ours: each part's crc32c, where the
server reports one, is combined into the whole's and must be the source's
before the upload completes; otherwise nothing is published and the upload
is aborted. S3 gives the object a multipart upload completes into only the
headers its CreateMultipartUpload carried (UploadPartCopy copies bytes
only), so that request carries what CopyObject would have copied
(``x-amz-metadata-directive: COPY``), as the source's HEAD answered it: the
content type, the custom metadata (``x-amz-meta-*``) and
:data:`KEPT_HEADERS`. A copy in parts and a copy in one request give the
same object; a ``Content-Encoding: gzip`` one that lost its coding would be
served as raw gzip bytes.

A source replaced after the HEAD fails the copy (``PreconditionFailed``
naming the source): CopyObject or the first part copy sent after it is
refused, and a copy in parts never publishes parts of two versions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from urllib.parse import quote

from .._core.concurrency.cleanup import to_the_end
from .._core.concurrency.window import gather_bounded
from .._core.errors import (
    ChecksumMismatch,
    NotFound,
    PreconditionFailed,
    StorageError,
    as_operation,
    describe,
)
from .._core.integrity.crc import crc32c_combine, encode_crc32c
from .._core.records.types import ObjectInfo, PartInfo
from .._core.storage.protocol import copy_differs
from .._net.failures import read_metadata
from .._net.transport import HttpResponse, Op
from ._multipart import MAX_PART_SIZE, MAX_PARTS, Multipart
from ._put import discard
from ._xml import (
    answer_crc32c,
    content_md5_base64,
    full_object_crc32c,
    head_size,
    parse,
    query,
    rfc3339,
    text,
)

if TYPE_CHECKING:
    from ._store import S3Store

__all__ = ["COPY_PART_SIZE", "KEPT_HEADERS", "SINGLE_COPY_LIMIT", "copy_object"]

# S3's limit of one CopyObject.
SINGLE_COPY_LIMIT = 5 * 1024**3
# The parts of a larger copy: each is copied by the server, so its size
# costs no memory here; 256 MiB keeps a 5 GiB object at 21 requests (a
# 5 TiB one needs 525 MiB parts to stay within 10,000).
COPY_PART_SIZE = 256 * 1024**2
# Part copies in flight at once (each also takes a transport permit).
_PARTS_IN_FLIGHT = 16
_DEFAULT_CONTENT_TYPE = "application/octet-stream"
# What S3 stores with an object besides its content type and custom
# metadata, returns with every HEAD and GET, and CopyObject copies; not the
# website redirect (CopyObject does not copy it), nor the storage class,
# encryption or ACL (CopyObject gives the copy the request's or the
# bucket's defaults, as CreateMultipartUpload does).
KEPT_HEADERS = ("Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
                "Expires")


async def copy_object(store: S3Store, bucket: str, name: str, dest_bucket: str,
                      dest_name: str) -> ObjectInfo:
    """Copy the version a HEAD sees now, checked (see the module doc)."""
    try:
        src, kept = await _head_source(store, bucket, name)
    except NotFound as exc:
        raise as_operation(exc, "copy") from None
    source = {"x-amz-copy-source": quote(f"/{bucket}/{name}", safe="/-_.~")}
    pinned = store._known_etag(src.generation)
    if pinned:
        source["x-amz-copy-source-if-match"] = pinned
    op = Op("copy", dest_bucket, dest_name, "s3")
    try:
        if src.size > SINGLE_COPY_LIMIT:
            etag = await _copy_in_parts(store, op, src, source, kept)
        else:
            etag = await _copy_whole(store, op, source, Op("copy", bucket, name, "s3"))
    except PreconditionFailed as exc:
        # The only condition sent is the source's ETag.
        raise PreconditionFailed(
            f"{describe('copy', dest_bucket, dest_name, 's3')} failed: the source {src.url} "
            f"was replaced while it was copied (it is no longer the version {pinned} the "
            "copy started from); nothing was published", operation="copy",
            bucket=dest_bucket, name=dest_name, status=exc.status, reason=exc.reason,
            attempts=exc.attempts) from exc
    try:
        info = await store.stat(dest_bucket, dest_name)
    except NotFound as exc:  # deleted since by another client
        raise as_operation(exc, "copy") from None
    if etag and store._remember(etag) != info.generation:
        # Replaced since by another writer: theirs is not ours to check.
        return store._info(dest_bucket, dest_name, size=src.size, etag=etag,
                           crc=src.crc32c, content_type=src.content_type)
    differs = copy_differs(src, info)
    if differs:
        await discard(store, op, info,
                      f"the copy's {' and '.join(differs)} differ from the source's")
    return info


async def _head_source(store: S3Store, bucket: str, name: str
                       ) -> tuple[ObjectInfo, dict[str, str]]:
    """The source as ``store.stat`` reads it, and its :data:`KEPT_HEADERS`
    (from the same HEAD: both are of the version the copy pins).

    Raises:
        NotFound: no such object or bucket.
    """
    op = Op("stat", bucket, name, "s3")

    async def handle(resp: HttpResponse) -> tuple[ObjectInfo, dict[str, str]]:
        lowered = {k.lower(): v for k, v in resp.headers.items()}
        metadata = {k[11:]: v for k, v in lowered.items() if k.startswith("x-amz-meta-")}
        info = store._info(bucket, name, size=head_size(lowered, op),
                           etag=lowered.get("etag", ""), crc=full_object_crc32c(lowered),
                           md5=content_md5_base64(lowered),
                           content_type=lowered.get("content-type"),
                           updated=rfc3339(lowered.get("last-modified")), metadata=metadata)
        kept = {header: lowered[header.lower()] for header in KEPT_HEADERS
                if lowered.get(header.lower())}
        # aws-chunked frames a request's body only; S3 never stores it (a
        # store that reports it anyway would have the upload refused).
        coding = ", ".join(c.strip() for c in kept.pop("Content-Encoding", "").split(",")
                           if c.strip() and c.strip().lower() != "aws-chunked")
        if coding:
            kept["Content-Encoding"] = coding
        return info, kept

    return await store.transport.request(op, "HEAD", store.object_url(bucket, name), handle,
                                         headers={"x-amz-checksum-mode": "ENABLED"})


async def _copy_whole(store: S3Store, op: Op, source: dict[str, str], src_op: Op) -> str:
    """CopyObject; returns the copy's ETag."""
    async def handle(resp: HttpResponse) -> str:
        # S3 keeps the answer alive with whitespace while it copies, and
        # an <Error> inside the 200 raises, naming the source as GCS's
        # copy does.
        return text(parse(await read_metadata(resp, src_op, kept_alive=True), src_op,
                          kept_alive=True), "ETag")

    # Sent under the destination: a wrong-region answer is the destination
    # bucket's (under the source's, its region was recorded for the source
    # and the copy sent again, signed for the same wrong region).
    return await store.transport.request(op, "PUT", store.object_url(op.bucket, op.name),
                                         handle, headers=source)


def part_size(size: int) -> int:
    """The part size of a copy of ``size`` bytes: COPY_PART_SIZE, or more
    (whole MiB) when 10,000 parts of it would not hold the object."""
    mib = 1024 * 1024
    needed = -(-size // MAX_PARTS)
    return min(MAX_PART_SIZE, max(COPY_PART_SIZE, -(-needed // mib) * mib))


async def _copy_in_parts(store: S3Store, op: Op, src: ObjectInfo, source: dict[str, str],
                         kept: dict[str, str]) -> str:
    """Copy ``src`` as a multipart upload of ranges, created with its content
    type, custom metadata and ``kept`` headers; returns the object's ETag.

    Raises:
        ChecksumMismatch: the parts' crc32c is not the source's (aborted,
            nothing published).
    """
    multipart = store._multipart
    bucket, name = op.bucket, op.name
    created: list[str] = []

    async def initiate() -> None:
        created.append(await multipart.initiate(
            bucket, name, src.content_type or _DEFAULT_CONTENT_TYPE, src.metadata or None, kept))

    try:
        # To its end: S3 creates the upload when the request arrives, and
        # only the answer names it; a copy cancelled before it was read
        # could abort nothing, and the upload stayed open.
        await to_the_end(initiate())
    except asyncio.CancelledError:
        if created:
            await _abort(multipart, bucket, name, created[0])
        raise
    upload_id = created[0]
    try:
        step = part_size(src.size)
        ranges = [(number, start, min(start + step, src.size))
                  for number, start in enumerate(range(0, src.size, step), 1)]
        copied = await gather_bounded(
            (_copy_part(store, op, upload_id, number, source, start, end)
             for number, start, end in ranges), _PARTS_IN_FLIGHT)
        whole = _combined(copied, ranges)
        if src.crc32c is not None and whole is not None and whole != src.crc32c:
            raise ChecksumMismatch(
                f"{describe('copy', bucket, name, 's3')} failed: the copied parts have crc32c "
                f"{encode_crc32c(whole)}, the source's is {encode_crc32c(src.crc32c)}; nothing "
                "was published", operation="copy", bucket=bucket, name=name)
        expected = src.crc32c if src.crc32c is not None else whole
        etag, _ = await multipart.complete(bucket, name, upload_id,
                                           [part for part, _ in copied], expected)
    except BaseException:
        await _abort(multipart, bucket, name, upload_id)
        raise
    return etag


async def _abort(multipart: Multipart, bucket: str, name: str, upload_id: str) -> None:
    """Drop a copy's upload and its parts, to its end: a cancelled copy
    still drops them (`aioflux clean` finds an upload whose abort failed);
    a cancellation that came meanwhile is raised once the abort is done."""
    try:
        await to_the_end(multipart.abort(bucket, name, upload_id))
    except StorageError:
        pass


async def _copy_part(store: S3Store, op: Op, upload_id: str, number: int,
                     source: dict[str, str], start: int, end: int) -> tuple[PartInfo, int | None]:
    """UploadPartCopy of ``[start, end)``; returns the part and the crc32c
    the server reports for it (None if it reports none)."""
    part_op = Op(f"copy part {number}", op.bucket, op.name, "s3")

    async def handle(resp: HttpResponse) -> tuple[PartInfo, int | None]:
        root = parse(await read_metadata(resp, part_op, kept_alive=True), part_op,
                     kept_alive=True)
        return PartInfo(number, text(root, "ETag"), end - start), answer_crc32c(root)

    url = store.object_url(op.bucket, op.name) + query(("partNumber", str(number)),
                                                       ("uploadId", upload_id))
    return await store.transport.request(
        part_op, "PUT", url, handle,
        headers={**source, "x-amz-copy-source-range": f"bytes={start}-{end - 1}"})


def _combined(copied: list[tuple[PartInfo, int | None]],
              ranges: list[tuple[int, int, int]]) -> int | None:
    """The whole object's crc32c from its parts', if every part reported one."""
    whole: int | None = None
    for (_, crc), (_, start, end) in zip(copied, ranges, strict=True):
        if crc is None:
            return None
        whole = crc if whole is None else crc32c_combine(whole, crc, end - start)
    return whole
