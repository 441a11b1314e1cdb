"""A file as an object, and its checked reads.

The blocking filesystem work of :class:`~aioflux.local.LocalStore` is here
(what a file is as an object, reads), in :mod:`._listing` (listings and the
open uploads) and in :mod:`._writes` (writes, copies and deletes). Every
function of the three runs in a worker thread and raises ``OSError`` or a
:class:`StorageError`; the store maps the former (:func:`mapped`). Paths are
``/<bucket>/<name>``: the bucket is the first directory of the path.

A file's object is its size, its modification time as the generation
(:func:`generation_of`), and the crc32c aioflux recorded for exactly that
content in an extended attribute (:func:`record_crc`, :func:`recorded_crc`).
"""

from __future__ import annotations

import errno
import io
import os
import stat as stat_mod
import struct
from collections.abc import Callable

from .._core.errors import (
    ChecksumMismatch,
    Conflict,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    StorageError,
    describe,
    out_of_memory,
)
from .._core.integrity.crc import crc32c, encode_crc32c
from .._core.memory.columns import rfc3339
from .._core.memory.prefault import populatable_address, prefault
from .._core.records.types import NO_METADATA, ObjectInfo
from .._core.storage.protocol import Fetched
from ._inline import INLINE_MAX, WouldWait, pread_nowait
from ._paths import path_of

__all__ = [
    "CLOEXEC",
    "READ_BLOCK",
    "TEMP_MARK",
    "check_unchanged",
    "file_info",
    "generation_at",
    "generation_of",
    "mapped",
    "not_a_file",
    "object_info",
    "object_of",
    "open_file",
    "path_of",
    "read_file",
    "read_ranges",
    "read_small_here",
    "record_crc",
    "recorded_crc",
]

# Temporary files of writes in progress (``.<base>.aioflux-tmp-<id>`` next
# to the target): skipped by listings, reported as open uploads.
TEMP_MARK = ".aioflux-tmp-"
_XATTR = "user.aioflux.crc32c"
# size (8 bytes), mtime_ns (8 bytes), crc32c (4 bytes), big-endian.
_XATTR_FORMAT = ">QQI"
_XATTR_SIZE = struct.calcsize(_XATTR_FORMAT)
READ_BLOCK = 8 * 1024 * 1024
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A path that needs a directory where a file is (or the reverse): files and
# directories cannot share a name, though GCS objects "a" and "a/b" can.
_SHAPE_ERRNOS = (errno.ENOTDIR, errno.EISDIR, errno.EEXIST)


def mapped(exc: OSError, op: str, bucket: str, name: str, *,
           writing: bool | None = None) -> StorageError:
    """The StorageError for a failed filesystem call of ``op`` on ``name``,
    which it writes (default: ``op`` is ``write``; a copy's source is read,
    its destination written: see :func:`._writes._failing_as`)."""
    where = describe(op, bucket, name, "file")
    if isinstance(exc, StorageError):
        # aioflux's own, raised inside the call (a path found no file, a
        # missing root): NotFound and PermissionDenied are OSErrors too, and
        # their kind stands; the text is said once, under this ``op``.
        said = f"{describe(exc.operation, exc.bucket, exc.name, 'file')} failed: "
        text = str(exc)
        return type(exc)(f"{where} failed: {text.removeprefix(said)}", operation=op,
                         bucket=bucket, name=name, status=exc.status, reason=exc.reason)
    detail = exc.strerror or str(exc)
    kind: type[StorageError]
    if writing is None:
        writing = op == "write"
    if exc.errno == errno.ENOENT or (exc.errno == errno.ELOOP and not writing):
        # A link that never resolves (to itself, a cycle) is no file, as a
        # dangling one is not: listings skip both, exists() is False.
        kind = NotFound
    elif exc.errno in _SHAPE_ERRNOS and writing:
        kind = Conflict
        detail += " (a file and a directory cannot share a path)"
    elif exc.errno in (errno.ENOTDIR, errno.EISDIR):
        kind = NotFound  # a directory, or a path through a file: no such object
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        kind = PermissionDenied
    elif exc.errno == errno.ENAMETOOLONG:
        # A name with a segment past the filesystem's longest file name (255
        # bytes on most) is a valid object name that no file can hold: no
        # such object, and a write the store refuses (final, as GCS's 400).
        kind = InvalidRequest if writing else NotFound
    else:
        kind = StorageError
    return kind(f"{where} failed: {detail}", operation=op, bucket=bucket, name=name,
                reason=errno.errorcode.get(exc.errno or 0, ""))


