"""``LocalStore``: objects as files, for NFS/Lustre checkpoints and server-free tests.

``file:///mnt/nfs/run1/step-1/model.pt`` is bucket ``mnt``, object
``nfs/run1/step-1/model.pt``: the path ``/mnt/nfs/run1/step-1/model.pt``.
The bucket directory must exist, as a bucket must (a mistyped path makes no
new directory at the root); the directories below it are made as needed.
A name is a plain relative path below it: every method refuses ``..``,
``.``, empty segments (``a//b``) and absolute names alike (``_paths.py``).

- Writes are all-or-nothing: the bytes go to a temporary file in the same
  directory (``.<name>.aioflux-tmp-<id>``), are read back and checked
  against their crc32c, fsynced, and renamed over the target (the directory
  is fsynced too, and so is the parent of every directory the write made,
  so a published file survives a power loss). A failed or killed writer
  leaves only its temporary file, which listings skip and ``aioflux clean``
  removes (they are reported as open uploads). A write, copy or delete
  whose caller is cancelled (Ctrl-C in a blocking call) stops at its
  worker thread's next look at it: nothing is published (or removed) and
  its temporary file is gone when the cancellation returns, unless its
  rename (or unlink) already ran: then the change is done.
- The crc32c of what aioflux wrote is kept in an extended attribute
  (``user.aioflux.crc32c``) with the size and modification time it belongs
  to, so reads of the whole file are checked as on GCS. A file written by
  anything else (or on a filesystem without user xattrs) has no crc32c:
  its length is still checked.
- ``generation`` is the file's modification time in nanoseconds (one at or
  before the epoch maps to ``2**63 - 1 + mtime``: 0 means "no version"): it
  changes on every write (stepped past the replaced file's, by whole seconds
  where the filesystem keeps no finer times), ``if_generation_match``
  compares it (``0``: the file must not exist, enforced atomically with a
  hard link), and ``generation=`` on a read or delete pins it. A check
  against a nonzero generation and the rename or unlink that follows are
  made one step by an ``flock`` on the file being replaced, which every
  aioflux write and delete takes (on a filesystem without locks they stay
  two steps). A whole read is checked
  against the recorded crc32c, and any read against the file's size and
  modification time before and after: a file rewritten in place while it
  is read is ``ChecksumMismatch``, never a mix of old and new bytes.
- Listings are sorted by name and paginated like the object stores;
  directories are not objects. A write marks the directories it creates
  (``user.aioflux.dir``), and a delete removes those it leaves empty, so
  none linger; a directory the user made is never removed. A file and a
  directory cannot share a path (GCS objects ``a`` and ``a/b`` can): such a
  write is ``Conflict``.

Filesystem calls block, so they run in the store's worker threads, at most
``config.max_concurrency`` (and 32) at once; that blocking work is in ``_files.py``
(a file as an object, reads), ``_listing.py`` and ``_writes.py`` (writes,
copies, deletes), the writer engine's streaming upload in ``_upload.py``.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import itertools
import os
import threading
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .._core.checks.arguments import (
    check_instance,
    list_args,
)
from .._core.concurrency.share import pool_threads
from .._core.concurrency.window import gather_bounded
from .._core.errors import InvalidArgument, NotFound, StorageError
from .._core.memory.columns import ListedColumns
from .._core.metrics import Attempt, RequestStats
from .._core.records.types import ListPage, MultipartUploadInfo, ObjectInfo
from .._core.records.urls import format_url
from .._core.settings.config import ClientConfig
from .._core.storage.protocol import Fetched, StoreFeatures, arguments_state, from_arguments
from .._engines.store_stream import StreamingStore
from . import _files, _listing, _writes
from ._files import TEMP_MARK
from ._held import HeldFiles
from ._inline import Placement, WouldWait
from ._paths import check_name, check_prefix, path_of, paths_of
from ._upload import LocalUpload

__all__ = ["FEATURES", "MAX_THREADS", "LocalStore"]

T = TypeVar("T")

# A listing applies end_offset itself; a file takes any number of parts
# (GCS's 10,000 would cap a file written in 1 MiB parts at 10 GB). Every
# listing walks the prefix's whole tree, wherever it starts (names are
# sorted only once all are found): split ranges would each walk it again
# from their cursor, so the parallel listers keep to one.
FEATURES = StoreFeatures(scheme="file", end_offset=True, max_parts=2**62, start_offset=False,
                         local_files=True)
# Filesystem calls wait on a disk or an NFS/Lustre server, so the store
# has threads of its own: the loop's default executor has min(32, cpus + 4)
# (6 on 2 cores), which would cap the reads in flight at 6 and make DNS
# lookups of the GCS client queue behind them. At most this many, and no
# more than config.max_concurrency.
MAX_THREADS = 32
# Files a thread stats at once while a listing page is stat-ed, where a
# stat waits (a network filesystem: a round trip each, so the threads
# overlap them). On a local disk each hand-over to a thread only costs: every
# stat and xattr call gives the GIL up and takes it back against the others
# (1e5 files on 2 cores: a page in 8 pieces 3.3 s of CPU, in one 2.2 s).
_STAT_PIECE = 125
# A page's stats that took longer than this a file waited on something (a
# local stat and xattr read take 5-10 us): the next page is split.
_WAITING_STAT = 100e-6
# Files a page of ``list_columns`` holds: the fewer pages, the fewer hand-overs
# to a thread and back (two a page); its columns are a few hundred KiB.
_COLUMN_PAGE = 4096


class LocalStore(StreamingStore):
    """The local filesystem as an ``ObjectStore``.

    Args:
        config: settings (``max_concurrency`` bounds the worker threads,
            ``verify_crc32c`` the read checks).

    Raises:
        InvalidArgument: ``config`` is not a ClientConfig.
    """

    _kind = "the filesystem"
    features = FEATURES
    __getstate__ = arguments_state
    __setstate__ = from_arguments

    def __init__(self, config: ClientConfig | None = None) -> None:
        check_instance("LocalStore", "config", config, ClientConfig, optional=True)
        self.config = config or ClientConfig()
        self._arguments = {"config": self.config}
        # One limiter per event loop, forgotten with the loop.
        self._limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                                asyncio.Semaphore] = weakref.WeakKeyDictionary()
        self._threads: tuple[int, ThreadPoolExecutor] | None = None
        self._stats = RequestStats()
        self._stats_wait = False  # the last page's stats waited (see _WAITING_STAT)
        self._placement = Placement()
        #: Reads tried in the calling thread that went to a thread (their
        #: bytes not in the page cache, or long).
        self.waits = 0

    def __repr__(self) -> str:
        return "LocalStore()"

    @property
    def stats(self) -> RequestStats:
        """What this store's filesystem calls did: counts, failures, bytes
        read, and latency per operation (``stats.summary()``)."""
        return self._stats

    async def aclose(self) -> None:
        """Nothing stays open between calls; forget this loop's limiter."""
        self._limits.pop(asyncio.get_running_loop(), None)

    async def _run(self, op: str, bucket: str, name: str, work: Callable[[], T],
                   received: Callable[[T], int] | None = None, *,
                   stop: threading.Event | None = None) -> T:
        """Run blocking filesystem ``work`` in a thread, errors mapped; its
        latency and outcome (``received(result)`` bytes read) go to
        ``stats``. ``stop`` is set if the caller is cancelled: ``work``
        then gives up at its next look at it (see ``_writes.Stopped``)."""
        loop = asyncio.get_running_loop()
        limit = self._limits.get(loop)
        if limit is None:
            limit = self._limits[loop] = asyncio.Semaphore(self.config.max_concurrency)
        async with limit:
            stats = self.stats
            stats.requests += 1
            started = time.perf_counter()
            future = loop.run_in_executor(self._executor(), work)
            try:
                result = await asyncio.shield(future)
            except asyncio.CancelledError:
                if stop is not None:
                    stop.set()
                # A thread cannot be stopped: let it finish (or give up, told
                # by ``stop``) before the caller goes on, so nothing it does (a
                # temporary file it creates, a write into one, a rename)
                # outlives the cancellation or an abort that follows.
                await asyncio.wait([future])
                if not future.cancelled():
                    future.exception()  # seen: no "exception never retrieved" log
                raise
            except Exception as exc:
                failure = self._failed(exc, op, bucket, name, started)
                if failure is exc:
                    raise
                raise failure from exc
            count = received(result) if received is not None else \
                result.count if isinstance(result, Fetched) else 0
            stats.observe(Attempt(op, "", time.perf_counter() - started, "", count))
            return result

    def _failed(self, exc: Exception, op: str, bucket: str, name: str,
                started: float) -> Exception:
        """The error ``exc`` stands for (an ``OSError`` mapped), counted."""
        failure = exc if isinstance(exc, StorageError) or not isinstance(
            exc, OSError) else _files.mapped(exc, op, bucket, name)
        self.stats.failures += 1
        self.stats.observe(Attempt(op, "", time.perf_counter() - started,
                                   type(failure).__name__))
        return failure

    def _here(self, bucket: str, name: str, work: Callable[[tuple[str, str, int]], T],
              received: Callable[[T], int]) -> T | None:
        """``work(here)`` done in the calling thread (see ``_inline.py``),
        checked as in a thread, or None where it could wait: then it is to
        be done in a thread."""
        path = path_of(bucket, name, op="read")
        kind, device = self._placement.of(path)
        if kind == "thread":
            return None
        return self._read_held(bucket, name, lambda: work((path, kind, device)), received)

    def _read_held(self, bucket: str, name: str, work: Callable[[], T],
                   received: Callable[[T], int]) -> T | None:
        """``work()``, a read in the calling thread of a file already found
        (``_here``, ``HeldFiles``), counted and its errors mapped; None where
        it could wait."""
        stats = self.stats
        started = time.perf_counter()
        try:
            result = work()
        except WouldWait:
            self.waits += 1
            return None
        except Exception as exc:
            stats.requests += 1
            failure = self._failed(exc, "read", bucket, name, started)
            if failure is exc:
                raise
            raise failure from exc
        stats.requests += 1
        # No Attempt built where no observer takes it (see observe_many).
        stats.observe_many("read", (time.perf_counter() - started,), (received(result),))
        return result

    def _read_here(self, bucket: str, name: str, start: int, end: int | None,
                   into: memoryview | None, generation: int | None, size: int | None,
                   crc: int | None, want_crc: bool) -> Fetched | None:
        verify = self.config.verify_crc32c
        return self._here(bucket, name, lambda here: _files.read_file(
            bucket, name, start, end, into, generation, size, crc, verify, want_crc, here),
            _counted)

    def _executor(self) -> ThreadPoolExecutor:
        """This process's worker threads (a forked child makes its own: the
        parent's threads do not exist there)."""
        threads = self._threads
        if threads is None or threads[0] != os.getpid():
            # A DataLoader worker's share of them (see _core/concurrency/share.py).
            workers = pool_threads(min(self.config.max_concurrency, MAX_THREADS))
            threads = self._threads = (os.getpid(), ThreadPoolExecutor(
                workers, thread_name_prefix="aioflux-local"))
        return threads[1]

    # -- metadata -------------------------------------------------------------

    def _check_object(self, op: str, bucket: str, name: str, *, bucket_arg: str = "bucket",
                      name_arg: str = "name") -> None:
        # A plain relative path below the bucket: no "..", ".", "//" or
        # absolute names (``_paths.py``).
        check_name(op, bucket, name, name_arg=name_arg)

    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        return await self._run("stat", bucket, name, lambda: _files.file_info(bucket, name))

    # -- listing --------------------------------------------------------------

    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None,
               page_size: int, fields: str | None) -> AsyncIterator[ListPage]:
        check_prefix("list", bucket, prefix)  # at once, before any walk
        return self._walk_pages(bucket, prefix, delimiter, start_offset, end_offset,
                                max(1, page_size))

    async def _walk_pages(self, bucket: str, prefix: str, delimiter: str | None,
                          start_offset: str | None, end_offset: str | None,
                          page_size: int) -> AsyncIterator[ListPage]:
        if delimiter is None:
            # Without folders to group, the walk goes on as pages are taken:
            # one page of names found and stat-ed at a time.
            walked = 0
            async for files, more in self._walked(bucket, prefix, start_offset, end_offset,
                                                  page_size):
                walked += page_size
                # A token of its own for each page, as the scan's (the names
                # before the next page): one repeated reads as a listing that
                # does not move forward (``_core/checks/pages.py``).
                yield ListPage(objects=_listing.objects_of(bucket, files), prefixes=[],
                               next_page_token=str(walked) if more else None)
            return
        found, prefixes = await self._run(
            "list", bucket, prefix,
            lambda: _listing.scan(bucket, prefix, delimiter, start_offset, end_offset))
        # One walk finds the names; each page stats only its own files, so a
        # lister that stops early (the parallel listers narrow their ranges)
        # pays for the pages it took. Prefixes come on the first page, each once.
        for start in range(0, max(len(found), 1), page_size):
            files = await self._stat_page(bucket, prefix, found[start:start + page_size])
            last = start + page_size >= len(found)
            yield ListPage(objects=_listing.objects_of(bucket, files),
                           prefixes=prefixes if start == 0 else [],
                           next_page_token=None if last else str(start + page_size))

    def list_columns(self, bucket: str, prefix: str
                     ) -> AsyncGenerator[ListedColumns, None]:
        """The files under ``prefix`` as ``list`` names them, in name order, a
        page at a time as an index's columns (``ListsColumns``): no
        ``ObjectInfo`` a file, nor its time written out: what a file costs is
        then mostly its stat and xattr calls.

        Args:
            bucket: the first directory.
            prefix: only names starting with this.

        Returns:
            The pages (an empty folder: none).

        Raises:
            InvalidURL: a bucket or prefix no path can be (at the call).
            NotFound: no such bucket directory.
        """
        list_args("list", bucket, prefix, delimiter=None, start_offset=None, end_offset=None,
                  page_size=_COLUMN_PAGE, scheme="file")
        check_prefix("list", bucket, prefix)
        return self._column_pages(bucket, prefix)

    async def _column_pages(self, bucket: str, prefix: str
                            ) -> AsyncGenerator[ListedColumns, None]:
        async for files, _ in self._walked(bucket, prefix, None, None, _COLUMN_PAGE):
            if files.names:
                yield _listing.columns_of(bucket, files)

    async def _walked(self, bucket: str, prefix: str, start_offset: str | None,
                      end_offset: str | None,
                      page_size: int) -> AsyncIterator[tuple[_listing.Stated, bool]]:
        """The walk's files a page at a time, stat-ed, and whether more follow."""
        walk = await self._run("list", bucket, prefix, lambda: _Walk(
            _listing.walk(bucket, prefix, start_offset, end_offset)))
        while True:
            names, more = await self._run("list", bucket, prefix, functools.partial(
                walk.names, page_size))
            yield await self._stat_page(bucket, prefix, names), more
            if not more:
                return

    async def _stat_page(self, bucket: str, prefix: str,
                         files: builtins.list[tuple[str, str]]) -> _listing.Stated:
        """A page's files stat-ed in the store's threads: :data:`_STAT_PIECE`
        at a time in several at once where the stats of the page before
        waited (a stat and an xattr read are each a round trip to an NFS or
        Lustre server), else in one (a local disk's take microseconds)."""
        step = _STAT_PIECE if self._stats_wait else max(1, len(files))
        pieces = [files[at:at + step] for at in range(0, len(files), step)]
        started = time.perf_counter()
        stated = await gather_bounded(
            self._run("list", bucket, prefix, functools.partial(_listing.stat_files, piece))
            for piece in pieces)
        if len(files) >= _STAT_PIECE:  # a short page measures the hand-over more than the stats
            took = (time.perf_counter() - started) * len(pieces) / len(files)
            self._stats_wait = took > _WAITING_STAT
        return _listing.stated(stated) if stated else _listing.Stated([], [], [], [])

    # -- reads ----------------------------------------------------------------

    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        # fetch is public: its names are checked too (path_of)
        here = self._read_here(bucket, name, start, end, into, generation, size, crc, want_crc)
        if here is not None:
            return here
        verify = self.config.verify_crc32c
        return await self._run("read", bucket, name, lambda: _files.read_file(
            bucket, name, start, end, into, generation, size, crc, verify, want_crc))

    async def read_ranges(self, bucket: str, name: str, ranges: Sequence[tuple[int, int]], *,
                          generation: int | None = None) -> list[bytes]:
        """Several ranges of one file, read in one hand-off to a file thread.

        Args:
            bucket: the folder.
            name: the file.
            ranges: ``(start, end)`` byte ranges.
            generation: the version the file must be at.

        Returns:
            Each range's bytes, in order; raises as ``fetch`` does.
        """
        spans = [(int(start), int(end)) for start, end in ranges]
        got = self._here(bucket, name, lambda here: _files.read_ranges(
            bucket, name, spans, generation, here), _total)
        if got is not None:
            return got
        return await self._run("read", bucket, name, lambda: _files.read_ranges(
            bucket, name, spans, generation), _total)

    def _held_files(self) -> HeldFiles:
        """Files one reader keeps open for its reads in its thread (``_held.py``)."""
        return HeldFiles(self)

    def _reads_here(self, bucket: str, name: str) -> bool:
        """Whether :meth:`_read_small_many` reads this file (its filesystem
        is memory or a local disk's), rather than always answering None (NFS,
        FUSE...): ``ReadsHere``.

        Raises:
            InvalidURL: not a name of the store.
        """
        return self._placement.of(path_of(bucket, name, op="read"))[0] != "thread"

    def _read_small_many(self, bucket: str, names: Sequence[str],
                         listed: Sequence[tuple[int, int | None, int | None]] | None = None
                         ) -> list[bytes | None]:
        """Listed files, each read whole in the calling thread as the
        download planner reads a small object directly: what is there now
        (its length, modification and the crc32c aioflux recorded checked),
        not pinned to the listing. None for a file whose read could wait: a
        network filesystem, bytes not in the page cache, a file over
        ``_inline.INLINE_MAX`` bytes; download that one (``ReadsHere``). A
        batch is counted in ``stats`` at its end.

        ``listed``: each file's ``(size, generation, crc32c)`` as listed. A
        file still of that size and time is the content the listing read
        the record of (or found none for): checked against that, with no
        attribute read (a syscall a file, ~0.7 us of a 16 KiB file's 12),
        and read as listed, one ``fstat`` fewer (``_files._read_as_listed``).

        Raises:
            StorageError: as ``read`` raises, for the first file that fails.
        """
        verify = self.config.verify_crc32c
        placement = self._placement
        clock = time.perf_counter
        out: list[bytes | None] = []
        seconds: list[float] = []
        sizes: list[int] = []
        paths = paths_of(bucket, names, op="read")
        started = clock()  # each read's start is the one before's end: one clock a file
        try:
            for k, (name, path) in enumerate(zip(names, paths, strict=True)):
                kind, device = placement.of(path)
                data = None
                if kind != "thread":
                    try:
                        data = _files.read_small_here(bucket, name, path, kind, device, verify,
                                                      None if listed is None else listed[k])
                    except WouldWait:
                        self.waits += 1
                    except Exception as exc:
                        self.stats.requests += 1
                        failure = self._failed(exc, "read", bucket, name, started)
                        if failure is exc:
                            raise
                        raise failure from exc
                    else:
                        ended = clock()
                        seconds.append(ended - started)
                        sizes.append(len(data))
                        started = ended
                out.append(data)
                if data is None:
                    started = clock()  # left to a download: the next read starts now
        finally:
            self.stats.requests += len(seconds)
            self.stats.observe_many("read", seconds, sizes)
        return out

    # -- writes ---------------------------------------------------------------

    async def _write(self, bucket: str, name: str, data: memoryview, content_type: str,
                     if_generation_match: int | None, metadata: dict[str, str] | None,
                     resumable: bool | None) -> ObjectInfo:
        # Atomic: a temporary file, checked, fsynced and renamed. Files keep
        # no content type; a write is one step, whatever ``resumable``.
        _check_writable_name("write", bucket, name)
        if metadata:
            raise InvalidArgument(f"write {_url(bucket, name)}: files have no custom metadata")
        stop = threading.Event()
        return await self._run("write", bucket, name, lambda: _writes.write_whole(
            bucket, name, data, if_generation_match, stop), stop=stop)

    def _start_upload(self, bucket: str, name: str, content_type: str, part_size: int,
                      metadata: dict[str, str] | None,
                      if_generation_match: int | None) -> LocalUpload:
        # A temporary file, renamed on finish; files keep no content type
        # and no metadata.
        _check_writable_name("write", bucket, name)
        if metadata:
            raise InvalidArgument(f"write {_url(bucket, name)}: files have no custom metadata")
        return LocalUpload(self, bucket, name, part_size, if_generation_match)

    async def _delete(self, bucket: str, name: str, generation: int | None,
                      if_generation_match: int | None, missing_ok: bool) -> None:
        # The file and the directories it leaves empty, up to the bucket; a
        # symbolic link is removed itself, never what it points to (as rm).
        # Cancelled once its unlink ran, the delete is done.
        stop = threading.Event()
        try:
            await self._run("delete", bucket, name, lambda: _writes.delete_file(
                bucket, name, generation, if_generation_match, stop), stop=stop)
        except NotFound:
            if not missing_ok:
                raise

    async def _copy(self, bucket: str, name: str, dest_bucket: str,
                    dest_name: str) -> ObjectInfo:
        # Published atomically, like a write.
        _check_writable_name("copy", dest_bucket, dest_name)
        stop = threading.Event()
        return await self._run("copy", bucket, name, lambda: _writes.copy_file(
            bucket, name, dest_bucket, dest_name, stop), stop=stop)

    # -- open uploads (temporary files of writers that did not finish) --------

    async def _list_uploads(self, bucket: str,
                            prefix: str) -> builtins.list[MultipartUploadInfo]:
        # Temporary files left by writers that did not finish (killed, or
        # still running); ``upload_id`` is the file's name, ``initiated``
        # its modification time.
        check_prefix("list uploads", bucket, prefix)
        return await self._run("list uploads", bucket, prefix,
                               lambda: _listing.temporaries(bucket, prefix))

    async def _abort_upload(self, bucket: str, name: str, upload_id: str) -> None:
        # Removes a temporary file ``list_multipart_uploads`` listed.
        directory, _, base = name.rpartition("/")
        if "/" in upload_id or not upload_id.startswith(f".{base}{TEMP_MARK}"):
            raise InvalidArgument(f"abort {_url(bucket, name)}: {upload_id!r} is not one of "
                                  "its temporary files")
        path = _files.path_of(bucket, f"{directory}/{upload_id}" if directory else upload_id)
        await self._run("abort upload", bucket, name, lambda: _writes.unlink_quietly(path))


