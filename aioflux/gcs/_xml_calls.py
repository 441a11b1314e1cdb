"""The GCS client's XML multipart calls: S3's protocol on GCS.

The writer engine drives them through ``GcsStore.start_upload``;
``clean`` lists and aborts what killed writers left. The public calls and
their checks are :class:`~aioflux._core.storage.base.MultipartCalls`' and
the base's; each wire call here is the :class:`~._xml.XmlMultipart`
protocol's, under the client's transport.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from .._core.records.types import MultipartUploadInfo, PartInfo
from .._core.storage.base import MultipartCalls
from ._xml import XmlMultipart

__all__ = ["XmlMultipartCalls"]


class XmlMultipartCalls(MultipartCalls):
    """What :class:`~._client.GcsStore` offers of XML multipart uploads."""

    _xml: XmlMultipart

    async def _initiate_multipart(self, bucket: str, name: str, content_type: str,
                                  metadata: dict[str, str] | None) -> str:
        return await self._xml.initiate_multipart(bucket, name, content_type=content_type,
                                                  metadata=metadata)

    async def _upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                           data: memoryview, checksum: int | None) -> PartInfo:
        return await self._xml.upload_part(bucket, name, upload_id, part_number, data, checksum)

    async def _complete_multipart(self, bucket: str, name: str, upload_id: str,
                                  parts: Sequence[PartInfo]) -> dict[str, str]:
        return await self._xml.complete_multipart(bucket, name, upload_id, parts)

    async def _abort_upload(self, bucket: str, name: str, upload_id: str) -> None:
        await self._xml.abort_multipart(bucket, name, upload_id)

    async def _list_parts(self, bucket: str, name: str,
                          upload_id: str) -> builtins.list[PartInfo]:
        return await self._xml.list_parts(bucket, name, upload_id)

    async def _list_uploads(self, bucket: str,
                            prefix: str) -> builtins.list[MultipartUploadInfo]:
        return await self._xml.list_multipart_uploads(bucket, prefix)