def recorded_crc(fd_or_path: int | str, st: os.stat_result) -> int | None:
    """The crc32c aioflux recorded for this exact content, if any."""
    try:
        # Listed first: most files a dataset reads have no record, and a
        # getxattr that finds none raises (1.4 us here, the list 0.5 us; a
        # file with a record pays the list on top).
        if _XATTR not in os.listxattr(fd_or_path):
            return None
        raw = os.getxattr(fd_or_path, _XATTR)
    except OSError:
        return None
    if len(raw) != _XATTR_SIZE:
        return None
    size, mtime_ns, value = struct.unpack(_XATTR_FORMAT, raw)
    # Rewritten in place by something else since (the modification time
    # moved): the record is not about these bytes.
    return int(value) if size == st.st_size and mtime_ns == st.st_mtime_ns else None


def record_crc(fd: int, st: os.stat_result, crc: int) -> None:
    """Record ``crc`` as the crc32c of the content ``st`` describes."""
    try:
        os.setxattr(fd, _XATTR, struct.pack(_XATTR_FORMAT, st.st_size, st.st_mtime_ns, crc))
    except OSError:
        pass  # no user xattrs here (some tmpfs, old NFS): reads check the length only


def generation_of(st: os.stat_result) -> int:
    """A file's generation (see :func:`generation_at`)."""
    return generation_at(st.st_mtime_ns)


def generation_at(mtime: int) -> int:
    """The generation of a file modified at ``mtime`` (nanoseconds): that
    time. One at or before the epoch (``touch -d @0``, archives that keep
    such times) maps to ``2**63 - 1 + mtime``: 0 means "no version" to every
    caller (reads went unpinned, ``if_generation_match=0`` meant "must not
    exist"), and generations are never negative."""
    return mtime if mtime > 0 else 2**63 - 1 + mtime


def object_info(bucket: str, name: str, st: os.stat_result, crc: int | None) -> ObjectInfo:
    """The object a file is, as ``st`` describes it."""
    return object_of(bucket, name, st.st_size, st.st_mtime_ns, crc)


def object_of(bucket: str, name: str, size: int, mtime: int, crc: int | None) -> ObjectInfo:
    """The object a file of ``size`` bytes modified at ``mtime`` (ns) is."""
    # ``updated`` in the JSON API's form (RFC 3339, UTC, microseconds): the
    # modification time written out, which an ObjectIndex then need not keep.
    # All fields in one ``tuple.__new__`` call: the named tuple's own
    # ``__new__`` binds keywords in Python, ~1 us a file of a listing.
    return tuple.__new__(ObjectInfo, (
        bucket, name, size, generation_at(mtime), crc, None, None, None, rfc3339(mtime),
        NO_METADATA, "file"))


def not_a_file(op: str, bucket: str, name: str) -> NotFound:
    """What a path that is no regular file is to ``op``."""
    return NotFound(f"{describe(op, bucket, name, 'file')} failed: not a file",
                    operation=op, bucket=bucket, name=name)


