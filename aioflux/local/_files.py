"""The blocking filesystem work of :class:`~aioflux.local.LocalStore`.

Every function here runs in a worker thread and raises ``OSError`` or a
:class:`StorageError`; the store maps the former (:func:`mapped`). Paths are
``/<bucket>/<name>``: the bucket is the first directory of the path.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import io
import os
import stat as stat_mod
import struct
import time
import uuid
from collections.abc import Iterator

from .._core.crc import Crc32c, crc32c, encode_crc32c
from .._core.errors import (
    ChecksumMismatch,
    Conflict,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    StorageError,
    describe,
    out_of_memory,
)
from .._core.locks import held_at, unlock
from .._core.store import Fetched
from .._core.types import MultipartUploadInfo, ObjectInfo
from ._paths import folder_of, path_of

__all__ = [
    "TEMP_MARK",
    "copy_file",
    "delete_file",
    "file_info",
    "finish_temp",
    "mapped",
    "open_temp",
    "path_of",
    "read_file",
    "scan",
    "stat_page",
    "temporaries",
    "unlink_quietly",
    "write_at",
    "write_whole",
]

# Temporary files of writes in progress (``.<base>.aioflux-tmp-<id>`` next
# to the target): skipped by listings, reported as open uploads.
TEMP_MARK = ".aioflux-tmp-"
_XATTR = "user.aioflux.crc32c"
# Marks a directory aioflux created (a delete may remove it once empty).
_DIR_XATTR = "user.aioflux.dir"
# size (8 bytes), mtime_ns (8 bytes), crc32c (4 bytes), big-endian.
_XATTR_FORMAT = ">QQI"
_XATTR_SIZE = struct.calcsize(_XATTR_FORMAT)
_READ_BLOCK = 8 * 1024 * 1024
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A path that needs a directory where a file is (or the reverse): files and
# directories cannot share a name, though GCS objects "a" and "a/b" can.
_SHAPE_ERRNOS = (errno.ENOTDIR, errno.EISDIR, errno.EEXIST)
# Directories a concurrent delete may remove under a new write (see open_temp).
_MKDIR_ATTEMPTS = 5
# Longest file name (bytes) on ext4, XFS, NFS and Lustre.
_NAME_MAX = 255


def mapped(exc: OSError, op: str, bucket: str, name: str, *,
           writing: bool | None = None) -> StorageError:
    """The StorageError for a failed filesystem call of ``op`` on ``name``,
    which it writes (default: ``op`` is ``write``; a copy's source is read,
    its destination written: see :func:`_failing_as`)."""
    where = describe(op, bucket, name, "file")
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
    else:
        kind = StorageError
    return kind(f"{where} failed: {detail}", operation=op, bucket=bucket, name=name,
                reason=errno.errorcode.get(exc.errno or 0, ""))


def _recorded_crc(fd_or_path: int | str, st: os.stat_result) -> int | None:
    """The crc32c aioflux recorded for this exact content, if any."""
    try:
        raw = os.getxattr(fd_or_path, _XATTR)
    except OSError:
        return None
    if len(raw) != _XATTR_SIZE:
        return None
    size, mtime_ns, value = struct.unpack(_XATTR_FORMAT, raw)
    # Rewritten in place by something else since (the modification time
    # moved): the record is not about these bytes.
    return int(value) if size == st.st_size and mtime_ns == st.st_mtime_ns else None


def generation_of(st: os.stat_result) -> int:
    """A file's generation: its modification time in nanoseconds. One at or
    before the epoch (``touch -d @0``, archives that keep such times) maps
    to ``2**63 - 1 + mtime``: 0 means "no version" to every caller (reads
    went unpinned, ``if_generation_match=0`` meant "must not exist"), and
    generations are never negative."""
    mtime = st.st_mtime_ns
    return mtime if mtime > 0 else 2**63 - 1 + mtime


def _object(bucket: str, name: str, st: os.stat_result, crc: int | None) -> ObjectInfo:
    # ``updated`` in the JSON API's form (RFC 3339, UTC, microseconds).
    seconds, nanos = divmod(st.st_mtime_ns, 1_000_000_000)
    updated = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos // 1000:06d}Z"
    return ObjectInfo(bucket, name, st.st_size, generation_of(st), crc, updated=updated,
                      scheme="file")


def _not_a_file(op: str, bucket: str, name: str) -> NotFound:
    return NotFound(f"{describe(op, bucket, name, 'file')} failed: not a file",
                    operation=op, bucket=bucket, name=name)


def _open_file(op: str, bucket: str, name: str) -> tuple[int, os.stat_result]:
    """Open a regular file for reading: ``(fd, its stat)``.

    Opened non-blocking: opening a named pipe for reading otherwise waits
    for a writer, forever, holding a worker thread that cannot be
    cancelled. Blocking reads are restored once it is known to be a file.
    """
    fd = os.open(path_of(bucket, name, op=op), os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise _not_a_file(op, bucket, name)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _check_unchanged(fd: int, st: os.stat_result, op: str, bucket: str, name: str) -> None:
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
        raise _not_a_file("stat", bucket, name)
    return _object(bucket, name, st, _recorded_crc(path, st))


# -- listing ------------------------------------------------------------------


def _in_range(name: str, start_offset: str | None, end_offset: str | None) -> bool:
    return ((start_offset is None or name >= start_offset)
            and (end_offset is None or name < end_offset))


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []  # removed while listing


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether a directory entry is a file or a link to one. A link that
    never resolves (one to itself, or a cycle of them) is no file, as a
    dangling one is not: it must not fail the listing of every other file."""
    try:
        return entry.is_file()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return False
        raise


