"""The blocking filesystem work of :class:`~aioflux.local.LocalStore`.

Every function here runs in a worker thread and raises ``OSError`` or a
:class:`StorageError`; the store maps the former (:func:`mapped`). Paths are
``/<bucket>/<name>``: the bucket is the first directory of the path.
"""

from __future__ import annotations

import datetime
import errno
import os
import stat as stat_mod
import struct
import time
import uuid

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
)
from .._core.store import Fetched
from .._core.types import MultipartUploadInfo, ObjectInfo

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
_WRITE_OPS = ("write", "copy")
# Directories a concurrent delete may remove under a new write (see open_temp).
_MKDIR_ATTEMPTS = 5


def path_of(bucket: str, name: str) -> str:
    """The absolute path of ``name`` in ``bucket``."""
    return f"/{bucket}/{name}" if name else f"/{bucket}"


def mapped(exc: OSError, op: str, bucket: str, name: str) -> StorageError:
    """The StorageError for a failed filesystem call of ``op``."""
    where = describe(op, bucket, name, "file")
    detail = exc.strerror or str(exc)
    kind: type[StorageError]
    if exc.errno == errno.ENOENT:
        kind = NotFound
    elif exc.errno in _SHAPE_ERRNOS and op in _WRITE_OPS:
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


def _object(bucket: str, name: str, st: os.stat_result, crc: int | None) -> ObjectInfo:
    # ``updated`` in the JSON API's form (RFC 3339, UTC, microseconds).
    seconds, nanos = divmod(st.st_mtime_ns, 1_000_000_000)
    updated = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos // 1000:06d}Z"
    return ObjectInfo(bucket, name, st.st_size, st.st_mtime_ns, crc, updated=updated,
                      scheme="file")


def _not_a_file(op: str, bucket: str, name: str) -> NotFound:
    return NotFound(f"{describe(op, bucket, name, 'file')} failed: not a file",
                    operation=op, bucket=bucket, name=name)


def file_info(bucket: str, name: str) -> ObjectInfo:
    """ObjectInfo of one file (``NotFound`` for a directory)."""
    path = path_of(bucket, name)
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
            elif (entry.is_file() and TEMP_MARK not in entry.name
                  and _in_range(name, start_offset, end_offset)):
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
    root = path_of(bucket, "")
    if not os.path.isdir(root):
        raise NotFound(f"{describe('list', bucket, prefix, 'file')} failed: no such "
                       "directory", operation="list", bucket=bucket, name=prefix)
    # Walk only below the prefix's directory part.
    base = prefix.rpartition("/")[0]
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
            elif (entry.is_file() and name.startswith(prefix) and TEMP_MARK not in entry.name
                  and _in_range(name, start_offset, end_offset)):
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
    """ObjectInfo of one page of :func:`scan`'s files (those still there)."""
    objects: list[ObjectInfo] = []
    for name, path in files:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # deleted since the scan: no longer an object
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
    fd = os.open(path_of(bucket, name), os.O_RDONLY | _CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise _not_a_file("read", bucket, name)
        if generation is not None and st.st_mtime_ns != generation:
            raise NotFound(f"{where} failed: generation {generation} is gone (now "
                           f"{st.st_mtime_ns})", operation="read", bucket=bucket, name=name)
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
        out = bytearray(count) if into is None else into
        view = memoryview(out)[:count]
        done = 0
        while done < count:
            got = os.preadv(fd, [view[done:done + _READ_BLOCK]], start + done)
            if got == 0:
                raise ChecksumMismatch(f"{where} failed: the file ended at {start + done} "
                                       f"of {stop} bytes (truncated while reading)",
                                       operation="read", bucket=bucket, name=name)
            done += got
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
    return Fetched(bytes(out) if into is None else None, count, actual, st.st_size)


# -- writes -------------------------------------------------------------------


def open_temp(bucket: str, name: str) -> tuple[str, int]:
    """Create the temporary file of a write of ``name``: (path, read-write fd)."""
    path = path_of(bucket, name)
    directory, _, base = path.rpartition("/")
    if not base:
        raise InvalidArgument(f"{describe('write', bucket, name, 'file')}: a name ending "
                              "in '/' is a directory, not a file")
    if not os.path.isdir(path_of(bucket, "")):
        # As a write to a missing bucket: a mistyped /mtn/nfs/... must not
        # make a new directory at the root of the filesystem.
        raise NotFound(f"{describe('write', bucket, name, 'file')} failed: no directory "
                       f"/{bucket}", operation="write", bucket=bucket, name=name)
    temp = f"{directory}/.{base}{TEMP_MARK}{uuid.uuid4().hex[:12]}"
    # Read-write: the bytes are read back and checked before publishing.
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _CLOEXEC
    attempts = 1
    while True:
        _make_directories(directory)
        try:
            return temp, os.open(temp, flags, 0o644)
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
    while not os.path.isdir(directory):
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
    path = path_of(bucket, name)
    st = _distinct_generation(fd, path)
    try:
        os.setxattr(fd, _XATTR, struct.pack(_XATTR_FORMAT, st.st_size, st.st_mtime_ns,
                                             expected))
    except OSError:
        pass  # no user xattrs here (some tmpfs, old NFS): reads check the length only
    os.fsync(fd)
    if if_generation_match == 0:
        try:
            os.link(temp, path)  # atomic "only if absent"
        except FileExistsError:
            raise PreconditionFailed(f"{where} failed: the file exists (if_generation_match"
                                     "=0)", operation=op, bucket=bucket, name=name,
                                     status=412) from None
        os.unlink(temp)
    else:
        if if_generation_match is not None:
            _check_generation(op, bucket, name, path, if_generation_match)
        os.replace(temp, path)
    _fsync_directory(path.rpartition("/")[0])
    return _object(bucket, name, st, expected)


def _distinct_generation(fd: int, path: str) -> os.stat_result:
    """Make the new file's mtime (its generation) later than the current one's.

    File times come from a clock that advances in ticks of a few ms on many
    kernels and filesystems: two writes in one tick would get one generation,
    and a precondition could not tell them apart.
    """
    st = os.fstat(fd)
    try:
        current = os.stat(path).st_mtime_ns
    except OSError:
        return st
    if st.st_mtime_ns <= current:
        os.utime(fd, ns=(st.st_atime_ns, current + 1))
        st = os.fstat(fd)
    return st


def _check_generation(op: str, bucket: str, name: str, path: str, wanted: int) -> None:
    try:
        current = os.stat(path).st_mtime_ns
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
                expected: Crc32c) -> ObjectInfo:
    """Publish a streaming upload's temporary file: the tail at ``offset``,
    cut to ``expected.length``, checked against ``expected``."""
    fd = os.open(temp, os.O_RDWR | _CLOEXEC)
    try:
        if tail is not None and len(tail):
            _pwrite_all(fd, tail, offset)
        os.ftruncate(fd, expected.length)
        return _publish(fd, temp, bucket, name, expected.length, expected.value, None)
    finally:
        os.close(fd)
        unlink_quietly(temp)


