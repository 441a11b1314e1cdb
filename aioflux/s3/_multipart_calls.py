"""The S3 store's open-upload calls: what ``clean`` uses to find and abort
the uploads killed writers left (the writer engine drives uploads through
``S3Store.start_upload``). The public calls and their checks are
:class:`~aioflux._core.storage.base.StoreBase`'s; these are the wire calls,
:class:`~._multipart.Multipart`'s requests once the bucket's region is
known."""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable

from .._core.records.types import MultipartUploadInfo, PartInfo
from ._multipart import Multipart

__all__ = ["S3MultipartCalls"]


class S3MultipartCalls:
    """What :class:`~._store.S3Store` offers of open multipart uploads."""

    _multipart: Multipart
    # The bucket's region is known (discovered once, on first use).
    _ready: Callable[[str], Awaitable[None]]

    async def _list_uploads(self, bucket: str,
                            prefix: str) -> builtins.list[MultipartUploadInfo]:
        await self._ready(bucket)
        return await self._multipart.list_uploads(bucket, prefix)

    async def _abort_upload(self, bucket: str, name: str, upload_id: str) -> None:
        await self._ready(bucket)
        await self._multipart.abort(bucket, name, upload_id)

    async def _list_parts(self, bucket: str, name: str,
                          upload_id: str) -> builtins.list[PartInfo]:
        await self._ready(bucket)
        return await self._multipart.list_parts(bucket, name, upload_id)
