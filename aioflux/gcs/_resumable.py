"""JSON-API resumable upload session.

Used for large single-object writes and as the streaming fallback of the
checkpoint writer where a server has no XML multipart upload. Chunks must be
multiples of 256 KiB except the last; the server reports what it persisted
(``Range`` on a 308), and we resend from there, so a torn chunk never
corrupts the object. A 308 that persists nothing new fails the attempt, so
the retry policy's attempts and deadline bound a server that never moves
forward. The object appears only when the final chunk lands.

A failed attempt is followed by a status query (``Content-Range: bytes */N``)
before anything is re-sent; a session that vanished after its final chunk
counts as done only if the object holds the size and crc32c written, and a
published object is checked against them (and deleted if it differs).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import aiohttp
import yarl

from .._core.concurrency.cleanup import to_the_end
from .._core.errors import InvalidArgument, StorageError, TransportError
from .._core.integrity.crc import encode_crc32c
from .._core.records.types import ObjectInfo
from .._net.failures import drain, read_metadata
from .._net.sessions import request_body
from .._net.transport import HttpResponse, Op
from ._json import resource_fault
from ._published import confirm_published, discard_published, verify_published

if TYPE_CHECKING:
    from ._client import AsyncClient

__all__ = ["CHUNK_GRANULARITY", "RESUMABLE_CHUNK_SIZE", "ResumableUpload"]


CHUNK_GRANULARITY = 256 * 1024
RESUMABLE_CHUNK_SIZE = 16 * 1024 * 1024
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
        crc32c: crc32c of the whole object if known before the first byte
            (``AsyncClient.write``); the session carries it so a checking
            server refuses other bytes.
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
        chunk_size: int = RESUMABLE_CHUNK_SIZE,
        crc32c: int | None = None,
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
        self._crc32c = crc32c
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
        if self._crc32c is not None:
            resource["crc32c"] = encode_crc32c(self._crc32c)
        params = {"uploadType": "resumable", "name": self.name, **self._client._billing}
        if self._precondition is not None:
            params["ifGenerationMatch"] = str(self._precondition)

        async def location(resp: HttpResponse) -> str:
            await drain(resp)
            url = resp.headers.get("Location")
            if not url:
                raise StorageError(f"resumable upload gs://{self.bucket}/{self.name}: "
                                   "no session Location in the response",
                                   operation="resumable upload", bucket=self.bucket,
                                   name=self.name)
            if yarl.URL(url).origin() != yarl.URL(self._client.endpoint).origin():
                # Every chunk carries our credentials: they go to the
                # configured endpoint only, never where a response points.
                raise StorageError(f"resumable upload gs://{self.bucket}/{self.name}: the "
                                   "session Location is not on the endpoint's origin",
                                   operation="resumable upload", bucket=self.bucket,
                                   name=self.name)
            # Every chunk bills the user project too.
            return self._client._billed(url)

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
            ChecksumMismatch: after a lost answer, the server published what
                it held on the status query (fake-gcs-server does); that
                partial object was deleted.
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
            ObjectInfo of the new object, its size (and crc32c, if given)
            checked.

        Raises:
            ChecksumMismatch: the server published other bytes (that
                generation is deleted).
            StorageError: the upload failed or its result cannot be verified
                (no object is published by it).
        """
        view = memoryview(data).cast("B")
        while len(view) > self.chunk_size:
            await self.send(view[: self.chunk_size])
            view = view[self.chunk_size:]
        if crc32c is None:
            crc32c = self._crc32c
        info = await self._put(view, total=self.offset + len(view), crc=crc32c)
        assert info is not None
        return info

    async def cancel(self) -> None:
        """Abandon the session; nothing is published. Safe to call twice.

        The session is cancelled by the time this returns, even if the
        caller is cancelled meanwhile (that cancellation is raised after):
        the session's URL is dropped as the cancel starts, so one cut short
        (its DELETE waiting for a permit) left it open for good.
        """
        url, self.session_url = self.session_url, None
        if url is None:
            return
        await to_the_end(self._delete(url))

    async def _delete(self, url: str) -> None:
        try:
            await self._client.transport.request(self._op(), "DELETE", url, drain,
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
        session_url = self.session_url
        start = self.offset
        end = start + len(view)
        attempts = 0

        async def attempt(session: aiohttp.ClientSession,
                          auth: dict[str, str]) -> ObjectInfo | object | None:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                # The last attempt failed somewhere between sending and reading
                # the answer: ask what the server holds instead of re-sending
                # blindly (a re-sent final chunk of a finished session is a 404
                # on some servers, a re-sent middle chunk may be stored twice).
                state = await self._query(session, auth, session_url, total)
                if not isinstance(state, int):
                    return state
                self._advance(state, start, end)
                if self.offset >= end and total is None:
                    return None  # the lost answer's chunk is all stored: nothing to send
            return await self._send_rest(session, auth, session_url, view, start, total, crc)

        outcome = await self._client.transport.run(self._op(), "PUT", session_url, attempt)
        if outcome is None:
            return None
        self.session_url = None
        if isinstance(outcome, _Unreadable):
            return await self._unreadable(outcome.fault, total, crc)
        if isinstance(outcome, ObjectInfo):
            if total is None:
                # Only a status query can finish a session before its final
                # chunk (fake-gcs-server publishes what it holds on one).
                await discard_published(
                    self._client, self._op(), outcome, f"the server published {outcome.size} "
                    f"bytes on a status query, before the final chunk")
            return await verify_published(self._client, self._op(), outcome, total, crc)
        return await self._recover_gone(total, crc)

    async def _send_rest(self, session: aiohttp.ClientSession, auth: dict[str, str], url: str,
                         view: memoryview, start: int, total: int | None,
                         crc: int | None) -> ObjectInfo | _Unreadable | None:
        """PUT the bytes of ``view`` the server does not hold yet, from
        ``self.offset``, until it holds them all (None) or publishes."""
        end = start + len(view)
        # A server persisting at least 256 KiB an answer needs no more rounds
        # than this; one persisting less ends the attempt, so the retry
        # policy's attempts and deadline bound the bytes it makes us re-send.
        rounds = 2 + len(view) // CHUNK_GRANULARITY
        stall = self._client.config.timeouts.read_stall
        for _ in range(rounds):
            before = self.offset
            piece = view[before - start:]
            size = "*" if total is None else str(total)
            headers = dict(auth)
            headers["Content-Range"] = (f"bytes {before}-{end - 1}/{size}" if len(piece)
                                        else f"bytes */{size}")
            if crc is not None and total is not None:
                headers["X-Goog-Hash"] = f"crc32c={encode_crc32c(crc)}"
            async with session.put(url, data=request_body(piece, window=stall), headers=headers,
                                   allow_redirects=False) as resp:
                if resp.status in (200, 201):
                    return self._object(await read_metadata(resp, self._op()))
                # A 308's body says nothing (its Range header does); an
                # error's is read for its message.
                raw = await drain(resp)
                if resp.status != 308:
                    raise _status_error(resp, raw)
                self._advance(_committed(resp), start, end)
            if self.offset >= end and total is None:
                return None
            if not piece:
                # Every byte is persisted, yet the final request did not
                # publish: asking again would loop.
                raise StorageError(
                    f"resumable upload gs://{self.bucket}/{self.name}: the server holds "
                    f"all {total} bytes but did not finish the upload",
                    operation="resumable upload", bucket=self.bucket, name=self.name)
            if self.offset <= before:
                raise self._stalled(f"answered bytes {before}-{end - 1} with a 308 at offset "
                                    f"{self.offset}, no progress")
        raise self._stalled(f"persisted only up to offset {self.offset} of bytes "
                            f"{start}-{end - 1} in {rounds} answers")

    def _stalled(self, what: str) -> TransportError:
        # Retryable: the retry asks where the session stands before sending.
        return TransportError(
            f"resumable upload gs://{self.bucket}/{self.name}: the server {what}",
            operation="resumable upload", bucket=self.bucket, name=self.name, status=308)

    def _object(self, raw: bytes) -> ObjectInfo | _Unreadable:
        try:
            item = json.loads(raw)
        except ValueError:
            item = None
        fault = resource_fault(item)
        if fault is not None:
            # Published, but we cannot tell what: only the name can say
            # whether it holds the bytes written.
            return _Unreadable(fault)
        return ObjectInfo.from_json(self.bucket, item)

    def _advance(self, committed: int, start: int, end: int) -> None:
        if committed < start or committed > end:
            # Fewer: bytes acknowledged earlier are gone and no longer in hand.
            # More: the server holds bytes we never sent (a chunk stored twice).
            raise StorageError(
                f"resumable upload gs://{self.bucket}/{self.name}: the server persisted "
                f"{committed} bytes, outside the {start}-{end} in flight",
                operation="resumable upload", bucket=self.bucket, name=self.name)
        self.offset = committed

    async def _query(self, session: aiohttp.ClientSession, auth: dict[str, str], url: str,
                     total: int | None) -> int | ObjectInfo | object:
        """The session's state: bytes persisted, the finished object, or _GONE."""
        headers = dict(auth)
        headers["Content-Range"] = f"bytes */{'*' if total is None else total}"
        async with session.put(url, headers=headers, allow_redirects=False) as resp:
            if resp.status in (200, 201):
                return self._object(await read_metadata(resp, self._op()))
            raw = await drain(resp)
            if resp.status == 308:
                return _committed(resp)
            if resp.status in (404, 410) and total is not None:
                return _GONE
            raise _status_error(resp, raw)

    async def _unreadable(self, fault: str, total: int | None, crc: int | None) -> ObjectInfo:
        """The server published (200 or 201) with an answer that is no
        object resource: a final chunk's write succeeded only if the object
        now holds exactly the bytes written; an earlier chunk's published a
        part of them, whose generation is unknown (left alone)."""
        op = self._op()
        if total is None:
            raise StorageError(f"{op.operation} gs://{self.bucket}/{self.name}: the server "
                               f"published before the final chunk, with an answer that "
                               f"{fault}; the write is not verified", operation=op.operation,
                               bucket=self.bucket, name=self.name)
        return await confirm_published(self._client, op, total, crc,
                                       why=f"the answer's object resource {fault}")

    async def _recover_gone(self, total: int | None, crc: int | None) -> ObjectInfo:
        """The session vanished after the final chunk was sent: it succeeded
        only if the object now holds exactly the bytes written."""
        op = self._op()
        if total is None or crc is None:
            raise StorageError(f"{op.operation} gs://{self.bucket}/{self.name}: the session "
                               "vanished after the final chunk; the write is not verified",
                               operation=op.operation, bucket=self.bucket, name=self.name,
                               status=404)
        return await confirm_published(self._client, op, total, crc,
                                       why="the session vanished after the final chunk")


_GONE = object()


class _Unreadable:
    """A 200 or 201 whose body is no object resource: what is wrong with it."""

    __slots__ = ("fault",)

    def __init__(self, fault: str) -> None:
        self.fault = fault


def _committed(resp: aiohttp.ClientResponse) -> int:
    match = _RANGE.match(resp.headers.get("Range", ""))
    return int(match.group(1)) + 1 if match else 0


def _status_error(resp: aiohttp.ClientResponse, raw: bytes) -> aiohttp.ClientResponseError:
    # The transport maps this to the typed error (404 NotFound, 5xx
    # ServerError...) and retries what is transient; "reason: body" is the
    # form it parses.
    return aiohttp.ClientResponseError(
        resp.request_info, resp.history, status=resp.status,
        message=f"{resp.reason}: {raw[:4096].decode('utf-8', 'replace')}", headers=resp.headers)