def _listed(entry: os.DirEntry[str], name: str, start_offset: str | None,
            end_offset: str | None) -> bool:
    """Whether a directory entry (not a directory) is an object a listing
    names: a file, not a temporary one, inside the offsets. A name no
    method takes (not UTF-8, a line break, over 1024 bytes) is listed: the
    datasets and ``load_files`` refuse it naming the file, where skipping
    it would drop a sample (or a file of ``cp -r``) in silence."""
    return (_in_range(name, start_offset, end_offset) and TEMP_MARK not in entry.name
            and _is_file(entry))


def _holds_object(directory: str, rel: str, start_offset: str | None,
                  end_offset: str | None) -> bool:
    """Whether any listable file lies below ``directory`` (stops at the first)."""
    stack = [(directory, rel)]
    while stack:
        path, rel = stack.pop()
        for entry in _entries(path):
            name = f"{rel}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                stack.append((entry.path, name))
            elif _listed(entry, name, start_offset, end_offset):
                return True
    return False


def scan(bucket: str, prefix: str, delimiter: str | None, start_offset: str | None,
         end_offset: str | None) -> tuple[list[tuple[str, str]], list[str]]:
    """The files under ``prefix`` as sorted (name, path) pairs, not stat-ed
    yet (see :func:`stat_page`), and, with ``delimiter``, the sorted
    prefixes that group the names continuing past it.

    Directories are not objects: an empty one is neither listed nor a
    prefix. Symbolic links to files are listed; links to directories are
    not followed (a loop could never end).
    """
    folder = folder_of(bucket, prefix)  # the walk stays below the prefix's directory
    root = path_of(bucket, "", op="list")
    if not os.path.isdir(root):
        raise NotFound(f"{describe('list', bucket, prefix, 'file')} failed: no such "
                       "directory", operation="list", bucket=bucket, name=prefix)
    base = folder[len(root) + 1:]
    files: list[tuple[str, str]] = []
    prefixes: set[str] = set()
    stack = [base]
    while stack:
        rel = stack.pop()
        for entry in _entries(f"{root}/{rel}" if rel else root):
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                if delimiter == "/" and name.startswith(prefix):
                    # One level is enough: the directory is a prefix if any
                    # object lies below it.
                    if _holds_object(entry.path, name, start_offset, end_offset):
                        prefixes.add(name + "/")
                elif name.startswith(prefix) or prefix.startswith(name + "/"):
                    stack.append(name)
            elif name.startswith(prefix) and _listed(entry, name, start_offset, end_offset):
                files.append((name, entry.path))
    files.sort()
    if delimiter and delimiter != "/":
        kept: list[tuple[str, str]] = []
        for name, path in files:
            cut = name.find(delimiter, len(prefix))
            if cut >= 0:
                prefixes.add(name[:cut + len(delimiter)])
            else:
                kept.append((name, path))
        files = kept
    return files, sorted(prefixes)


