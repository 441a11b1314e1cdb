"""``FileWriter``: a streaming write straight into one local file.

What ``torch.save`` to ``file://`` writes through. The object writer's
parts exist to keep uploads in flight; on a file they cost a copy of every
byte into part memory, a checksum pass over it there, a hop to the loop
and a worker thread per part, and a second read of the whole file before
it is published. Here each write goes from the caller's buffer into the
temporary file (``pwrite``), in the caller's thread, a piece at a time,
and each piece is read back right after it is written: the crc32c of the
caller's bytes and of the file's bytes read back, both taken while the
piece is in the core's cache, must agree. When the writer closes, the
file holds every byte written, each checked once: publishing it (its
size checked, fsync, rename) reads nothing again. The pages written are
handed to the disk as the writer goes (``sync_file_range``), so the
fsync before publishing waits for the last few only. A large write is cut
into spans written side by side, one in the caller's thread, the others
in the file reader's threads: the copy into the page cache and both
checksums spread over the cores (``torch.save`` writes a tensor in one
thread), each span's crc32c combined into the file's.

All or nothing as every local write: nothing is visible under the name
before the rename; a failure, an abort or a close after an error removes
the temporary file.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import ctypes.util
import io
import itertools
import os
from typing import Any

from .._core.errors import ChecksumMismatch, InvalidArgument, describe
from .._core.integrity.crc import Crc32c, crc32c, crc32c_combine, encode_crc32c
from .._core.records.types import ObjectInfo
from .._core.records.urls import format_url
from . import _writes
from ._files import mapped
from ._reader import _spare_threads

__all__ = ["FileWriter"]

# Bytes written and read back at a time: within a core's cache, so the
# read-back and both checksums run there.
_PIECE = 256 * 1024
# Writes smaller than this are gathered first (a zip's headers and names:
# one write and read-back for many of them).
_SMALL = 64 * 1024
# From this size on, a write is cut into spans written side by side, each
# in pieces of _SPAN_PIECE, whose crc32c runs without the GIL.
_SPLIT_FROM = 8 * 1024 * 1024
_SPAN_PIECE = 1024 * 1024
# Written bytes are handed to the disk every this many (see _start_writeback).
_WRITEBACK_EVERY = 8 * 1024 * 1024
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback, do not wait


def _sync_file_range() -> Any:
    """libc's ``sync_file_range`` (Python has none), or None where there is none."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c")).sync_file_range
    except (OSError, AttributeError, TypeError):  # not Linux
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


