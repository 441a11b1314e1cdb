"""GCS streaming uploads: the parts of a writer, published all at once.

XML multipart where the server has it (parts in parallel); otherwise
(fake-gcs-server answers 400 to ``?uploads``) the same parts go through a
JSON resumable session, in order, still published only by the final
request; so do those of an upload with a precondition (XML multipart
uploads take none), which the final request carries. A part of such an
upload that fails or is cancelled, while it is sent or while it waits for
its turn, breaks it: no later part is sent, and ``finish`` publishes
nothing. A payload smaller
than one part goes up in a single request. The published object is
checked against the running crc32c and length; one that differs (a
server that stored other bytes) is deleted, that generation only, before
``ChecksumMismatch``; a completion whose answer names no generation
succeeds only if the name holds exactly those bytes, and nothing is
deleted. A completion retried after its answer was lost (``NoSuchUpload``)
succeeds only if the object holds exactly those bytes.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from .._core.checks.stated_counts import count_of
from .._core.concurrency.cleanup import to_the_end
from .._core.concurrency.window import shared_task
from .._core.errors import InvalidRequest, NotFound, StorageError
from .._core.integrity.crc import Crc32c
from .._core.records.types import NO_METADATA, ObjectInfo, PartInfo
from .._core.storage.protocol import UploadTarget, published_before
from .._net.transport import Op
from ._published import confirm_published, verify_published
from ._resumable import ResumableUpload
from ._xml import stored_crc

if TYPE_CHECKING:
    from ._client import AsyncClient

__all__ = ["GcsUpload"]


class GcsUpload(UploadTarget):
    """One streaming upload (:class:`~aioflux._core.storage.protocol.PartUpload`): starts
    lazily on the first part, sends parts, publishes or aborts. All methods
    run on the client's event loop."""

    def __init__(self, client: AsyncClient, bucket: str, name: str, content_type: str,
                 part_size: int, metadata: dict[str, str] | None = None,
                 if_generation_match: int | None = None) -> None:
        super().__init__(bucket, name, content_type, metadata, if_generation_match)
        self.client = client
        self.part_size = part_size
        self._init: asyncio.Future[None] | None = None
        self._upload_id: str | None = None
        self._resumable: ResumableUpload | None = None
        self._parts: dict[int, PartInfo] = {}
        # A resumable session takes its parts one at a time, in order: the
        # part whose turn it is, and whether one was lost (failed or
        # cancelled, its bytes never all sent).
        self._next_in_order = 1
        self._broken = False
        # Set, and replaced, whenever either changes: parts waiting for
        # their turn look again.
        self._turn: asyncio.Event | None = None

    async def _start(self) -> None:
        if self._init is None:
            self._turn = asyncio.Event()
            # Awaited by every part: see shared_task.
            self._init = shared_task(self._initiate())
        # Shielded: a part cancelled while the upload is being created must
        # not lose the upload id, or abort() could not drop the upload.
        await asyncio.shield(self._init)

    async def _initiate(self) -> None:
        if (self.if_generation_match is None and _headers_carry(self.metadata)
                and not _NOT_XML.search(self.name)):
            try:
                self._upload_id = await self.client.initiate_multipart(
                    self.bucket, self.name, content_type=self.content_type,
                    metadata=self.metadata)
                self.mode = "multipart"
                return
            except (InvalidRequest, NotFound) as exc:
                if isinstance(exc, NotFound) and "bucket" in exc.reason.lower():
                    raise
        # No XML multipart upload here (fake-gcs-server), or metadata or a
        # name only JSON can carry: stream the same parts through a resumable
        # session, in order.
        upload = ResumableUpload(self.client, self.bucket, self.name,
                                 content_type=self.content_type, metadata=self.metadata,
                                 chunk_size=self.part_size,
                                 if_generation_match=self.if_generation_match)
        self._resumable = upload
        self.mode = "resumable"
        await upload.start()

    async def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Upload part ``number`` (1-based); ``checksum`` is its crc32c if known."""
        try:
            await self._start()
        except BaseException:
            self._lose()  # cancelled or failed while the upload was created: never sent
            raise
        if self._resumable is not None:
            try:
                await self._wait_turn(number)
                if self._broken:
                    # An earlier part was lost (a failed one reports its
                    # error): this one must not follow it into the session.
                    return
                await self._resumable.send(data)
            except BaseException:
                # Failed or cancelled, while sent or while waiting for its
                # turn: the parts behind it must not wait for a turn that
                # never comes, nor be sent after a gap.
                self._lose()
                raise
            self._pass_turn()
        else:
            assert self._upload_id is not None
            self._parts[number] = await self.client.upload_part(
                self.bucket, self.name, self._upload_id, number, data, checksum)

    async def finish(self, last_number: int, tail: memoryview | None,
                     expected: Crc32c, tail_checksum: int | None = None) -> ObjectInfo:
        """Publish: the tail as the last part (or the whole object in one
        request if no part was sent), then verify the stored crc32c.
        ``tail_checksum`` is the tail's crc32c if the writer knows it."""
        if last_number == 1 and self._upload_id is None and self._resumable is None:
            self.mode = "single"
            # AsyncClient.write sends the crc32c and checks the stored one.
            info = await self.client.write(self.bucket, self.name, tail or b"",
                                           content_type=self.content_type,
                                           metadata=self.metadata, resumable=False,
                                           if_generation_match=self.if_generation_match)
            return info
        if self._resumable is not None:
            await self._wait_turn(last_number)
            if self._broken:
                # The session lacks a part: its final request would publish
                # the object without it (a server that does not check the
                # crc32c sent with it stores those bytes, deleted only
                # after). abort() cancels the session.
                raise StorageError(
                    f"write gs://{self.bucket}/{self.name}: a part of the resumable upload "
                    f"failed or was cancelled before it was sent; nothing is published",
                    operation="write", bucket=self.bucket, name=self.name)
            # finish() checks the published size and crc32c, and deletes a
            # generation that differs before raising.
            info = await self._resumable.finish(tail or b"", crc32c=expected.value)
            self._resumable = None
        else:
            if tail is not None and len(tail):
                await self.put(last_number, tail, tail_checksum)
            assert self._upload_id is not None
            upload_id, self._upload_id = self._upload_id, None
            try:
                headers = await self.client.complete_multipart(
                    self.bucket, self.name, upload_id, list(self._parts.values()))
            except NotFound as exc:
                self._upload_id = upload_id  # let abort() try to drop it
                info = await self._completed_before(exc, expected)
            except BaseException:
                self._upload_id = upload_id  # still open: let abort() drop it
                raise
            else:
                info = await self._published(headers, expected)
        return info

    async def _completed_before(self, exc: NotFound, expected: Crc32c) -> ObjectInfo:
        info = await published_before(self.client, self.bucket, self.name, exc,
                                          expected.length, expected.value)
        self._upload_id = None
        return info

    async def _published(self, headers: dict[str, str], expected: Crc32c) -> ObjectInfo:
        op = Op("write", self.bucket, self.name)
        stored = stored_crc([headers.get("x-goog-hash", "")])
        # A malformed generation is none (a bare ValueError otherwise, after
        # the object was published): a stat then confirms the bytes.
        value = headers.get("x-goog-generation", "").strip()
        generation = count_of(value) or 0
        if not generation:
            # The object live under the name may be a concurrent writer's
            # newer one: without our generation a stat can confirm our bytes
            # landed, never prove a differing object ours to delete.
            return await confirm_published(self.client, op, expected.length, expected.value)
        if stored is not None:
            # The crc32c of the whole object covers its length as well.
            info = ObjectInfo(self.bucket, self.name, expected.length, generation, stored,
                              content_type=self.content_type,
                              metadata=self.metadata or NO_METADATA)
        else:
            info = await self.client.stat(self.bucket, self.name)
            if info.generation != generation:
                # A newer write replaced ours before we could look: ours
                # cannot be verified, and the newer one is not ours to delete.
                raise StorageError(
                    f"write gs://{self.bucket}/{self.name}: generation {generation} was "
                    f"replaced by {info.generation} before its crc32c could be checked",
                    operation="write", bucket=self.bucket, name=self.name)
        return await verify_published(self.client, op, info, expected.length, expected.value)

    async def _wait_turn(self, number: int) -> None:
        """Until it is part ``number``'s turn in the session, or a part was lost."""
        while not (self._broken or self._next_in_order == number):
            assert self._turn is not None
            await self._turn.wait()

    def _changed(self) -> None:
        # Not awaited: a part cancelled again while it gives up its turn
        # still lets the others go.
        if self._turn is not None:
            self._turn.set()
            self._turn = asyncio.Event()

    def _pass_turn(self) -> None:
        self._next_in_order += 1
        self._changed()

    def _lose(self) -> None:
        self._broken = True
        self._changed()

    async def abort(self) -> None:
        """Drop the upload; nothing is published. Safe to call twice.

        Done by the time this returns, even if the caller is cancelled
        meanwhile (that cancellation is raised after): an abort cut short
        while it waited for the upload's creation or for a permit left the
        upload open for good.
        """
        await to_the_end(self._abort())

    async def _abort(self) -> None:
        if self._init is not None and not self._init.done():
            await asyncio.wait([self._init])
        upload_id, self._upload_id = self._upload_id, None
        resumable, self._resumable = self._resumable, None
        if resumable is not None:
            await resumable.cancel()
        if upload_id is not None:
            try:
                await self.client.abort_multipart(self.bucket, self.name, upload_id)
            except StorageError:
                # `aioflux clean` finds uploads left open; an abort failing here
                # must not hide the error that caused it.
                pass


# Characters XML 1.0 cannot carry (C0 controls but tab; LF and CR are
# refused in names; U+FFFE, U+FFFF): the XML API's answers name the object,
# and one naming such a name cannot be parsed.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _headers_carry(metadata: dict[str, str] | None) -> bool:
    """Whether XML ``x-goog-meta-*`` headers carry ``metadata`` exactly:
    printable ASCII (the XML API takes no other) and lower-case keys (HTTP
    header names have no case); else the JSON API's resumable session does."""
    return all(key == key.lower() and all(t.isascii() and t.isprintable() for t in (key, value))
               for key, value in (metadata or {}).items())