def stat_page(bucket: str, files: list[tuple[str, str]]) -> list[ObjectInfo]:
    """ObjectInfo of one page of :func:`scan`'s files (those still files)."""
    objects: list[ObjectInfo] = []
    for name, path in files:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # deleted since the scan: no longer an object
        if not stat_mod.S_ISREG(st.st_mode):
            continue  # replaced since by a directory or a pipe, which stat refuses
        objects.append(_object(bucket, name, st, _recorded_crc(path, st)))
    return objects


# -- reads --------------------------------------------------------------------


def read_file(bucket: str, name: str, start: int, end: int | None, into: memoryview | None,
              generation: int | None, size: int | None, crc: int | None, verify: bool,
              want_crc: bool) -> Fetched:
    """Read ``[start, end)`` of a file, checked (see ``LocalStore.fetch``)."""
    where = describe("read", bucket, name, "file")
    # One descriptor for the whole read: a concurrent rename replaces the
    # name, not the content this read sees.
    fd, st = _open_file("read", bucket, name)
    try:
        if generation is not None and generation_of(st) != generation:
            raise NotFound(f"{where} failed: generation {generation} is gone (now "
                           f"{generation_of(st)})", operation="read", bucket=bucket, name=name)
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
                # bytearray copied into bytes at the end took the file's size
                # twice, and a MemoryError of the copy went out untyped.
                sink = io.BytesIO(bytes(count))
                view = sink.getbuffer()
            else:
                view = into[:count]
        except MemoryError as exc:
            raise out_of_memory("read", bucket, name, "file", count) from exc
        done = 0
        while done < count:
            got = os.preadv(fd, [view[done:done + _READ_BLOCK]], start + done)
            if got == 0:
                raise ChecksumMismatch(f"{where} failed: the file ended at {start + done} "
                                       f"of {stop} bytes (truncated while reading)",
                                       operation="read", bucket=bucket, name=name)
            done += got
        _check_unchanged(fd, st, "read", bucket, name)
        whole = start == 0 and stop == st.st_size
        known = crc if crc is not None else _recorded_crc(fd, st)
        check = verify and whole and known is not None
        actual = crc32c(view) if want_crc or check else None
        if check and actual != known:
            raise ChecksumMismatch(
                f"{where} failed: crc32c {encode_crc32c(actual or 0)} != recorded "
                f"{encode_crc32c(known or 0)}", operation="read", bucket=bucket, name=name)
    finally:
        os.close(fd)
    if sink is None:
        return Fetched(None, count, actual, st.st_size)
    view.release()
    return Fetched(sink.getvalue(), count, actual, st.st_size)


# -- writes -------------------------------------------------------------------


def open_temp(bucket: str, name: str) -> tuple[str, int]:
    """Create the temporary file of a write of ``name``: (path, read-write fd)."""
    path = path_of(bucket, name, op="write")
    directory, _, base = path.rpartition("/")
    if not base:
        raise InvalidArgument(f"{describe('write', bucket, name, 'file')}: a name ending "
                              "in '/' is a directory, not a file")
    if not os.path.isdir(path_of(bucket, "", op="write")):
        # As a write to a missing bucket: a mistyped /mtn/nfs/... must not
        # make a new directory at the root of the filesystem.
        raise NotFound(f"{describe('write', bucket, name, 'file')} failed: no directory "
                       f"/{bucket}", operation="write", bucket=bucket, name=name)
    # A file name may take all of the filesystem's 255 bytes; the
    # temporary's copy of it is cut to leave room for the mark and the id
    # (it then lists as an open upload of the cut name, which aborts it).
    stem = base.encode()[:_NAME_MAX - len(TEMP_MARK) - 13].decode(errors="ignore")
    temp = f"{directory}/.{stem}{TEMP_MARK}{uuid.uuid4().hex[:12]}"
    # Read-write: the bytes are read back and checked before publishing.
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _CLOEXEC
    attempts = 1
    while True:
        _make_directories(directory)
        try:
            # The mode of Python's open() and every other tool: the umask
            # decides (a shared directory's umask 002 keeps files group-writable).
            return temp, os.open(temp, flags, 0o666)
        except FileNotFoundError:
            # A concurrent delete removed the directory it had just emptied
            # between our makedirs and open: make it again.
            if attempts == _MKDIR_ATTEMPTS:
                raise
            attempts += 1


