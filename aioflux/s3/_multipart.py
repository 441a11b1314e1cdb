"""S3 multipart uploads and batch delete: the XML requests.

Uploads are created with ``x-amz-checksum-algorithm: CRC32C`` and
``x-amz-checksum-type: FULL_OBJECT``: every part carries its crc32c (the
server refuses a corrupted part), and the completed object's checksum is
the crc32c of its whole content, the one the writer computed while sending
it, so the completion and every later whole-object read check the same
number.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import unquote_plus
from xml.sax.saxutils import escape

from .._core.checks.pages import PartListingCheck, UploadListingCheck
from .._core.checks.stated_counts import count_of
from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    ProtocolError,
    StorageError,
    describe,
)
from .._core.integrity.crc import crc32c, decode_crc32c, encode_crc32c
from .._core.integrity.md5 import md5_digest
from .._core.records.types import MultipartUploadInfo, PartInfo
from .._net.failures import drain, read_metadata
from .._net.transport import HttpResponse, Op
from ._crc32_note import crc32_note
from ._put import metadata_headers
from ._xml import NOT_XML, answer_crc32c, children, content_md5, error_of, parse, query, text

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

    from ._store import S3Store

__all__ = ["MAX_PARTS", "MAX_PART_SIZE", "MIN_PART_SIZE", "Multipart"]

MIN_PART_SIZE = 5 * 1024 * 1024  # every part but the last (S3's rule)
MAX_PART_SIZE = 5 * 1024**3
MAX_PARTS = 10_000


def _stored_crc(headers: dict[str, str]) -> int | None:
    value = headers.get("x-amz-checksum-crc32c", "")
    if not value or "-" in value:
        return None
    try:
        return decode_crc32c(value)
    except ValueError:
        return None


class Multipart:
    """The multipart and batch-delete requests of one :class:`S3Store`."""

    def __init__(self, store: S3Store) -> None:
        self.store = store

    def _op(self, operation: str, bucket: str, name: str = "") -> Op:
        return Op(operation, bucket, name, "s3")

    async def _xml(self, op: Op, method: str, url: str, *, headers: dict[str, str] | None = None,
                   data: bytes | None = None, ok: tuple[int, ...] = (200,),
                   kept_alive: bool = False) -> ET.Element:
        async def handle(resp: HttpResponse) -> ET.Element:
            return parse(await read_metadata(resp, op, kept_alive=kept_alive), op,
                         kept_alive=kept_alive)

        return await self.store.transport.request(op, method, url, handle, headers=headers,
                                                  data=data, ok=ok)

    async def initiate(self, bucket: str, name: str, content_type: str,
                       metadata: dict[str, str] | None = None,
                       stored: Mapping[str, str] | None = None) -> str:
        """Create an upload (published with ``metadata`` and the ``stored``
        headers S3 keeps with the object: Cache-Control...); returns its id."""
        op = self._op("initiate multipart upload", bucket, name)
        headers = {**(stored or {}), "Content-Type": content_type,
                   "x-amz-checksum-algorithm": "CRC32C", "x-amz-checksum-type": "FULL_OBJECT"}
        headers.update(metadata_headers("write", bucket, name, metadata))
        root = await self._xml(op, "POST", self.store.object_url(bucket, name) +
                               query(("uploads", None)), headers=headers)
        upload_id = text(root, "UploadId")
        if not upload_id:
            raise StorageError(f"{describe(op.operation, bucket, name, 's3')} failed: no "
                               "UploadId in the response", operation=op.operation,
                               bucket=bucket, name=name)
        return upload_id

    async def upload_part(self, bucket: str, name: str, upload_id: str, number: int,
                          data: memoryview, checksum: int | None = None) -> PartInfo:
        """Send part ``number`` with its crc32c; a server that reports
        storing another crc32c fails it (retried: the part goes again). A
        server that reports none (it keeps no checksums) is held to the MD5
        its ETag is, where it is one (:func:`._xml.content_md5`)."""
        if not 1 <= number <= MAX_PARTS:
            raise InvalidArgument(f"upload part s3://{bucket}/{name}: part number must be "
                                  f"1..{MAX_PARTS}, got {number}")
        view = data.cast("B") if data.format != "B" else data
        crc = crc32c(view) if checksum is None else checksum
        op = self._op(f"upload part {number}", bucket, name)

        async def handle(resp: HttpResponse) -> PartInfo:
            await drain(resp)
            lowered = {k.lower(): v for k, v in resp.headers.items()}
            stored = _stored_crc(lowered)
            md5 = None if stored is not None else content_md5(lowered)
            if stored is not None and stored != crc:
                what = (f"stored crc32c {encode_crc32c(stored)} != sent {encode_crc32c(crc)}"
                        f"{crc32_note(stored, view)}")
            elif md5 is not None and md5 != (await md5_digest(view)).hex():
                what = f"its ETag {lowered.get('etag')} is not the MD5 of the bytes sent"
            else:
                return PartInfo(number, lowered.get("etag", ""), len(view), md5 is not None)
            raise ChecksumMismatch(f"{describe(op.operation, bucket, name, 's3')} failed: "
                                   f"{what}", operation=op.operation, bucket=bucket, name=name)

        url = self.store.object_url(bucket, name) + query(("partNumber", str(number)),
                                                          ("uploadId", upload_id))
        return await self.store.transport.request(
            op, "PUT", url, handle, data=view,
            headers={"x-amz-checksum-crc32c": encode_crc32c(crc),
                     "x-amz-sdk-checksum-algorithm": "CRC32C"})

    async def complete(self, bucket: str, name: str, upload_id: str, parts: Sequence[PartInfo],
                       checksum: int | None, conditions: dict[str, str] | None = None
                       ) -> tuple[str, int | None]:
        """Publish the parts in number order, under ``conditions``
        (``If-None-Match`` / ``If-Match`` headers), the server held to
        ``checksum``, the whole object's crc32c (None: not known, as for a
        copy of an object the store keeps none for); returns the object's
        ETag and the crc32c the server reports for it (None if it reports
        none).

        Raises:
            ProtocolError: the answer names another bucket or key.
        """
        op = self._op("complete multipart upload", bucket, name)
        body = "<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{p.number}</PartNumber><ETag>{escape(p.etag)}</ETag></Part>"
            for p in sorted(parts, key=lambda p: p.number)) + "</CompleteMultipartUpload>"
        whole = {} if checksum is None else {"x-amz-checksum-crc32c": encode_crc32c(checksum),
                                             "x-amz-checksum-type": "FULL_OBJECT"}
        root = await self._xml(op, "POST", self.store.object_url(bucket, name) +
                               query(("uploadId", upload_id)),
                               headers={"Content-Type": "application/xml", **whole,
                                        **(conditions or {})},
                               # S3 keeps the answer alive with whitespace
                               # while it assembles the parts.
                               data=body.encode(), kept_alive=True)
        # parse() dropped what XML cannot carry from the key it names.
        for field, wanted in (("Bucket", bucket), ("Key", NOT_XML.sub("", name))):
            said = text(root, field)
            if said and said != wanted:
                raise ProtocolError(f"{describe(op.operation, bucket, name, 's3')} failed: "
                                    f"the answer names {field} {said[:80]!r}",
                                    operation=op.operation, bucket=bucket, name=name)
        return text(root, "ETag"), answer_crc32c(root)

    async def abort(self, bucket: str, name: str, upload_id: str) -> None:
        """Drop an upload and its parts."""
        await self.store.transport.request(
            self._op("abort multipart upload", bucket, name), "DELETE",
            self.store.object_url(bucket, name) + query(("uploadId", upload_id)), drain,
            ok=(200, 204))

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> list[PartInfo]:
        """Every part of an upload, in number order (all pages).

        Raises:
            ProtocolError: part numbers out of order or repeated, or a marker
                that does not rise (a listing that would never end).
        """
        op = self._op("list parts", bucket, name)
        check = PartListingCheck("s3", bucket, name)
        parts: list[PartInfo] = []
        marker = ""
        while True:
            pairs = [("uploadId", upload_id)]
            if marker:
                pairs.append(("part-number-marker", marker))
            root = await self._xml(op, "GET",
                                   self.store.object_url(bucket, name) + query(*sorted(pairs)))
            for el in children(root, "Part"):
                number, size = check.part(text(el, "PartNumber")), text(el, "Size")
                count = count_of(size)
                if count is None:
                    # int() raised a bare ValueError, naming nothing.
                    raise ProtocolError(f"{describe(op.operation, bucket, name, 's3')} failed: "
                                        f"the listing gives part {number} the size "
                                        f"{size[:40]!r}, not a count of bytes",
                                        operation=op.operation, bucket=bucket, name=name,
                                        status=200)
                parts.append(PartInfo(number, text(el, "ETag"), count))
            if text(root, "IsTruncated").lower() != "true":
                return parts
            marker = check.next_marker(text(root, "NextPartNumberMarker"))

    async def list_uploads(self, bucket: str, prefix: str) -> list[MultipartUploadInfo]:
        """Open uploads of keys under ``prefix`` (all pages).

        Raises:
            ProtocolError: the answer is not an upload listing, or names a
                key outside ``prefix`` (``clean`` would abort it), keys out
                of order, an upload twice, or markers that do not advance.
        """
        op = self._op("list multipart uploads", bucket, prefix)
        check = UploadListingCheck("s3", bucket, prefix)
        uploads: list[MultipartUploadInfo] = []
        key_marker = id_marker = ""
        while True:
            # Keys URL-encoded, as in listings: XML cannot carry every
            # character a key may hold (a server that ignores it says so by
            # naming no EncodingType).
            pairs: list[tuple[str, str | None]] = [("encoding-type", "url"), ("uploads", None)]
            if prefix:
                pairs.append(("prefix", prefix))
            if key_marker:
                pairs += [("key-marker", key_marker), ("upload-id-marker", id_marker)]
            root = await self._xml(op, "GET", self.store.object_url(bucket) +
                                   query(*sorted(pairs, key=lambda p: p[0])))
            decode = unquote_plus if text(root, "EncodingType") == "url" else str
            for el in children(root, "Upload"):
                key, upload_id = decode(text(el, "Key")), text(el, "UploadId")
                check.upload(key, upload_id)
                uploads.append(MultipartUploadInfo(bucket, key, upload_id,
                                                   text(el, "Initiated")))
            if text(root, "IsTruncated").lower() != "true":
                return uploads
            key_marker = decode(text(root, "NextKeyMarker"))
            id_marker = text(root, "NextUploadIdMarker")
            check.next_markers(key_marker, id_marker)

    async def delete_batch(self, bucket: str, names: Sequence[str]) -> None:
        """One DeleteObjects request of at most 1000 keys.

        Raises:
            ProtocolError: the answer is not a DeleteResult (nothing says a
                key was deleted), or reports deleting a key not asked for.
            StorageError: a key could not be deleted (other than NoSuchKey).
        """
        op = self._op("delete many", bucket, names[0] if names else "")
        body = ("<Delete><Quiet>true</Quiet>" + "".join(
            f"<Object><Key>{escape(name)}</Key></Object>" for name in names) +
            "</Delete>").encode()
        # AWS requires a body checksum on DeleteObjects; Content-MD5 is the
        # one every S3-compatible store accepts.
        md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()
        root = await self._xml(op, "POST", self.store.object_url(bucket) +
                               query(("delete", None)),
                               headers={"Content-Type": "application/xml", "Content-MD5": md5},
                               data=body)
        # Another 200 document (a proxy, a store without DeleteObjects)
        # holds no <Error>: read as "all deleted" when nothing was.
        tag = root.tag.rsplit("}", 1)[-1]
        asked = set(names)
        foreign = [key for el in children(root, "Deleted") if (key := text(el, "Key")) not in asked]
        if tag != "DeleteResult" or foreign:
            what = (f"answered <{tag[:40]}>, not <DeleteResult>" if tag != "DeleteResult" else
                    f"reported deleting {foreign[0][:80]!r}, a key it was not asked to delete")
            raise ProtocolError(f"{describe(op.operation, bucket, op.name, 's3')} failed: the "
                                f"server {what}", operation=op.operation, bucket=bucket,
                                name=op.name, status=200)
        for error in children(root, "Error"):
            key, code = text(error, "Key"), text(error, "Code")
            if code == "NoSuchKey":
                continue  # gone is what was asked
            raise error_of(code, f"{code}: {text(error, 'Message')}", op, key)
