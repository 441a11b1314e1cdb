"""XML-API multipart upload primitives (the S3-compatible protocol of GCS).

gcloud-aio-storage has no XML API, so these requests are ours. Parts are
sent with their crc32c in ``x-goog-hash`` so the server rejects a corrupted
part instead of storing it. Every request names the client's user project
(a requester-pays bucket's payer) in ``x-goog-user-project``, the XML API's
header for it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING
from urllib.parse import quote

from .._core.checks.pages import PartListingCheck, UploadListingCheck
from .._core.checks.stated_counts import count_of
from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    InvalidRequest,
    ProtocolError,
    StorageError,
    describe,
)
from .._core.integrity.crc import crc32c, decode_crc32c, encode_crc32c
from .._core.records.types import MultipartUploadInfo, PartInfo
from .._core.records.urls import validate_bucket, validate_object_name
from .._net.failures import drain, read_metadata
from .._net.heads import check_header
from .._net.transport import HttpResponse, Op
from .._net.xml_doctype import refuse_doctype
from ._auth import USER_PROJECT_HEADER

if TYPE_CHECKING:
    from .._net.transport import Transport

__all__ = ["MAX_PARTS", "MIN_PART_SIZE", "XmlMultipart", "stored_crc"]

MIN_PART_SIZE = 5 * 1024 * 1024  # every part but the last, per the protocol
MAX_PARTS = 10_000


def _children(root: ET.Element, tag: str) -> list[ET.Element]:
    # GCS answers with or without the S3 namespace; match on the local name.
    return [el for el in root.iter() if el.tag.rsplit("}", 1)[-1] == tag]


def _text(root: ET.Element, tag: str, default: str = "") -> str:
    for el in root:
        if el.tag.rsplit("}", 1)[-1] == tag:
            return el.text or ""
    return default


def stored_crc(values: Sequence[str]) -> int | None:
    """The crc32c an ``x-goog-hash`` reports ("crc32c=...,md5=..." in one
    header or several); None where it reports none or a malformed one (a
    bare ValueError otherwise: the object's crc32c is checked all the same,
    by a stat)."""
    for value in values:
        for item in value.split(","):
            key, _, encoded = item.strip().partition("=")
            if key == "crc32c" and encoded:
                try:
                    return decode_crc32c(encoded)
                except ValueError:  # binascii.Error is one
                    return None
    return None


def _parse(raw: bytes, op: Op) -> ET.Element:
    # The whitespace a server may keep a completion alive with comes before
    # the XML declaration, where XML allows nothing: a completion that
    # published would read as a failure.
    raw = raw.lstrip(b" \t\r\n")
    refuse_doctype(raw, op)
    try:
        return ET.fromstring(raw)
    except ET.ParseError as exc:
        raise StorageError(f"{op.operation} gs://{op.bucket}/{op.name}: unparsable XML "
                           f"response ({exc})", operation=op.operation, bucket=op.bucket,
                           name=op.name) from exc


def _part_size(el: ET.Element, op: Op, number: int) -> int:
    # Read strictly: a missing, negative or malformed size is a
    # ProtocolError naming the part, never 0 or a bare ValueError.
    size = _text(el, "Size").strip()
    count = count_of(size)
    if count is None:
        raise ProtocolError(f"{describe(op.operation, op.bucket, op.name)} failed: the listing "
                            f"gives part {number} the size {size[:40]!r}, not a count of bytes",
                            operation=op.operation, bucket=op.bucket, name=op.name, status=200)
    return count


class XmlMultipart:
    """The XML multipart upload API (S3's protocol) on a GCS endpoint.

    Args:
        transport: the client's transport (semaphore, retries, auth).
        endpoint: the API root.
        user_project: the project every request bills, or None.
    """

    def __init__(self, transport: Transport, endpoint: str,
                 user_project: str | None = None) -> None:
        self._transport = transport
        self.endpoint = endpoint
        # Added to every request's own headers (made once).
        self._headers: Mapping[str, str] = MappingProxyType(
            {USER_PROJECT_HEADER: user_project} if user_project else {})

    def _xml_url(self, bucket: str, name: str = "") -> str:
        # Every '/' quoted too (as google-cloud-storage's XML uploads do): a
        # name's "." and ".." segments left as path segments are resolved by
        # yarl before sending, so "a/../b" would upload to "b", and
        # "x/../../other/y" into another bucket.
        return f"{self.endpoint}/{bucket}/{quote(name, safe='')}"

    async def initiate_multipart(self, bucket: str, name: str, *,
                                 content_type: str = "application/octet-stream",
                                 metadata: dict[str, str] | None = None) -> str:
        """See :meth:`AsyncClient.initiate_multipart` (the public face)."""
        validate_bucket(bucket)
        validate_object_name(name)
        op = Op("initiate multipart upload", bucket, name)

        async def handle(resp: HttpResponse) -> str:
            upload_id = _text(_parse(await read_metadata(resp, op), op), "UploadId")
            if not upload_id:
                raise StorageError(f"initiate multipart upload gs://{bucket}/{name}: no UploadId "
                                   "in the response", operation=op.operation, bucket=bucket,
                                   name=name)
            return upload_id

        headers = {"Content-Type": content_type, **self._headers}
        for key, value in (metadata or {}).items():
            try:
                check_header(f"x-goog-meta-{key}", value)
            except InvalidArgument as exc:
                raise InvalidArgument(f"initiate multipart upload gs://{bucket}/{name}: custom "
                                      f"metadata {key!r} cannot go in an XML API header "
                                      f"({exc})") from None
            headers[f"x-goog-meta-{key}"] = value
        return await self._transport.request(op, "POST", self._xml_url(bucket, name) + "?uploads",
                                            handle, headers=headers)

    async def upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                          data: bytes | bytearray | memoryview,
                          checksum: int | None = None) -> PartInfo:
        """See :meth:`AsyncClient.upload_part` (the public face)."""
        if not 1 <= part_number <= MAX_PARTS:
            raise InvalidArgument(f"upload part gs://{bucket}/{name}: part number must be "
                                  f"1..{MAX_PARTS}, got {part_number}")
        view = memoryview(data).cast("B")
        crc = crc32c(view) if checksum is None else checksum
        op = Op(f"upload part {part_number}", bucket, name)

        async def handle(resp: HttpResponse) -> PartInfo:
            await drain(resp)
            # A server that does not check our x-goog-hash still reports what
            # it stored: catch a corrupted part here, before anything is
            # published (ChecksumMismatch is retried: the part goes again).
            stored = stored_crc(resp.headers.getall("x-goog-hash", []))
            if stored is not None and stored != crc:
                raise ChecksumMismatch(
                    f"upload part {part_number} gs://{bucket}/{name}: stored crc32c "
                    f"{encode_crc32c(stored)} != sent {encode_crc32c(crc)}",
                    operation=op.operation, bucket=bucket, name=name)
            return PartInfo(part_number, resp.headers.get("ETag", ""), len(view))

        return await self._transport.request(
            op, "PUT", self._xml_url(bucket, name), handle,
            params={"partNumber": str(part_number), "uploadId": upload_id},
            headers={"x-goog-hash": f"crc32c={encode_crc32c(crc)}", **self._headers}, data=view)

    async def complete_multipart(self, bucket: str, name: str, upload_id: str,
                                 parts: Sequence[PartInfo]) -> dict[str, str]:
        """See :meth:`AsyncClient.complete_multipart` (the public face)."""
        op = Op("complete multipart upload", bucket, name)
        ordered = sorted(parts, key=lambda p: p.number)
        body = "<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{p.number}</PartNumber><ETag>{p.etag}</ETag></Part>"
            for p in ordered) + "</CompleteMultipartUpload>"

        async def handle(resp: HttpResponse) -> dict[str, str]:
            # The XML API is S3's: its answer may be kept alive with whitespace.
            root = _parse(await read_metadata(resp, op, kept_alive=True), op)
            if root.tag.rsplit("}", 1)[-1] == "Error":
                # S3-style servers may report a failed completion inside a 200.
                raise StorageError(f"complete multipart upload gs://{bucket}/{name} failed: "
                                   f"{_text(root, 'Code')}: {_text(root, 'Message')}",
                                   operation=op.operation, bucket=bucket, name=name)
            return {k.lower(): v for k, v in resp.headers.items()
                    if k.lower() in ("x-goog-hash", "x-goog-generation", "etag")}

        return await self._transport.request(
            op, "POST", self._xml_url(bucket, name), handle, params={"uploadId": upload_id},
            headers={"Content-Type": "application/xml", **self._headers}, data=body.encode())

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """See :meth:`AsyncClient.abort_multipart` (the public face)."""

        await self._transport.request(Op("abort multipart upload", bucket, name), "DELETE",
                                     self._xml_url(bucket, name), drain,
                                     params={"uploadId": upload_id}, headers=self._headers,
                                     ok=(200, 204))

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> list[PartInfo]:
        """See :meth:`AsyncClient.list_parts` (the public face)."""
        op = Op("list parts", bucket, name)
        check = PartListingCheck("gs", bucket, name)
        parts: list[PartInfo] = []
        marker = ""
        while True:
            params = {"uploadId": upload_id}
            if marker:
                params["part-number-marker"] = marker

            async def handle(resp: HttpResponse) -> ET.Element:
                return _parse(await read_metadata(resp, op), op)

            root = await self._transport.request(op, "GET", self._xml_url(bucket, name), handle,
                                                params=params, headers=self._headers)
            for el in _children(root, "Part"):
                number = check.part(_text(el, "PartNumber"))
                parts.append(PartInfo(number, _text(el, "ETag"), _part_size(el, op, number)))
            if _text(root, "IsTruncated").lower() != "true":
                return parts
            marker = check.next_marker(_text(root, "NextPartNumberMarker"))

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> list[MultipartUploadInfo]:
        """See :meth:`AsyncClient.list_multipart_uploads` (the public face)."""
        validate_bucket(bucket)
        op = Op("list multipart uploads", bucket, prefix)
        check = UploadListingCheck("gs", bucket, prefix)
        uploads: list[MultipartUploadInfo] = []
        key_marker = id_marker = ""
        while True:
            query = "?uploads"
            if prefix:
                query += "&prefix=" + quote(prefix, safe="")
            if key_marker:
                query += "&key-marker=" + quote(key_marker, safe="")
                query += "&upload-id-marker=" + quote(id_marker, safe="")

            async def handle(resp: HttpResponse) -> ET.Element:
                return _parse(await read_metadata(resp, op), op)

            root = await self._transport.request(op, "GET", f"{self.endpoint}/{bucket}{query}",
                                                handle, headers=self._headers)
            if root.tag.rsplit("}", 1)[-1] != "ListMultipartUploadsResult":
                # fake-gcs-server ignores "?uploads" and lists objects: that
                # is "cannot list", not "no uploads open".
                raise InvalidRequest(
                    f"{op.operation} gs://{bucket}: the server has no XML multipart upload "
                    f"listing (it answered <{root.tag.rsplit('}', 1)[-1]}>)",
                    operation=op.operation, bucket=bucket, status=200, reason="unsupported")
            for el in _children(root, "Upload"):
                key, upload_id = _text(el, "Key"), _text(el, "UploadId")
                check.upload(key, upload_id)  # clean aborts what this returns
                uploads.append(MultipartUploadInfo(bucket, key, upload_id,
                                                   _text(el, "Initiated")))
            if _text(root, "IsTruncated").lower() != "true":
                return uploads
            key_marker = _text(root, "NextKeyMarker")
            id_marker = _text(root, "NextUploadIdMarker")
            check.next_markers(key_marker, id_marker)
