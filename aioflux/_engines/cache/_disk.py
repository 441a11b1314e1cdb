"""``DiskCache``: objects kept on local disk across epochs, keyed by version.

The cache sits on the storage protocol: it sees only :class:`ObjectInfo`
(scheme, bucket, name, size, version token, crc32c) and a ``fetch``
function for what it lacks, so it serves every backend. A lookup:

1. reads the entry (through an open fd, crc32c-checked, its mtime touched
   as the LRU clock);
2. on a miss takes the entry's lock without waiting; an entry another
   process is filling is waited for (polled), never fetched twice;
3. fetches what it locked in one ``fetch`` call (the download planner
   composes and batches them), stores each entry (temp + rename, evicting
   least-recently-used entries beyond the limit) and unlocks. No fsync:
   the crc32c check on read catches an entry a power loss left torn. Only
   bytes of the version asked for are stored: checked against its crc32c
   when known, else the fetch reads that version only (a fetch that could
   not hands back :class:`Replaced`).

The cache is an accelerator: a cache directory that cannot be read or
written mid-run (disk full, EIO), or made on a full disk, costs a fetch and
is counted in ``stats.errors``, it never fails the read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import hashlib
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..._core.checks.arguments import check_int
from ..._core.concurrency.share import pool_threads
from ..._core.errors import InvalidArgument, NotFound, PreconditionFailed
from ..._core.integrity.crc import crc32c
from ..._core.records.types import ObjectInfo
from . import _files
from ._files import CORRUPT, HEADER, Layout

__all__ = ["DEFAULT_WAIT_LIMIT", "FIRST_POLL", "MAX_POLL", "CacheStats", "DiskCache", "Fetch",
           "Replaced", "Unclaimable", "cache_from_args", "read_listed", "version_token"]

Data = bytes | bytearray


@dataclass(frozen=True)
class Replaced:
    """What a fetch hands back for an object it found replaced since it was
    listed: the bytes there now, returned to the caller but never stored
    under the version asked for.

    Attributes:
        data: the bytes read.
    """

    data: Data


Fetch = Callable[[list[ObjectInfo]], Awaitable[Sequence[Data | Replaced]]]


async def read_listed(obj: ObjectInfo,
                      read_at: Callable[[ObjectInfo, int | None], Awaitable[Data]]
                      ) -> Data | Replaced:
    """``obj`` read at its listed version, for the cache to store under it.

    For an object without a crc32c to check a miss against (an S3 listing's,
    a file another tool wrote): read unpinned, a replacement of the same size
    was stored under the listed version and served whenever that version
    was asked for again. No longer that version, the bytes there now come
    back marked :class:`Replaced` (handed out, never stored).

    Args:
        obj: the object, as listed or stat'ed.
        read_at: reads ``obj`` at a generation (None: the current one).

    Returns:
        The listed version's bytes, or the current ones as Replaced.

    Raises:
        NotFound: the object is gone.
    """
    try:
        return await read_at(obj, obj.generation)
    except (NotFound, PreconditionFailed):
        return Replaced(await read_at(obj, None))  # gone: NotFound again

# Polling another process's fill: from 2 ms (a small object from a warm
# emulator) doubling to 100 ms (a large object takes seconds anyway).
FIRST_POLL = 0.002
MAX_POLL = 0.1
# After this long waiting for another process's fill, fetch the object
# without the cache rather than stall training behind a hung process.
DEFAULT_WAIT_LIMIT = 600.0
# A batch's entries are written by this many threads (writes of 100 KiB
# entries measured 0.3 ms each with 6-16 in parallel on the 2-core test
# VM), a pool of the cache's own so that they never queue behind (or
# starve) other blocking work such as LocalStore's.
_IO_THREADS = 16
# Entries read by one thread call (a batch's hits spread over the pool).
_READ_CHUNK = 8
# Reads of an entry found filled by another process (it exists once its
# lock is held) before the object is read around the cache. One is the
# race with that filler; more, its entry evicted again before it was read
# each time. The bound also ends the rereads of a path that exists but
# never opens (a stale name on NFS).
_REREADS = 8

# Errors of a full disk or quota: the cache degrades to reading around itself.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

_pool_lock = threading.Lock()
_pool_of: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """This process's cache I/O threads (built again after fork: threads do not survive it)."""
    global _pool_of
    with _pool_lock:
        if _pool_of is None or _pool_of[0] != os.getpid():
            _pool_of = (os.getpid(), concurrent.futures.ThreadPoolExecutor(
                pool_threads(_IO_THREADS), thread_name_prefix="aioflux-cache"))
        return _pool_of[1]


