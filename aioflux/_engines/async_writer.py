"""``AsyncObjectWriter``: the streaming multipart writer for async pipelines.

The async twin of :class:`~aioflux._engines.writer.ObjectWriter`: same parts, same
bounded buffers (``part_size * (max_in_flight + 1)``), same rule that nothing
is published unless ``close()`` succeeds. It runs on the caller's event
loop, so it bounds in-flight parts with an ``asyncio.Semaphore`` instead of
the sync writer's thread semaphore, and shares the loop-side upload session
(``_Session``) with it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .._core.concurrency.cleanup import to_the_end
from .._core.errors import InvalidArgument
from .._core.integrity.crc import crc32c
from .._core.records.types import ObjectInfo
from .writer import Bytes, WriterBase, byte_view, interrupted_write, warn_unclosed

if TYPE_CHECKING:
    from .writer import _Session

__all__ = ["AsyncObjectWriter"]

# Aborts of abandoned writers, held until they finish (a task nobody
# references may be collected before it runs).
_ABANDONED: set[asyncio.Task[None]] = set()


class AsyncObjectWriter(WriterBase):
    """Async twin of :class:`ObjectWriter` for use on any event loop.

    A writer garbage-collected unclosed publishes nothing: its upload is
    aborted (on its loop, if that still runs), with an
    :class:`~aioflux._engines.writer.UnclosedWriterWarning` (shown by Python's
    default warning filters) if anything was written.

    Args:
        client: the store.
        bucket: bucket name.
        name: object name.
        options: part size and parts in flight (``write`` waits beyond).
        content_type: Content-Type of the object.
        metadata: custom metadata of the object (GCS and S3; files have none).
        if_generation_match: publish only if the object is then this
            generation (``0``: only if it does not exist); else ``close()``
            raises ``PreconditionFailed`` and nothing is published.

    Raises:
        InvalidArgument: bad settings.
    """

    def _init_flow(self, max_in_flight: int) -> None:
        self._slots = asyncio.Semaphore(max_in_flight)
        # Writes from several tasks go one at a time: one waiting for a slot
        # must not see another append to, or send, the buffer it filled.
        self._lock = asyncio.Lock()
        self._buffer = bytearray()
        self._tasks: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None
        # The loop of the first part: an abandoned writer aborts there.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._published: ObjectInfo | None = None

    async def write(self, data: Bytes) -> int:
        """Append bytes; waits while ``max_in_flight`` parts are uploading.

        Args:
            data: bytes-like.

        Returns:
            The number of bytes taken.

        Raises:
            InvalidArgument: the writer is closed, or ``data`` is not bytes-like.
            StorageError: a background part failed (the upload is aborted).
            BridgeError: the writer was opened in the parent of this forked
                process.
        """
        self._refuse_if_forked()
        async with self._lock:
            return await self._write(data)

    async def _write(self, data: Bytes) -> int:
        if self._done:
            raise InvalidArgument(f"write to closed writer {self.url}")
        await self._raise_pending()
        view = byte_view(self.url, data)
        total = len(view)
        try:
            while view:
                # A full buffer leaves only once more bytes come: the last
                # part may then be a full one (max_parts parts fit).
                if len(self._buffer) == self.part_size:
                    await self._send_part()
                take = min(len(view), self.part_size - len(self._buffer))
                piece, view = view[:take], view[take:]
                self._buffer += piece
        except BaseException:
            # Cancelled (a timeout) while waiting for a part slot, or failed,
            # mid-way: see interrupted_write.
            if self._error is None:
                self._error = interrupted_write(self.url, total - len(view), total)
            raise
        return total

    async def _send_part(self) -> None:
        """Start the full buffer's upload as the next part (waits for a slot)."""
        self._check_part_limit()
        await self._slots.acquire()
        if self._done:
            self._slots.release()
            raise self._aborted()
        await self._raise_pending(release=True)
        part, self._buffer = self._buffer, bytearray()
        # As in ObjectWriter: each part is checksummed once, in its buffer.
        checksum = crc32c(part)
        self._crc.append(checksum, self.part_size)
        self._loop = self._loop or asyncio.get_running_loop()
        task = asyncio.ensure_future(self._session.put(self._number, memoryview(part), checksum))
        self._number += 1
        self._tasks.add(task)
        task.add_done_callback(self._part_done)

    def _aborted(self) -> InvalidArgument:
        # abort() from another task while this one waited (abort takes no
        # turn: it must stop a write that waits for a slot, not wait for it).
        return InvalidArgument(f"write to {self.url}: the writer was aborted meanwhile; "
                               "nothing is published")

    def _part_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self._error is None:
            self._error = task.exception()
        self._slots.release()

    async def _raise_pending(self, release: bool = False) -> None:
        if self._error is not None:
            if release:
                self._slots.release()
            error = self._error
            await self.abort()
            raise error

    async def close(self) -> ObjectInfo:
        """Upload the rest and publish.

        Returns:
            ObjectInfo of the new object.

        Raises:
            StorageError: the upload failed (aborted, nothing published).
            ChecksumMismatch: the stored crc32c differs from the written bytes'.
            BridgeError: the writer was opened in the parent of this forked
                process (its upload is the parent's to finish).
        """
        self._refuse_if_forked()
        async with self._lock:
            return await self._close()

    async def _close(self) -> ObjectInfo:
        if self._published is not None:
            # Closed already (a close inside ``async with``): the object it
            # published, as ObjectWriter's close is a no-op then.
            return self._published
        if self._done:
            raise InvalidArgument(f"writer {self.url} is closed")
        try:
            if self._tasks:
                await asyncio.wait(set(self._tasks))
            if self._done:
                raise self._aborted()
            await self._raise_pending()
            checksum = crc32c(self._buffer)
            self._crc.append(checksum, len(self._buffer))
            info = await self._session.finish(self._number, memoryview(self._buffer),
                                              self._crc, checksum)
        except BaseException:
            await self.abort()
            raise
        self._done = True
        self._published = info
        return info

    async def abort(self) -> None:
        """Discard everything written; nothing is published (nothing to do
        once published; in a forked child, nothing but this copy: the
        upload is the parent's)."""
        if self._published is not None:
            return
        self._done = True
        if self._forked_copy():
            return
        # To its end however often the caller is cancelled meanwhile (a
        # timeout, asyncio.run's shutdown): a cancel while the parts unwind
        # must not leave the upload open, unaborted.
        await to_the_end(self._discard())

    async def _discard(self) -> None:
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._buffer = bytearray()
        await self._session.abort()

    def __del__(self) -> None:
        if self.__dict__.get("_done", True) or self._forked_copy():
            return
        self._done = True
        # Dropped unclosed after parts went up: the open multipart upload
        # (stored, and billed, by the server) or temporary file would stay
        # until `aioflux clean`. Abort it on the loop it ran on, if that
        # still runs (ObjectWriter aborts when collected too).
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(_abort_abandoned, self._session)
            except RuntimeError:
                pass  # the loop closed meanwhile: `aioflux clean` finds the upload
        warn_unclosed(self.url, self._crc.length + len(self._buffer), source=self,
                      opened=self._opened)

    async def __aenter__(self) -> AsyncObjectWriter:
        if self._done:
            # As the blocking writer's ``with``: a new block on a closed
            # writer would write nothing and publish nothing, in silence.
            raise InvalidArgument(f"writer {self.url} is closed")
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.abort()



def _abort_abandoned(session: _Session) -> None:
    task = asyncio.ensure_future(session.abort())
    _ABANDONED.add(task)
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[None]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a failed abort leaves what `clean` removes
