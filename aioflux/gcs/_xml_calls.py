"""The GCS client's public XML multipart calls: S3's protocol on GCS.

The writer engine drives them through ``AsyncClient.start_upload``;
``clean`` lists and aborts what killed writers left. Each call is the
:class:`~._xml.XmlMultipart` protocol's, under the client's transport.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from .._core.types import MultipartUploadInfo, PartInfo
from ._xml import XmlMultipart

__all__ = ["XmlMultipartCalls"]


class XmlMultipartCalls:
    """What :class:`~._client.AsyncClient` offers of XML multipart uploads."""

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
            StorageError: the server refused (fake-gcs-server answers 400/404:
                it has no XML multipart upload).
        """
        return await self._xml.initiate_multipart(bucket, name, content_type=content_type,
                                                  metadata=metadata)

    async def upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                          data: bytes | bytearray | memoryview,
                          checksum: int | None = None) -> PartInfo:
        """Upload one part, its crc32c checked by the server.

        Args:
            bucket: bucket name.
            name: object name.
            upload_id: from :meth:`initiate_multipart`.
            part_number: 1..10000.
            data: the part (>= 5 MiB unless it is the last).
            checksum: the part's crc32c if the caller knows it already (a
                writer derives it from its running checksum); computed otherwise.

        Returns:
            PartInfo with the part's ETag.

        Raises:
            InvalidArgument: part number out of range.
            ChecksumMismatch: the server reports storing other bytes, on
                every attempt.
            StorageError: the upload failed.
        """
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
            InvalidRequest: parts missing, out of order, or too small.
            StorageError: any other failure.
        """
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
        return await self._xml.list_multipart_uploads(bucket, prefix)