def _forget_pool_in_child() -> None:
    # The parent's threads did not survive the fork, and its lock may have
    # been held by one of them at that moment.
    global _pool_lock, _pool_of
    _pool_lock, _pool_of = threading.Lock(), None


os.register_at_fork(after_in_child=_forget_pool_in_child)


class Unclaimable(Exception):
    """A :meth:`DiskCache.claim` that cannot be taken at all (no version to
    key it by, or a lock the cache cannot make or check: a read-only or full
    disk, a lock file whose stat fails, or whose path never names the file
    locked): not "another process holds it", which is worth waiting for."""


@dataclass
class CacheStats:
    """Counters of one :class:`DiskCache` in one process.

    Attributes:
        hits: objects served from disk.
        misses: objects fetched to fill the cache.
        corrupt: entries that failed their crc32c/size check (dropped and refetched).
        evictions: entries this process removed to stay within the limit.
        bytes: bytes served from disk.
        stored: entries this process wrote.
        waits: objects another process was filling when asked for (waited
            for rather than fetched).
        uncached: objects with no version token (fetched, never cached).
        errors: cache reads or writes that failed (the object was fetched
            and returned all the same).
    """

    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    evictions: int = 0
    bytes: int = 0
    stored: int = 0
    waits: int = 0
    uncached: int = 0
    errors: int = 0


def version_token(obj: ObjectInfo) -> str | None:
    """What identifies this content of the object on its store, or None.

    GCS's generation (a file's mtime in ns) when non-zero, else an ETag or
    version string the backend filled in; an object with none cannot be
    cached safely.

    Args:
        obj: the object.

    Returns:
        The token, or None.
    """
    if obj.generation:
        return f"g{obj.generation}"
    for attr in ("etag", "version"):
        value = getattr(obj, attr, None)
        if value:
            return f"e{value}"
    return None


def cache_from_args(op: str, cache_dir: object, cache_limit: object) -> DiskCache | None:
    """The cache a public function's ``cache_dir=`` / ``cache_limit=`` ask for.

    Args:
        op: the function, for messages.
        cache_dir: a directory, or None for no cache.
        cache_limit: most bytes, or None for no limit.

    Returns:
        The cache, or None.

    Raises:
        InvalidArgument: a wrong type, a limit below 1, a limit without a
            directory, or a directory that holds files but is not a cache.
    """
    check_int(op, "cache_limit", cache_limit, minimum=1, optional=True)
    if cache_dir is None:
        if cache_limit is not None:
            raise InvalidArgument(f"{op}: cache_limit needs a cache_dir")
        return None
    if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
        raise InvalidArgument(f"{op}: cache_dir must be a directory path, got "
                              f"{cache_dir!r:.60}")
    return DiskCache(cache_dir, cache_limit)  # type: ignore[arg-type]  # checked above


