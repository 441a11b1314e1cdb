"""The multipart side of :class:`~._memory.MemoryStore`: the XML-multipart
primitives (initiate, upload part, complete, abort, list parts, list
uploads) and :class:`MemoryUpload`, the streaming upload the writer engine
drives through ``start_upload``. An open upload is listed like one on GCS;
nothing is visible until it is published, after its bytes are checked
against the writer's running crc32c and length."""

from __future__ import annotations

import asyncio
import builtins
import datetime as _dt
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aioflux._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    describe,
)
from aioflux._core.integrity.crc import Crc32c, crc32c, encode_crc32c
from aioflux._core.records.types import MultipartUploadInfo, ObjectInfo, PartInfo
from aioflux._core.storage.base import MultipartCalls
from aioflux._core.storage.protocol import UploadTarget

if TYPE_CHECKING:
    from ._memory import _Bucket

__all__ = ["MAX_PARTS", "SCHEME", "MemoryMultipart", "MemoryUpload", "now"]

SCHEME = "memory"
MAX_PARTS = 10_000


@dataclass(slots=True)
class _Upload:
    bucket: str
    name: str
    content_type: str
    initiated: str
    metadata: dict[str, str] | None = None
    parts: dict[int, tuple[bytes, str]] = field(default_factory=dict)


class MemoryMultipart(MultipartCalls):
    """The multipart primitives of :class:`~._memory.MemoryStore`
    (``features.multipart``): the wire calls behind the base's checked ones."""

    _uploads: dict[str, _Upload]
    # The store's own: the bucket (NotFound if missing), and the one place
    # an object becomes current.
    _bucket: Callable[..., _Bucket]
    _publish: Callable[..., ObjectInfo]
    _check_precondition: Callable[[str, str, str, int | None], None]

    async def _initiate_multipart(self, bucket: str, name: str, content_type: str,
                                  metadata: dict[str, str] | None) -> str:
        await asyncio.sleep(0)
        return self._initiate(bucket, name, content_type, metadata)

    def _initiate(self, bucket: str, name: str, content_type: str,
                  metadata: dict[str, str] | None = None) -> str:
        self._bucket("initiate multipart", bucket, name)
        upload_id = uuid.uuid4().hex
        self._uploads[upload_id] = _Upload(bucket, name, content_type, now(), metadata)
        return upload_id

    def _upload(self, op: str, bucket: str, name: str, upload_id: str) -> _Upload:
        upload = self._uploads.get(upload_id)
        if upload is None or (upload.bucket, upload.name) != (bucket, name):
            raise NotFound(f"{describe(op, bucket, name, SCHEME)} failed: no upload "
                           f"{upload_id!r}", operation=op, bucket=bucket, name=name,
                           status=404, reason="NoSuchUpload")
        return upload

    async def _upload_part(self, bucket: str, name: str, upload_id: str, part_number: int,
                           data: memoryview, checksum: int | None) -> PartInfo:
        content = bytes(data)  # copied: the caller may reuse its buffer
        await asyncio.sleep(0)
        return self._put_part("upload part", bucket, name, upload_id, part_number, content,
                              checksum)

    def _put_part(self, op: str, bucket: str, name: str, upload_id: str, number: int,
                  content: bytes, checksum: int | None) -> PartInfo:
        where = describe(op, bucket, name, SCHEME)
        if not 1 <= number <= MAX_PARTS:
            raise InvalidArgument(f"{where}: part number {number} is outside 1-{MAX_PARTS}")
        upload = self._upload(op, bucket, name, upload_id)
        actual = crc32c(content)
        if checksum is not None and checksum != actual:
            # What a server checking x-goog-hash answers (400 BadDigest).
            raise ChecksumMismatch(f"{where} failed: part {number} has crc32c "
                                   f"{encode_crc32c(actual)}, sent with "
                                   f"{encode_crc32c(checksum)}", operation=op, bucket=bucket,
                                   name=name)
        etag = f'"{actual:08x}-{len(content)}"'
        upload.parts[number] = (content, etag)
        return PartInfo(number, etag, len(content))

    async def _complete_multipart(self, bucket: str, name: str, upload_id: str,
                                  parts: Sequence[PartInfo]) -> dict[str, str]:
        # The headers the GCS client returns: x-goog-hash, x-goog-generation.
        await asyncio.sleep(0)
        upload = self._upload("complete multipart", bucket, name, upload_id)
        data = self._assemble("complete multipart", upload, parts)
        info = self._finish_upload(upload_id, upload, data, crc32c(data))
        return {"x-goog-hash": f"crc32c={encode_crc32c(info.crc32c or 0)}",
                "x-goog-generation": str(info.generation)}

    def _assemble(self, op: str, upload: _Upload, parts: Sequence[PartInfo]) -> bytes:
        where = describe(op, upload.bucket, upload.name, SCHEME)

        def invalid(detail: str, reason: str) -> InvalidRequest:
            return InvalidRequest(f"{where} failed: {detail}", operation=op,
                                  bucket=upload.bucket, name=upload.name, status=400,
                                  reason=reason)

        if not parts:
            raise invalid("no parts", "MalformedXML")
        numbers = [p.number for p in parts]
        if numbers != sorted(set(numbers)):
            raise invalid("parts not in ascending order", "InvalidPartOrder")
        pieces = []
        for part in parts:
            stored = upload.parts.get(part.number)
            if stored is None or stored[1] != part.etag:
                raise invalid(f"part {part.number} was not uploaded as listed", "InvalidPart")
            pieces.append(stored[0])
        return b"".join(pieces)

    def _finish_upload(self, upload_id: str, upload: _Upload, data: bytes,
                       crc: int) -> ObjectInfo:
        info = self._publish("write", upload.bucket, upload.name, data, crc,
                             upload.content_type, upload.metadata)
        del self._uploads[upload_id]
        return info

    async def _abort_upload(self, bucket: str, name: str, upload_id: str) -> None:
        await asyncio.sleep(0)
        self._upload("abort multipart", bucket, name, upload_id)
        del self._uploads[upload_id]

    async def _list_parts(self, bucket: str, name: str,
                          upload_id: str) -> builtins.list[PartInfo]:
        await asyncio.sleep(0)
        upload = self._upload("list parts", bucket, name, upload_id)
        return [PartInfo(number, etag, len(data))
                for number, (data, etag) in sorted(upload.parts.items())]

    async def _list_uploads(self, bucket: str,
                            prefix: str) -> builtins.list[MultipartUploadInfo]:
        await asyncio.sleep(0)
        self._bucket("list uploads", bucket, prefix)
        found = [MultipartUploadInfo(u.bucket, u.name, upload_id, u.initiated)
                 for upload_id, u in self._uploads.items()
                 if u.bucket == bucket and u.name.startswith(prefix)]
        return sorted(found, key=lambda u: (u.name, u.initiated, u.upload_id))