_SYNC_RANGE = _sync_file_range()


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing ``length`` bytes at ``offset`` to the disk, not waiting.

    Only a head start for the fsync before publishing, which reports any
    error of these writes: a failure here is not one (tmpfs, a FUSE mount
    that has no such call).
    """
    if _SYNC_RANGE is not None:
        _SYNC_RANGE(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def _write_span(fd: int, view: memoryview, offset: int) -> tuple[int, int, int]:
    """Write ``view`` at ``offset`` of the file, reading each piece back.

    Returns:
        The crc32c of ``view``, that of the bytes read back, and their
        count (short if the file gave back fewer: it stops there).
    """
    wrote = read = done = handed = 0
    back = bytearray(min(_SPAN_PIECE, len(view)))
    while done < len(view):
        piece = view[done:done + _SPAN_PIECE]
        wrote = crc32c(piece, wrote)
        _writes._pwrite_all(fd, piece, offset + done)
        got = os.preadv(fd, [memoryview(back)[:len(piece)]], offset + done)
        read = crc32c(memoryview(back)[:got], read)
        done += got
        if got != len(piece):
            break
        if done - handed >= _WRITEBACK_EVERY:
            _start_writeback(fd, offset + handed, done - handed)
            handed = done
    if done > handed:
        _start_writeback(fd, offset + handed, done - handed)
    return wrote, read, done


class FileWriter(io.RawIOBase):
    """A write-only file for ``/bucket/name``: published on :meth:`close`,
    removed on :meth:`abort` or an error in a ``with`` block.

    Args:
        bucket: the first directory of the path.
        name: the rest of the path.
        sync_directory: fsync the directory once the file is renamed into
            it (False: a later write there does, see ``publish_checked``).

    Raises:
        StorageError: the temporary file could not be made.
    """

    def __init__(self, bucket: str, name: str, *, sync_directory: bool = True) -> None:
        super().__init__()
        self.bucket = bucket
        self.name = name
        self._sync_directory = sync_directory
        self.url = format_url("file", bucket, name)
        #: The published file's metadata, once closed.
        self.info: ObjectInfo | None = None
        self._crc = Crc32c()
        self._gathered = bytearray()
        self._back = bytearray(_PIECE)
        self._failed = False
        try:
            self._temp, self._fd = _writes.open_temp(bucket, name)
        except OSError as exc:
            raise mapped(exc, "write", bucket, name) from exc
        self._open = True

    def writable(self) -> bool:
        """Always True."""
        return True

    def tell(self) -> int:
        """Bytes written so far."""
        return self._crc.length + len(self._gathered)

    def write(self, data: Any) -> int:
        """Write ``data`` (any bytes-like) at the end.

        Args:
            data: the bytes.

        Returns:
            Their count.

        Raises:
            InvalidArgument: the writer is closed.
            ChecksumMismatch: a piece read back differs from what was written.
            StorageError: the filesystem refused (full, read-only...).
        """
        if not self._open:
            raise InvalidArgument(f"write to closed writer {self.url}")
        with memoryview(data) as view, view.cast("B") as flat:
            size = len(flat)
            if size < _SMALL:
                self._gathered += flat
                if len(self._gathered) >= _PIECE:
                    self._flush_gathered()
                return size
            self._flush_gathered()
            spans, pool = _spare_threads() if size >= _SPLIT_FROM else (1, None)
            if pool is not None:
                self._write_split(flat, spans, pool)
                return size
            for start in range(0, size, _PIECE):
                self._write_piece(flat[start:start + _PIECE])
        return size

    def _write_split(self, flat: memoryview, spans: int,
                     pool: concurrent.futures.ThreadPoolExecutor) -> None:
        """Write ``flat`` at the end as ``spans`` spans side by side, each checked."""
        offset, size = self._crc.length, len(flat)
        edges = [size * i // spans // 4096 * 4096 for i in range(spans)] + [size]
        ranges = list(itertools.pairwise(edges))
        futures = [pool.submit(_write_span, self._fd, flat[lo:hi], offset + lo)
                   for lo, hi in ranges[1:]]
        try:
            results = [_write_span(self._fd, flat[:edges[1]], offset)]
            results += [future.result() for future in futures]
        except OSError as exc:
            self._failed = True
            raise mapped(exc, "write", self.bucket, self.name) from exc
        except BaseException:
            self._failed = True
            raise
        finally:
            # ``flat`` is the caller's: no thread may read it after this returns.
            concurrent.futures.wait(futures)
        crc = self._crc.value
        for (lo, hi), (wrote, read, got) in zip(ranges, results, strict=True):
            if got != hi - lo or read != wrote:
                self._failed = True
                raise self._mismatch(hi - lo, offset + lo, got, read, wrote)
            crc = crc32c_combine(crc, wrote, hi - lo)
        self._crc.value, self._crc.length = crc, offset + size

    def _flush_gathered(self) -> None:
        if self._gathered:
            with memoryview(self._gathered) as gathered:
                for start in range(0, len(gathered), _PIECE):
                    self._write_piece(gathered[start:start + _PIECE])
            self._gathered = bytearray()

    def _write_piece(self, piece: memoryview) -> None:
        """Write ``piece`` at the end, read it back, and check it."""
        offset, before = self._crc.length, self._crc.value
        wrote = crc32c(piece, before)
        try:
            _writes._pwrite_all(self._fd, piece, offset)
            back = memoryview(self._back)[:len(piece)]
            got = os.preadv(self._fd, [back], offset)
        except OSError as exc:
            self._failed = True
            raise mapped(exc, "write", self.bucket, self.name) from exc
        read = crc32c(back[:got], before)
        if got != len(piece) or read != wrote:
            self._failed = True
            raise self._mismatch(len(piece), offset, got, read, wrote)
        self._crc.value, self._crc.length = wrote, offset + len(piece)
        if (offset + len(piece)) // _WRITEBACK_EVERY != offset // _WRITEBACK_EVERY:
            end = (offset + len(piece)) // _WRITEBACK_EVERY * _WRITEBACK_EVERY
            _start_writeback(self._fd, end - _WRITEBACK_EVERY, _WRITEBACK_EVERY)

    def _mismatch(self, size: int, offset: int, got: int, read: int,
                  wrote: int) -> ChecksumMismatch:
        """The error of ``size`` bytes at ``offset`` read back other than written."""
        return ChecksumMismatch(
            f"{describe('write', self.bucket, self.name, 'file')} failed: {size} "
            f"bytes written at {offset} read back as {got} with crc32c "
            f"{encode_crc32c(read)}, written {encode_crc32c(wrote)}; nothing was published",
            operation="write", bucket=self.bucket, name=self.name)

    def close(self) -> None:
        """Publish the file (every byte was checked as it was written).

        Raises:
            ChecksumMismatch: the file's size is not what was written.
            StorageError: the fsync or the rename failed (nothing published).
        """
        if not self._open:
            return
        if self._failed:
            self.abort()
            return
        try:
            self._flush_gathered()
            self.info = _writes.publish_checked(self._fd, self._temp, self.bucket, self.name,
                                                self._crc, sync_directory=self._sync_directory)
        except OSError as exc:
            self.abort()
            raise mapped(exc, "write", self.bucket, self.name) from exc
        except BaseException:
            self.abort()
            raise
        self._release()

    def abort(self) -> None:
        """Remove the temporary file; nothing is published. Safe to call twice."""
        if self._open:
            self._release()
            _writes.unlink_quietly(self._temp)

    def _release(self) -> None:
        self._open = False
        os.close(self._fd)
        super().close()

    def __del__(self) -> None:
        # Dropped unclosed: never published (io's own __del__ would close,
        # i.e. publish, whatever was written so far).
        if getattr(self, "_open", False):
            self.abort()

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
