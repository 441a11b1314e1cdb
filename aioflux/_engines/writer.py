"""Streaming object writer: the store's streaming upload while the producer writes.

``ObjectWriter`` is a blocking file object (``torch.save`` writes into it);
``AsyncObjectWriter`` (in ``async_writer.py``) is its twin for async
pipelines and shares the loop-side ``_Session`` defined here. Both cut the stream
into parts, upload up to ``max_in_flight`` of them concurrently and block the
producer beyond that, so the writer's buffers stay at
``part_size * (max_in_flight + 1)`` whatever the object size (the event
loop transport may hold a copy of a part body it has not sent yet on top;
see the defaults below). Nothing is visible until the upload completes:
an exception in the ``with`` body, a failed part or a bad checksum aborts
the upload. How parts are stored and published, and how the result is
checked, is the store's :class:`~aioflux._core.storage.protocol.PartUpload` (GCS:
``aioflux/gcs/_upload.py``; files: a temporary file renamed into place).
"""

from __future__ import annotations

import abc
import atexit
import collections
import concurrent.futures
import functools
import io
import os
import sys
import threading
import warnings
import weakref
from typing import TYPE_CHECKING

from .._core.checks.arguments import check_content_type, check_contiguous, check_int
from .._core.concurrency.portal import get_portal
from .._core.errors import BridgeError, InvalidArgument, add_note
from .._core.integrity.crc import Crc32c, crc32c, crc32c_combine
from .._core.records.types import ObjectInfo
from .._core.records.urls import format_url
from .._core.settings.options import WriterOptions
from .._core.storage.protocol import ObjectStore, StoreFeatures

if TYPE_CHECKING:
    from typing import Self  # Python >= 3.11; annotations only

__all__ = [
    "Bytes",
    "ObjectWriter",
    "Opened",
    "PublishOnExit",
    "UnclosedWriterWarning",
    "WriterBase",
    "WriterStats",
    "byte_view",
    "interrupted_write",
    "opening_site",
    "warn_unclosed",
]

Bytes = bytes | bytearray | memoryview


def byte_view(url: str, data: Bytes) -> memoryview:
    """``data`` as a flat byte view, for a writer's ``write``.

    Args:
        url: the object's URL, for the message.
        data: anything with the buffer protocol.

    Returns:
        A ``memoryview`` of format ``B``.

    Raises:
        InvalidArgument: ``data`` is not bytes-like (a ``str`` needs ``.encode()``).
    """
    try:
        view = memoryview(data)
    except TypeError:
        # memoryview's own TypeError names neither the writer nor the fix.
        hint = " (encode a str first, e.g. data.encode())" if isinstance(data, str) else ""
        raise InvalidArgument(f"write {url}: data must be bytes, bytearray or memoryview, "
                              f"got {type(data).__name__}{hint}") from None
    check_contiguous(f"write {url}", "data", view)
    return view.cast("B")


def interrupted_write(url: str, taken: int, total: int) -> InvalidArgument:
    """The error a writer's ``close`` raises (and aborts) after a ``write``
    that was interrupted (cancelled, Ctrl-C) or failed mid-way.

    Such a write took some of its bytes, maybe all: closing would publish a
    stream without the rest (its crc32c covers what was taken, so it checks
    out), and writing the data again would repeat what was taken. The
    caller cannot tell which, so nothing is published.
    """
    return InvalidArgument(f"write {url}: a write was interrupted after {taken} of its "
                           f"{total} bytes; the upload is aborted, nothing is published")


def _check_settings(part_size: int, features: StoreFeatures) -> None:
    if part_size < features.min_part_size or part_size % features.part_granularity:
        raise InvalidArgument(f"part_size must be >= {features.min_part_size} and a multiple "
                              f"of {features.part_granularity} bytes on {features.scheme}://, "
                              f"got {part_size}")


class WriterStats:
    """What an upload did (read after close).

    Attributes:
        bytes: bytes written.
        parts: parts uploaded (0 for a single-request upload).
        mode: ``"single"``, ``"multipart"`` or ``"resumable"``.
        info: the published object's metadata.
    """

    def __init__(self) -> None:
        self.bytes = 0
        self.parts = 0
        self.mode = ""
        self.info: ObjectInfo | None = None


