"""The GCS client's public XML multipart calls: S3's protocol on GCS.

The writer engine drives them through ``AsyncClient.start_upload``;
``clean`` lists and aborts what killed writers left. Each call is the
:class:`~._xml.XmlMultipart` protocol's, under the client's transport.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from .._core.types import MultipartUploadInfo, PartInfo
from .._core.urls import validate_bucket
from .._core.validate import (
    check_bytes,
    check_content_type,
    check_instance,
    check_int,
    check_metadata,
    check_object,
    check_str,
)
from ._xml import XmlMultipart

__all__ = ["XmlMultipartCalls"]


class XmlMultipartCalls:
    """What :class:`~._client.GcsStore` offers of XML multipart uploads."""

    _xml: XmlMultipart

    async def initiate_multipart(self, bucket: str, name: str, *,
                                 content_type: str = "application/octet-stream",
                                 metadata: dict[str, str] | None = None) -> str:
        """Start an XML multipart upload; nothing is visible until completion.

        Args:
            bucket: bucket name.
            name: object name.
            content_type: Content-Type of the final object.
            metadata: custom metadata of the final object (``x-goog-meta-*``).

        Returns:
            The upload id.

        Raises:
            InvalidArgument: a content type or metadata a header cannot carry.
            StorageError: the server refused (fake-gcs-server answers 400/404:
                it has no XML multipart upload).
        """
        op = "initiate multipart upload"
        check_object(op, bucket, name)
        check_content_type(op, content_type)
        check_metadata(op, "metadata", metadata)
        return await self._xml.initiate_multipart(bucket, name, content_type=content_type,
                                                  metadata=metadata)

    async def upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                          data: bytes | bytearray | memoryview,
                          checksum: int | None = None) -> PartInfo:
        """Upload one part, its crc32c checked by the server.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: from ``initiate_multipart``.
            part_number: 1..10000.
            data: the part (>= 5 MiB unless it is the last).
            checksum: the part's crc32c if the caller knows it already (a
                writer derives it from its running checksum); computed otherwise.

        Returns:
            PartInfo with the part's ETag.

        Raises:
            InvalidArgument: part number out of range, or an argument of
                the wrong type.
            ChecksumMismatch: the server reports storing other bytes, on
                every attempt.
            StorageError: the upload failed.
        """
        op = "upload part"
        check_object(op, bucket, name)
        check_str(op, "upload_id", upload_id)
        check_int(op, "part_number", part_number, minimum=None)
        check_bytes(op, "data", data)
        check_int(op, "checksum", checksum, optional=True)
        return await self._xml.upload_part(bucket, name, upload_id, part_number, data, checksum)

    async def complete_multipart(self, bucket: str, name: str, upload_id: str,
                                 parts: Sequence[PartInfo]) -> dict[str, str]:
        """Publish the object from its parts, in part-number order.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: the upload.
            parts: every uploaded part.

        Returns:
            Response headers of interest (``x-goog-hash``, ``x-goog-generation``
            when the server sends them).

        Raises:
            InvalidArgument: ``parts`` is not a list of PartInfo.
            InvalidRequest: parts missing, out of order, or too small.
            StorageError: any other failure.
        """
        op = "complete multipart upload"
        check_object(op, bucket, name)
        check_str(op, "upload_id", upload_id)
        check_instance(op, "parts", parts, (list, tuple))
        for part in parts:
            check_instance(op, "parts[...]", part, PartInfo)
        return await self._xml.complete_multipart(bucket, name, upload_id, parts)

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Abort an upload and drop its parts.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: the upload.

        Raises:
            NotFound: no such upload.
            StorageError: any other failure.
        """
        check_object("abort multipart upload", bucket, name)
        check_str("abort multipart upload", "upload_id", upload_id)
        return await self._xml.abort_multipart(bucket, name, upload_id)

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """List the parts uploaded so far.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: the upload.

        Returns:
            PartInfo in part-number order.

        Raises:
            NotFound: no such upload.
            StorageError: any other failure.
        """
        check_object("list parts", bucket, name)
        check_str("list parts", "upload_id", upload_id)
        return await self._xml.list_parts(bucket, name, upload_id)

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """List open multipart uploads (for cleaning up after killed writers).

        Args:
            bucket: bucket name.
            prefix: only uploads of names starting with this.

        Returns:
            MultipartUploadInfo for each open upload.

        Raises:
            StorageError: the listing failed.
        """
        validate_bucket(bucket)
        check_str("list multipart uploads", "prefix", prefix)
        return await self._xml.list_multipart_uploads(bucket, prefix)
