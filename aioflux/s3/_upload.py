"""S3 streaming uploads: the parts of a writer, published all at once.

A multipart upload starts with the first part; parts go up in parallel,
each with its crc32c. A payload smaller than one part goes up in a single
PUT. The completed object is checked against the running crc32c and
length (the crc32c the server reports, else a HEAD); on a server that
keeps no checksums, each part's ETag was checked as its MD5, and the
object's ETag must be the MD5 of theirs (``<md5>-<parts>``), so the server
assembled exactly the parts sent. One that differs is deleted, the
version the completion made only (``If-Match``: a writer that replaced it
since keeps its object), before ``ChecksumMismatch``. A completion retried
after its answer was lost (``NoSuchUpload``) succeeds only if the object
holds exactly those bytes. A precondition (``If-None-Match: *``, or
``If-Match``) goes on the completion, or on the single PUT; a retried
completion that fails it after the first attempt's answer was lost
succeeds only if the object holds exactly those bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import TYPE_CHECKING

from .._core.concurrency.window import shared_task
from .._core.errors import NotFound, PreconditionFailed, StorageError, as_operation
from .._core.integrity.crc import Crc32c, encode_crc32c
from .._core.records.types import ObjectInfo, PartInfo
from .._core.storage.protocol import UploadTarget, published_before
from .._net.transport import Op
from ._crc32_note import stored_crc32_note
from ._put import discard, precondition_headers

if TYPE_CHECKING:
    from ._multipart import Multipart
    from ._store import S3Store

__all__ = ["S3Upload"]

# The ETag S3 (and MinIO, Ceph, moto) gives a completed multipart upload.
_PARTS_ETAG = re.compile(r"[0-9a-f]{32}-\d+")


class S3Upload(UploadTarget):
    """One streaming upload (:class:`~aioflux._core.storage.protocol.PartUpload`)."""

    def __init__(self, store: S3Store, multipart: Multipart, bucket: str, name: str,
                 content_type: str, metadata: dict[str, str] | None = None,
                 if_generation_match: int | None = None) -> None:
        super().__init__(bucket, name, content_type, metadata, if_generation_match)
        self.store = store
        self.multipart = multipart
        self._init: asyncio.Future[str] | None = None
        self._upload_id: str | None = None
        self._parts: dict[int, PartInfo] = {}

    async def _start(self) -> str:
        if self._init is None:
            # Awaited by every part: see shared_task.
            self._init = shared_task(self._initiate())
        # Shielded: a part cancelled while the upload is being created must
        # not lose the upload id, or abort() could not drop the upload.
        return await asyncio.shield(self._init)

    async def _initiate(self) -> str:
        await self.store._ready(self.bucket)
        upload_id = await self.multipart.initiate(self.bucket, self.name, self.content_type,
                                                  self.metadata)
        self._upload_id = upload_id
        self.mode = "multipart"
        return upload_id

    async def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Upload part ``number`` (1-based); ``checksum`` is its crc32c if known."""
        upload_id = await self._start()
        self._parts[number] = await self.multipart.upload_part(
            self.bucket, self.name, upload_id, number, data, checksum)

    async def finish(self, last_number: int, tail: memoryview | None, expected: Crc32c,
                     tail_checksum: int | None = None) -> ObjectInfo:
        """Publish: the tail as the last part (or the whole object in one PUT
        if no part was sent), then check the stored crc32c and length."""
        if last_number == 1 and self._init is None:
            self.mode = "single"
            return await self.store.write(self.bucket, self.name, tail or b"",
                                          content_type=self.content_type, metadata=self.metadata,
                                          if_generation_match=self.if_generation_match)
        if tail is not None and len(tail):
            await self.put(last_number, tail, tail_checksum)
        upload_id = await self._start()
        self._upload_id = None
        op = Op("write", self.bucket, self.name, "s3")
        try:
            etag, stored = await self.multipart.complete(
                self.bucket, self.name, upload_id, list(self._parts.values()), expected.value,
                await precondition_headers(self.store, op, self.if_generation_match))
        except (NotFound, PreconditionFailed) as exc:
            self._upload_id = upload_id  # let abort() try to drop it
            return await self._completed_before(exc, expected)
        except BaseException:
            self._upload_id = upload_id  # still open: let abort() drop it
            raise
        return await self._checked(etag, stored, expected)

    async def _checked(self, etag: str, stored: int | None, expected: Crc32c) -> ObjectInfo:
        """The completed object, once it holds what was sent (see the module doc)."""
        op = Op("write", self.bucket, self.name, "s3")
        try:
            info = await self.store.stat(self.bucket, self.name)
        except NotFound as exc:  # deleted since by another client
            raise as_operation(exc, "write") from None
        made = self.store._remember(etag) if etag else info.generation
        if made != info.generation:
            # Replaced since: the HEAD shows another writer's object, whose
            # size is not ours to check nor its version ours to delete.
            info = self.store._info(self.bucket, self.name, size=expected.length, etag=etag,
                                    crc=stored, content_type=self.content_type,
                                    metadata=self.metadata)
        elif stored is None:
            stored = info.crc32c
        if info.size != expected.length or (stored is not None and stored != expected.value):
            shown = "none" if stored is None else encode_crc32c(stored)
            note = ""
            if stored is not None and info.size == expected.length:
                note = await stored_crc32_note(self.store, info, stored, expected.value)
            await discard(self.store, op, info, f"the server stored {info.size} bytes, crc32c "
                                                f"{shown}; sent {expected.length} bytes, "
                                                f"crc32c {encode_crc32c(expected.value)}{note}")
        if stored is None:
            parts = sorted(self._parts.values(), key=lambda p: p.number)
            wanted = _parts_etag(parts)
            said = etag.strip().strip('"').lower()
            if wanted is not None and _PARTS_ETAG.fullmatch(said) and said != wanted:
                await discard(self.store, op, info, f"its ETag {etag} is not {wanted}, the "
                                                    f"ETag of the {len(parts)} parts sent")
        return info.replace(crc32c=expected.value)

    async def _completed_before(self, exc: NotFound | PreconditionFailed,
                                expected: Crc32c) -> ObjectInfo:
        try:
            info = await published_before(self.store, self.bucket, self.name, exc,
                                          expected.length, expected.value)
        except (NotFound, PreconditionFailed):
            if exc.attempts < 2:
                raise
            # A store that keeps no crc32c: the object is this upload's if
            # its ETag is the parts' (each part's MD5 checked as it went up).
            info = await self.store.stat(self.bucket, self.name)
            parts = sorted(self._parts.values(), key=lambda p: p.number)
            wanted = _parts_etag(parts)
            etag = (self.store._known_etag(info.generation) or "").strip().strip('"').lower()
            if info.crc32c is not None or info.size != expected.length or wanted is None \
                    or etag != wanted:
                raise exc from None
            info = info.replace(crc32c=expected.value)
        self._upload_id = None
        return info

    async def abort(self) -> None:
        """Drop the upload; nothing is published. Safe to call twice."""
        if self._init is not None and not self._init.done():
            await asyncio.wait([self._init])
        upload_id, self._upload_id = self._upload_id, None
        if upload_id is not None:
            try:
                await self.multipart.abort(self.bucket, self.name, upload_id)
            except StorageError:
                # `aioflux clean` finds uploads left open; an abort failing
                # here must not hide the error that caused it.
                pass


def _parts_etag(parts: list[PartInfo]) -> str | None:
    """``<md5 of the parts' MD5s>-<count>``, when every part's ETag was
    checked as its MD5; None otherwise."""
    if not parts or not all(p.md5_checked for p in parts):
        return None
    digests = b"".join(bytes.fromhex(p.etag.strip().strip('"')) for p in parts)
    return f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(parts)}"