def open_file(op: str, bucket: str, name: str, *, path: str | None = None,
              restore: bool = True) -> tuple[int, os.stat_result]:
    """Open a regular file for reading: ``(fd, its stat)``.

    Opened non-blocking: opening a named pipe for reading otherwise waits
    for a writer, forever, holding a worker thread that cannot be
    cancelled. Blocking reads are restored once it is known to be a file
    (``restore``; a local filesystem's regular file ignores the flag).
    """
    fd = os.open(path or path_of(bucket, name, op=op), os.O_RDONLY | os.O_NONBLOCK | CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise not_a_file(op, bucket, name)
        if restore:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def check_unchanged(fd: int, st: os.stat_result, op: str, bucket: str, name: str) -> None:
    """Raise if the file was written in place while it was read (a rename
    over its name does not matter: the descriptor keeps the old content).

    A whole read of a file aioflux wrote is also checked against its crc32c;
    this catches a rewrite of any file, and of a range, by its new size or
    modification time.
    """
    now = os.fstat(fd)
    if (now.st_size, now.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
        raise ChecksumMismatch(f"{describe(op, bucket, name, 'file')} failed: the file was "
                               f"modified while it was read (size {st.st_size} -> "
                               f"{now.st_size}, mtime {st.st_mtime_ns} -> {now.st_mtime_ns})",
                               operation=op, bucket=bucket, name=name)


def file_info(bucket: str, name: str) -> ObjectInfo:
    """ObjectInfo of one file (``NotFound`` for a directory)."""
    path = path_of(bucket, name, op="stat")
    st = os.stat(path)
    if not stat_mod.S_ISREG(st.st_mode):
        raise not_a_file("stat", bucket, name)
    return object_info(bucket, name, st, recorded_crc(path, st))


# -- reads --------------------------------------------------------------------


def _pread_here(fd: int, st: os.stat_result, here: tuple[str, str, int], start: int,
                end: int | None) -> Callable[[int, list[memoryview], int], int]:
    """The read call of a read done in the calling thread, or
    :class:`WouldWait` (the descriptor closed) where it could wait."""
    _, kind, device = here
    stop = st.st_size if end is None else min(end, st.st_size)
    if st.st_dev != device or stop - start > INLINE_MAX:
        os.close(fd)  # a mount on the file itself, or a long read
        raise WouldWait
    return os.preadv if kind == "memory" else _nowait


def _nowait(fd: int, views: list[memoryview], at: int) -> int:
    return pread_nowait(fd, views[0], at)


def bytes_nowait(fd: int, count: int, at: int) -> bytes:
    buf = bytearray(count)
    with memoryview(buf) as view:
        got = pread_nowait(fd, view, at)
    del buf[got:]
    return bytes(buf)


def read_small_here(bucket: str, name: str, path: str, kind: str, device: int,
                    verify: bool, listed: tuple[int, int | None, int | None] | None = None
                    ) -> bytes:
    """A whole small file read in the calling thread: :func:`read_file`'s
    whole read with ``here`` (``kind`` and ``device`` of its folder, see
    :mod:`._inline`), checked as that is (its length, unchanged while read,
    the crc32c aioflux recorded when ``verify``), less what a dataset's
    batch never asks (a range, a version, a buffer, the crc32c handed back):
    a file of a batch then costs its syscalls and little Python
    (``LocalStore._read_small_many``). :class:`WouldWait` where it could wait.

    ``listed``: its ``(size, generation, crc32c)`` as listed. Where the
    file still has that size and generation (modification time), its
    record is the one the listing read with them (:func:`recorded_crc`
    keys a record to both; None: it had none), and is not read again; and
    it is read as listed (:func:`_read_as_listed`), one ``fstat`` fewer.
    """
    if listed is not None:
        data = _read_as_listed(path, kind, device, listed)
        if data is not None:
            if verify and listed[2] is not None:
                actual = crc32c(data)
                if actual != listed[2]:
                    raise _not_recorded(bucket, name, actual, listed[2])
            return data
    fd, st = open_file("read", bucket, name, path=path, restore=False)
    try:
        size = st.st_size
        if st.st_dev != device or size > INLINE_MAX:
            raise WouldWait  # a mount on the file itself, or a long read
        pread = os.pread if kind == "memory" else bytes_nowait
        data = pread(fd, size, 0)
        while len(data) < size:  # a short read: go on where it stopped
            more = pread(fd, size - len(data), len(data))
            if not more:
                raise _cut_short(bucket, name, len(data), size)
            data += more
        check_unchanged(fd, st, "read", bucket, name)
        if verify:
            if listed is not None and listed[0] == size and listed[1] == generation_of(st):
                known = listed[2]
            else:
                known = recorded_crc(fd, st)
            if known is not None:
                actual = crc32c(data)
                if actual != known:
                    raise _not_recorded(bucket, name, actual, known)
    finally:
        os.close(fd)
    return data


def _read_as_listed(path: str, kind: str, device: int,
                    listed: tuple[int, int | None, int | None]) -> bytes | None:
    """A small file's bytes read as its listing says it is: its listed size
    read, then its ``fstat`` taken. Where that still says the listed size
    and generation, no write reached the file since it was listed (a write
    moves its modification time before it copies a byte), so the bytes are
    the listed version's whole: one ``fstat`` where a read of a file of
    unknown size takes one before the read and one after (~1 us of a 16 KiB
    file's 9). None where it is not so (rewritten, a symlink, not a regular
    file, another filesystem, cut short): the caller reads it afresh.

    A symlink is not followed (``O_NOFOLLOW``): its target may be on a
    filesystem whose reads wait. A file that is itself a mount point (a
    bind mount of one file) is seen only after it was read.
    """
    size, generation = listed[0], listed[1]
    if size > INLINE_MAX or generation is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | CLOEXEC)
    except OSError:
        return None  # the read afresh says what is there (or is not)
    try:
        data = os.pread(fd, size, 0) if kind == "memory" else bytes_nowait(fd, size, 0)
        st = os.fstat(fd)
    except OSError:
        return None  # a directory, a pipe...: the read afresh names it
    finally:
        os.close(fd)
    if len(data) != size or st.st_size != size or generation_of(st) != generation \
            or st.st_dev != device or not stat_mod.S_ISREG(st.st_mode):
        return None
    return data


def _cut_short(bucket: str, name: str, at: int, stop: int) -> ChecksumMismatch:
    return ChecksumMismatch(f"{describe('read', bucket, name, 'file')} failed: the file ended "
                            f"at {at} of {stop} bytes (truncated while reading)",
                            operation="read", bucket=bucket, name=name)


def _not_recorded(bucket: str, name: str, actual: int, known: int) -> ChecksumMismatch:
    return ChecksumMismatch(f"{describe('read', bucket, name, 'file')} failed: crc32c "
                            f"{encode_crc32c(actual)} != recorded {encode_crc32c(known)}",
                            operation="read", bucket=bucket, name=name)


def check_generation(where: str, bucket: str, name: str, st: os.stat_result,
                      generation: int | None) -> None:
    """A read of ``generation`` finds the file at it, or ``NotFound``."""
    if generation is not None and generation_of(st) != generation:
        raise NotFound(f"{where} failed: generation {generation} is gone (now "
                       f"{generation_of(st)})", operation="read", bucket=bucket, name=name)


def read_ranges(bucket: str, name: str, ranges: list[tuple[int, int]],
                generation: int | None, here: tuple[str, str, int] | None = None) -> list[bytes]:
    """Ranges ``[start, end)`` of one file, each whole, through one descriptor
    (see ``LocalStore.read_ranges``; ``here`` as for :func:`read_file`)."""
    where = describe("read", bucket, name, "file")
    if here is None:
        fd, st = open_file("read", bucket, name)
        pread = os.pread
    else:
        fd, st = open_file("read", bucket, name, path=here[0], restore=False)
        reader = _pread_here(fd, st, here, 0, sum(end - start for start, end in ranges))
        pread = os.pread if reader is os.preadv else bytes_nowait
    try:
        check_generation(where, bucket, name, st, generation)
        return read_spans(fd, st, ranges, pread, bucket, name)
    finally:
        os.close(fd)


def read_spans(fd: int, st: os.stat_result, ranges: list[tuple[int, int]],
               pread: Callable[[int, int, int], bytes], bucket: str,
               name: str) -> list[bytes]:
    """Ranges of the open file ``fd`` (stat ``st``), each whole, then checked
    unchanged by a write in place."""
    out = pread_spans(fd, st.st_size, ranges, pread, bucket, name)
    check_unchanged(fd, st, "read", bucket, name)
    return out


def pread_spans(fd: int, size: int, ranges: list[tuple[int, int]],
                pread: Callable[[int, int, int], bytes], bucket: str,
                name: str) -> list[bytes]:
    """Ranges of the open file ``fd`` of ``size`` bytes, each whole; whether
    the file changed meanwhile is the caller's to check."""
    out = []
    for start, end in ranges:
        if not 0 <= start <= end <= size:
            raise InvalidRequest(f"{describe('read', bucket, name, 'file')} failed: range "
                                 f"{start}-{end} is outside the file ({size} bytes)",
                                 operation="read", bucket=bucket, name=name, status=416)
        data = pread(fd, end - start, start)
        while len(data) < end - start:  # a short read: go on where it stopped
            more = pread(fd, end - start - len(data), start + len(data))
            if not more:
                raise _cut_short(bucket, name, start + len(data), end)
            data += more
        out.append(data)
    return out


def read_file(bucket: str, name: str, start: int, end: int | None, into: memoryview | None,
              generation: int | None, size: int | None, crc: int | None, verify: bool,
              want_crc: bool, here: tuple[str, str, int] | None = None) -> Fetched:
    """Read ``[start, end)`` of a file, checked (see ``LocalStore.fetch``).

    ``here``: ``(path, kind, device)`` of a read done in the calling thread
    (see :mod:`._inline`), which raises :class:`WouldWait` before it waits.
    """
    where = describe("read", bucket, name, "file")
    # One descriptor for the whole read: a concurrent rename replaces the
    # name, not the content this read sees.
    pread: Callable[[int, list[memoryview], int], int]
    if here is None:
        fd, st = open_file("read", bucket, name)
        pread = os.preadv
    else:
        fd, st = open_file("read", bucket, name, path=here[0], restore=False)
        pread = _pread_here(fd, st, here, start, end)
    try:
        check_generation(where, bucket, name, st, generation)
        if size is not None and size != st.st_size:
            raise ChecksumMismatch(f"{where} failed: {st.st_size} bytes, expected {size}",
                                   operation="read", bucket=bucket, name=name)
        if start > st.st_size or (start == st.st_size and st.st_size > 0):
            # As the GCS servers answer it (HTTP 416): the range depends on
            # the object's size, not on the arguments alone.
            raise InvalidRequest(f"{where} failed: start {start} is past the end "
                                 f"({st.st_size} bytes)", operation="read", bucket=bucket,
                                 name=name, status=416)
        stop = st.st_size if end is None else min(end, st.st_size)
        count = stop - start
        if into is not None and len(into) < count:
            raise InvalidArgument(f"{where}: {count} bytes do not fit a buffer of "
                                  f"{len(into)}")
        sink: io.BytesIO | None = None
        try:
            if into is None:
                # Read straight into the bytes handed out: a BytesIO over a
                # bytes it alone holds lends that buffer, and getvalue()
                # hands the same object back once no view of it is left
                # (CPython; elsewhere it copies), as in _net/http.py. A
                # bytearray copied into bytes at the end would take the file's
                # size twice, and a MemoryError of the copy would go out untyped.
                sink = io.BytesIO(bytes(count))
                view = sink.getbuffer()
            else:
                view = into[:count]
        except MemoryError as exc:
            raise out_of_memory("read", bucket, name, "file", count) from exc
        done = 0
        at = populatable_address(view)
        while done < count:
            if at:
                prefault(at + done, min(READ_BLOCK, count - done))
            got = pread(fd, [view[done:done + READ_BLOCK]], start + done)
            if got == 0:
                raise _cut_short(bucket, name, start + done, stop)
            done += got
        check_unchanged(fd, st, "read", bucket, name)
        whole = start == 0 and stop == st.st_size
        known = crc if crc is not None else recorded_crc(fd, st)
        check = verify and whole and known is not None
        actual = crc32c(view) if want_crc or check else None
        if check and actual != known:
            raise _not_recorded(bucket, name, actual or 0, known or 0)
    finally:
        os.close(fd)
    if sink is None:
        return Fetched(None, count, actual, st.st_size)
    view.release()
    return Fetched(sink.getvalue(), count, actual, st.st_size)