def _make_directories(directory: str) -> None:
    """``os.makedirs``, marking each directory it creates as aioflux's, so
    that a delete later removes only directories aioflux made (never one
    the user made, empty or not)."""
    missing: list[str] = []
    # Stops at "" too (whose mkdir fails): the bucket removed meanwhile.
    while directory and not os.path.isdir(directory):
        missing.append(directory)
        directory = directory.rpartition("/")[0]
    for created in reversed(missing):
        try:
            os.mkdir(created)
        except FileExistsError:
            continue  # made meanwhile by another writer, which marks it
        try:
            os.setxattr(created, _DIR_XATTR, b"1")
        except OSError:
            pass  # no user xattrs here: the directory simply stays after deletes
        # The new directory's name is an entry of its parent: without this,
        # a power loss may drop it, and with it a file published (and
        # fsynced, directory and all) below it.
        _fsync_directory(created.rpartition("/")[0] or "/")


def _made_by_us(directory: str) -> bool:
    try:
        return os.getxattr(directory, _DIR_XATTR) == b"1"
    except OSError:
        return False


def write_at(path: str, data: memoryview, offset: int) -> None:
    """Write ``data`` at ``offset`` of the existing file ``path``.

    Each call opens the file itself, so an abort that removes it cannot
    close a descriptor another thread is still writing through.
    """
    fd = os.open(path, os.O_WRONLY | _CLOEXEC)
    try:
        _pwrite_all(fd, data, offset)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def _publish(fd: int, temp: str, bucket: str, name: str, length: int, expected: int,
             if_generation_match: int | None, op: str = "write") -> ObjectInfo:
    """Check the temporary file, fsync it, and move it into place."""
    where = describe(op, bucket, name, "file")
    check = Crc32c()
    block = bytearray(min(_READ_BLOCK, max(length, 1)))
    offset = 0
    while offset < length:
        got = os.preadv(fd, [memoryview(block)[:length - offset]], offset)
        if got == 0:
            break
        check.update(memoryview(block)[:got])
        offset += got
    if check.length != length or check.value != expected or os.fstat(fd).st_size != length:
        raise ChecksumMismatch(
            f"{where} failed: the file holds {check.length} bytes with crc32c "
            f"{encode_crc32c(check.value)}, written were {length} with "
            f"{encode_crc32c(expected)}; nothing was published",
            operation=op, bucket=bucket, name=name)
    path = path_of(bucket, name, op=op)
    st = os.fstat(fd)
    _record_crc(fd, st, expected)
    os.fsync(fd)  # outside the lock below, which other writers of the name wait for
    if if_generation_match == 0:
        try:
            os.link(temp, path)  # atomic "only if absent"
        except FileExistsError:
            if _directory_at(path):
                # No object is there (stat says NotFound) and none can be: the
                # Conflict of a write over it, not "the file exists".
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path) from None
            raise PreconditionFailed(f"{where} failed: the file exists (if_generation_match"
                                     "=0)", operation=op, bucket=bucket, name=name,
                                     status=412) from None
        os.unlink(temp)
    else:
        with _changing(path):
            if if_generation_match is not None:
                _check_generation(op, bucket, name, path, if_generation_match)
            st = _distinct_generation(fd, path, st, expected)
            os.replace(temp, path)
    _fsync_directory(path.rpartition("/")[0])
    return _object(bucket, name, st, expected)


