"""JSON-API resumable upload session.

Used for large single-object writes and as the streaming fallback of the
checkpoint writer where a server has no XML multipart upload. Chunks must be
multiples of 256 KiB except the last; the server reports what it persisted
(``Range`` on a 308), and we resend from there, so a torn chunk never
corrupts the object. The object appears only when the final chunk lands.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import aiohttp

from ._crc import encode_crc32c
from ._errors import InvalidArgument, StorageError
from ._transport import Op
from ._types import ObjectInfo

if TYPE_CHECKING:
    from ._client import AsyncClient

__all__ = ["CHUNK_GRANULARITY", "DEFAULT_CHUNK_SIZE", "ResumableUpload"]

CHUNK_GRANULARITY = 256 * 1024
DEFAULT_CHUNK_SIZE = 16 * 1024 * 1024
_RANGE = re.compile(r"bytes=0-(\d+)")


class ResumableUpload:
    """One resumable upload session.

    Args:
        client: the AsyncClient to send with.
        bucket: bucket name.
        name: object name.
        content_type: Content-Type to store.
        if_generation_match: precondition on the object (0 = must not exist).
        metadata: custom metadata.
        chunk_size: bytes per request when given a large body.
    """

    def __init__(
        self,
        client: AsyncClient,
        bucket: str,
        name: str,
        *,
        content_type: str = "application/octet-stream",
        if_generation_match: int | None = None,
        metadata: dict[str, str] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        if chunk_size <= 0 or chunk_size % CHUNK_GRANULARITY:
            raise InvalidArgument(f"chunk_size must be a positive multiple of "
                                  f"{CHUNK_GRANULARITY}, got {chunk_size}")
        self._client = client
        self.bucket = bucket
        self.name = name
        self._content_type = content_type
        self._precondition = if_generation_match
        self._metadata = metadata
        self.chunk_size = chunk_size
        self.session_url: str | None = None
        self.offset = 0

    def _op(self) -> Op:
        return Op("resumable upload", self.bucket, self.name)

    async def start(self) -> None:
        """Open the session.

        Raises:
            StorageError: the server refused.
        """
        resource: dict[str, Any] = {"name": self.name, "contentType": self._content_type}
        if self._metadata:
            resource["metadata"] = self._metadata
        params = {"uploadType": "resumable", "name": self.name}
        if self._precondition is not None:
            params["ifGenerationMatch"] = str(self._precondition)

        async def location(resp: aiohttp.ClientResponse) -> str:
            await resp.read()
            url = resp.headers.get("Location")
            if not url:
                raise StorageError(f"resumable upload gs://{self.bucket}/{self.name}: "
                                   "no session Location in the response",
                                   operation="resumable upload", bucket=self.bucket,
                                   name=self.name)
            return url

        self.session_url = await self._client.transport.request(
            self._op(), "POST", f"{self._client.endpoint}/upload/storage/v1/b/{self.bucket}/o",
            location, params=params, data=json.dumps(resource).encode(),
            headers={"Content-Type": "application/json; charset=UTF-8",
                     "X-Upload-Content-Type": self._content_type})

    async def send(self, chunk: bytes | bytearray | memoryview) -> None:
        """Send a non-final chunk (a multiple of 256 KiB).

        Args:
            chunk: the next bytes of the object.

        Raises:
            InvalidArgument: the chunk size is not a multiple of 256 KiB.
            StorageError: the upload failed.
        """
        view = memoryview(chunk).cast("B")
        if len(view) % CHUNK_GRANULARITY:
            raise InvalidArgument(f"resumable chunks must be multiples of {CHUNK_GRANULARITY} "
                                  f"bytes except the last, got {len(view)}")
        if view:
            await self._put(view, total=None, crc=None)

    async def finish(self, data: bytes | bytearray | memoryview = b"",
                     crc32c: int | None = None) -> ObjectInfo:
        """Send the remaining bytes and publish the object.

        Args:
            data: the remaining bytes (any length; sent in ``chunk_size`` pieces).
            crc32c: crc32c of the whole object, checked by the server.

        Returns:
            ObjectInfo of the new object.

        Raises:
            StorageError: the upload failed (no object is published).
        """
        view = memoryview(data).cast("B")
        while len(view) > self.chunk_size:
            await self.send(view[: self.chunk_size])
            view = view[self.chunk_size:]
        info = await self._put(view, total=self.offset + len(view), crc=crc32c)
        assert info is not None
        return info

    async def cancel(self) -> None:
        """Abandon the session; nothing is published. Safe to call twice."""
        url, self.session_url = self.session_url, None
        if url is None:
            return

        async def ignore(resp: aiohttp.ClientResponse) -> None:
            await resp.read()

        try:
            await self._client.transport.request(self._op(), "DELETE", url, ignore,
                                                 ok=(200, 204, 404, 499))
        except StorageError:
            # GCS expires abandoned sessions after a week; nothing is visible
            # meanwhile, so a failed cancel loses nothing.
            pass

    async def _put(self, view: memoryview, *, total: int | None,
                   crc: int | None) -> ObjectInfo | None:
        if self.session_url is None:
            raise InvalidArgument(f"resumable upload gs://{self.bucket}/{self.name} "
                                  "is not started or already finished")
        start = self.offset
        end = start + len(view)
        while True:
            piece = view[self.offset - start:]
            size = "*" if total is None else str(total)
            content_range = (f"bytes {self.offset}-{end - 1}/{size}" if len(piece)
                             else f"bytes */{size}")
            headers = {"Content-Range": content_range}
            if crc is not None and total is not None:
                headers["X-Goog-Hash"] = f"crc32c={encode_crc32c(crc)}"

            async def handle(resp: aiohttp.ClientResponse) -> tuple[int, ObjectInfo | None]:
                raw = await resp.read()
                if resp.status == 308:
                    match = _RANGE.match(resp.headers.get("Range", ""))
                    return (int(match.group(1)) + 1 if match else 0), None
                return end, ObjectInfo.from_json(self.bucket, json.loads(raw))

            committed, info = await self._client.transport.request(
                self._op(), "PUT", self.session_url, handle, data=piece, headers=headers,
                ok=(200, 201, 308))
            if committed < start:
                # Bytes acknowledged earlier are gone and no longer in hand.
                raise StorageError(
                    f"resumable upload gs://{self.bucket}/{self.name}: server persisted "
                    f"{committed} bytes, fewer than the {start} it acknowledged",
                    operation="resumable upload", bucket=self.bucket, name=self.name)
            self.offset = committed
            if info is not None:
                self.session_url = None
                return info
            if self.offset >= end:
                return None
