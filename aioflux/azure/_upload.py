"""Azure streaming uploads: Put Block for each part, Put Block List to publish.

Blocks go up in parallel, each with its MD5 (``Content-MD5``: the service
refuses a block whose bytes do not match). Their ids are the upload's own
(a random tag and the part number, the same length for every block, as
Azure requires), so two writers of one name never take each other's
blocks. Nothing is visible until the block list commits, with the blob's
content type, custom metadata and aioflux's crc32c of the whole; the
committed blob must then have the length sent, else exactly that version
is deleted (``If-Match``) before ``ChecksumMismatch``. A payload smaller
than one part goes up in one Put Blob.

An abort sends nothing: uncommitted blocks are invisible, the service
drops them a week after their upload (or at the next commit of that blob),
and no request can drop them earlier without touching the committed blob.

Two refusals of the service have a cause the caller could not guess from
its code, and become a :class:`~aioflux._core.errors.Conflict` naming it
(nothing of the upload is visible either way): a Put Block answered 400
``InvalidBlobOrBlock``, because the blob holds uncommitted blocks whose ids
have another length (another tool's: the Azure SDK's ids are 48
characters, these 32), and a Put Block List answered 400
``InvalidBlockList``, because another write of the blob committed first
and so dropped this upload's blocks.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from typing import Protocol
from urllib.parse import quote
from xml.sax.saxutils import escape

from .._core.errors import (
    Conflict,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    as_operation,
    describe,
)
from .._core.integrity.crc import Crc32c, encode_crc32c
from .._core.integrity.md5 import md5_base64
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import UploadTarget
from .._net.failures import drain
from .._net.transport import HttpResponse, Op
from ._put import Writes, discard, metadata_headers, precondition_headers, precondition_outcome
from ._xml import CRC_KEY

__all__ = ["MAX_BLOCKS", "MAX_BLOCK_SIZE", "AzureUpload"]

MAX_BLOCKS = 50_000
MAX_BLOCK_SIZE = 4000 * 1024 * 1024


class Store(Writes, Protocol):
    """What an upload needs of its store: the writes, and one Put Blob."""

    async def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
                    content_type: str = "application/octet-stream",
                    if_generation_match: int | None = None,
                    metadata: dict[str, str] | None = None,
                    resumable: bool | None = None) -> ObjectInfo:
        """Put Blob, checked."""
        ...


class AzureUpload(UploadTarget):
    """One streaming upload (:class:`~aioflux._core.storage.protocol.PartUpload`) into
    container ``bucket``."""

    def __init__(self, store: Store, container: str, name: str, content_type: str,
                 metadata: dict[str, str] | None = None,
                 if_generation_match: int | None = None) -> None:
        super().__init__(container, name, content_type, metadata, if_generation_match)
        self.store = store
        self._tag = secrets.token_hex(8)
        self._sizes: dict[int, int] = {}

    def block_id(self, number: int) -> str:
        """The base64 id of part ``number`` (the same length for every part)."""
        return base64.b64encode(f"{self._tag}-{number:05d}".encode()).decode()

    async def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Put Block ``number`` (1-based) with its MD5; ``checksum`` is unused
        (Azure checks an MD5 of a block, not a crc32c)."""
        if not 1 <= number <= MAX_BLOCKS:
            raise InvalidArgument(f"upload part az://{self.bucket}/{self.name}: part "
                                  f"number must be 1..{MAX_BLOCKS}, got {number}")
        # "multipart" as the writer engine's stats name a part-by-part
        # upload (it counts the tail part of that mode only).
        self.mode = "multipart"
        view = data.cast("B") if data.format != "B" else data
        op = Op(f"upload part {number}", self.bucket, self.name, "az")
        url = (f"{self.store.blob_url(self.bucket, self.name)}?comp=block"
               f"&blockid={quote(self.block_id(number), safe='')}")
        try:
            await self.store.transport.request(
                op, "PUT", url, drain, data=view, ok=(201,),
                headers={"Content-MD5": await md5_base64(view)})
        except InvalidRequest as exc:
            if exc.reason != "InvalidBlobOrBlock":
                raise
            raise _conflict(op, exc, "the blob has uncommitted blocks of another writer or "
                                     "tool (block ids of another length); they expire in a "
                                     "week, or a Put Blob of the name clears them") from exc
        self._sizes[number] = len(view)

    async def finish(self, last_number: int, tail: memoryview | None, expected: Crc32c,
                     tail_checksum: int | None = None) -> ObjectInfo:
        """Publish: the tail as the last block (or the whole blob in one Put
        Blob if no block was sent), then the block list, checked."""
        if last_number == 1 and not self._sizes:
            self.mode = "single"
            return await self.store.write(self.bucket, self.name, tail or b"",
                                          content_type=self.content_type,
                                          metadata=self.metadata,
                                          if_generation_match=self.if_generation_match)
        if tail is not None and len(tail):
            await self.put(last_number, tail)
        numbers = sorted(self._sizes)
        if numbers != list(range(1, len(numbers) + 1)):
            raise InvalidArgument(f"finish az://{self.bucket}/{self.name}: parts "
                                  f"{numbers[:5]}... are not 1..{len(numbers)}")
        op = Op("commit block list", self.bucket, self.name, "az")
        body = ('<?xml version="1.0" encoding="utf-8"?><BlockList>' + "".join(
            f"<Latest>{escape(self.block_id(n))}</Latest>" for n in numbers) +
            "</BlockList>").encode()
        headers = {"Content-Type": "application/xml",
                   "x-ms-blob-content-type": self.content_type,
                   f"x-ms-meta-{CRC_KEY}": encode_crc32c(expected.value)}
        headers.update(metadata_headers("write", self.bucket, self.name, self.metadata))
        headers.update(await precondition_headers(self.store, op, self.if_generation_match))

        async def handle(resp: HttpResponse) -> str:
            await drain(resp)
            return resp.headers.get("ETag", "")

        try:
            etag = await self.store.transport.request(
                op, "PUT", f"{self.store.blob_url(self.bucket, self.name)}?comp=blocklist",
                handle, headers=headers, data=body, ok=(201,))
        except (PreconditionFailed, Conflict, NotFound) as exc:
            return await precondition_outcome(self.store, op, exc, self.if_generation_match,
                                              expected.length, expected.value)
        except InvalidRequest as exc:
            if exc.reason != "InvalidBlockList":
                raise
            # A commit drops every uncommitted block of the blob, ours too.
            raise _conflict(op, exc, "another write of this blob replaced the upload's "
                                     "blocks") from exc
        return await self._checked(etag, expected)

    async def _checked(self, etag: str, expected: Crc32c) -> ObjectInfo:
        op = Op("write", self.bucket, self.name, "az")
        try:
            info = await self.store.stat(self.bucket, self.name)
        except NotFound as exc:  # deleted since by another client
            raise as_operation(exc, "write") from None
        if etag and self.store.remember(etag) != info.generation:
            # Replaced since: another writer's blob is not ours to check.
            return self.store.info(self.bucket, self.name, size=expected.length, etag=etag,
                                   crc=expected.value, content_type=self.content_type,
                                   metadata=self.metadata)
        if info.size != expected.length or info.crc32c != expected.value:
            shown = "none" if info.crc32c is None else encode_crc32c(info.crc32c)
            await discard(self.store, op, info,
                          f"the service committed {info.size} bytes, crc32c {shown}; sent "
                          f"{expected.length} bytes, crc32c {encode_crc32c(expected.value)}")
        return info

    async def abort(self) -> None:
        """Drop the upload: nothing to send (see the module doc). Safe to call twice."""
        self._sizes.clear()
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"AzureUpload({describe('upload', self.bucket, self.name, 'az')!r})"


def _conflict(op: Op, exc: InvalidRequest, cause: str) -> Conflict:
    return Conflict(f"{describe(op.operation, op.bucket, op.name, 'az')} failed: HTTP 400 "
                    f"{exc.reason}: {cause}; nothing of this upload was published",
                    operation=op.operation, bucket=op.bucket, name=op.name, status=400,
                    reason=exc.reason, attempts=exc.attempts)