class _Session:
    """The loop-side half: the store's upload (:meth:`ObjectStore.start_upload`)
    and what it did. All methods run on the client's event loop."""

    def __init__(self, client: ObjectStore, bucket: str, name: str, content_type: str,
                 part_size: int, metadata: dict[str, str] | None,
                 if_generation_match: int | None) -> None:
        # Passed only when set: a store written before the precondition
        # existed still takes the writer's other uploads.
        condition = {} if if_generation_match is None else {
            "if_generation_match": if_generation_match}
        self.upload = client.start_upload(bucket, name, content_type=content_type,
                                          part_size=part_size, metadata=metadata, **condition)
        self.stats = WriterStats()

    async def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Upload part ``number`` (1-based); ``checksum`` is its crc32c if known."""
        await self.upload.put(number, data, checksum)
        self.stats.parts += 1
        self.stats.mode = self.upload.mode

    async def finish(self, last_number: int, tail: memoryview | None,
                     expected: Crc32c, tail_checksum: int | None = None) -> ObjectInfo:
        """Publish and verify (see :meth:`PartUpload.finish`)."""
        self.stats.bytes = expected.length
        info = await self.upload.finish(last_number, tail, expected, tail_checksum)
        if tail is not None and len(tail) and self.upload.mode == "multipart":
            self.stats.parts += 1
        self.stats.mode = self.upload.mode
        self.stats.info = info
        return info

    async def abort(self) -> None:
        """Drop the upload; nothing is published. Safe to call twice."""
        await self.upload.abort()


class _Parts:
    """Completion state of background parts, apart from the writer so that
    callbacks on the loop thread do not keep an abandoned writer alive."""

    def __init__(self, max_in_flight: int) -> None:
        self.slots = threading.BoundedSemaphore(max_in_flight)
        self.error: BaseException | None = None
        # Buffers of uploaded parts, to fill again: a fresh bytearray is
        # zeroed (and may be faulted in anew) only to be overwritten. At most
        # max_in_flight + 1 buffers exist.
        self.spare: collections.deque[bytearray] = collections.deque()

    def buffer(self, size: int) -> bytearray:
        """A part buffer of ``size`` bytes (contents undefined)."""
        try:
            return self.spare.pop()
        except IndexError:
            return bytearray(size)

    def done(self, buf: bytearray, future: concurrent.futures.Future[None]) -> None:
        if future.cancelled() or future.exception() is not None:
            if not future.cancelled() and self.error is None:
                self.error = future.exception()
        else:
            # Only a part the server acknowledged is reused: a failed or
            # cancelled send may still be referenced by its connection.
            self.spare.append(buf)
        self.slots.release()


class UnclosedWriterWarning(UserWarning):
    """A writer was dropped, or left open at exit, with data written to it
    and never closed: nothing was published, and what was written is lost.

    A ``UserWarning``, so Python's default warning filters show it, where
    they hide the ``ResourceWarning`` of an unclosed file: Python's own
    files publish in that case, so a user who expected the same must hear
    of the loss without ``-X dev``. ``-W error::UserWarning`` (or a filter
    on this class) turns it into an error; a filter on the message
    ``"unclosed writer"`` silences it.
    """


# Shown as the public name it is (aioflux.UnclosedWriterWarning), in warnings
# and help, as the errors are.
UnclosedWriterWarning.__module__ = "aioflux"


Opened = tuple[str, int, str]


# Packages whose frames are not where a writer was opened: aioflux's own,
# and fsspec's ``open`` that calls aioflux's filesystem.
_NOT_THE_CALLER = ("aioflux", "fsspec")


def opening_site() -> Opened:
    """Where the caller's code opened a writer: the file, line and module
    of the innermost frame outside aioflux (and fsspec), which a warning
    about the writer names (the writer's own frames say nothing to its user)."""
    frame = sys._getframe(1)
    while True:
        module = frame.f_globals.get("__name__", "")
        if not isinstance(module, str) or module.partition(".")[0] not in _NOT_THE_CALLER:
            break
        if frame.f_back is None:  # opened by aioflux itself, on a thread of its own
            break
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno, str(module)


def warn_unclosed(url: str, count: int, unit: str = "byte", source: object = None,
                  opened: Opened | None = None) -> None:
    """Say that a writer collected unclosed discarded what was written.

    Python's own files publish what was written when they are collected
    unclosed; ours abort (a half-written object must not appear: the
    writer cannot tell a script that forgot ``close()`` from one whose
    exception unwound past it), so the data is lost, and this warning, which
    Python's default filters show, is how a user hears of it.

    Args:
        url: the object's URL.
        count: how many units were written (nothing is said for 0).
        unit: ``"byte"`` or ``"character"`` (a text writer).
        source: the writer (tracemalloc then shows where it was opened).
        opened: where the caller opened it (:func:`opening_site`): the
            warning is reported there, not in aioflux.
    """
    if not count:
        return
    message = (f"unclosed writer {url} discarded the {count:,} {unit}"
               f"{'' if count == 1 else 's'} written to it: nothing is published "
               "(close() publishes, as does leaving a with block normally)")
    filename, line, module = opened or opening_site()
    import tracemalloc  # here: only a loss needs it, and it is no import-time cost then
    # No registry: each loss is said, even the same URL's again ("default"
    # would show a message once per line, and a loop's second loss is no repeat).
    # The source only when tracemalloc traces (-X tracemalloc): its
    # traceback of the opening then follows; otherwise Python adds a line
    # asking to enable it, noise beside the opening site said already.
    warnings.warn_explicit(message, UnclosedWriterWarning, filename, line, module=module,
                           registry=None,
                           source=source if tracemalloc.is_tracing() else None)


class PublishOnExit:
    """Context-manager and finalizer rules of a writer that publishes on
    ``close()`` and discards on ``abort()``: leaving a ``with`` block
    normally publishes, leaving it by an exception aborts, and a writer
    garbage-collected unclosed, or still open when the interpreter exits,
    is aborted, with an :class:`UnclosedWriterWarning` if anything was written. Shared
    by ObjectWriter, :class:`~aioflux._engines.zstd.ZstdWriter` and the
    text writer of ``aioflux.open``; put it before the io base in the bases
    so its methods win, and call ``_track()`` in ``__init__``."""

    _done: bool
    _pid: int  # the process that opened it

    if TYPE_CHECKING:
        # Declared for the type checker only: a real definition here would
        # be what the writers' own ``super().close()`` reaches.
        def close(self) -> None: ...

        def abort(self) -> None: ...

        @property
        def closed(self) -> bool: ...

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def _check_open(self) -> None:
        """Refuse an I/O call on a closed writer, as Python's files do (a
        ``ValueError``): after close, ``writable()``, ``tell()`` or a new
        ``with`` block answering as if it were open hid the mistake."""
        if self.closed:
            raise InvalidArgument(f"I/O operation on closed writer {self._unpublished()[0]}")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.abort()
        except Exception as failed:
            if not isinstance(exc, BaseException):
                raise
            # The block's error stays the one raised, the abort's a note on it.
            add_note(exc, f"aborting the write failed too: {failed}")

    def _track(self) -> None:
        """Note the opening process and where the caller opened it, and the
        writer for the exit hook."""
        self._pid = os.getpid()
        self._opened = opening_site()
        _OPEN.add(self)

    def _unpublished(self) -> tuple[str, int, str]:
        """The URL, and how much was written in what unit (see warn_unclosed)."""
        raise NotImplementedError

    def _inner(self) -> PublishOnExit | None:
        """The writer this one writes through, if it is one of these."""
        return None

    def _discard(self) -> None:
        """Abort the writer if it is still open, and say what that discarded."""
        try:
            if self._done or self._pid != os.getpid():
                # A forked child's copy (a DataLoader worker collecting its
                # parent's garbage): the upload, and the data, are the parent's.
                return
            url, count, unit = self._unpublished()
        except Exception:
            return  # its __init__ failed: nothing was written
        try:
            self.abort()
        except Exception:
            pass  # `aioflux clean` finds what an abort could not remove
        warn_unclosed(url, count, unit, source=self, opened=getattr(self, "_opened", None))

    def __del__(self) -> None:
        # io.IOBase.__del__ would close(), i.e. publish a possibly partial
        # object; an abandoned writer must abort instead.
        self._discard()


# Writers of this process, for the exit hook. A writer a script leaves open
# (a global, or one in a reference cycle) is otherwise collected only after
# the portal's own exit hook has stopped the event loop, when its abort
# cannot run: a file's temporary copy would stay beside it, and a multipart
# upload on the server until `aioflux clean`.
_OPEN: weakref.WeakSet[PublishOnExit] = weakref.WeakSet()


def _discard_at_exit() -> None:
    # getattr: a writer whose __init__ failed part-way has no _done.
    writers = [w for w in list(_OPEN) if not getattr(w, "_done", True)]
    inner = {id(w._inner()) for w in writers}
    errors: list[Exception] = []
    # The outermost first: a text or zstd writer's abort aborts the writer
    # under it, and its warning counts what the caller wrote.
    for writer in sorted(writers, key=lambda w: id(w) in inner):
        try:
            writer._discard()
        except Exception as exc:  # a warning turned into an error (-W error)
            errors.append(exc)
    if errors:
        raise errors[0]


# Registered after the portal's hook (this module imports the portal), so
# it runs first: exit hooks run last registered first.
atexit.register(_discard_at_exit)


class WriterBase(abc.ABC):
    """What ObjectWriter and AsyncObjectWriter share: their settings, the
    loop-side upload session and the running CRC. How writes wait for
    in-flight parts differs (a thread semaphore against an asyncio one), so
    each writer sets that up in ``_init_flow``."""

    def __init__(self, client: ObjectStore, bucket: str, name: str, *,
                 options: WriterOptions | None = None,
                 content_type: str = "application/octet-stream",
                 metadata: dict[str, str] | None = None,
                 if_generation_match: int | None = None) -> None:
        super().__init__()  # ObjectWriter's io base; object for the async writer
        options = options or WriterOptions()
        part_size, max_in_flight = options.part_size, options.max_in_flight
        _check_settings(part_size, client.features)
        self._max_parts = client.features.max_parts
        self.bucket = bucket
        self.name = name
        self.url = format_url(client.features.scheme, bucket, name)
        check_content_type(f"write {self.url}", content_type)
        check_int(f"write {self.url}", "if_generation_match", if_generation_match,
                  optional=True)
        self.part_size = part_size
        self._session = _Session(client, bucket, name, content_type, part_size, metadata,
                                 if_generation_match)
        self._pid = os.getpid()
        self._opened = opening_site()
        # An upload whose parts land at memory speed (a file's, in the page
        # cache) names how many in flight help: past that, parts only wait,
        # each in a part buffer of fresh memory faulted in (ckpt_file).
        cap = getattr(self._session.upload, "parts_in_flight", None)
        self._init_flow(min(max_in_flight, cap) if cap else max_in_flight)
        self._number = 1
        self._crc = Crc32c()
        self._done = False

    def _forked_copy(self) -> bool:
        """Whether this is a forked child's copy of a writer opened in its
        parent (a DataLoader worker collecting the parent's garbage): the
        upload is the parent's to finish or abort, and the fork may have
        frozen the copy's lock and part futures mid-use."""
        pid: int = self.__dict__.get("_pid", os.getpid())
        return pid != os.getpid()

    def _refuse_if_forked(self) -> None:
        if self._forked_copy():
            raise BridgeError(f"write {self.url}: this writer was opened in process "
                              f"{self._pid}; a forked child cannot write to its upload "
                              f"(open the object anew in the child)")

    def _check_part_limit(self) -> None:
        """Refuse a part past the store's limit: a part is sent only once
        bytes after it came, so the tail will be part ``self._number + 1``."""
        if self._number >= self._max_parts:
            raise InvalidArgument(
                f"write {self.url}: more than {self._max_parts:,} parts of "
                f"{self.part_size / 2**20:g} MiB ({self._max_parts * self.part_size / 1e9:.0f} "
                "GB); pass WriterOptions(part_size=...) larger for such an object")

    @abc.abstractmethod
    def _init_flow(self, max_in_flight: int) -> None:
        """Set up how ``write`` waits when ``max_in_flight`` parts are uploading."""

    @property
    def stats(self) -> WriterStats:
        """What the upload did."""
        return self._session.stats


class ObjectWriter(PublishOnExit, WriterBase, io.BufferedIOBase):
    """Blocking, write-only file object uploading to ``gs://bucket/name``.

    Use as a context manager: leaving the ``with`` block normally publishes
    the object, leaving it by an exception aborts. ``close()`` publishes;
    ``abort()`` discards. A writer garbage-collected unclosed, or still
    open when the interpreter exits, is aborted (its upload too), with a
    :class:`UnclosedWriterWarning` if anything was written.

    Args:
        client: the store (driven on the portal loop).
        bucket: bucket name.
        name: object name.
        options: part size and parts in flight (``write`` blocks beyond).
        content_type: Content-Type of the object.
        metadata: custom metadata of the object (GCS and S3; files have none).
        if_generation_match: publish only if the object is then this
            generation (``0``: only if it does not exist); else ``close()``
            raises ``PreconditionFailed`` and nothing is published.

    Raises:
        InvalidArgument: bad settings.
    """

    #: As Python's ``open(path, "wb")``: gzip and others read a file's way from it.
    mode = "wb"

    def _init_flow(self, max_in_flight: int) -> None:
        self._track()
        self._portal = get_portal()
        # Writes, close and abort from several threads go one at a time, as
        # on io.BufferedWriter: unlocked, two writes filled the same buffer
        # range or resized a buffer a part upload was reading.
        self._lock = threading.RLock()
        self._parts = _Parts(max_in_flight)
        # A failure a write raised, once aborted: the next close() says it again.
        self._unsaid: BaseException | None = None
        self._buffer = self._parts.buffer(self.part_size)
        self._fill = 0
        # The buffer's first _summed bytes are checksummed already (their
        # crc32c: _summed_crc): see _checksum_filled.
        self._summed = 0
        self._summed_crc = 0
        self._futures: list[concurrent.futures.Future[None]] = []

    @property
    def info(self) -> ObjectInfo | None:
        """The published object's metadata, after a successful close."""
        return self._session.stats.info

    def writable(self) -> bool:
        self._check_open()
        return True

    def seekable(self) -> bool:
        self._check_open()
        return False

    def readable(self) -> bool:
        return False

    def tell(self) -> int:
        self._check_open()
        return self._written()

    def _written(self) -> int:
        return self._crc.length + self._fill

    def _unpublished(self) -> tuple[str, int, str]:
        return self.url, self._written(), "byte"

    def write(self, data: Bytes) -> int:  # type: ignore[override]
        """Append bytes; blocks while ``max_in_flight`` parts are uploading.

        Args:
            data: bytes-like.

        Returns:
            The number of bytes taken (all of them).

        Raises:
            InvalidArgument: the writer is closed, or ``data`` is not bytes-like.
            StorageError: a background part failed (the upload is aborted).
            BridgeError: the writer was opened in the parent of this forked
                process, or this is the event loop's own thread.
        """
        self._refuse_if_forked()
        # On the loop thread a full part waits for a slot that only the
        # uploads this loop runs can free, for good (and close() could never
        # publish from there either).
        self._portal.refuse_loop_thread(f"write {self.url}")
        with self._lock:
            if self._done:
                raise InvalidArgument(f"write to closed writer {self.url}")
            self._raise_pending()
            view = byte_view(self.url, data)
            total = len(view)
            try:
                while view:
                    # A full buffer leaves only once more bytes come: the
                    # last part may then be a full one (an object of exactly
                    # max_parts parts fits).
                    if self._fill == self.part_size:
                        self._flush_part()
                    take = min(len(view), self.part_size - self._fill)
                    # Through a memoryview: a bytearray's own slice
                    # assignment first copies any other buffer into a new
                    # bytearray (CPython), a second copy of every byte into
                    # fresh memory (ckpt_file: 1.5 GiB/s against 10).
                    with memoryview(self._buffer) as into:
                        into[self._fill:self._fill + take] = view[:take]
                    self._fill += take
                    view = view[take:]
            except BaseException:
                # Ctrl-C (or a signal handler's exception) while waiting for
                # a part slot: see interrupted_write.
                if self._parts.error is None:
                    self._parts.error = interrupted_write(self.url, total - len(view), total)
                raise
            return total

    def _flush_part(self) -> None:
        self._check_part_limit()
        self._parts.slots.acquire()
        try:
            self._raise_pending()
        except BaseException:
            self._parts.slots.release()
            raise
        checksum = self._checksum_filled()
        buf, self._buffer = self._buffer, self._parts.buffer(self.part_size)
        self._fill = self._summed = self._summed_crc = 0
        self._crc.append(checksum, self.part_size)
        future = self._portal.submit(self._session.put(self._number, memoryview(buf), checksum))
        self._number += 1
        future.add_done_callback(functools.partial(self._parts.done, buf))
        self._futures.append(future)

    def _checksum_filled(self) -> int:
        """Checksum the buffer's bytes written since the last call; return
        the crc32c of all the buffer holds.

        Every byte is checksummed once, in the part buffer: read in place
        and without the GIL (see _core/integrity/crc.py), where checksumming
        torch.save's read-only views as they came copied them and held the
        GIL ~0.2 s a GiB, which the loop thread sending the parts waited for.
        A part is one piece unless something asked where the stream stands
        between (see ``_checksummed``).
        """
        if self._fill > self._summed:
            length = self._fill - self._summed
            piece = crc32c(memoryview(self._buffer)[self._summed:self._fill])
            self._checksummed(piece, length)
            self._summed_crc = crc32c_combine(self._summed_crc, piece, length)
            self._summed = self._fill
        return self._summed_crc

    def _checksummed(self, crc: int, length: int) -> None:
        """The crc32c of the next ``length`` bytes written, in stream order:
        for a subclass that keeps checksums of ranges (DCP's items)."""

    def _raise_pending(self) -> None:
        if self._parts.error is not None:
            error = self._parts.error
            self._abort_after(error)
            # Said again by the next close(): a caller that caught it and
            # closed was told nothing, as if the object had been published.
            self._unsaid = error
            raise error

    def flush(self) -> None:
        """No-op: a full part leaves when the next byte comes; the tail goes at close.

        Raises:
            InvalidArgument: the writer is closed (a ``ValueError``, as
                Python's files raise).
        """
        # The io base's own flag, not ``closed``: an fsspec transaction's
        # file says it is closed once staged, and its commit's close() flushes.
        if super().closed:
            self._check_open()

    def settle(self) -> None:
        """Wait for the parts in flight and keep only the tail, unpublished.

        For a file whose publishing waits (an fsspec transaction's, until
        its commit): its failures surface now, and until ``close()`` it
        holds the tail's bytes (at most a part), not the part buffers.

        Raises:
            StorageError: a part failed (the upload is aborted).
            BridgeError: the writer was opened in the parent of this forked
                process, or this is the event loop's own thread.
        """
        self._refuse_if_forked()
        self._portal.refuse_loop_thread(f"write {self.url}")
        with self._lock:
            if self._done:
                return
            concurrent.futures.wait(self._futures)
            self._raise_pending()
            self._buffer = bytearray(memoryview(self._buffer)[:self._fill])
            self._parts.spare.clear()

    def close(self) -> None:
        """Upload the rest and publish the object (no-op if already closed).

        Raises:
            StorageError: the upload failed (it is aborted, nothing published);
                also the first close() after a write raised a part's failure.
            ChecksumMismatch: the stored crc32c differs from the written bytes'.
            BridgeError: the writer was opened in the parent of this forked
                process, or this is the event loop's own thread.
        """
        self._refuse_if_forked()
        if not self._done:
            # Waiting for the parts there would hang (see write), as would
            # taking the lock a write waiting for them holds; the upload is
            # left as it is, for a close() from another thread.
            self._portal.refuse_loop_thread(f"close {self.url}")
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._done:
            unsaid, self._unsaid = self._unsaid, None
            if unsaid is not None:
                raise unsaid
            return
        try:
            concurrent.futures.wait(self._futures)
            self._raise_pending()
            tail = memoryview(self._buffer)[:self._fill]
            checksum = self._checksum_filled()
            self._crc.append(checksum, self._fill)
            self._fill = self._summed = self._summed_crc = 0
            self._portal.call(self._session.finish(self._number, tail, self._crc, checksum))
            self._futures = []
        except BaseException as exc:
            self._unsaid = None  # said now
            self._abort_after(exc)
            raise
        finally:
            self._done = True
            self._buffer = bytearray()
            self._parts.spare.clear()
            super().close()

    def _abort_after(self, error: BaseException) -> None:
        """Abort because of ``error``, which stays the one raised: an abort
        that fails too (a store's abort can) is a note on it, not in its place."""
        try:
            self.abort()
        except Exception as exc:
            add_note(error, f"aborting the upload of {self.url} failed too: {exc}")

    def abort(self) -> None:
        """Discard everything written; no object is published."""
        if self._forked_copy():
            self._done = True  # never the parent's upload, never its locks
            return
        with self._lock:
            self._abort()

    def _abort(self) -> None:
        if self._done and not self._futures:
            return
        self._done = True
        for future in self._futures:
            future.cancel()
        self._buffer = bytearray()
        self._parts.spare.clear()
        if self._portal.in_loop_thread():
            # Only reachable from __del__ on the loop thread: do not block it.
            self._portal.submit(self._session.abort())
        else:
            concurrent.futures.wait(self._futures)
            self._portal.call(self._session.abort())
        self._futures = []
        if not self.closed:
            super().close()
