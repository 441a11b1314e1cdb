"""``FileReader``: a checked, seekable read-only file over one local file.

What a checkpoint load from ``file://`` reads through (``torch.load``'s
seeks and reads, DCP's items). The object reader's blocks exist to keep
many GETs in flight; on a file they cost a copy of every byte into fresh
block memory (each page a fault) and a hop to the loop and a worker thread
per block, while the kernel reads ahead on its own. Here every read goes
straight from the file into the caller's buffer (``preadv``), in the
caller's thread, as torch's own file reader does.

Integrity is the object reader's: the file is opened once, at the
version (modification time) and size asked for, and its bytes are held to
the crc32c aioflux recorded for it (or the one the caller names). The
crc32c runs front to back over the bytes read, a piece at a time right
after each piece is read, while the piece is still in the core's cache
(one pass over memory for the read, none more for the check). Reads that
skip a few bytes (a zip's local headers, its names and padding, which
``torch.load`` never reads) read the skipped bytes too; whatever the reads
never reached (a zip's central directory, read first, out of order) is
read by :meth:`FileReader.verify`, which ends the load. A file rewritten
in place while it is read (size or modification time moved) fails
:meth:`verify` too.
"""

from __future__ import annotations

import concurrent.futures
import io
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._core.concurrency.share import cpus, pool_threads
from .._core.errors import ChecksumMismatch, InvalidArgument, NotFound, describe
from .._core.integrity.crc import crc32c, crc32c_combine, encode_crc32c
from .._core.memory.prefault import populatable_address, prefault
from .._core.records.types import ObjectInfo
from .._core.records.urls import format_url
from ._files import check_unchanged, generation_of, mapped, object_info, open_file, recorded_crc
from ._inline import on_disk

__all__ = ["FileReader"]

# Bytes read (and checksummed) at a time: within a core's cache, so the
# crc32c reads them from there (ckpt_file: 256 MiB read and checked in
# 256 KiB pieces 45 ms, in 8 MiB pieces 54 ms).
_PIECE = 256 * 1024
# A read this close past the checked bytes reads the bytes between too.
_GAP = 64 * 1024
# From this size on, a read of a file on a memory filesystem is cut into
# spans read side by side, one in the caller's thread, the others in this
# module's: the copy into torch's fresh tensor memory, and the page faults
# of that memory, spread over the cores (torch.load reads a tensor in one
# thread). On a local disk one thread reads it front to back: two streams
# in one file break the kernel's sequential read-ahead. Each span is read
# and checksummed in pieces of _SPAN_PIECE, whose crc32c runs without the
# GIL.
_SPLIT_FROM = 8 * 1024 * 1024
_SPAN_MIN = 4 * 1024 * 1024
_SPAN_PIECE = 1024 * 1024
_MOST_THREADS = 4
_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _spare_threads() -> tuple[int, ThreadPoolExecutor | None]:
    """How many spans a read may be cut into, and the threads reading all
    but the first (this process's: a forked child makes its own)."""
    global _pool
    # A DataLoader worker's share of the CPUs, as its other pools take.
    cores = pool_threads(min(_MOST_THREADS, cpus()), least=1)
    if cores < 2:
        return 1, None
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(cores - 1,
                                                     thread_name_prefix="aioflux-file-read"))
        return cores, _pool[1]


def _read_span(fd: int, view: memoryview, offset: int, skip: int | None) -> tuple[int, int]:
    """Read ``view``'s bytes from ``offset`` of the file.

    Returns:
        The bytes read (fewer at the file's end) and the crc32c of those
        from index ``skip`` on (0 if ``skip`` is None).
    """
    crc, done = 0, 0
    at = populatable_address(view)
    while done < len(view):
        piece = view[done:done + _SPAN_PIECE]
        if at:
            prefault(at + done, len(piece))
        got = os.preadv(fd, [piece], offset + done)
        if got == 0:
            break
        if skip is not None and skip - done < got:
            crc = crc32c(piece[max(skip - done, 0):got], crc)
        done += got
    return done, crc