def _counted(fetched: Fetched) -> int:
    return fetched.count


def _total(pieces: list[bytes]) -> int:
    return sum(map(len, pieces))


def _url(bucket: str, name: str) -> str:
    return format_url("file", bucket, name)


def _check_writable_name(op: str, bucket: str, name: str) -> None:
    # Such a file would be taken for a temporary one: hidden from listings,
    # reported as an open upload, and removed by ``aioflux clean``.
    if TEMP_MARK in name.rpartition("/")[2]:
        raise InvalidArgument(f"{op} {_url(bucket, name)}: names containing {TEMP_MARK!r} are "
                              "reserved for temporary files of writes in progress")


class _Walk:
    """A walk's names (:func:`_listing.walk`), taken a page at a time; one
    name is looked ahead, to tell whether more follow. Built and advanced
    in the store's threads: the walk reads directories as it goes."""

    def __init__(self, names: Iterator[tuple[str, str]]) -> None:
        self._names = names
        self._ahead = next(names, None)

    def names(self, size: int) -> tuple[list[tuple[str, str]], bool]:
        """The next ``size`` files, not stat-ed yet, and whether more follow."""
        if self._ahead is None:
            return [], False
        chunk = [self._ahead, *itertools.islice(self._names, size - 1)]
        self._ahead = next(self._names, None)
        return chunk, self._ahead is not None