def copy_file(bucket: str, name: str, dest_bucket: str, dest_name: str) -> ObjectInfo:
    """Copy a file (published like a write), checked against the source's
    recorded crc32c when it has one."""
    source = os.open(path_of(bucket, name), os.O_RDONLY | _CLOEXEC)
    try:
        st = os.fstat(source)
        if not stat_mod.S_ISREG(st.st_mode):
            raise _not_a_file("copy", bucket, name)
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
                _pwrite_all(fd, piece, offset)
                offset += got
            recorded = _recorded_crc(source, st)
            if recorded is not None and (offset != st.st_size or check.value != recorded):
                raise ChecksumMismatch(
                    f"{describe('copy', bucket, name, 'file')} failed: the source's bytes "
                    "differ from its recorded crc32c", operation="copy", bucket=bucket,
                    name=name)
            return _publish(fd, temp, dest_bucket, dest_name, offset, check.value, None,
                            op="copy")
        finally:
            os.close(fd)
            unlink_quietly(temp)
    finally:
        os.close(source)


def delete_file(bucket: str, name: str, generation: int | None,
                if_generation_match: int | None) -> None:
    """Delete a file and the directories aioflux made that it leaves empty.

    A symbolic link is removed itself, never what it points to: one to a
    directory too (``aioflux rm link``, as rm does).
    """
    path = path_of(bucket, name)
    st = os.stat(path)
    if not (stat_mod.S_ISREG(st.st_mode) or os.path.islink(path)):
        raise _not_a_file("delete", bucket, name)
    if generation is not None and st.st_mtime_ns != generation:
        raise NotFound(f"{describe('delete', bucket, name, 'file')} failed: generation "
                       f"{generation} is gone", operation="delete", bucket=bucket, name=name)
    if if_generation_match is not None:
        _check_generation("delete", bucket, name, path, if_generation_match)
    os.unlink(path)
    # Directories are not objects: drop the ones this delete emptied, if
    # aioflux made them (a directory the user made stays, even empty).
    stop = path_of(bucket, "")
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
    root = path_of(bucket, "")
    found: list[MultipartUploadInfo] = []
    base = prefix.rpartition("/")[0]
    for directory, _dirs, files in os.walk(f"{root}/{base}" if base else root):
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