def _directory_at(path: str) -> bool:
    try:
        return stat_mod.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _record_crc(fd: int, st: os.stat_result, crc: int) -> None:
    try:
        os.setxattr(fd, _XATTR, struct.pack(_XATTR_FORMAT, st.st_size, st.st_mtime_ns, crc))
    except OSError:
        pass  # no user xattrs here (some tmpfs, old NFS): reads check the length only


def _distinct_generation(fd: int, path: str, st: os.stat_result, crc: int) -> os.stat_result:
    """Make the new file's mtime (its generation) later than the current one's.

    File times come from a clock that advances in ticks of a few ms on many
    kernels and filesystems: two writes in one tick would get one generation,
    and a precondition could not tell them apart.
    """
    try:
        current = os.stat(path).st_mtime_ns
    except OSError:
        return st
    if st.st_mtime_ns <= current:
        os.utime(fd, ns=(st.st_atime_ns, current + 1))
        st = os.fstat(fd)
        _record_crc(fd, st, crc)  # the record names the modification time
        os.fsync(fd)
    return st


@contextlib.contextmanager
def _changing(path: str) -> Iterator[None]:
    """Hold an ``flock`` on the file at ``path`` (if there is one) while it
    is replaced or removed.

    Every aioflux write and delete of an existing file takes it, so the
    check of a generation precondition and the rename or unlink that
    follows are one step for every aioflux process on the machine: two
    writers with ``if_generation_match`` of the same generation cannot both
    succeed. A taker checks that the file it locked is still the one at the
    path (a writer it waited for may have replaced it), as the disk cache's
    lock files do. Where the filesystem offers no locks (``ENOLCK`` on an
    NFS mount without a lock manager) the two steps stay apart.
    """
    fd = _lock_current(path)
    try:
        yield
    finally:
        if fd is not None:
            unlock(fd)


def _lock_current(path: str) -> int | None:
    while True:
        try:
            # Read-write and non-blocking: NFS turns flock into a POSIX
            # write lock, which needs a descriptor open for writing, and a
            # named pipe must not make the open wait.
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | _CLOEXEC)
        except OSError:
            return None  # none, or none to lock (a directory): the change itself says
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return None
        if held_at(path, fd):
            return fd
        unlock(fd)  # replaced or removed while we waited: lock what is there now


def _check_generation(op: str, bucket: str, name: str, path: str, wanted: int) -> None:
    try:
        current = generation_of(os.stat(path))
    except FileNotFoundError:
        current = 0
    if current != wanted:
        raise PreconditionFailed(f"{describe(op, bucket, name, 'file')} failed: generation "
                                 f"{current}, not {wanted}", operation=op, bucket=bucket,
                                 name=name, status=412)


def write_whole(bucket: str, name: str, data: memoryview,
                if_generation_match: int | None) -> ObjectInfo:
    """Write a file all or nothing: temporary file, check, fsync, rename."""
    temp, fd = open_temp(bucket, name)
    try:
        _pwrite_all(fd, data, 0)
        return _publish(fd, temp, bucket, name, len(data), crc32c(data), if_generation_match)
    finally:
        os.close(fd)
        unlink_quietly(temp)  # already gone when published


def finish_temp(temp: str, bucket: str, name: str, tail: memoryview | None, offset: int,
                expected: Crc32c, if_generation_match: int | None = None) -> ObjectInfo:
    """Publish a streaming upload's temporary file: the tail at ``offset``,
    cut to ``expected.length``, checked against ``expected``, if the file
    is then ``if_generation_match``."""
    fd = os.open(temp, os.O_RDWR | _CLOEXEC)
    try:
        if tail is not None and len(tail):
            _pwrite_all(fd, tail, offset)
        os.ftruncate(fd, expected.length)
        return _publish(fd, temp, bucket, name, expected.length, expected.value,
                        if_generation_match)
    finally:
        os.close(fd)
        unlink_quietly(temp)


