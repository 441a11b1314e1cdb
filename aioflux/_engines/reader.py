"""Parallel ranged reader: a seekable, read-only file object over one object.

``torch.load`` reads a checkpoint front to back with a few seeks. The reader
splits the object into ``block_size`` blocks and keeps up to ``read_ahead``
of them downloading ahead of the position with ranged GETs on the portal
loop, so one stream gets the throughput of many connections. Blocks outside
that window (behind the position, or from before a seek) stay only in the
room it leaves, so memory stays at ``block_size * read_ahead`` and a seek
to the end and back (a zip's central directory) fetches nothing twice.
The generation is pinned at open, so an overwrite mid-read fails instead of
mixing two versions.

The reader is the io methods over three parts with state of their own:
the blocks and their window (:mod:`.reader_blocks`, ``_window``), the
front-to-back crc32c of the bytes consumed (:mod:`.reader_check`,
``_check``) and the version read (:mod:`.reader_versions`, ``_version``:
a recent info gone stale, a stat beside). The reads that skip the blocks
are functions of those parts (:mod:`.reader_direct`).
"""

from __future__ import annotations

import io
import operator
import os
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._core.checks.arguments import check_contiguous
from .._core.errors import InvalidArgument, ProtocolError, out_of_memory
from .._core.memory.buffers import GrowingBytes
from .._core.records.types import ObjectInfo
from .._core.records.urls import format_url
from .._core.settings.options import ReaderOptions
from .reader_blocks import BlockWindow
from .reader_check import FrontToBackCheck
from .reader_direct import across, exact
from .reader_versions import PinnedVersion

if TYPE_CHECKING:
    from .._core.storage.protocol import ObjectStore

__all__ = ["ObjectReader"]

# From this size on, read() grows the bytes it returns as blocks arrive.
_GROWN = 1 << 20