class FileReader(io.RawIOBase):
    """A seekable read-only file over ``/<bucket>/<name>``, checked.

    Args:
        bucket: the first directory of the path.
        name: the rest of the path.
        info: the version to read (its generation and size must match;
            its crc32c, if set, is the one checked), or None for the
            file as it is.
        verify: check the bytes against a crc32c (the store's
            ``verify_crc32c``).

    Raises:
        NotFound: no such file, or ``info``'s version of it is gone.
        ChecksumMismatch: the file is not ``info``'s size.
    """

    mode = "rb"

    def __init__(self, bucket: str, name: str, *, info: ObjectInfo | None = None,
                 verify: bool = True) -> None:
        super().__init__()
        self.bucket = bucket
        self.name = name
        self.url = format_url("file", bucket, name)
        self._fd = -1
        try:
            self._fd, self._st = open_file("read", bucket, name)
        except OSError as exc:
            raise mapped(exc, "read", bucket, name) from exc
        try:
            known = self._opened(info)
        except BaseException:
            self.close()
            raise
        self.info = object_info(bucket, name, self._st, known)
        self._verify = verify
        self._start(0, self._st.st_size, known if verify else None)

    def _opened(self, info: ObjectInfo | None) -> int | None:
        """Check the file opened is ``info``'s version; its crc32c."""
        where = describe("read", self.bucket, self.name, "file")
        st = self._st
        if info is not None and info.generation and generation_of(st) != info.generation:
            raise NotFound(f"{where} failed: generation {info.generation} is gone (now "
                           f"{generation_of(st)})", operation="read", bucket=self.bucket,
                           name=self.name)
        if info is not None and info.size != st.st_size:
            raise ChecksumMismatch(f"{where} failed: {st.st_size} bytes, expected {info.size}",
                                   operation="read", bucket=self.bucket, name=self.name)
        if info is not None and info.crc32c is not None:
            return info.crc32c
        return recorded_crc(self._fd, st)

    def _start(self, base: int, size: int, expected: int | None) -> None:
        """Read bytes ``[base, base + size)`` of the file as this file's,
        checked against ``expected`` (worked out anyway where ``_want``)."""
        self._base = base
        self.size = size
        self._expected = expected
        self._want = expected is not None
        self._pos = 0
        self._checked = 0  # bytes [0, _checked) are accounted in _crc
        self._crc = 0
        self._corrupt: ChecksumMismatch | None = None

    def item(self, offset: int, length: int) -> FileReader:
        """A reader of bytes ``[offset, offset + length)`` alone (a DCP
        item's), over this reader's descriptor: its crc32c is worked out
        as it is read, and :meth:`finish` hands it over.

        Args:
            offset: where the item starts in the file.
            length: its length (within the file).

        Returns:
            The item's reader (close it: it holds a descriptor of its own).
        """
        self._check_open()
        item = FileReader.__new__(FileReader)
        io.RawIOBase.__init__(item)
        item.bucket, item.name, item.url, item.info = self.bucket, self.name, self.url, self.info
        # A descriptor of its own: DCP closes the file's reader before it
        # is done with its last item (checked once the next is asked for).
        item._fd, item._st, item._verify = os.dup(self._fd), self._st, self._verify
        item._start(offset, length, None)
        item._want = self._verify
        return item

    def modified(self) -> NotFound | None:
        """Whether the file was rewritten in place since it was opened (its
        size or modification time moved; a rename over its name is not:
        the descriptor keeps the content): the error saying so, or None."""
        self._check_open()
        try:
            now = os.fstat(self._fd)
        except OSError as exc:
            raise mapped(exc, "read", self.bucket, self.name) from exc
        if (now.st_size, now.st_mtime_ns) == (self._st.st_size, self._st.st_mtime_ns):
            return None
        return NotFound(f"{describe('read', self.bucket, self.name, 'file')} failed: "
                        f"generation {generation_of(self._st)} is gone (now "
                        f"{generation_of(now)})", operation="read", bucket=self.bucket,
                        name=self.name)

    def finish(self) -> int | None:
        """Read what the reads left unchecked and check the file was not
        rewritten in place meanwhile.

        Returns:
            The crc32c of all this reader's bytes (None when not checking).

        Raises:
            ChecksumMismatch: as :meth:`verify`.
            StorageError: a read failed.
        """
        self.verify()
        return self._crc if self._want else None

    # -- io ------------------------------------------------------------------

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
        """Move the position (as a file's ``seek``).

        Raises:
            InvalidArgument: a negative position, or a bad ``whence``.
        """
        self._check_open()
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self.size}.get(whence)
        if base is None or base + offset < 0:
            raise InvalidArgument(f"seek {self.url}: bad offset {offset} from whence {whence}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        """Read into ``buffer`` from the position.

        Returns:
            Bytes read (0 at the end).

        Raises:
            ChecksumMismatch: the file's bytes, read front to back, are not
                its crc32c's, or it ended early (truncated while read).
            StorageError: the read failed.
        """
        self._check_open()
        if self._corrupt is not None:
            raise self._corrupt
        out = memoryview(buffer).cast("B")
        start = self._pos
        count = max(0, min(len(out), self.size - start))
        if count and self._checked < start <= self._checked + _GAP:
            self._check_through(start)  # the bytes skipped: checked now, or never in order
        if count >= _SPLIT_FROM:
            spans, pool = _spare_threads() if not on_disk(self._st) else (1, None)
            return self._read_split(out[:count], start, max(min(spans, count // _SPAN_MIN), 1),
                                    pool)
        done = 0
        memory = populatable_address(out[:count])
        try:
            while done < count:
                at = start + done
                piece = out[done:done + min(_PIECE, count - done)]
                if memory:
                    prefault(memory + done, len(piece))
                got = os.preadv(self._fd, [piece], self._base + at)
                if got == 0:
                    raise self._fail(f"the file ended at {self._base + at} of "
                                     f"{self._base + self.size} bytes (truncated while reading)")
                self._account(at, piece[:got])
                done += got
        except OSError as exc:
            raise mapped(exc, "read", self.bucket, self.name) from exc
        self._pos = start + done
        return done

    def _read_split(self, out: memoryview, start: int, spans: int,
                    pool: ThreadPoolExecutor | None) -> int:
        """``readinto`` of ``len(out)`` bytes as ``spans`` spans side by side
        (one, in this thread, without ``pool``)."""
        count = len(out)
        edges = [count * i // spans // 4096 * 4096 for i in range(spans)] + [count]
        checked = self._checked if self._want and start <= self._checked < start + count \
            else None
        ranges = list(itertools.pairwise(edges))
        skips = [None if checked is None or start + hi <= checked
                 else max(checked - start - lo, 0) for lo, hi in ranges]
        assert pool is not None or spans == 1
        futures = [pool.submit(_read_span, self._fd, out[lo:hi], self._base + start + lo, skip)
                   for (lo, hi), skip in zip(ranges[1:], skips[1:], strict=True)
                   ] if pool is not None else []
        try:
            results = [_read_span(self._fd, out[:edges[1]], self._base + start, skips[0])]
            results += [future.result() for future in futures]
        except OSError as exc:
            raise mapped(exc, "read", self.bucket, self.name) from exc
        finally:
            # ``out`` is the caller's: no thread may write into it after this returns.
            concurrent.futures.wait(futures)
        for (lo, hi), skip, (got, crc) in zip(ranges, skips, results, strict=True):
            if got < hi - lo:
                raise self._fail(f"the file ended at {self._base + start + lo + got} of "
                                 f"{self._base + self.size} bytes (truncated while reading)")
            if skip is not None:
                self._crc = crc32c_combine(self._crc, crc, hi - lo - skip)
                self._checked = start + hi
        self._decide()
        self._pos = start + count
        return count

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the position (the rest if negative)."""
        self._check_open()
        rest = max(0, self.size - self._pos)
        count = rest if size is None or size < 0 else min(size, rest)
        buf = bytearray(count)
        got = self.readinto(buf)
        return bytes(memoryview(buf)[:got])

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        """Close the file (a second call does nothing)."""
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)
        super().close()

    def __enter__(self) -> FileReader:
        self._check_open()
        return self

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"read from closed reader {self.url}")

    # -- the check -----------------------------------------------------------

    def verify(self) -> None:
        """Check the whole file: read what the reads left unchecked, and
        hold it all to the crc32c; and check the file was not rewritten in
        place while it was read.

        Raises:
            ChecksumMismatch: the bytes are not the file's, or the file was
                modified while it was read.
            StorageError: a read failed.
        """
        self._check_open()
        if self._corrupt is not None:
            raise self._corrupt
        try:
            if self._want:
                self._check_through(self.size)
                if self.size == 0 and self._expected:  # no byte to decide: said here
                    raise self._fail(f"crc32c {encode_crc32c(0)} != recorded "
                                     f"{encode_crc32c(self._expected)}")
            check_unchanged(self._fd, self._st, "read", self.bucket, self.name)
        except OSError as exc:
            raise mapped(exc, "read", self.bucket, self.name) from exc

    def _check_through(self, end: int) -> None:
        """Read and account bytes ``[_checked, end)``."""
        if not self._want or self._checked >= end:
            return
        scratch = memoryview(bytearray(min(_PIECE, end - self._checked)))
        while self._checked < end:
            at = self._checked
            piece = scratch[:min(len(scratch), end - at)]
            got = os.preadv(self._fd, [piece], self._base + at)
            if got == 0:
                raise self._fail(f"the file ended at {self._base + at} of "
                                 f"{self._base + self.size} bytes (truncated while reading)")
            self._account(at, piece[:got])

    def _account(self, at: int, piece: memoryview) -> None:
        """``piece`` holds the file's bytes from ``at``: the part of it past
        the bytes checked so far, if it starts at or before them, goes into
        the crc32c; the last byte decides."""
        if not self._want or not at <= self._checked < at + len(piece):
            return
        self._crc = crc32c(piece[self._checked - at:], self._crc)
        self._checked = at + len(piece)
        self._decide()

    def _decide(self) -> None:
        """Once every byte is accounted, hold the crc32c to the file's."""
        if self._checked == self.size and self._expected is not None:
            # (An item's reader has nothing to hold its bytes to: its
            # reader's owner compares the crc32c :meth:`finish` hands over.)
            if self._crc != self._expected:
                raise self._fail(f"crc32c {encode_crc32c(self._crc)} != recorded "
                                 f"{encode_crc32c(self._expected)}")
            # As the object reader's last block: the bytes matched, and were
            # of one content (a file rewritten in place since it was opened
            # may match by chance only in a pathological case, checked anyway).
            check_unchanged(self._fd, self._st, "read", self.bucket, self.name)

    def _fail(self, detail: str) -> ChecksumMismatch:
        """The mismatch, kept: every later read raises it too."""
        self._corrupt = ChecksumMismatch(
            f"{describe('read', self.bucket, self.name, 'file')} failed: {detail}",
            operation="read", bucket=self.bucket, name=self.name)
        return self._corrupt