def copy_file(bucket: str, name: str, dest_bucket: str, dest_name: str) -> ObjectInfo:
    """Copy a file (published like a write), checked against the source's
    recorded crc32c when it has one."""
    source, st = _open_file("copy", bucket, name)
    try:
        with _failing_as("copy", dest_bucket, dest_name):
            temp, fd = open_temp(dest_bucket, dest_name)
        try:
            check = Crc32c()
            block = bytearray(_READ_BLOCK)
            offset = 0
            while True:
                got = os.preadv(source, [block], offset)
                if got == 0:
                    break
                piece = memoryview(block)[:got]
                check.update(piece)
                with _failing_as("copy", dest_bucket, dest_name):
                    _pwrite_all(fd, piece, offset)
                offset += got
            _check_unchanged(source, st, "copy", bucket, name)
            recorded = _recorded_crc(source, st)
            if recorded is not None and (offset != st.st_size or check.value != recorded):
                raise ChecksumMismatch(
                    f"{describe('copy', bucket, name, 'file')} failed: the source's bytes "
                    "differ from its recorded crc32c", operation="copy", bucket=bucket,
                    name=name)
            with _failing_as("copy", dest_bucket, dest_name):
                return _publish(fd, temp, dest_bucket, dest_name, offset, check.value, None,
                                op="copy")
        finally:
            os.close(fd)
            unlink_quietly(temp)
    finally:
        os.close(source)


@contextlib.contextmanager
def _failing_as(op: str, bucket: str, name: str) -> Iterator[None]:
    """Map a failed filesystem call inside to a failure to write ``name``:
    the store names a copy's source (whose path through a file is a missing
    source, ``NotFound``), and a destination that cannot be written
    (read-only, a directory there, a full disk) is not the source."""
    try:
        yield
    except OSError as exc:
        raise mapped(exc, op, bucket, name, writing=True) from exc


def delete_file(bucket: str, name: str, generation: int | None,
                if_generation_match: int | None) -> None:
    """Delete a file and the directories aioflux made that it leaves empty.

    A symbolic link is removed itself, never what it points to: one to a
    directory too (``aioflux rm link``, as rm does).
    """
    path = path_of(bucket, name, op="delete")
    with _changing(path):
        st = os.stat(path)
        if not (stat_mod.S_ISREG(st.st_mode) or os.path.islink(path)):
            raise _not_a_file("delete", bucket, name)
        if generation is not None and generation_of(st) != generation:
            raise NotFound(f"{describe('delete', bucket, name, 'file')} failed: generation "
                           f"{generation} is gone", operation="delete", bucket=bucket,
                           name=name)
        if if_generation_match is not None:
            _check_generation("delete", bucket, name, path, if_generation_match)
        os.unlink(path)
    # Directories are not objects: drop the ones this delete emptied, if
    # aioflux made them (a directory the user made stays, even empty).
    stop = path_of(bucket, "", op="delete")
    directory = path.rpartition("/")[0]
    while directory != stop and directory.startswith(stop + "/") and _made_by_us(directory):
        try:
            os.rmdir(directory)
        except OSError:
            break  # not empty: the ones above are not empty either
        directory = directory.rpartition("/")[0]


# -- open uploads -------------------------------------------------------------


def temporaries(bucket: str, prefix: str) -> list[MultipartUploadInfo]:
    """Temporary files of unfinished writes under ``prefix``, as open uploads."""
    root = path_of(bucket, "", op="list uploads")
    found: list[MultipartUploadInfo] = []
    for directory, _dirs, files in os.walk(folder_of(bucket, prefix, op="list uploads")):
        rel = directory[len(root):].strip("/")
        for file in files:
            target, mark, _ = file.partition(TEMP_MARK)
            if not mark or not target.startswith("."):
                continue
            name = f"{rel}/{target[1:]}" if rel else target[1:]
            if not name.startswith(prefix):
                continue
            try:
                mtime = os.stat(f"{directory}/{file}").st_mtime
            except FileNotFoundError:
                continue  # finished or aborted meanwhile
            when = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc)
            found.append(MultipartUploadInfo(bucket, name, file,
                                             when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")))
    return sorted(found, key=lambda u: (u.name, u.upload_id))


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename stands
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> None:
    """Remove ``path`` if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
