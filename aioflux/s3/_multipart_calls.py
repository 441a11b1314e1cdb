"""The S3 store's public multipart calls: what ``clean`` uses to find and
abort the uploads killed writers left (the writer engine drives uploads
through ``S3Store.start_upload``)."""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable

from .._core.types import MultipartUploadInfo, PartInfo
from .._core.urls import validate_bucket
from .._core.validate import check_object
from ._multipart import Multipart

__all__ = ["MultipartCalls"]


class MultipartCalls:
    """What :class:`~._store.S3Store` offers of open multipart uploads."""

    _multipart: Multipart
    # The bucket's region is known (discovered once, on first use).
    _ready: Callable[[str], Awaitable[None]]

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """Open multipart uploads (for cleaning up after killed writers).

        Args:
            bucket: bucket name.
            prefix: only uploads of keys starting with this.

        Returns:
            MultipartUploadInfo of each open upload.

        Raises:
            StorageError: the listing failed.
        """
        validate_bucket(bucket, scheme="s3")
        await self._ready(bucket)
        return await self._multipart.list_uploads(bucket, prefix)

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Abort a multipart upload and drop its parts.

        Args:
            bucket: bucket name.
            name: object key.
            upload_id: the upload.

        Raises:
            NotFound: no such upload.
            StorageError: any other failure.
        """
        check_object("abort multipart upload", bucket, name, scheme="s3")
        await self._ready(bucket)
        await self._multipart.abort(bucket, name, upload_id)

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """Parts of an open multipart upload.

        Args:
            bucket: bucket name.
            name: object key.
            upload_id: the upload.

        Returns:
            PartInfo in part-number order.

        Raises:
            NotFound: no such upload.
            StorageError: any other failure.
        """
        check_object("list parts", bucket, name, scheme="s3")
        await self._ready(bucket)
        return await self._multipart.list_parts(bucket, name, upload_id)