class ObjectReader(io.RawIOBase):
    """Blocking, seekable, read-only file object over ``gs://bucket/name``.

    Its io methods are those of Python's ``open(path, "rb")`` (an
    io.BufferedReader): ``peek``, ``read1`` and ``readinto1`` too, and a
    ``mode`` of ``"rb"``, which gzip and others read to tell a file's way.

    Args:
        client: the store (driven on the portal loop).
        bucket: bucket name.
        name: object name.
        options: block size and read-ahead.
        info: the object's metadata if already known (skips a stat).
        recent: ``info`` came from a cache (a listing's, an earlier stat's)
            and may name a version since replaced or deleted: if the first
            read finds that version gone, or the object of another size
            than ``info`` said, the object is stat'ed again and read at its
            current version (nothing was handed out yet).
        stat_beside: ``info`` lacks the checksums reads are checked against
            (an S3 listing's has none): a stat begun at open runs beside
            the first GETs, which are pinned to ``info``'s version, and is
            adopted before any byte is handed out. An open that stat'ed
            first cost each small file of a dataset a round trip.

    Raises:
        NotFound: no such object.
        InvalidArgument: bad settings.
    """

    mode = "rb"

    def __init__(self, client: ObjectStore, bucket: str, name: str, *,
                 options: ReaderOptions | None = None, info: ObjectInfo | None = None,
                 recent: bool = False, stat_beside: bool = False) -> None:
        super().__init__()
        options = options or ReaderOptions()
        self._client = client
        self.bucket = bucket
        self.name = name
        self.url = format_url(client.features.scheme, bucket, name)
        self.block_size = options.block_size
        self.read_ahead = options.read_ahead
        self._pos = 0
        # Where the last read ended: a read starting elsewhere follows a seek.
        self._last_end = 0
        # Its ``corrupt``, set once the bytes read did not match, is raised by
        # every later read: a retry is never served the unchecked last block.
        self._check = FrontToBackCheck(self.url, bucket, name, self.block_size)
        # Before the stat, which may fail (NotFound): the half-built reader's
        # finalizer closes it, and close() needs the window.
        self._window = BlockWindow(client, bucket, name, self.url, block_size=self.block_size,
                                   read_ahead=self.read_ahead, check=self._check,
                                   on_fork=weakref.WeakMethod(self._after_fork))
        self._version = PinnedVersion(client, self._window, self._check)
        self._version.open(info, recent=recent, stat_beside=stat_beside)

    @property
    def info(self) -> ObjectInfo:
        """The version read."""
        return self._version.info

    @property
    def size(self) -> int:
        """Its size."""
        return self._version.size

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"read from closed reader {self.url}")

    def _after_fork(self) -> None:
        self._version.after_fork()

    def readable(self) -> bool:
        self._check_open()
        return True

    def seekable(self) -> bool:
        self._check_open()
        return True

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move the position.

        Args:
            offset: bytes.
            whence: ``SEEK_SET``, ``SEEK_CUR`` or ``SEEK_END``.

        Returns:
            The new position.

        Raises:
            InvalidArgument: negative resulting position, bad ``whence``, or
                the reader is closed.
            TypeError: ``offset`` is not an integer.
        """
        self._check_open()
        offset = operator.index(offset)
        with self._window.locked():
            version = self._version
            base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: version.size}.get(whence)
            if whence == os.SEEK_END:
                version.size_told = True  # the caller's offsets may rest on it now
            if base is None or base + offset < 0:
                raise InvalidArgument(f"seek {self.url}: bad offset "
                                      f"{offset} from whence {whence}")
            self._pos = base + offset
            return self._pos

    def told_size(self) -> int:
        """The size, handed out to a caller whose offsets may rest on it: a
        first read that finds another version of another size raises
        ``PreconditionFailed``, as after a seek from the end.

        Returns:
            The size.
        """
        version = self._version
        if not version.recent:
            # Confirmed (a stat at open, or a read): nothing to hold to, and
            # no wait for a read another thread has under way.
            return version.size
        with self._window.locked():
            version.size_told = True
            return version.size

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Read into ``buffer`` from the current position.

        Args:
            buffer: writable bytes-like.

        Returns:
            Bytes read (0 at the end).

        Raises:
            InvalidArgument: ``buffer`` is read-only (``bytes``).
            StorageError: a ranged GET failed after retries (nothing was
                consumed: reading again fetches anew, from the same position).
            ChecksumMismatch: the object read front to back did not match its
                crc32c or MD5 (then every later read raises it too).
            BridgeError: called on the event loop's own thread.
        """
        out = self._writable(buffer)
        with self._reading():
            return self._readinto(out)

    def _writable(self, buffer: bytearray | memoryview) -> memoryview:
        """``buffer`` as the bytes a read fills, checked before any request:
        a long read fetches straight into it, and into a read-only one every
        GET failed, and was retried, as a truncated body."""
        view = memoryview(buffer)  # io's TypeError if it is no buffer at all
        if view.readonly:
            raise InvalidArgument(f"read {self.url}: readinto needs a writable buffer, got a "
                                  f"read-only {type(buffer).__name__}")
        check_contiguous(f"read {self.url}", "buffer", view)
        return view.cast("B")

    def _in_block(self, limit: int) -> int:
        """How many of ``limit`` bytes (all if negative) the block holding
        the position has from there: what one GET of io's ``read1`` gives."""
        rest = self.block_size - self._pos % self.block_size
        return rest if limit < 0 else min(limit, rest)

    def peek(self, size: int = 0) -> bytes:
        """As io.BufferedReader's: bytes from the position on (at least one
        unless at the end; up to ``size`` or ``io.DEFAULT_BUFFER_SIZE``, within
        the block holding the position), which stays where it is. Raises
        as ``read``."""
        most = max(operator.index(size), io.DEFAULT_BUFFER_SIZE)
        with self._reading():
            if self._check.corrupt is not None:
                raise self._check.corrupt
            version = self._version
            version.confirm_end(1, self._pos)
            if self._pos >= version.size:
                return b""
            index = self._pos // self.block_size
            # The block, held: the read that follows hands out these bytes.
            data, crc = version.block(index, self._pos)
            if self._pos >= version.size:
                return b""  # a recent info was stale: the current version ends before here
            offset = self._pos - index * self.block_size
            self._check.account(index, data, crc)  # held whole: counts if it is the next
            return bytes(memoryview(data)[offset:offset + most])

    def read1(self, size: int | None = -1) -> bytes:
        """As io.BufferedReader's: up to ``size`` bytes (the rest of the
        block if negative or None) in at most one GET. Raises as ``read``."""
        limit = -1 if size is None else operator.index(size)
        with self._reading():
            return self.read(self._in_block(limit))

    def readinto1(self, buffer: bytearray | memoryview) -> int:
        """As io.BufferedReader's: ``readinto`` in at most one GET."""
        out = self._writable(buffer)
        with self._reading():
            return self._readinto(out[:self._in_block(len(out))])

    def _readinto(self, buffer: bytearray | memoryview, ahead_too: bool = True) -> int:
        out = memoryview(buffer).cast("B")
        got = across(self._window, self._check, self._version, self._pos, out, ahead_too)
        if got is not None:
            self._pos = self._last_end = self._pos + got
            return got
        done = 0
        start, last_end = self._pos, self._last_end
        try:
            for piece in self._pieces(len(out)):
                out[done:done + len(piece)] = piece
                done += len(piece)
        except BaseException:
            # A read that fails partway (a GET, the check, Ctrl-C) returns
            # no count, so it consumes nothing, as across(): the blocks it had
            # taken moved the position on, and reading again skipped them.
            self._pos, self._last_end = start, last_end
            raise
        return done

    def _pieces(self, count: int) -> Iterator[memoryview]:
        """Up to ``count`` bytes from the position, as views of the blocks
        holding them; the position passes each piece once it was taken."""
        if self._check.corrupt is not None:
            raise self._check.corrupt
        version = self._version
        version.confirm_end(count, self._pos)
        alone = exact(self._window, self._check, version, self._pos, self._last_end, count)
        if alone is not None:
            yield memoryview(alone)
            self._pos += len(alone)
            self._last_end = self._pos
            return
        while count > 0 and self._pos < version.size:
            index = self._pos // self.block_size
            data, crc = version.block(index, self._pos)
            if self._pos >= version.size:
                break  # a recent info was stale: the current version ends before here
            offset = self._pos - index * self.block_size
            take = min(count, len(data) - offset)
            if take <= 0:
                # Never spin on a block shorter than its range (its fetch
                # rejects those; this guards the invariant).
                raise ProtocolError(f"read {self.url} failed: no bytes at "
                                    f"offset {self._pos}", operation="read",
                                    bucket=self.bucket, name=self.name)
            # Held whole, so its crc32c counts if it is the next, from its
            # start or not: a long read ending inside a block fetches the
            # block, and the next read goes on from inside it (counted only
            # from its start, the check would stop there and every later block
            # be read again by verify(), or never checked).
            self._check.account(index, data, crc)
            yield memoryview(data)[offset:offset + take]
            count -= take
            self._pos += take
        self._last_end = self._pos

    def readline(self, size: int | None = -1) -> bytes:
        """Read up to and including the next ``b"\\n"`` (at most ``size`` bytes).

        io's default reads one byte per call; this scans the blocks.

        Args:
            size: most bytes to return (all up to the newline if negative or None).

        Returns:
            The line (empty at the end).

        Raises:
            StorageError: a ranged GET failed after retries.
        """
        limit = -1 if size is None else operator.index(size)
        pieces: list[bytes] = []
        got = 0
        with self._reading():
            version = self._version
            version.confirm_end(limit, self._pos)
            start, last_end = self._pos, self._last_end
            try:
                while self._pos < version.size and (limit < 0 or got < limit):
                    index = self._pos // self.block_size
                    offset = self._pos - index * self.block_size
                    held = self._held(index) if offset else None
                    data = held if held is not None else version.block(index, self._pos)[0]
                    if self._pos >= version.size:
                        break  # a recent info was stale: the current version ends before here
                    stop = len(data) if limit < 0 else min(len(data), offset + limit - got)
                    newline = data.find(b"\n", offset, stop)
                    end = stop if newline < 0 else newline + 1
                    if held is not None:
                        # Past a block's start (where _pieces accounts it for
                        # the crc32c) in a block held and settled: sliced
                        # here, as read() would; through read(), a line a
                        # few dozen bytes long cost ~9 us.
                        piece = bytes(memoryview(data)[offset:end])
                        self._pos = self._last_end = self._pos + len(piece)
                    else:
                        piece = self.read(end - offset)
                    pieces.append(piece)
                    got += len(piece)
                    if newline >= 0 or not piece:
                        break
            except BaseException:
                self._pos, self._last_end = start, last_end  # as _readinto: nothing consumed
                raise
        return b"".join(pieces)

    def _held(self, index: int) -> bytearray | None:
        """Block ``index``'s bytes if the window holds them fetched and the
        version read is settled (nothing to check or adopt before handing
        them out); else None: read through ``PinnedVersion.block``."""
        block = self._window.blocks.get(index)
        version = self._version
        if block is None or not block.done() or version.recent or version.stat is not None \
                or self._check.corrupt is not None:
            return None
        outcome = block.result()
        return None if isinstance(outcome, Exception) else outcome[0]

    def _reading(self) -> threading.RLock:
        """The lock, for a read that will wait for blocks.

        Raises:
            InvalidArgument: the reader is closed.
            BridgeError: called on the portal's loop thread, where the wait
                would block the loop that fetches the blocks, for good (and
                taking the lock, while another thread's read holds it
                waiting for that loop).
        """
        self._check_open()
        self._window.portal.refuse_loop_thread(f"read {self.url}")
        return self._window.locked()

    def read(self, size: int | None = -1) -> bytes:
        """Read up to ``size`` bytes (all remaining if negative or None).

        Args:
            size: byte count.

        Returns:
            The bytes (empty at the end).

        Raises:
            TypeError: ``size`` is not an integer or None.
            StorageError: a ranged GET failed after retries, or the bytes
                do not fit in memory (nothing was consumed).
            ChecksumMismatch: the object read front to back did not match
                its crc32c or MD5.
        """
        limit = -1 if size is None else operator.index(size)
        with self._reading():
            version = self._version
            version.confirm_end(limit, self._pos)
            remaining = max(version.size - self._pos, 0)
            n = remaining if limit < 0 else min(limit, remaining)
            if n < _GROWN:
                buf = bytearray(n)
                got = self._readinto(buf)  # already under _reading()
                # Sliced, not resized: after a failed GET, views of ``buf``
                # may live on in its traceback until collected.
                data = bytes(memoryview(buf)[:got])
                if limit < 0 and self._pos < version.size:
                    # "The rest" was sized by a cached size that the read
                    # found stale, before handing out a byte: the current
                    # version is longer, and its rest is read too.
                    return data + self.read(-1)
                return data
            return self._read_grown(limit, n)

    def _read_grown(self, limit: int, n: int) -> bytes:
        """``read(limit)`` of ``n`` bytes or more (all remaining if ``limit``
        is negative), received straight into the ``bytes`` returned.

        The size is the server's claim (a HEAD, a listing), so the object
        grows as the bytes arrive, never to the claim up front: a piece
        the size of the read-ahead's window first, then as long as what
        arrived (a GiB in 4 pieces). Each piece's blocks are fetched into
        it, checked as they land; a block the window already holds is
        copied in. Copying blocks out of their own buffers touched every
        byte twice more (1 GiB: 1.6 s of CPU against 1 for the socket's
        copy and the crc32c)."""
        bs = self.block_size
        window = bs * self.read_ahead
        start, last_end = self._pos, self._last_end
        version = self._version
        got = 0
        sink: GrowingBytes | None = None
        try:
            sink = GrowingBytes(min(n, window))
            while True:
                rest = max(version.size - self._pos, 0)
                # "The rest" rests on the size: a stale cached one found
                # shorter than the current version reads on to its end.
                want = rest if limit < 0 else min(limit - got, rest)
                if want <= 0:
                    break
                end = self._pos + min(want, max(window, got))
                if end - self._pos < want:
                    end -= end % bs  # a piece ends on a block's end: none fetched twice
                sink.grow(got + end - self._pos)
                # Valid until the next grow: every GET into it has ended by then.
                piece = sink.view()[got:]
                done = self._readinto(piece, ahead_too=end - self._pos == want)
                got += done
                if done == 0:
                    break  # the version read is shorter than the size said
            return sink.take(got)
        except BaseException as exc:
            self._pos, self._last_end = start, last_end  # as _readinto: nothing consumed
            if sink is not None:
                sink.close()
            if isinstance(exc, MemoryError):
                raise out_of_memory("read", self.bucket, self.name,
                                    self._client.features.scheme, n) from exc
            raise

    def readall(self) -> bytes:
        return self.read(-1)

    def verify(self) -> None:
        """Check the whole object against its crc32c (or MD5), reading what
        the reads so far left unchecked: the check runs front to back, and
        a reader that ended on a seek never got there (``torch.load`` reads
        a zip's central directory out of order, and may never read it from
        its start: every flipped byte that still parsed loaded in silence).
        Blocks already checked are not read again. Nothing to check against
        (no crc32c, no MD5, ``verify_crc32c`` off): nothing is read.

        Raises:
            ChecksumMismatch: the bytes are not the object's.
            StorageError: a read failed.
        """
        with self._reading():
            if self._check.corrupt is not None:
                raise self._check.corrupt
            if not self._check.active:
                return
            version = self._version
            if version.size == 0:
                version.confirm_end(-1, self._pos)  # no block to account: see there
            try:
                while self._check.next * self.block_size < version.size:
                    index = self._check.next
                    data, crc = version.block(index, self._pos)
                    if not data:
                        break  # the version read is gone: reads say so
                    self._check.account(index, data, crc)
            finally:
                self._window.drop()

    def close(self) -> None:
        """Cancel read-ahead and release buffers."""
        # One step under the lock: a read on another thread that takes the
        # lock after the blocks were dropped finds the reader closed (see
        # BlockWindow.fetch), never open and empty.
        with self._window.locked():
            self._window.drop()
            self._window.closed = True
            self._version.close()
            super().close()

    def __enter__(self) -> ObjectReader:
        self._check_open()  # as io's: a closed file is no context
        return self

    def write(self, data: Any) -> int:
        """Refused: the reader is read-only (``io.UnsupportedOperation``, as
        Python's ``open(path, "rb").write`` raises)."""
        raise io.UnsupportedOperation(f"write to {self.url}: opened for reading")