class DiskCache:
    """A local disk cache of whole objects, shared by every process on the machine.

    Entries are keyed by ``(scheme, bucket, name, version token, size)``
    (see :func:`version_token`) so a changed object is never served stale;
    each holds its crc32c, checked on every read (a corrupt entry is
    dropped, refetched and counted). Beyond ``limit_bytes`` the least
    recently used entries are evicted. DataLoader workers and ranks may
    share one directory: per-entry ``flock`` locks make one process fetch
    each object while the others wait for it; an entry appears by rename,
    complete or not at all. Use a local disk: ``flock`` is not reliable on
    every network filesystem.

    Args:
        directory: the cache directory: created if missing; an existing
            one must be empty or a cache's (hold its marker), since the
            cache deletes files it takes for its own there.
        limit_bytes: most bytes of entries (None: no limit).
        wait_limit: seconds to wait for another process's fill of an
            entry before reading the object without the cache.

    Raises:
        InvalidArgument: a setting of the wrong type, or a directory that
            holds files but is not a cache.
    """

    def __init__(self, directory: str | os.PathLike[str], limit_bytes: int | None = None, *,
                 wait_limit: float = DEFAULT_WAIT_LIMIT) -> None:
        if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
            raise InvalidArgument(f"DiskCache: directory must be a path, got {directory!r:.60}")
        check_int("DiskCache", "limit_bytes", limit_bytes, minimum=1, optional=True)
        self.directory = os.path.abspath(os.fspath(directory))
        self.limit = limit_bytes
        self.wait_limit = wait_limit
        self.layout = Layout(self.directory)
        try:
            self.layout.refuse_foreign()  # at once, where the directory is given
        except OSError:
            pass  # unreadable: said with its cause when the cache is opened
        self.stats = CacheStats()
        self._opened_in: int | None = None
        # Whether this cache's limited writes have counted the usage again
        # (see _files.write_entry's recount).
        self._counted = limit_bytes is None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["stats"] = CacheStats()  # counters are per process
        state["_opened_in"] = None
        return state

    def __repr__(self) -> str:
        return f"DiskCache({self.directory!r}, limit_bytes={self.limit})"

    def key(self, obj: ObjectInfo) -> tuple[str, bytes] | None:
        """``(digest, key)`` of the object's entry, or None if it has no version.

        Args:
            obj: the object.

        Returns:
            The hex digest naming the entry's files, and the key it holds.
        """
        token = version_token(obj)
        if token is None:
            return None
        key = "\n".join((obj.scheme, obj.bucket, obj.name, token, str(obj.size))).encode()
        return hashlib.sha256(key).hexdigest(), key

    def _open(self) -> None:
        try:
            self.layout.make(self.limit)
            _files.sweep_temps(self.layout)  # left by writers killed earlier
        except OSError as exc:
            if exc.errno not in _NO_SPACE:
                raise InvalidArgument(f"cache {self.directory}: cannot be used: "
                                      f"{exc.strerror or exc}") from exc
            # A full disk is no mistake in the settings, and may pass: the
            # lookups read around what could not be made (stats.errors).
        self._opened_in = os.getpid()

    async def _ensure_open(self) -> None:
        if self._opened_in != os.getpid():
            await asyncio.to_thread(self._open)

    async def lookup(self, obj: ObjectInfo) -> bytes | None:
        """The entry of ``obj`` if the cache holds it (a hit), else None.

        Nothing is fetched: for entries a caller fills itself (:meth:`put`),
        many at a time under one :meth:`claim`. A corrupt entry is dropped
        and counted, then missed.

        Args:
            obj: the entry's object.

        Returns:
            Its bytes, or None.
        """
        await self._ensure_open()
        key = self.key(obj)
        if key is None:
            return None
        [(status, value)] = await self._read_all([(key, obj.crc32c)])
        if isinstance(value, bytes):
            self.stats.hits += 1
            self.stats.bytes += len(value)
            return value
        if status == "error":
            self.stats.errors += 1
        elif status == CORRUPT:
            self.stats.corrupt += 1
            mine, _, _, _ = self._lock([0], [key], {0: value})
            for fd in mine.values():  # dropped by _lock; nothing to store
                _files.unlock(fd, self.layout.lock(key[0]))
        return None

    async def put(self, obj: ObjectInfo, data: Data) -> Literal["stored", "skipped", "failed"]:
        """Store ``data`` as ``obj``'s entry, unless it is there or being stored.

        Args:
            obj: the entry's object (``obj.size`` bytes; its crc32c, if
                given, must match).
            data: its bytes.

        Returns:
            ``"stored"``; ``"skipped"``: there already, being stored by
            another process, or not these bytes (no version, another size or
            crc32c); ``"failed"``: the cache disk could not take it (counted
            in ``stats.errors``).
        """
        await self._ensure_open()
        key = self.key(obj)
        if key is None:
            return "skipped"
        mine, _, _, broken = self._lock([0], [key], {})
        if broken:
            return "failed"
        if not mine:
            return "skipped"
        stored, errors = await self._store_all([(key, obj, data, mine[0])])
        return "stored" if stored else "failed" if errors else "skipped"

    async def claim(self, obj: ObjectInfo) -> int | None:
        """Take the lock named by ``obj`` without waiting: one process at a
        time fills what it stands for (a shard decompressed into its read
        units, each an entry of its own).

        Args:
            obj: names the claim (never stored as an entry).

        Returns:
            The lock's descriptor for :meth:`release`, or None: another
            process (or task) holds it.

        Raises:
            Unclaimable: it cannot be taken (the caller goes without the
                cache; waiting for a claim nobody can take stalled every
                read unit of a compressed shard for ``wait_limit``).
        """
        await self._ensure_open()
        key = self.key(obj)
        if key is None:
            raise Unclaimable(f"{obj.url}: no version to key a claim by")
        try:
            return _files.try_lock(self.layout.lock(key[0]))
        except OSError as exc:
            self.stats.errors += 1
            raise Unclaimable(f"{obj.url}: {exc}") from None

    def release(self, obj: ObjectInfo, fd: int) -> None:
        """Release a :meth:`claim`.

        Args:
            obj: what was claimed.
            fd: the descriptor :meth:`claim` returned.
        """
        key = self.key(obj)
        _files.unlock(fd, None if key is None else self.layout.lock(key[0]))

    async def get(self, obj: ObjectInfo, fetch: Fetch) -> Data:
        """One object from the cache, fetched (and stored) on a miss.

        Args:
            obj: the object (its version token and crc32c from a listing or stat).
            fetch: downloads a list of objects (see :meth:`get_many`).

        Returns:
            Its bytes.

        Raises:
            StorageError: the fetch failed.
        """
        return (await self.get_many([obj], fetch))[0]

    async def get_many(self, objects: Sequence[ObjectInfo], fetch: Fetch) -> list[Data]:
        """Objects from the cache; the misses fetched in one ``fetch`` call and stored.

        Args:
            objects: the objects.
            fetch: downloads a list of objects (the download planner): each
                of the version given, since an object without a crc32c is
                stored as read; or, for one no longer that version,
                :class:`Replaced` (returned, not stored).

        Returns:
            Their bytes, in order.

        Raises:
            InvalidArgument: the cache directory cannot be created, or
                holds files but is not a cache.
            StorageError: a fetch failed.
        """
        await self._ensure_open()
        out: list[Data | None] = [None] * len(objects)
        keys = [self.key(o) for o in objects]
        direct = [i for i, k in enumerate(keys) if k is None]  # fetched, not stored
        self.stats.uncached += len(direct)
        todo = [i for i, k in enumerate(keys) if k is not None]
        corrupt: dict[int, int] = {}  # index -> inode of the corrupt entry seen
        waited: set[int] = set()
        rereads: dict[int, int] = {}  # index -> times found filled by another process
        poll, started = FIRST_POLL, time.monotonic()
        while todo or direct:
            lock = []
            if todo:
                found = await self._read_all([(keys[i], objects[i].crc32c) for i in todo])
                for i, (status, value) in zip(todo, found, strict=True):
                    if isinstance(value, bytes):
                        out[i] = value
                        self.stats.hits += 1
                        self.stats.bytes += len(value)
                    elif status == "error":
                        self.stats.errors += 1
                        direct.append(i)
                    else:
                        if status == CORRUPT:
                            self.stats.corrupt += 1
                            corrupt[i] = value
                        lock.append(i)
            mine, busy, reread, broken = self._lock(lock, keys, corrupt)
            direct.extend(broken)
            for i in reread:
                rereads[i] = rereads.get(i, 0) + 1
            unreadable = [i for i in reread if rereads[i] > _REREADS]
            if unreadable:
                # Fetched, not stored: the entry is there, and this process
                # cannot read it.
                self.stats.errors += len(unreadable)
                direct.extend(unreadable)
                reread = [i for i in reread if rereads[i] <= _REREADS]
            try:
                fill = [*mine, *direct]
                if fill:
                    self.stats.misses += len(mine)
                    datas = await fetch([objects[i] for i in fill])
                    replaced: set[int] = set()
                    for i, data in zip(fill, datas, strict=True):
                        if isinstance(data, Replaced):
                            replaced.add(i)  # not the version the key names: unlocked below
                            data = data.data
                        out[i] = data
                    jobs = [(keys[i], objects[i], out[i], mine.pop(i)) for i in list(mine)
                            if i not in replaced]
                    direct = []
                    if jobs:
                        await self._store_all(jobs)
            finally:
                for i, fd in mine.items():
                    _files.unlock(fd, self.layout.lock(keys[i][0]))  # type: ignore[index]
            if busy:
                waited.update(busy)
                if time.monotonic() - started > self.wait_limit:
                    direct.extend(busy)  # a hung filler: read around it
                    busy = []
                else:
                    await asyncio.sleep(poll)
                    poll = min(poll * 2, MAX_POLL)
            todo = reread + busy
        self.stats.waits += len(waited)
        return out  # type: ignore[return-value]  # every index was filled

    def _lock(self, indices: list[int], keys: list[tuple[str, bytes] | None],
              corrupt: dict[int, int]
              ) -> tuple[dict[int, int], list[int], list[int], list[int]]:
        """Take the entry locks of ``indices`` without waiting (cheap
        syscalls, on the loop so no lock is ever taken by a thread whose
        task was cancelled). Returns ``(locked: index -> fd, busy, to read
        again, to fetch without storing)``."""
        mine: dict[int, int] = {}
        busy: list[int] = []
        reread: list[int] = []
        broken: list[int] = []
        try:
            for i in indices:
                digest = keys[i][0]  # type: ignore[index]
                path = self.layout.lock(digest)
                try:
                    fd = _files.try_lock(path)
                except OSError:
                    # An unusable lock directory: fetch it, do not store it.
                    self.stats.errors += 1
                    broken.append(i)
                    continue
                if fd is None:
                    busy.append(i)
                    continue
                inode = corrupt.pop(i, None)
                if inode is not None:
                    try:
                        _files.drop_entry(self.layout, digest, inode)
                    except OSError:
                        # Not removable, so not replaceable either: fetch it,
                        # do not store it (it stays refused by its crc32c).
                        _files.unlock(fd, path)
                        self.stats.errors += 1
                        broken.append(i)
                        continue
                elif os.path.exists(self.layout.entry(digest)):
                    # Filled by another process since we looked.
                    _files.unlock(fd, path)
                    reread.append(i)
                    continue
                mine[i] = fd
        except BaseException:
            for i, fd in mine.items():
                _files.unlock(fd, self.layout.lock(keys[i][0]))  # type: ignore[index]
            raise
        return mine, busy, reread, broken

    async def _read_all(self, wanted: list[tuple[tuple[str, bytes] | None, int | None]]
                        ) -> list[tuple[str, bytes | int]]:
        pool = _pool()
        chunks = [wanted[s:s + _READ_CHUNK] for s in range(0, len(wanted), _READ_CHUNK)]
        done = await asyncio.gather(*(asyncio.wrap_future(pool.submit(self._read_some, chunk))
                                      for chunk in chunks))
        return [found for chunk in done for found in chunk]

    def _read_some(self, wanted: list[tuple[tuple[str, bytes] | None, int | None]]
                   ) -> list[tuple[str, bytes | int]]:
        out: list[tuple[str, bytes | int]] = []
        for key, crc in wanted:
            digest, raw = key  # type: ignore[misc]
            try:
                out.append(_files.read_entry(self.layout.entry(digest), raw, crc))
            except OSError:
                out.append(("error", 0))
        return out

    async def _store_all(self, jobs: list[tuple[tuple[str, bytes] | None, ObjectInfo,
                                                Data | None, int]]) -> tuple[int, int]:
        """Store and unlock each job's entry; returns ``(stored, errors)``."""
        pool = _pool()
        # Every job is submitted now and shielded: each one unlocks its entry
        # when it has run, so a cancelled caller cannot strand a lock in a
        # job that never started.
        stores = asyncio.gather(*(asyncio.wrap_future(pool.submit(self._store, *job))
                                  for job in jobs))
        totals = [0, 0]
        for stored, evicted, error in await asyncio.shield(stores):
            self.stats.stored += stored
            self.stats.evictions += evicted
            self.stats.errors += error
            totals[0] += stored
            totals[1] += error
        return totals[0], totals[1]

    def _store(self, key: tuple[str, bytes] | None, obj: ObjectInfo, data: Data | None,
               fd: int) -> tuple[int, int, int]:
        """Store one fetched object and unlock its entry. Returns
        ``(stored, evicted, errors)``."""
        digest, raw = key  # type: ignore[misc]
        try:
            if data is None or len(data) != obj.size:
                return 0, 0, 0  # replaced since it was listed: not this version's bytes
            crc = crc32c(data)
            if obj.crc32c is not None and crc != obj.crc32c:
                return 0, 0, 0
            if self.limit is not None and HEADER.size + len(raw) + len(data) > self.limit:
                return 0, 0, 0  # larger than the whole cache
            evicted = _files.write_entry(self.layout, digest, raw, data, crc, self.limit,
                                         recount=not self._counted)
            self._counted = True
            return 1, evicted, 0
        except OSError:
            return 0, 0, 1
        finally:
            _files.unlock(fd, self.layout.lock(digest))
