"""Parallel ranged reader: a seekable, read-only file object over one object.

``torch.load`` reads a checkpoint front to back with a few seeks. The reader
splits the object into ``block_size`` blocks and keeps up to ``read_ahead``
of them downloading ahead of the position with ranged GETs on the portal
loop, so one stream gets the throughput of many connections. Blocks behind
the position are dropped, so memory stays at ``block_size * read_ahead``.
The generation is pinned at open, so an overwrite mid-read fails instead of
mixing two versions.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import io
import operator
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .._core.crc import crc32c_combine, encode_crc32c
from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    ProtocolError,
    out_of_memory,
)
from .._core.options import ReaderOptions
from .._core.portal import get_portal
from .._core.types import ObjectInfo
from .._core.urls import format_url
from .._core.validate import check_contiguous

if TYPE_CHECKING:
    from .._core.store import ObjectStore

__all__ = ["ObjectReader"]

# A block's bytes and crc32c, or the error that fetching it ended with.
_Outcome = tuple[bytearray, int | None] | Exception
_Block = concurrent.futures.Future[_Outcome]
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
            read finds that version gone, the object is stat'ed again and
            read at its current version (nothing was handed out yet).
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
        self._portal = get_portal()
        self._pid = os.getpid()
        self.bucket = bucket
        self.name = name
        self.url = format_url(client.features.scheme, bucket, name)
        self.block_size = options.block_size
        self.read_ahead = options.read_ahead
        self._pos = 0
        # Where the last read ended: a read starting elsewhere follows a seek.
        self._last_end = 0
        self._recent = recent and info is not None
        # Before the stat, which may fail (NotFound): the half-built reader's
        # finalizer closes it, and close() needs these.
        self._blocks: dict[int, _Block] = {}
        # Reads, seeks and close from several threads go one at a time, as
        # on io.BufferedReader: unlocked, two reads took the same position
        # and dropped each other's blocks (a false "no bytes at offset"
        # ProtocolError), or accounted a block's crc32c twice (a false
        # ChecksumMismatch).
        self._lock = threading.RLock()
        # Set once the bytes read did not match: every later read raises it,
        # so a retry on this reader is never served the unchecked last block.
        self._corrupt: ChecksumMismatch | None = None
        # The stat whose checksums the bytes read so far await (stat_beside).
        self._stat: concurrent.futures.Future[ObjectInfo] | None = None
        if stat_beside and info is not None:
            self._stat = self._portal.submit(client.stat(bucket, name))
        self._adopt(info or self._portal.call(client.stat(bucket, name)))

    def _adopt(self, info: ObjectInfo) -> None:
        """Read the version ``info`` names (at open, or after a stale one)."""
        self.info = info
        self.size = info.size
        # Read front to back, the blocks' crc32c combine into the object's,
        # checked when the last block is consumed; an object with no crc32c
        # but an MD5 (a plain S3 ETag) is hashed as it is consumed, on the
        # reader's thread, not the event loop.
        checking = self._client.config.verify_crc32c
        self._verify = info.crc32c is not None and checking
        self._md5 = hashlib.md5(usedforsecurity=False) \
            if checking and not self._verify and info.md5 is not None else None
        # Before a stat beside says, every block's crc32c is worked out as
        # it arrives: the stat may yet give the object's.
        self._want_crc = self._verify or (checking and self._stat is not None)
        self._crc_next = 0
        self._crc = 0

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
        with self._locked():
            base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self.size}.get(whence)
            if base is None or base + offset < 0:
                raise InvalidArgument(f"seek {self.url}: bad offset "
                                      f"{offset} from whence {whence}")
            self._pos = base + offset
            return self._pos

    def _fetch(self, index: int) -> _Block:
        block = self._blocks.get(index)
        if block is None:
            start = index * self.block_size
            end = min(start + self.block_size, self.size)
            block = self._portal.submit(self._read_block(start, end))
            self._blocks[index] = block
        return block

    async def _read_block(self, start: int, end: int) -> _Outcome:
        # The error is returned, not raised: a block dropped by a seek or by
        # close() may already have failed, and an error nobody reads would be
        # logged by asyncio as "Task exception was never retrieved".
        try:
            return await self._fetch_block(start, end)
        except Exception as exc:
            return exc

    async def _fetch_block(self, start: int, end: int) -> tuple[bytearray, int | None]:
        buf = bytearray(end - start)
        return buf, await self._fetch_into(memoryview(buf), start, end)

    async def _fetch_into(self, view: memoryview, start: int, end: int) -> int | None:
        """Bytes ``[start, end)`` into ``view``; their crc32c if checking."""
        # ``size``: a server reporting another length (or metadata larger
        # than the object) fails at once instead of looping on short blocks.
        fetched = await self._client.fetch(
            self.bucket, self.name, start=start, end=end, into=view,
            generation=self.info.generation or None, size=self.size, want_crc=self._want_crc)
        if fetched.count != end - start:
            raise ProtocolError(f"read {self.url} failed: bytes [{start}, "
                                f"{end}) came back as {fetched.count} bytes",
                                operation="read", bucket=self.bucket, name=self.name)
        return fetched.crc

    async def _fill(self, out: memoryview, base: int,
                    ranges: list[tuple[int, int]]) -> list[int | None]:
        """``ranges`` fetched at once into ``out`` (which starts at ``base``).
        Returns only once no GET is left writing into it: on an error, the
        others are cancelled and waited for (``out`` is the caller's)."""
        tasks = [asyncio.ensure_future(self._fetch_into(out[s - base:e - base], s, e))
                 for s, e in ranges]
        try:
            return await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)

    def _account(self, index: int, data: bytearray | memoryview, crc: int | None) -> None:
        if index != self._crc_next:
            return
        if self._verify and crc is not None:
            self._crc = crc32c_combine(self._crc, crc, len(data))
        elif self._md5 is not None:
            self._md5.update(data)
        else:
            return
        self._crc_next += 1
        if self._crc_next * self.block_size >= self.size:
            self._check_whole()

    def _check_whole(self) -> None:
        """The bytes accounted are the whole object's: hold them to its
        crc32c (or MD5)."""
        if self._md5 is not None:
            digest = base64.b64encode(self._md5.digest()).decode()
            if digest != self.info.md5:
                self._corrupt = ChecksumMismatch(
                    f"read {self.url} failed: MD5 {digest} of the bytes read != "
                    f"{self.info.md5}", operation="read", bucket=self.bucket, name=self.name)
        elif self._verify and self._crc != self.info.crc32c:
            self._corrupt = ChecksumMismatch(
                f"read {self.url} failed: crc32c "
                f"{encode_crc32c(self._crc)} of the bytes read != "
                f"{encode_crc32c(self.info.crc32c or 0)}", operation="read",
                bucket=self.bucket, name=self.name)
        if self._corrupt is not None:
            raise self._corrupt

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Read into ``buffer`` from the current position.

        Args:
            buffer: writable bytes-like.

        Returns:
            Bytes read (0 at the end).

        Raises:
            InvalidArgument: ``buffer`` is read-only (``bytes``).
            StorageError: a ranged GET failed after retries (reading there
                again fetches anew).
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
            if self._corrupt is not None:
                raise self._corrupt
            self._confirm_end(1)
            if self._pos >= self.size:
                return b""
            index = self._pos // self.block_size
            # The block, held: the read that follows hands out these bytes.
            data, crc = self._block(index)
            if self._pos >= self.size:
                return b""  # a recent info was stale: the current version ends before here
            offset = self._pos - index * self.block_size
            if offset == 0:
                self._account(index, data, crc)
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

    def _readinto(self, buffer: bytearray | memoryview) -> int:
        out = memoryview(buffer).cast("B")
        across = self._across(out)
        if across is not None:
            return across
        done = 0
        for piece in self._pieces(len(out)):
            out[done:done + len(piece)] = piece
            done += len(piece)
        return done

    def _pieces(self, count: int) -> Iterator[memoryview]:
        """Up to ``count`` bytes from the position, as views of the blocks
        holding them; the position passes each piece once it was taken."""
        if self._corrupt is not None:
            raise self._corrupt
        self._confirm_end(count)
        exact = self._exact(count)
        if exact is not None:
            yield memoryview(exact)
            self._pos += len(exact)
            self._last_end = self._pos
            return
        while count > 0 and self._pos < self.size:
            index = self._pos // self.block_size
            data, crc = self._block(index)
            if self._pos >= self.size:
                break  # a recent info was stale: the current version ends before here
            offset = self._pos - index * self.block_size
            take = min(count, len(data) - offset)
            if take <= 0:
                # Never spin on a block shorter than its range (_read_block
                # rejects those; this guards the invariant).
                raise ProtocolError(f"read {self.url} failed: no bytes at "
                                    f"offset {self._pos}", operation="read",
                                    bucket=self.bucket, name=self.name)
            if offset == 0:
                self._account(index, data, crc)
            yield memoryview(data)[offset:offset + take]
            count -= take
            self._pos += take
        self._last_end = self._pos

    def _across(self, out: memoryview) -> int | None:
        """A read spanning whole blocks that no read-ahead holds: those go
        straight into ``out``, all at once; an unheld block it ends inside is
        fetched as a block (the next read goes on in it). A Parquet reader's
        32 MiB row group was fetched into blocks, then copied: twice the
        memory touched, every page of it a fault. None: read by blocks."""
        if self._corrupt is not None:
            raise self._corrupt
        self._confirm_end(len(out))
        bs, start = self.block_size, self._pos
        end = min(self.size, start + len(out))
        if end - start < bs:
            return None
        first, last = start // bs, (end - 1) // bs
        spans = [(i, i * bs, min(i * bs + bs, self.size)) for i in range(first, last + 1)]
        if not any(s >= start and e <= end and i not in self._blocks for i, s, e in spans):
            return None
        direct: dict[int, tuple[int, int]] = {}  # block -> range fetched into out
        for i, s, e in spans:
            if i not in self._blocks and e <= end:
                direct[i] = (max(s, start), e)
        # The read-ahead past the read (from the block it ends inside) starts
        # with it, not once it is done: a Parquet reader's next range, the
        # rest of a row group, waited a round trip. Within the read-ahead's
        # bound, blocks this read holds counted.
        ahead = end // bs if end < self.size else last + 1
        room = self.read_ahead - len(self._blocks)
        for i in range(ahead, min(ahead + room, (self.size - 1) // bs + 1)):
            self._fetch(i)
        try:
            crcs = dict(zip(direct, self._portal.call(
                self._fill(out, start, list(direct.values())), settled=True), strict=True))
            held: dict[int, tuple[bytearray, int | None]] = {}
            for i, _, _ in spans:
                if i not in direct:
                    outcome = self._fetch(i).result()
                    if isinstance(outcome, Exception):
                        raise outcome
                    held[i] = outcome
        except Exception as exc:
            self._drop_blocks()  # as _block does: reading again fetches anew
            if self._recover(exc):
                return None  # nothing handed out: read the current version by blocks
            raise
        if not self._settle():
            return None  # nothing handed out: read the stat's version by blocks
        self._recent = False
        for i, s, e in spans:
            if i in held:
                lo, hi = max(s, start), min(e, end)
                out[lo - start:hi - start] = memoryview(held[i][0])[lo - s:hi - s]
            if s >= start:  # read from its start: its crc32c counts
                self._account(i, *(held[i] if i in held else (out[s - start:e - start], crcs[i])))
        self._pos = self._last_end = end
        self._schedule(ahead)
        return end - start

    def _confirm_end(self, count: int) -> None:
        """Nothing read yet, and at or past the end a cache named: the store
        says where the end is now (no block fetch would find out). An empty
        object (no block to account) is held to its checksum here: a size
        of 0 beside the crc32c of other bytes is not an empty object."""
        if count == 0:
            return
        if self._recent and self._pos >= self.size:
            self._restat()
        if self.size == 0:
            self._settle()  # the checksums a stat beside gives, or its other version
            if self.size == 0:
                self._check_whole()

    def _exact(self, count: int) -> bytearray | None:
        """A small read away from where the last one ended, of bytes no
        block holds: just those bytes, in one ranged GET with no read-ahead
        (a Parquet reader's 64 KiB footer cost a 4 MiB block, then its
        column chunks start back at the front). None: read by blocks."""
        start = self._pos
        # A read going on from the last one (the common case) is decided first.
        if start == self._last_end or count > self.block_size // 4 \
                or self.size <= self.block_size:
            # (One block is the whole object, which its reader wants anyway:
            # a Parquet file of 2 MiB took a footer GET, then the file's.)
            return None
        end = min(self.size, start + count)
        first, last = start // self.block_size, (end - 1) // self.block_size
        if start >= end or any(i in self._blocks for i in range(first, last + 1)):
            return None
        if first == self._crc_next and start == first * self.block_size:
            # The block the front-to-back crc32c needs next, from its start
            # (torch.load seeks back to 0 for a zip's first header): read by
            # blocks, so the whole read is still checked.
            return None
        try:
            buf, _ = self._portal.call(self._fetch_block(start, end))
        except (NotFound, PreconditionFailed) as exc:
            if not self._recover(exc):
                raise
            return None  # read by blocks, at the current version
        if not self._settle():
            return None  # read by blocks, at the version the stat found
        self._recent = False
        return buf

    def _recover(self, exc: Exception) -> bool:
        """Whether ``exc`` says the version a recent info named is gone (before
        any byte was handed out); then the object was stat'ed again (a
        deleted one raises NotFound)."""
        if not (self._recent and isinstance(exc, NotFound | PreconditionFailed)):
            return False
        self._drop_blocks()
        self._restat()
        return True

    def _restat(self, current: ObjectInfo | None = None) -> None:
        """Read the version the store has now (a recent info was stale): the
        one ``current`` names, else the one a stat finds."""
        self._recent = False
        if self._stat is not None:
            self._stat.cancel()  # asked before the version changed, perhaps
            self._stat = None
        self._adopt(current or self._portal.call(self._client.stat(self.bucket, self.name)))

    def _settle(self) -> bool:
        """The stat begun beside the first GETs (``stat_beside``) adopted,
        before any byte is handed out. False: it found another version than
        the one the GETs were pinned to (a listing gone stale): what they
        fetched is dropped, and the caller reads again at the stat's."""
        pending = self._stat
        if pending is None:
            return True
        try:
            current = pending.result()
        except Exception:
            # Asked again by the next read: no byte goes out unchecked.
            self._stat = self._portal.submit(self._client.stat(self.bucket, self.name))
            self._drop_blocks()
            raise
        self._stat = None
        if current.generation == self.info.generation and current.size == self.size:
            # Nothing was handed out, so nothing accounted: adopting starts
            # the front-to-back check on the bytes already fetched (their
            # crc32c worked out, see _want_crc).
            self._adopt(current)
            return True
        self._drop_blocks()
        self._restat(current)
        return False

    def _block(self, index: int) -> tuple[bytearray, int | None]:
        """Block ``index`` (waited for), with read-ahead scheduled past it.

        After a stale recent info, the current version may end before the
        block: then it is empty and the position is past the (new) size.
        """
        self._schedule(index)
        outcome = self._fetch(index).result()
        if isinstance(outcome, Exception):
            # The read-ahead is dropped (blocks ahead may fail alike, or be
            # failing now), so that reading again once the store is back
            # fetches anew instead of raising this error forever.
            self._drop_blocks()
            if not self._recover(outcome):
                raise outcome
        elif self._settle():
            self._recent = False
            return outcome
        # The version fetched is gone, or a stat beside found another: the
        # current one, from this block on.
        if self._pos >= self.size:
            return bytearray(), None
        return self._block(index)

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
            self._confirm_end(limit)
            while self._pos < self.size and (limit < 0 or got < limit):
                index = self._pos // self.block_size
                data = self._block(index)[0]
                if self._pos >= self.size:
                    break  # a recent info was stale: the current version ends before here
                offset = self._pos - index * self.block_size
                stop = len(data) if limit < 0 else min(len(data), offset + limit - got)
                newline = data.find(b"\n", offset, stop)
                piece = self.read((stop if newline < 0 else newline + 1) - offset)
                pieces.append(piece)
                got += len(piece)
                if newline >= 0 or not piece:
                    break
        return b"".join(pieces)

    def _adopt_after_fork(self) -> None:
        if self._pid != os.getpid():
            # A forked child's copy (a DataLoader worker reading a file its
            # parent opened): the parent's read-ahead never completes here,
            # and its futures' locks may be frozen mid-use. Forget it and
            # fetch on this process's loop.
            self._pid, self._portal, self._blocks = os.getpid(), get_portal(), {}
            if self._stat is not None:  # the parent's never completes here
                self._stat = self._portal.submit(self._client.stat(self.bucket, self.name))
            # A parent's thread may have held it at the fork.
            self._lock = threading.RLock()

    def _locked(self) -> threading.RLock:
        """The lock, after the adoption a forked child's copy needs first."""
        self._adopt_after_fork()
        return self._lock

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
        self._portal.refuse_loop_thread(f"read {self.url}")
        return self._locked()

    def _schedule(self, index: int) -> None:
        self._adopt_after_fork()
        last = (self.size - 1) // self.block_size if self.size else -1
        # Drop blocks outside the window: behind the position, or far ahead
        # after a backward seek.
        for old in [i for i in self._blocks if i < index or i >= index + self.read_ahead]:
            self._blocks.pop(old).cancel()
        for i in range(index, min(index + self.read_ahead, last + 1)):
            self._fetch(i)

    def read(self, size: int | None = -1) -> bytes:
        """Read up to ``size`` bytes (all remaining if negative or None).

        Args:
            size: byte count.

        Returns:
            The bytes (empty at the end).

        Raises:
            TypeError: ``size`` is not an integer or None.
            StorageError: a ranged GET failed after retries, or the bytes
                do not fit in memory.
            ChecksumMismatch: the object read front to back did not match
                its crc32c or MD5.
        """
        limit = -1 if size is None else operator.index(size)
        with self._reading():
            self._confirm_end(limit)
            remaining = max(self.size - self._pos, 0)
            n = remaining if limit < 0 else min(limit, remaining)
            if n < _GROWN:
                buf = bytearray(n)
                got = self._readinto(buf)  # already under _reading()
                # Sliced, not resized: after a failed GET, views of ``buf``
                # may live on in its traceback until collected.
                return bytes(memoryview(buf)[:got])
            # The size is the server's claim (a HEAD, a listing): grown by the
            # blocks as they arrive, never zero-filled to it up front. Handed
            # over as is: BytesIO.getvalue() returns its own buffer once no
            # view of it is left (CPython), so reading a whole object peaks at
            # its size (its growth reserves up to an eighth more, untouched)
            # and the read-ahead, where bytes(bytearray) took twice.
            out = io.BytesIO()
            try:
                for piece in self._pieces(n):
                    out.write(piece)
            except MemoryError as exc:
                raise out_of_memory("read", self.bucket, self.name,
                                    self._client.features.scheme, n) from exc
            return out.getvalue()

    def readall(self) -> bytes:
        return self.read(-1)

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"read from closed reader {self.url}")

    def _drop_blocks(self) -> None:
        with self._locked():
            for block in self._blocks.values():
                block.cancel()
            self._blocks.clear()

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
            if self._corrupt is not None:
                raise self._corrupt
            if not (self._verify or self._md5 is not None):
                return
            if self.size == 0:
                self._confirm_end(-1)  # no block to account: see there
            try:
                while self._crc_next * self.block_size < self.size:
                    index = self._crc_next
                    data, crc = self._block(index)
                    if not data:
                        break  # the version read is gone: reads say so
                    self._account(index, data, crc)
            finally:
                self._drop_blocks()

    def close(self) -> None:
        """Cancel read-ahead and release buffers."""
        self._drop_blocks()
        if self._stat is not None:
            self._stat.cancel()
        super().close()

    def __enter__(self) -> ObjectReader:
        return self