class MemoryUpload(UploadTarget):
    """A streaming upload of :class:`~._memory.MemoryStore` (a
    :class:`~aioflux._core.storage.protocol.PartUpload`): parts go into a multipart
    upload opened on the first one; :meth:`finish` checks the joined bytes
    against the writer's crc32c and length before publishing them, so an
    upload that lost or garbled a part publishes nothing."""

    def __init__(self, store: MemoryMultipart, bucket: str, name: str, content_type: str,
                 part_size: int, metadata: dict[str, str] | None = None,
                 if_generation_match: int | None = None) -> None:
        super().__init__(bucket, name, content_type, metadata, if_generation_match)
        self._store = store
        self.part_size = part_size
        self.upload_id: str | None = None
        self._numbers: set[int] = set()

    async def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Store part ``number`` (1-based); ``checksum`` is checked if given.

        Raises:
            ChecksumMismatch: ``checksum`` is not the part's crc32c.
            InvalidArgument: the upload was finished or aborted.
        """
        content = bytes(data)
        await asyncio.sleep(0)
        if self.upload_id is None:
            if self.mode:
                raise InvalidArgument(f"{describe('write', self.bucket, self.name, SCHEME)}: "
                                      f"the upload is {self.mode}")
            # Opened in this same step: concurrent first parts share it.
            self.upload_id = self._store._initiate(self.bucket, self.name, self.content_type,
                                                   self.metadata)
        self._store._put_part("write", self.bucket, self.name, self.upload_id, number, content,
                              checksum)
        self._numbers.add(number)

    async def finish(self, last_number: int, tail: memoryview | None, expected: Crc32c,
                     tail_checksum: int | None = None) -> ObjectInfo:
        """Publish parts ``1..last_number`` (``tail`` is the last; the whole
        object when no part was put), if they match ``expected``.

        Returns:
            ObjectInfo of the published object.

        Raises:
            ChecksumMismatch: the joined bytes differ from ``expected`` in
                length or crc32c (nothing is published; :meth:`abort` drops
                the upload).
            InvalidRequest: a part of ``1..last_number`` is missing.
            PreconditionFailed: the object is not ``if_generation_match``.
        """
        where = describe("write", self.bucket, self.name, SCHEME)
        if self.upload_id is None and last_number == 1 and not self.mode:
            self.mode = "single"
            data = bytes(tail or b"")
            self._check(where, len(data), crc32c(data), expected)
            await asyncio.sleep(0)
            self._store._check_precondition("write", self.bucket, self.name,
                                            self.if_generation_match)
            return self._store._publish("write", self.bucket, self.name, data, expected.value,
                                        self.content_type, self.metadata)
        if tail is not None and len(tail):
            await self.put(last_number, tail, tail_checksum)
        if self.upload_id is None:
            raise InvalidArgument(f"{where}: the upload is {self.mode or 'not started'}")
        self.mode = "multipart"
        store = self._store
        upload = store._upload("write", self.bucket, self.name, self.upload_id)
        missing = sorted(set(range(1, last_number + 1)) - self._numbers)
        if missing:
            raise InvalidRequest(f"{where} failed: parts {missing[:5]} of 1-{last_number} "
                                 "were never put", operation="write", bucket=self.bucket,
                                 name=self.name, reason="InvalidPart")
        data = b"".join(upload.parts[n][0] for n in range(1, last_number + 1))
        crc = crc32c(data)
        self._check(where, len(data), crc, expected)
        store._check_precondition("write", self.bucket, self.name, self.if_generation_match)
        upload_id, self.upload_id = self.upload_id, None
        return store._finish_upload(upload_id, upload, data, crc)

    def _check(self, where: str, length: int, crc: int, expected: Crc32c) -> None:
        if (length, crc) != (expected.length, expected.value):
            raise ChecksumMismatch(
                f"{where} failed: the parts hold {length} bytes with crc32c "
                f"{encode_crc32c(crc)}, written were {expected.length} with "
                f"{encode_crc32c(expected.value)}; nothing was published",
                operation="write", bucket=self.bucket, name=self.name)

    async def abort(self) -> None:
        """Drop the upload; nothing is published. Safe to call twice."""
        upload_id, self.upload_id = self.upload_id, None
        self.mode = self.mode or "aborted"
        if upload_id is not None:
            self._store._uploads.pop(upload_id, None)


def now() -> str:
    """An RFC 3339 UTC timestamp, as GCS reports ``updated``/``initiated``."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
