"""Changes to files: writes and copies all or nothing, and deletes.

A write goes to a temporary file next to its target (:func:`open_temp`),
which is read back and checked against the crc32c of what was written,
fsynced, and renamed over the target, or hard-linked for "must not exist"
(:func:`_publish`). Each write and delete of an existing file holds its
``flock`` (:func:`_changing`), so a generation precondition and the change
it guards are one step. A write marks the directories it creates, and a
delete removes those it leaves empty.

A write, copy or delete takes the ``stop`` event its caller sets when it
is cancelled (Ctrl-C in a blocking call): the worker thread cannot be
stopped from outside, so it looks at the event between pieces of its work
and before the rename (or unlink) and raises :class:`Stopped` there,
its temporary file removed. Once the rename or unlink has run, the change
is done.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat as stat_mod
import threading
import uuid
from collections.abc import Iterator

from .._core.concurrency.locks import kept, unlock
from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StorageError,
    describe,
)
from .._core.integrity.crc import Crc32c, crc32c, encode_crc32c
from .._core.records.types import ObjectInfo
from ._files import (
    CLOEXEC,
    READ_BLOCK,
    TEMP_MARK,
    check_unchanged,
    generation_of,
    mapped,
    not_a_file,
    object_info,
    open_file,
    record_crc,
    recorded_crc,
)
from ._paths import path_of

__all__ = [
    "Stopped",
    "copy_file",
    "delete_file",
    "finish_temp",
    "open_temp",
    "publish_checked",
    "unlink_quietly",
    "write_at",
    "write_whole",
]

# Marks a directory aioflux created (a delete may remove it once empty).
_DIR_XATTR = "user.aioflux.dir"
# Steps (ns) past a replaced file's time that a new one's may need to differ
# from it: as fine as the filesystem keeps times, up to FAT's two seconds.
_TIME_STEPS = (1, 1_000, 1_000_000, 1_000_000_000, 2_000_000_000)
# Read size of the check of a written file: small enough to stay in a
# core's cache between the read and its crc32c (8 MiB, read_file's size,
# went out to memory and back: ckpt_file's 256 MiB check 54 ms, 45 here).
_CHECK_BLOCK = 256 * 1024
# Bytes a whole write hands to one pwrite before it looks at its ``stop``
# event again: a 300 MiB write then answers a Ctrl-C within a piece's copy
# into the page cache (a few ms), not after all of its bytes.
_WRITE_PIECE = 8 * 1024 * 1024
# Directories a concurrent delete may remove under a new write (see open_temp).
_MKDIR_ATTEMPTS = 5
# Attempts at the lock of a file being changed, when the file locked is no
# longer the one at its path. Each lost attempt is a change of the object
# that another writer published while this one waited for the lock; losing
# this many in a row is no contention a file meets (GCS itself takes one
# write of an object a second) but a path that never names the file opened,
# which retried without end spun a worker thread for good.
_LOCK_ATTEMPTS = 64
# Longest file name (bytes) on ext4, XFS, NFS and Lustre, where the
# filesystem does not say (``pathconf``).
_NAME_MAX = 255
# Failures of the open of a file to lock that say there is no file at the
# path to lock: nothing (a new file; a delete's NotFound), a directory or a
# path through a file (Conflict), a link that never resolves, a socket or a
# device (ENXIO), a name no file can have. The change itself then says
# what is there. Any other failure (EIO, ESTALE, EMFILE...) is raised: the
# change going ahead unlocked made a generation precondition and the
# rename it guards two steps again, on a transient error.
_NOTHING_TO_LOCK = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP,
                              errno.ENXIO, errno.ENAMETOOLONG})
# Failures of a read-write open of a file that this process may replace or
# remove (a rename or unlink needs only the directory) but not write: mode
# 0444 (datasets unpacked from archives), a program being run (ETXTBSY).
# Its lock is taken through a read-only descriptor instead.
_NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.ETXTBSY})
# Failures of flock that say the filesystem has no locks: ENOLCK (an NFS
# mount without a lock manager), EOPNOTSUPP / ENOTSUP, ENOSYS (Lustre
# mounted without ``flock`` or ``localflock``), EINVAL (a filesystem, FUSE
# ones among them, that takes no flock on the file). Only then does a
# change go ahead unlocked.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS,
                       errno.EINVAL})
# Failures of a directory's fsync that say the filesystem syncs no
# directories (or none opened read-only); any other (EIO, ENOSPC) may have
# lost the name just published, and is raised.
_NO_DIRECTORY_SYNC = frozenset({errno.EINVAL, errno.EBADF, errno.EROFS, errno.EOPNOTSUPP,
                                errno.ENOTSUP})


class Stopped(Exception):
    """A write, copy or delete given up because its caller was cancelled:
    nothing was published (or removed), no temporary file is left."""


def _go_on(stop: threading.Event | None) -> None:
    """Raise :class:`Stopped` once the caller of the work has been cancelled."""
    if stop is not None and stop.is_set():
        raise Stopped


def open_temp(bucket: str, name: str) -> tuple[str, int]:
    """Create the temporary file of a write of ``name``: (path, read-write fd)."""
    path = path_of(bucket, name, op="write")
    directory, _, base = path.rpartition("/")
    if not base:
        raise InvalidArgument(f"{describe('write', bucket, name, 'file')}: a name ending "
                              "in '/' is a directory, not a file")
    root = path_of(bucket, "", op="write")
    if not os.path.isdir(root):
        # As a write to a missing bucket: a mistyped /mtn/nfs/... must not
        # make a new directory at the root of the filesystem.
        raise NotFound(f"{describe('write', bucket, name, 'file')} failed: no directory "
                       f"/{bucket}", operation="write", bucket=bucket, name=name)
    name_max = _name_max(directory, root)
    if len(base.encode()) > name_max:
        # Refused now, not by the rename after every byte was written and
        # fsynced (a directory's name too long fails its mkdir at once).
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)
    # A file name may take all of the filesystem's 255 bytes; the
    # temporary's copy of it is cut to leave room for the mark and the id
    # (it then lists as an open upload of the cut name, which aborts it).
    stem = base.encode()[:name_max - len(TEMP_MARK) - 13].decode(errors="ignore")
    temp = f"{directory}/.{stem}{TEMP_MARK}{uuid.uuid4().hex[:12]}"
    # Read-write: the bytes are read back and checked before publishing.
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | CLOEXEC
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


def _name_max(directory: str, root: str) -> int:
    """The longest file name (bytes) the filesystem of ``directory`` takes,
    asked of its nearest existing ancestor up to ``root`` (a directory below
    the bucket's may be another mount)."""
    while len(directory) > len(root) and not os.path.isdir(directory):
        directory = directory.rpartition("/")[0]
    try:
        limit = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return _NAME_MAX
    return limit if limit > 0 else _NAME_MAX  # -1: no limit stated


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
    fd = os.open(path, os.O_WRONLY | CLOEXEC)
    try:
        _pwrite_all(fd, data, offset)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def _publish(fd: int, temp: str, bucket: str, name: str, length: int, expected: int,
             if_generation_match: int | None, op: str = "write", *,
             read_back: bool = True, sync_directory: bool = True,
             stop: threading.Event | None = None) -> ObjectInfo:
    """Check the temporary file, fsync it, and move it into place
    (``read_back=False``: its bytes were read back and checked as they
    were written, see ``_file_writer``; its size is checked here;
    ``sync_directory=False``: the new name is made durable by a later
    write's fsync of the same directory, see :func:`publish_checked`;
    ``stop`` set: :class:`Stopped` before the rename)."""
    where = describe(op, bucket, name, "file")
    check = Crc32c()
    if not read_back:
        check.value, check.length = expected, length
    block = bytearray(min(_CHECK_BLOCK, max(length, 1)) if read_back else 0)
    offset = 0
    while read_back and offset < length:
        _go_on(stop)
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
    record_crc(fd, st, expected)
    _go_on(stop)
    os.fsync(fd)  # outside the lock below, which other writers of the name wait for
    if if_generation_match == 0:
        _go_on(stop)
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
        with _changing(path, op, bucket, name):
            if if_generation_match is not None:
                _check_generation(op, bucket, name, path, if_generation_match)
            current = _current(path)
            if current is not None:
                st = _distinct_generation(fd, current, st, expected)
                # Last: a mode without the owner's write (0444) refuses the
                # crc32c record a new generation writes.
                _keep_mode(fd, st, current)
            _go_on(stop)  # last: the lock above may have waited for another writer
            os.replace(temp, path)
    if not sync_directory:
        return object_info(bucket, name, st, expected)
    try:
        _fsync_directory(path.rpartition("/")[0])
    except OSError as exc:
        # Published already: said, since a power loss may still take it back.
        raise OSError(exc.errno, f"{exc.strerror or exc} (syncing its directory: the file "
                      "is in place, but may not survive a power loss)", exc.filename) from exc
    return object_info(bucket, name, st, expected)


def _directory_at(path: str) -> bool:
    try:
        return stat_mod.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _current(path: str) -> os.stat_result | None:
    """The file a write replaces, None if there is none."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None  # nothing there (the change itself says a path through a file)
    # Any other failure (EIO, ESTALE) is raised: taken for "no file", the
    # new file could get the generation of the one it replaced.


def _keep_mode(fd: int, st: os.stat_result, current: os.stat_result) -> None:
    """Give the new file the mode of the one it replaces, as Python's
    ``open(path, "wb")`` keeps it: a checkpoint made private (0600) stays so."""
    mode = current.st_mode & 0o777  # never set-id bits, which a write drops
    if stat_mod.S_ISREG(current.st_mode) and mode != st.st_mode & 0o777:
        # Not fsynced: other writers of the name wait on this lock, and a
        # power loss that takes the mode back leaves the umask's, as before.
        os.fchmod(fd, mode)


def _distinct_generation(fd: int, current: os.stat_result, st: os.stat_result,
                         crc: int) -> os.stat_result:
    """Make the new file's mtime (its generation) later than the ``current`` one's.

    File times come from a clock that advances in ticks of a few ms on many
    kernels and filesystems: two writes in one tick would get one generation,
    and a precondition could not tell them apart. Some filesystems keep
    whole seconds (Lustre, ext2/ext3 with small inodes, some NFS servers;
    FAT two), and drop a finer step: the step grows until the time moves.
    """
    latest = current.st_mtime_ns
    if st.st_mtime_ns <= latest:
        for step in _TIME_STEPS:
            os.utime(fd, ns=(st.st_atime_ns, latest + step))
            st = os.fstat(fd)
            if st.st_mtime_ns > latest:
                break
        record_crc(fd, st, crc)  # the record names the modification time
        os.fsync(fd)
    return st


@contextlib.contextmanager
def _changing(path: str, op: str, bucket: str, name: str) -> Iterator[None]:
    """Hold an ``flock`` on the file at ``path`` (if there is one) while
    ``op`` replaces or removes it (object ``name`` of ``bucket``).

    Every aioflux write and delete of an existing file takes it, so the
    check of a generation precondition and the rename or unlink that
    follows are one step for every aioflux process on the machine: two
    writers with ``if_generation_match`` of the same generation cannot both
    succeed. A taker checks that the file it locked is still the one at the
    path (a writer it waited for may have replaced it), as the disk cache's
    lock files do. A file this process may not write is locked through a
    read-only descriptor. The two steps stay apart only where there is
    nothing to lock (no file at the path, or no regular one: the change
    itself says), the filesystem offers no locks (``ENOLCK`` on an NFS
    mount without a lock manager, ``ENOSYS`` on Lustre mounted without
    ``flock``, ``EOPNOTSUPP``, ``EINVAL``), or the process may not lock the
    file it may still replace (not readable, or only readable where locks
    need it open for writing, NFS's); never on a failure of the open or the
    lock itself (``EIO``, ``ESTALE``).

    Raises:
        OSError: the file cannot be opened or locked (``EIO``, ``ESTALE``),
            or its path or the file locked cannot be checked (a stat
            failing: ``ESTALE``, ``EIO``); nothing is left open or locked.
        StorageError: the path never named the file locked, in
            ``_LOCK_ATTEMPTS`` attempts.
    """
    fd = _lock_current(path, op, bucket, name)
    try:
        yield
    finally:
        if fd is not None:
            unlock(fd)


def _lock_current(path: str, op: str, bucket: str, name: str) -> int | None:
    """The locked descriptor of the file at ``path``, or None (see :func:`_changing`)."""
    for _ in range(_LOCK_ATTEMPTS):
        opened = _open_to_lock(path)
        if opened is None:
            return None
        fd, refused = opened
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            os.close(fd)
            if exc.errno in _NO_LOCKS:
                return None
            if refused is not None and exc.errno == errno.EBADF:
                # NFS's flock is a POSIX write lock, which a read-only
                # descriptor cannot hold. The rename or unlink needs only
                # the directory (a team's folder of others' files): it goes
                # ahead unlocked, as where there are no locks.
                return None
            raise
        except BaseException:
            os.close(fd)
            raise
        # A stat failing for good (ESTALE on NFS, EIO) is raised, not taken
        # for a file replaced meanwhile and tried again without end.
        if kept(path, fd):
            return fd
        # Replaced or removed while we waited: lock what is there now.
    raise StorageError(f"{describe(op, bucket, name, 'file')} failed: the file locked was no "
                       f"longer the one at its path in each of {_LOCK_ATTEMPTS} attempts to "
                       "lock it (replaced under each, or a filesystem whose path never names "
                       "the file opened)", operation=op, bucket=bucket, name=name)


def _open_to_lock(path: str) -> tuple[int, OSError | None] | None:
    """A descriptor of the file at ``path`` to lock, and the failure of its
    read-write open if it is read-only; None: no file there to lock."""
    # Read-write and non-blocking: NFS turns flock into a POSIX write lock,
    # which needs a descriptor open for writing, and a named pipe must not
    # make the open wait.
    try:
        return os.open(path, os.O_RDWR | os.O_NONBLOCK | CLOEXEC), None
    except OSError as exc:
        if exc.errno in _NOTHING_TO_LOCK:
            return None
        if exc.errno not in _NOT_WRITABLE:
            raise
        refused = exc
    try:
        # A local filesystem's flock needs no write access.
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | CLOEXEC), refused
    except OSError as exc:
        if exc.errno in _NOTHING_TO_LOCK or exc.errno in _NOT_WRITABLE:
            # Removed since; or not even readable (mode 000), which the
            # directory still lets this process replace: no lock to take.
            return None
        raise


def _check_generation(op: str, bucket: str, name: str, path: str, wanted: int) -> None:
    try:
        current = generation_of(os.stat(path))
    except FileNotFoundError:
        current = 0
    if current != wanted:
        raise PreconditionFailed(f"{describe(op, bucket, name, 'file')} failed: generation "
                                 f"{current}, not {wanted}", operation=op, bucket=bucket,
                                 name=name, status=412)


def write_whole(bucket: str, name: str, data: memoryview, if_generation_match: int | None,
                stop: threading.Event | None = None) -> ObjectInfo:
    """Write a file all or nothing: temporary file, check, fsync, rename.

    Raises:
        Stopped: ``stop`` was set before the rename: nothing published.
    """
    temp, fd = open_temp(bucket, name)
    try:
        for offset in range(0, len(data), _WRITE_PIECE):
            _go_on(stop)
            _pwrite_all(fd, data[offset:offset + _WRITE_PIECE], offset)
        return _publish(fd, temp, bucket, name, len(data), crc32c(data), if_generation_match,
                        stop=stop)
    finally:
        os.close(fd)
        unlink_quietly(temp)  # already gone when published


def finish_temp(temp: str, bucket: str, name: str, tail: memoryview | None, offset: int,
                expected: Crc32c, if_generation_match: int | None = None,
                stop: threading.Event | None = None) -> ObjectInfo:
    """Publish a streaming upload's temporary file: the tail at ``offset``,
    cut to ``expected.length``, checked against ``expected``, if the file
    is then ``if_generation_match``.

    Raises:
        Stopped: ``stop`` was set before the rename: nothing published.
    """
    fd = os.open(temp, os.O_RDWR | CLOEXEC)
    try:
        _go_on(stop)
        if tail is not None and len(tail):
            _pwrite_all(fd, tail, offset)
        os.ftruncate(fd, expected.length)
        return _publish(fd, temp, bucket, name, expected.length, expected.value,
                        if_generation_match, stop=stop)
    finally:
        os.close(fd)
        unlink_quietly(temp)


def publish_checked(fd: int, temp: str, bucket: str, name: str, written: Crc32c, *,
                    sync_directory: bool = True) -> ObjectInfo:
    """Publish a temporary file whose every byte was read back and checked
    against ``written`` as it was written: its size checked, fsync, rename,
    and (``sync_directory``) an fsync of its directory.

    Without that last fsync the file is still all or nothing (its bytes
    are durable before the rename), but a power loss may take back its
    name until a later write's fsync of the same directory, whose entries
    it makes durable up to then: the files of one commit, a DCP
    checkpoint's, sync their directory once, with the file that commits
    them (its metadata, written last).
    """
    return _publish(fd, temp, bucket, name, written.length, written.value, None,
                    read_back=False, sync_directory=sync_directory)


def copy_file(bucket: str, name: str, dest_bucket: str, dest_name: str,
              stop: threading.Event | None = None) -> ObjectInfo:
    """Copy a file (published like a write), checked against the source's
    recorded crc32c when it has one.

    Raises:
        Stopped: ``stop`` was set before the rename: nothing published.
    """
    source, st = open_file("copy", bucket, name)
    try:
        with _failing_as("copy", dest_bucket, dest_name):
            temp, fd = open_temp(dest_bucket, dest_name)
        try:
            check = Crc32c()
            block = bytearray(READ_BLOCK)
            offset = 0
            while True:
                _go_on(stop)
                got = os.preadv(source, [block], offset)
                if got == 0:
                    break
                piece = memoryview(block)[:got]
                check.update(piece)
                with _failing_as("copy", dest_bucket, dest_name):
                    _pwrite_all(fd, piece, offset)
                offset += got
            check_unchanged(source, st, "copy", bucket, name)
            recorded = recorded_crc(source, st)
            if recorded is not None and (offset != st.st_size or check.value != recorded):
                raise ChecksumMismatch(
                    f"{describe('copy', bucket, name, 'file')} failed: the source's bytes "
                    "differ from its recorded crc32c", operation="copy", bucket=bucket,
                    name=name)
            with _failing_as("copy", dest_bucket, dest_name):
                return _publish(fd, temp, dest_bucket, dest_name, offset, check.value, None,
                                op="copy", stop=stop)
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
                if_generation_match: int | None, stop: threading.Event | None = None) -> None:
    """Delete a file and the directories aioflux made that it leaves empty.

    A symbolic link is removed itself, never what it points to: one to a
    directory too (``aioflux rm link``, as rm does). ``stop`` is looked at
    once, right before the unlink: a delete cancelled after that is done
    (a removed file cannot be put back), and the directories it emptied
    are still removed.

    Raises:
        Stopped: ``stop`` was set before the unlink: the file stays.
    """
    path = path_of(bucket, name, op="delete")
    with _changing(path, "delete", bucket, name):
        st = os.stat(path)
        if not (stat_mod.S_ISREG(st.st_mode) or os.path.islink(path)):
            raise not_a_file("delete", bucket, name)
        if generation is not None and generation_of(st) != generation:
            raise NotFound(f"{describe('delete', bucket, name, 'file')} failed: generation "
                           f"{generation} is gone", operation="delete", bucket=bucket,
                           name=name)
        if if_generation_match is not None:
            _check_generation("delete", bucket, name, path, if_generation_match)
        _go_on(stop)
        os.unlink(path)
    # Directories are not objects: drop the ones this delete emptied, if
    # aioflux made them (a directory the user made stays, even empty).
    root = path_of(bucket, "", op="delete")
    directory = path.rpartition("/")[0]
    while directory != root and directory.startswith(root + "/") and _made_by_us(directory):
        try:
            os.rmdir(directory)
        except OSError:
            break  # not empty: the ones above are not empty either
        directory = directory.rpartition("/")[0]


def _fsync_directory(directory: str) -> None:
    """Make the names in ``directory`` durable.

    Raises:
        OSError: the fsync failed otherwise than by syncing no directories
            (EIO, ENOSPC: a name just made there may be lost), or the
            directory cannot be opened otherwise than by being gone or
            unreadable (a directory one may write but not read cannot be
            synced, as PostgreSQL's fsync_fname also allows).
    """
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EACCES):
            return  # removed meanwhile (and what it held), or not ours to read
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _NO_DIRECTORY_SYNC:
            raise
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> None:
    """Remove ``path`` if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
