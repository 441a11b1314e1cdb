"""The blocking filesystem work of the disk cache (run in worker threads
or, for the non-blocking lock calls, on the loop).

Layout of a cache directory::

    aioflux-cache.json        marker (a directory without it is never cleared) + recorded limit
    usage                     bytes of all entries, kept under flock(usage)
    entries/ab/cdef...        one entry per object version: header, key, bytes
    locks/abcdef...           per-entry lock file, present only while an entry is filled
    tmp/abcdef....PID.RAND    entries being written (renamed into entries/ when complete)

A cache deletes what it takes for its own leftovers, so it adopts only a new
or empty directory (or one holding its marker), and it sweeps, evicts and
clears only names of exactly the forms above: a file someone else put there
is never taken for an entry or a temporary.

An entry is ``HEADER`` (magic, size, crc32c, key length), the key, then the
object's bytes; the crc32c covers the bytes and is checked on every read.
Locks are ``flock`` locks, which the kernel drops when a process dies, so
a killed writer never blocks the others; a lock file is unlinked by its
holder before it unlocks, and a taker checks that the file it locked is
still the one at the path (the classic unlink-safe lock-file protocol).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import struct
import time
import uuid
from dataclasses import dataclass

from ..._core.concurrency.locks import kept
from ..._core.concurrency.locks import unlock as release
from ..._core.errors import InvalidArgument
from ..._core.integrity.crc import crc32c
from ..._core.memory.buffers import GrowingBytes

__all__ = [
    "CORRUPT",
    "HEADER",
    "MARKER",
    "MISS",
    "CacheInfo",
    "Layout",
    "clear",
    "drop_entry",
    "info",
    "is_cache",
    "read_entry",
    "sweep_temps",
    "try_lock",
    "unlock",
    "write_entry",
]

MARKER = "aioflux-cache.json"
FORMAT = 1
_MAGIC = b"AFXCACH1"
# magic, object size (u64), crc32c (u32), key length (u16); big-endian.
HEADER = struct.Struct(">8sQIH")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# One pread per entry up to this size (larger ones are read in pieces).
_READ_PIECE = 64 * 1024 * 1024
# An eviction pass frees this fraction of the limit beyond what the new entry
# needs, so that a full cache is scanned once per ~10% of its size written,
# not once per entry.
EVICT_SLACK = 0.1

MISS, CORRUPT = "miss", "corrupt"

# Attempts at an entry's lock before it counts as unusable, when the file
# locked is not the one at its path. A holder's unlink between our open and
# our flock is a race a retry wins (another holder must take and release it
# in between for the next to lose as well); losing every time is a path that
# never names the file opened, which retried without end spun on the event
# loop. (A path whose stat fails, ESTALE on NFS, is no race: it fails the
# lock at once, see _core.concurrency.locks.held_at.)
_LOCK_ATTEMPTS = 8

# The names the cache writes: an entry ``entries/<2 hex>/<62 hex>`` (the
# sha256 of its key, split), a temporary ``tmp/<64 hex>.<pid>.<8 hex>`` and
# the marker's temporary ``<MARKER>.<pid>.<8 hex>``.
_FAN = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"[0-9a-f]{62}")
_TEMP = re.compile(r"([0-9a-f]{64})\.[0-9]+\.[0-9a-f]{8}")
_MARKER_TEMP = re.compile(re.escape(MARKER) + r"\.[0-9]+\.[0-9a-f]{8}")
# Names of a refused directory's files shown in the message.
_SHOWN = 3


@dataclass(frozen=True)
class Layout:
    """The paths of one cache directory."""

    root: str

    @property
    def marker(self) -> str:
        return os.path.join(self.root, MARKER)

    @property
    def usage(self) -> str:
        return os.path.join(self.root, "usage")

    def entry(self, digest: str) -> str:
        return os.path.join(self.root, "entries", digest[:2], digest[2:])

    def lock(self, digest: str) -> str:
        return os.path.join(self.root, "locks", digest)

    @property
    def tmp(self) -> str:
        return os.path.join(self.root, "tmp")

    def make(self, limit: int | None) -> None:
        """Adopt the directory, create the subdirectories and record
        ``limit`` in the marker (None keeps the limit recorded before).

        Raises:
            InvalidArgument: the directory holds files but no marker.
            OSError: the directory cannot be created or written.
        """
        os.makedirs(self.root, exist_ok=True)
        self.refuse_foreign()
        # The marker before the subdirectories: another process opening the
        # same new directory meanwhile must never see them without it.
        try:
            self._record(limit)
        except OSError:
            if not os.path.exists(self.marker):
                raise
            # A cache already (a full disk, a directory shared read-only):
            # the recorded limit only informs ``aioflux cache info``.
        for sub in ("entries", "locks", "tmp"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)

    def refuse_foreign(self) -> None:
        """Raise unless the directory is missing, empty or a cache's: sweeps
        and eviction would delete a user's ``tmp/*`` and ``entries/*/*``
        (``cache_dir=os.getcwd()`` or ``"~"``).

        Raises:
            InvalidArgument: the directory holds files but no marker.
            OSError: the directory cannot be listed.
        """
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return  # made when the cache is opened
        found = sorted(name for name in names
                       if name != MARKER and not _MARKER_TEMP.fullmatch(name))
        # The marker is looked for after the listing: a process making the
        # cache writes it before anything else, so if the listing shows that
        # process's files, the marker exists by now.
        if found and not os.path.exists(self.marker):
            shown = ", ".join(map(repr, found[:_SHOWN])) + (", ..." if len(found) > _SHOWN
                                                            else "")
            raise InvalidArgument(
                f"cache {self.root}: not a cache directory (it holds {shown} but no "
                f"{MARKER}): a cache deletes files it takes for its own in its directory, "
                "so it uses only a new or empty one, or one a cache made")

    def _record(self, limit: int | None) -> None:
        """Write ``limit`` into the marker, unless it already holds it.

        No limit leaves a recorded one in place: an opener without one (a
        dataset given ``cache_dir`` but no ``cache_limit``) evicts nothing,
        so the last limit given still bounds the cache, and ``aioflux cache
        info`` reports it.
        """
        want = {"format": FORMAT, "limit": limit}
        try:
            with open(self.marker, encoding="utf-8") as f:
                held = json.load(f)
        except (OSError, ValueError):
            held = None
        if held == want or (limit is None and isinstance(held, dict)
                            and held.get("format") == FORMAT
                            and isinstance(held.get("limit"), int)):
            return
        temp = f"{self.marker}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        try:
            with open(temp, "w", encoding="utf-8") as f:
                json.dump(want, f)
            os.replace(temp, self.marker)
        except BaseException:
            _unlink_quietly(temp)
            raise

    def recorded_limit(self) -> int | None:
        """The limit the last process that opened the cache with one recorded
        (None: none, or a marker left empty or torn by a crash, which the
        next opener writes again)."""
        try:
            with open(self.marker, encoding="utf-8") as f:
                held = json.load(f)
        except ValueError:
            return None
        limit = held.get("limit") if isinstance(held, dict) else None
        return limit if isinstance(limit, int) else None


# -- locks --------------------------------------------------------------------


def try_lock(path: str) -> int | None:
    """Take the lock file ``path`` without waiting: its fd, or None if held.

    Args:
        path: the lock file.

    Returns:
        The locked descriptor, or None: another process (or task) holds it.

    Raises:
        OSError: the lock directory is unusable, the stat of the path or of
            the file locked failed (ESTALE, EIO: its own error, at once), or
            the path named another file than the one locked at each of
            ``_LOCK_ATTEMPTS`` attempts (no errno: no call failed).
    """
    for _ in range(_LOCK_ATTEMPTS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if kept(path, fd):
            return fd
        # Its holder unlinked it between our open and our flock: the lock
        # now lives in a new file at the path.
    # No call failed: an errno here (ESTALE, say) would name a failure
    # that never happened.
    raise OSError(f"lock file {path}: the file locked was not the one at the path at each of "
                  f"{_LOCK_ATTEMPTS} attempts to take it (replaced or removed under each, or "
                  "a filesystem whose path never names the file opened)")


def unlock(fd: int, path: str | None = None) -> None:
    """Release a lock from :func:`try_lock` (see :func:`aioflux._core.concurrency.locks.unlock`),
    unlinking ``path`` first if given."""
    try:
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                # Gone already, or a disk that turned read-only or failing
                # mid-run: a lock file left at its path is harmless (the next
                # taker locks that file), and raising here failed the read
                # whose bytes were fetched (or the store that just failed).
                pass
    finally:
        release(fd)


class _UsageLock:
    """``flock`` on the usage file, which holds the entries' total bytes."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.fd = -1

    def __enter__(self) -> _UsageLock:
        self.fd = os.open(self.layout.usage, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            # No __exit__ follows a failed __enter__: left open, one
            # descriptor per entry written (an flock failing for good,
            # ENOLCK) ran the process out of them.
            os.close(self.fd)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        unlock(self.fd)

    def read(self) -> int | None:
        raw = os.pread(self.fd, 32, 0)
        try:
            return int(raw.decode())
        except ValueError:
            return None  # new, or torn by a crash: the caller rescans

    def write(self, total: int) -> None:
        text = str(max(0, total)).encode()
        os.pwrite(self.fd, text, 0)
        os.ftruncate(self.fd, len(text))


# -- entries ------------------------------------------------------------------


def _read_body(fd: int, offset: int, size: int) -> bytes | None:
    """An entry's ``size`` bytes from ``offset``, None if the file ends first.

    A large one lands a piece at a time in the ``bytes`` handed out, so a
    hit holds the entry once: its pieces joined would hold it twice.
    """
    if size <= _READ_PIECE:
        got = os.pread(fd, size, offset)
        if len(got) == size:
            return got
        # Short (a network filesystem may answer so): piece by piece below.
    out = GrowingBytes(max(size, 1))
    view: memoryview | None = out.view()
    try:
        done = 0
        while done < size:
            assert view is not None
            count = os.preadv(fd, [view[done:done + _READ_PIECE]], offset + done)
            if not count:
                return None
            done += count
        view = None  # no view may outlive the take
        return out.take(size)
    finally:
        view = None  # nor the close, on the way out of a failed read
        out.close()


def read_entry(path: str, key: bytes, expected_crc: int | None) -> tuple[str, bytes | int]:
    """Read and check one entry; touch it (its mtime is the LRU clock).

    Args:
        path: the entry's path.
        key: the key it must hold.
        expected_crc: the listed crc32c of the object, if known.

    Returns:
        ``("hit", bytes)``, ``(MISS, 0)``, or ``(CORRUPT, inode)`` for an
        entry that fails its checks (the inode, so that only that file is
        dropped).

    Raises:
        OSError: the entry exists but cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    except FileNotFoundError:
        return MISS, 0
    try:
        # Read through the open fd: an eviction that unlinks the path now
        # cannot tear this read.
        st = os.fstat(fd)
        head = os.pread(fd, HEADER.size + len(key), 0)
        if len(head) != HEADER.size + len(key):
            return CORRUPT, st.st_ino
        magic, size, crc, key_len = HEADER.unpack_from(head)
        if (magic != _MAGIC or key_len != len(key) or head[HEADER.size:] != key
                or st.st_size != HEADER.size + key_len + size):
            return CORRUPT, st.st_ino
        offset = HEADER.size + key_len
        data = _read_body(fd, offset, size)
        if data is None:
            return CORRUPT, st.st_ino
        if crc32c(data) != crc or (expected_crc is not None and crc != expected_crc):
            return CORRUPT, st.st_ino
        try:
            os.utime(fd)
        except OSError:
            pass  # read-only cache (another user's): still served, just not refreshed
        return "hit", data
    finally:
        os.close(fd)


def write_entry(layout: Layout, digest: str, key: bytes, data: bytes | bytearray | memoryview,
                crc: int, limit: int | None, *, recount: bool = False) -> int:
    """Write an entry atomically (temp + rename), within ``limit``.

    The caller holds the entry's lock. Before the rename, under the usage
    lock, least-recently-used entries are evicted so that the entries stay
    within ``limit`` with this one added. ``recount``: the recorded usage
    is counted again from the entries first (a process's first limited
    write: a writer without a limit does not keep the count, and a limited
    one that trusted it held 5.8 times its limit).

    Returns:
        Entries this call evicted.

    Raises:
        OSError: the cache directory cannot be written (disk full...).
    """
    view = memoryview(data).cast("B")
    temp = os.path.join(layout.tmp, f"{digest}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o644)
    try:
        try:
            _write_all(fd, HEADER.pack(_MAGIC, len(view), crc, len(key)) + key)
            _write_all(fd, view)
            # No fsync: after a power loss the rename may survive without
            # the data, and the crc32c check on read catches that at the
            # cost of one refetch. An fsync per entry would make a first epoch
            # 2-3x slower than an uncached one (~3 ms per 100 KiB entry).
        finally:
            os.close(fd)
        size = HEADER.size + len(key) + len(view)
        path = layout.entry(digest)
        if limit is None:
            _rename(temp, path)
            return 0
        with _UsageLock(layout) as usage:
            total = usage.read()
            if recount:
                total = sum(entry_size for _, entry_size, _ in _scan(layout))
            evicted = 0
            if total is None or total + size > limit:
                total, evicted = _evict(layout, limit - size - int(limit * EVICT_SLACK))
            _rename(temp, path)
            usage.write(total + size)
            return evicted
    except BaseException:
        _unlink_quietly(temp)
        raise


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _rename(temp: str, path: str) -> None:
    try:
        os.rename(temp, path)
    except FileNotFoundError:
        # Its fan-out directory is new, or ``cache clear`` just removed it.
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.rename(temp, path)


def drop_entry(layout: Layout, digest: str, inode: int) -> None:
    """Remove a corrupt entry, if the file at its path is still that inode.

    Raises:
        OSError: it cannot be removed (a disk failing or read-only).
    """
    path = layout.entry(digest)
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# -- scans: eviction, stale temporaries, info, clear -------------------------


def _scan(layout: Layout) -> list[tuple[int, int, str]]:
    """``(mtime_ns, size, path)`` of every entry."""
    found = []
    top = os.path.join(layout.root, "entries")
    try:
        fans = list(os.scandir(top))
    except FileNotFoundError:
        return []
    for fan in fans:
        if not _FAN.fullmatch(fan.name):
            continue
        try:
            files = list(os.scandir(fan.path))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in files:
            if not _ENTRY.fullmatch(entry.name):
                continue
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            found.append((st.st_mtime_ns, st.st_size, entry.path))
    return found


def _evict(layout: Layout, target: int) -> tuple[int, int]:
    """Remove least-recently-used entries until their total is at most
    ``target``; also drop stale temporaries. Called under the usage lock.

    Returns:
        ``(total bytes left, entries removed)``.
    """
    sweep_temps(layout)
    entries = sorted(_scan(layout))
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in entries:
        if total <= max(0, target):
            break
        # A reader holding it open keeps reading the unlinked file.
        _unlink_quietly(path)
        total -= size
        removed += 1
    return total, removed


def sweep_temps(layout: Layout) -> int:
    """Remove temporaries whose writer is gone (killed mid-write).

    A writer holds its entry's lock for as long as its temporary exists, so
    a temporary whose entry lock can be taken has no writer. One that cannot
    be removed (a disk read-only or failing) is left, for ``aioflux cache
    info`` to count: raising failed the opening of the cache, and with it
    every read, or every eviction, and with it every store.

    Returns:
        Temporaries removed.
    """
    removed = 0
    for name, digest in _temporaries(layout):
        lock_path = layout.lock(digest)
        try:
            fd = try_lock(lock_path)
        except OSError:
            continue
        if fd is None:
            continue  # being written right now
        try:
            _unlink_quietly(os.path.join(layout.tmp, name))
            removed += 1
        except OSError:
            pass
        finally:
            unlock(fd, lock_path)
    return removed


def _temporaries(layout: Layout) -> list[tuple[str, str]]:
    """``(name, digest)`` of every temporary in ``tmp/``."""
    try:
        names = os.listdir(layout.tmp)
    except FileNotFoundError:
        return []
    return [(name, match.group(1)) for name in names if (match := _TEMP.fullmatch(name))]


@dataclass(frozen=True)
class CacheInfo:
    """What a cache directory holds.

    Attributes:
        directory: the cache directory.
        entries: cached objects.
        bytes: their total size on disk.
        limit: the byte limit recorded by the last process that opened it
            with one (None: none ever did).
        temporaries: entries being written, or left by killed writers.
        oldest: seconds since the least recently used entry was used.
    """

    directory: str
    entries: int
    bytes: int
    limit: int | None
    temporaries: int
    oldest: float | None


def is_cache(root: str) -> bool:
    """Whether ``root`` is a cache directory (holds the marker)."""
    return os.path.isfile(os.path.join(root, MARKER))


def info(root: str) -> CacheInfo:
    """Describe the cache at ``root`` (which must hold the marker)."""
    layout = Layout(root)
    entries = _scan(layout)
    temps = len(_temporaries(layout))
    oldest = min((m for m, _, _ in entries), default=None)
    return CacheInfo(root, len(entries), sum(s for _, s, _ in entries),
                     layout.recorded_limit(), temps,
                     None if oldest is None else max(0.0, time.time() - oldest / 1e9))


def clear(root: str) -> tuple[int, int]:
    """Remove every entry and stale temporary of the cache at ``root``.

    Readers holding an entry open finish reading it; writers busy now
    publish their entry afterwards.

    Returns:
        ``(entries removed, bytes removed)``.
    """
    layout = Layout(root)
    with _UsageLock(layout) as usage:
        sweep_temps(layout)
        entries = _scan(layout)
        for _, _, path in entries:
            _unlink_quietly(path)
        for fan in {os.path.dirname(p) for _, _, p in entries}:
            try:
                os.rmdir(fan)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.ENOENT, errno.EEXIST):
                    raise
        usage.write(0)
    return len(entries), sum(s for _, s, _ in entries)
