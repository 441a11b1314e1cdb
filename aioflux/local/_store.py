"""``LocalStore``: objects as files, for NFS/Lustre checkpoints and server-free tests.

``file:///mnt/nfs/run1/step-1/model.pt`` is bucket ``mnt``, object
``nfs/run1/step-1/model.pt``: the path ``/mnt/nfs/run1/step-1/model.pt``.

- Writes are all-or-nothing: the bytes go to a temporary file in the same
  directory (``.<name>.aioflux-tmp-<id>``), are read back and checked
  against their crc32c, fsynced, and renamed over the target (the directory
  is fsynced too). A failed or killed writer leaves only its temporary file,
  which listings skip and ``aioflux clean`` removes (they are reported as
  open uploads).
- The crc32c of what aioflux wrote is kept in an extended attribute
  (``user.aioflux.crc32c``) with the size and modification time it belongs
  to, so reads of the whole file are checked as on GCS. A file written by
  anything else (or on a filesystem without user xattrs) has no crc32c:
  its length is still checked.
- ``generation`` is the file's modification time in nanoseconds: it changes
  on every write, ``if_generation_match`` compares it (``0``: the file must
  not exist, enforced atomically with a hard link), and ``generation=`` on
  a read or delete pins it. A check against a nonzero generation and the
  rename that follows are two steps: a concurrent writer of the same file
  may slip between them (as with any POSIX filesystem).
- Listings are sorted by name and paginated like the object stores;
  directories are not objects, and a delete removes the directories it
  leaves empty (up to the bucket directory), so none linger.

Filesystem calls block, so they run in worker threads, at most
``config.max_concurrency`` at once.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import os
import stat as stat_mod
import struct
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar, overload

from .._core.config import ClientConfig
from .._core.crc import Crc32c, crc32c, encode_crc32c
from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    StorageError,
    describe,
)
from .._core.store import Buffer, Fetched, SourceSpec, StoreFeatures
from .._core.types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from .._core.validate import (
    check_instance,
    delete_args,
    list_args,
    read_args,
    write_args,
)
from .._engines.iterables import StreamItem, stream, stream_args

__all__ = ["FEATURES", "LocalStore"]

T = TypeVar("T")

FEATURES = StoreFeatures(scheme="file")
# Temporary files of writes in progress: skipped by listings, removed by
# ``aioflux clean`` once old enough.
TEMP_MARK = ".aioflux-tmp-"
_XATTR = "user.aioflux.crc32c"
# size (8 bytes), mtime_ns (8 bytes), crc32c (4 bytes), big-endian.
_XATTR_FORMAT = ">QQI"
_READ_BLOCK = 8 * 1024 * 1024


class LocalStore:
    """The local filesystem as an :class:`~aioflux._core.store.ObjectStore`.

    Args:
        config: settings (``max_concurrency`` bounds the worker threads,
            ``verify_crc32c`` the read checks).

    Raises:
        InvalidArgument: ``config`` is not a ClientConfig.
    """

    def __init__(self, config: ClientConfig | None = None) -> None:
        check_instance("LocalStore", "config", config, ClientConfig, optional=True)
        self.config = config or ClientConfig()
        self._limits: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}

    def __repr__(self) -> str:
        return "LocalStore()"

    @property
    def features(self) -> StoreFeatures:
        """Files offer no compose, no multipart primitives and no server."""
        return FEATURES

    async def __aenter__(self) -> LocalStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Nothing stays open between calls; forget this loop's limiter."""
        self._limits.pop(asyncio.get_running_loop(), None)

    async def _run(self, op: str, bucket: str, name: str, work: Callable[[], T]) -> T:
        """Run blocking filesystem ``work`` in a thread, errors mapped."""
        loop = asyncio.get_running_loop()
        limit = self._limits.get(loop)
        if limit is None:
            limit = self._limits[loop] = asyncio.Semaphore(self.config.max_concurrency)
        async with limit:
            job = asyncio.ensure_future(asyncio.to_thread(work))
            try:
                return await asyncio.shield(job)
            except asyncio.CancelledError:
                # A thread cannot be stopped: wait for it, so that nothing it
                # does (a temporary file created, a pwrite into a descriptor
                # an abort is about to close) outlives the cancelled caller.
                while not job.done():
                    try:
                        await asyncio.wait({job})
                    except asyncio.CancelledError:
                        continue
                raise
            except StorageError:
                raise
            except OSError as exc:
                raise _mapped(exc, op, bucket, name) from exc

    # -- metadata -------------------------------------------------------------

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        """Metadata of one file.

        Args:
            bucket: the first directory of the path.
            name: the rest of the path.

        Returns:
            ObjectInfo (crc32c when aioflux wrote the file).

        Raises:
            NotFound: no such file (a directory is not an object).
        """
        read_args(bucket, name, 0, None, None, None, scheme="file")
        return await self._run("stat", bucket, name, lambda: _info(bucket, name))

    async def exists(self, bucket: str, name: str) -> bool:
        """Whether the file exists.

        Args:
            bucket: the first directory of the path.
            name: the rest of the path.

        Returns:
            True or False.
        """
        try:
            await self.stat(bucket, name)
        except NotFound:
            return False
        return True

    # -- listing --------------------------------------------------------------

    def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
             start_offset: str | None = None, end_offset: str | None = None,
             page_size: int = 1000) -> AsyncIterator[ListPage]:
        """Files under ``prefix``, sorted by name, page by page.

        Args:
            bucket: the first directory of the path.
            prefix: only names starting with this.
            delimiter: group names by this (``"/"``) into ``prefixes``.
            start_offset: first name (inclusive).
            end_offset: end (exclusive).
            page_size: items per page.

        Returns:
            An async iterator of ListPage.

        Raises:
            InvalidURL: a bad bucket (at once).
            NotFound: no such bucket directory (while iterating).
        """
        list_args("list", bucket, prefix, delimiter=delimiter, start_offset=start_offset,
                  end_offset=end_offset, page_size=page_size, scheme="file")
        return self._pages(bucket, prefix, delimiter, start_offset, end_offset,
                           max(1, page_size))

    async def _pages(self, bucket: str, prefix: str, delimiter: str | None,
                     start_offset: str | None, end_offset: str | None,
                     page_size: int) -> AsyncIterator[ListPage]:
        objects, prefixes = await self._run(
            "list", bucket, prefix,
            lambda: _scan(bucket, prefix, delimiter, start_offset, end_offset))
        # Prefixes are reported on the first page, as a server that groups
        # them would report each once.
        for start in range(0, max(len(objects), 1), page_size):
            last = start + page_size >= len(objects)
            yield ListPage(objects=objects[start:start + page_size],
                           prefixes=prefixes if start == 0 else [],
                           next_page_token=None if last else str(start + page_size))

    async def list_objects(self, bucket: str, prefix: str = "", *,
                           start_offset: str | None = None,
                           end_offset: str | None = None) -> AsyncIterator[ObjectInfo]:
        """Every file under ``prefix``, sorted by name.

        Args:
            bucket: the first directory of the path.
            prefix: only names starting with this.
            start_offset: first name (inclusive).
            end_offset: end (exclusive).

        Yields:
            ObjectInfo.
        """
        async for page in self.list(bucket, prefix, start_offset=start_offset,
                                    end_offset=end_offset):
            for obj in page.objects:
                yield obj

    def stream(self, bucket: str, prefix: str = "", *, concurrency: int | None = None,
               ordered: bool = False,
               list_concurrency: int | None = None) -> AsyncIterator[StreamItem]:
        """List ``prefix`` and read each file as it is listed (see
        :meth:`aioflux.AsyncClient.stream`).

        Args:
            bucket: the first directory, or a ``file://`` URL.
            prefix: only names starting with this.
            concurrency: reads in flight (``None``: 64).
            ordered: yield in listing order; else as reads complete.
            list_concurrency: parallel listers (``None``: 16).

        Returns:
            An async iterator of StreamItem.
        """
        stream_args("stream", bucket, prefix, concurrency, ordered, list_concurrency, None)
        return stream(self, bucket, prefix, concurrency=concurrency, ordered=ordered,
                      list_concurrency=list_concurrency)

    # -- reads ----------------------------------------------------------------

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: None = ..., generation: int | None = ...) -> bytes: ...

    @overload
    async def read(self, bucket: str, name: str, *, start: int = ..., end: int | None = ...,
                   into: Buffer, generation: int | None = ...) -> int: ...

    async def read(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                   into: Buffer | None = None, generation: int | None = None) -> bytes | int:
        """Read a file, or its bytes ``[start, end)``.

        Args:
            bucket: the first directory of the path.
            name: the rest of the path.
            start: first byte.
            end: end (exclusive); ``None`` reads to the end.
            into: write the bytes here instead of returning them.
            generation: only this version (modification time in ns).

        Returns:
            The bytes, or their count when ``into`` is given.

        Raises:
            NotFound: no such file (or it changed since ``generation``).
            InvalidArgument: ``into`` too small, or ``start`` past the end.
            ChecksumMismatch: the file's bytes differ from the crc32c
                recorded when aioflux wrote it.
        """
        read_args(bucket, name, start, end, into, generation, scheme="file")
        if end is not None and end == start:
            return b"" if into is None else 0
        dest = None if into is None else memoryview(into).cast("B")
        fetched = await self.fetch(bucket, name, start=start, end=end, into=dest,
                                   generation=generation)
        return fetched.count if fetched.data is None else fetched.data

    async def fetch(self, bucket: str, name: str, *, start: int = 0, end: int | None = None,
                    into: memoryview | None = None, generation: int | None = None,
                    size: int | None = None, crc: int | None = None,
                    want_crc: bool = False) -> Fetched:
        """The engines' checked read (see :meth:`ObjectStore.fetch`).

        Args:
            bucket: the first directory of the path.
            name: the rest of the path.
            start: first byte.
            end: end (exclusive), or None.
            into: destination buffer, or None.
            generation: only this version.
            size: the size the caller expects (from a listing).
            crc: the crc32c the caller expects.
            want_crc: also return the crc32c of the bytes read.

        Returns:
            Fetched.
        """
        verify = self.config.verify_crc32c
        return await self._run("read", bucket, name, lambda: _read(
            bucket, name, start, end, into, generation, size, crc, verify, want_crc))

    # -- writes ---------------------------------------------------------------

    async def write(self, bucket: str, name: str, data: bytes | bytearray | memoryview, *,
                    content_type: str = "application/octet-stream",
                    if_generation_match: int | None = None,
                    metadata: dict[str, str] | None = None,
                    resumable: bool | None = None) -> ObjectInfo:
        """Write a file atomically (temporary file, check, fsync, rename).

        Args:
            bucket: the first directory of the path.
            name: the rest of the path.
            data: the content.
            content_type: not stored (files have none).
            if_generation_match: precondition; 0 means "must not exist yet".
            metadata: not supported (files have none): must be empty.
            resumable: ignored (a file write is one step).

        Returns:
            ObjectInfo of the new file.

        Raises:
            PreconditionFailed: ``if_generation_match`` did not hold.
            InvalidArgument: ``metadata`` was given.
            StorageError: the write failed; nothing was published.
        """
        write_args(bucket, name, data, content_type, if_generation_match, metadata, resumable,
                   scheme="file")
        if metadata:
            raise InvalidArgument(f"write {_url(bucket, name)}: files have no custom metadata")
        view = memoryview(data).cast("B")
        return await self._run("write", bucket, name, lambda: _write_whole(
            bucket, name, view, if_generation_match))

    def start_upload(self, bucket: str, name: str, *,
                     content_type: str = "application/octet-stream",
                     part_size: int = 8 * 1024 * 1024) -> LocalUpload:
        """A streaming upload into a temporary file, renamed on finish.

        Args:
            bucket: the first directory of the path.
            name: the rest of the path.
            content_type: not stored.
            part_size: size of every part but the last.

        Returns:
            The upload (nothing is created before its first part).
        """
        return LocalUpload(self, bucket, name, part_size)

    async def delete(self, bucket: str, name: str, *, generation: int | None = None,
                     if_generation_match: int | None = None, missing_ok: bool = False) -> None:
        """Delete a file (and the directories it leaves empty, up to the bucket).

        Args:
            bucket: the first directory of the path.
            name: the rest of the path.
            generation: delete only this version.
            if_generation_match: precondition on the version.
            missing_ok: a missing file is success.

        Raises:
            NotFound: no such file (unless ``missing_ok``), or another version.
            PreconditionFailed: ``if_generation_match`` did not hold.
        """
        delete_args(bucket, name, generation, if_generation_match, missing_ok, scheme="file")
        try:
            await self._run("delete", bucket, name, lambda: _delete(
                bucket, name, generation, if_generation_match))
        except NotFound:
            if not missing_ok:
                raise

    async def copy(self, bucket: str, name: str, dest_bucket: str,
                   dest_name: str) -> ObjectInfo:
        """Copy a file (atomically published, like a write).

        Args:
            bucket: source's first directory.
            name: source path below it.
            dest_bucket: destination's first directory.
            dest_name: destination path below it.

        Returns:
            ObjectInfo of the copy.
        """
        read_args(bucket, name, 0, None, None, None, scheme="file")
        read_args(dest_bucket, dest_name, 0, None, None, None, scheme="file")
        return await self._run("copy", bucket, name, lambda: _copy(
            bucket, name, dest_bucket, dest_name))

    async def compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec], *,
                      if_generation_match: int | None = None,
                      content_type: str = "application/octet-stream") -> ObjectInfo:
        """Not offered by files (``features.compose`` is 0).

        Raises:
            InvalidRequest: always.
        """
        raise InvalidRequest(f"compose {_url(bucket, destination)}: the filesystem has no "
                             "server-side compose", operation="compose", bucket=bucket,
                             name=destination)

    # -- open uploads (temporary files of writers that did not finish) --------

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        """Temporary files left by writers that did not finish (killed, or
        still running), as open uploads; ``upload_id`` is the file's name.

        Args:
            bucket: the first directory of the path.
            prefix: only targets whose names start with this.

        Returns:
            MultipartUploadInfo per temporary file (``initiated``: its
            modification time, RFC 3339).
        """
        list_args("list uploads", bucket, prefix, scheme="file")
        return await self._run("list uploads", bucket, prefix,
                               lambda: _temporaries(bucket, prefix))

    async def abort_multipart(self, bucket: str, name: str, upload_id: str) -> None:
        """Remove a temporary file listed by :meth:`list_multipart_uploads`.

        Args:
            bucket: the first directory of the path.
            name: the target's path below it.
            upload_id: the temporary file's name.

        Raises:
            InvalidArgument: ``upload_id`` is not a temporary file of ``name``.
        """
        directory, _, base = name.rpartition("/")
        if not (upload_id.startswith(f".{base}{TEMP_MARK}") and "/" not in upload_id):
            raise InvalidArgument(f"abort {_url(bucket, name)}: {upload_id!r} is not one of "
                                  "its temporary files")
        path = _path(bucket, f"{directory}/{upload_id}" if directory else upload_id)
        await self._run("abort upload", bucket, name, lambda: _unlink_quietly(path))

    async def list_parts(self, bucket: str, name: str, upload_id: str) -> builtins.list[PartInfo]:
        """Not offered by files (a temporary file has no parts).

        Raises:
            InvalidRequest: always.
        """
        raise InvalidRequest(f"list parts {_url(bucket, name)}: files have no upload parts",
                             operation="list parts", bucket=bucket, name=name)


class LocalUpload:
    """A streaming write into a temporary file; parts land at their offsets
    (``(number - 1) * part_size``), so they may arrive in any order."""

    mode = "file"

    def __init__(self, store: LocalStore, bucket: str, name: str, part_size: int) -> None:
        self._store = store
        self.bucket = bucket
        self.name = name
        self.part_size = part_size
        self._fd: int | None = None
        self._temp: str | None = None
        self._opening: asyncio.Lock | None = None

    async def _open(self) -> int:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._fd is not None:
                return self._fd

            def open_temp() -> int:
                # Recorded by the thread itself: an abort after a cancelled
                # open still finds the file to remove.
                self._temp, self._fd = _open_temp(self.bucket, self.name)
                return self._fd

            return await self._store._run("write", self.bucket, self.name, open_temp)

    async def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Write part ``number`` at its offset.

        Args:
            number: 1-based part number.
            data: the part.
            checksum: unused (the whole file is checked on finish).
        """
        fd = await self._open()
        offset = (number - 1) * self.part_size
        await self._store._run("write", self.bucket, self.name,
                               lambda: _pwrite_all(fd, data, offset))

    async def finish(self, last_number: int, tail: memoryview | None, expected: Crc32c,
                     tail_checksum: int | None = None) -> ObjectInfo:
        """Write the tail, check the whole file's crc32c, fsync, rename.

        Args:
            last_number: the tail's part number.
            tail: the last bytes (may be empty).
            expected: crc32c and length of everything written.
            tail_checksum: unused.

        Returns:
            ObjectInfo of the published file.

        Raises:
            ChecksumMismatch: the file read back differs (nothing published).
        """
        fd = await self._open()
        offset = (last_number - 1) * self.part_size
        temp = self._temp
        assert temp is not None

        def publish() -> ObjectInfo:
            if tail is not None and len(tail):
                _pwrite_all(fd, tail, offset)
            os.ftruncate(fd, expected.length)
            return _publish(fd, temp, self.bucket, self.name, expected.length,
                            expected.value, None)

        try:
            info = await self._store._run("write", self.bucket, self.name, publish)
        finally:
            self._fd = None
            os.close(fd)
            _unlink_quietly(temp)  # gone already when published
        return info

    async def abort(self) -> None:
        """Remove the temporary file. Safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        if self._temp is not None:
            _unlink_quietly(self._temp)


# -- blocking helpers (run in worker threads) ---------------------------------


def _path(bucket: str, name: str) -> str:
    return f"/{bucket}/{name}" if name else f"/{bucket}"


def _url(bucket: str, name: str) -> str:
    return f"file:///{bucket}/{name}"


def _mapped(exc: OSError, op: str, bucket: str, name: str) -> StorageError:
    where = describe(op, bucket, name, "file")
    detail = exc.strerror or str(exc)
    kind: type[StorageError]
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
        kind = NotFound
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
    if len(raw) != struct.calcsize(_XATTR_FORMAT):
        return None
    size, mtime_ns, value = struct.unpack(_XATTR_FORMAT, raw)
    # Written by someone else since (same name, other bytes): not ours.
    return value if size == st.st_size and mtime_ns == st.st_mtime_ns else None


def _object(bucket: str, name: str, st: os.stat_result, crc: int | None) -> ObjectInfo:
    return ObjectInfo(bucket, name, st.st_size, st.st_mtime_ns, crc, scheme="file")


def _info(bucket: str, name: str) -> ObjectInfo:
    path = _path(bucket, name)
    st = os.stat(path)
    if not stat_mod.S_ISREG(st.st_mode):
        raise NotFound(f"{describe('stat', bucket, name, 'file')} failed: not a file",
                       operation="stat", bucket=bucket, name=name)
    return _object(bucket, name, st, _recorded_crc(path, st))


def _scan(bucket: str, prefix: str, delimiter: str | None, start_offset: str | None,
          end_offset: str | None) -> tuple[list[ObjectInfo], list[str]]:
    root = _path(bucket, "")
    if not os.path.isdir(root):
        raise NotFound(f"{describe('list', bucket, prefix, 'file')} failed: no such "
                       "directory", operation="list", bucket=bucket, name=prefix)
    # Walk only below the prefix's directory part.
    base = prefix.rpartition("/")[0]
    found: builtins.list[tuple[str, os.DirEntry[str]]] = []
    stack = [base]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(f"{root}/{rel}" if rel else root))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                if name.startswith(prefix) or prefix.startswith(name + "/"):
                    stack.append(name)
            elif (entry.is_file() and name.startswith(prefix) and TEMP_MARK not in entry.name
                  and (start_offset is None or name >= start_offset)
                  and (end_offset is None or name < end_offset)):
                found.append((name, entry))
    found.sort(key=lambda pair: pair[0])
    objects: builtins.list[ObjectInfo] = []
    prefixes: builtins.list[str] = []
    for name, entry in found:
        if delimiter:
            cut = name.find(delimiter, len(prefix))
            if cut >= 0:
                group = name[:cut + len(delimiter)]
                if not prefixes or prefixes[-1] != group:
                    prefixes.append(group)
                continue
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue  # deleted while listing
        objects.append(_object(bucket, name, st, _recorded_crc(entry.path, st)))
    return objects, prefixes


def _read(bucket: str, name: str, start: int, end: int | None, into: memoryview | None,
          generation: int | None, size: int | None, crc: int | None, verify: bool,
          want_crc: bool) -> Fetched:
    where = describe("read", bucket, name, "file")
    # One descriptor for the whole read: a concurrent rename replaces the
    # name, not the content this read sees.
    fd = os.open(_path(bucket, name), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise NotFound(f"{where} failed: not a file", operation="read", bucket=bucket,
                           name=name)
        if generation is not None and st.st_mtime_ns != generation:
            raise NotFound(f"{where} failed: generation {generation} is gone (now "
                           f"{st.st_mtime_ns})", operation="read", bucket=bucket, name=name)
        if size is not None and size != st.st_size:
            raise ChecksumMismatch(f"{where} failed: {st.st_size} bytes, the listing said "
                                   f"{size}", operation="read", bucket=bucket, name=name)
        if start > st.st_size or (start == st.st_size and st.st_size > 0):
            raise InvalidArgument(f"{where}: start {start} is past the end ({st.st_size} "
                                  "bytes)")
        stop = st.st_size if end is None else min(end, st.st_size)
        count = stop - start
        out = bytearray(count) if into is None else into
        if len(out) < count:
            raise InvalidArgument(f"{where}: into holds {len(out)} bytes, {count} needed")
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
        actual = crc32c(view) if want_crc or (verify and whole and known is not None) else None
        if verify and whole and known is not None and actual != known:
            raise ChecksumMismatch(
                f"{where} failed: crc32c {encode_crc32c(actual or 0)} != recorded "
                f"{encode_crc32c(known)}", operation="read", bucket=bucket, name=name)
    finally:
        os.close(fd)
    return Fetched(bytes(out) if into is None else None, count, actual, st.st_size)


def _open_temp(bucket: str, name: str) -> tuple[str, int]:
    path = _path(bucket, name)
    directory, _, base = path.rpartition("/")
    os.makedirs(directory, exist_ok=True)
    temp = f"{directory}/.{base}{TEMP_MARK}{uuid.uuid4().hex[:12]}"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    return temp, os.open(temp, flags, 0o644)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def _publish(fd: int, temp: str, bucket: str, name: str, length: int, expected: int,
             if_generation_match: int | None) -> ObjectInfo:
    """Check the temporary file, fsync it, and move it into place."""
    where = describe("write", bucket, name, "file")
    check = Crc32c()
    block = bytearray(min(_READ_BLOCK, max(length, 1)))
    offset = 0
    while offset < length:
        got = os.preadv(fd, [memoryview(block)[:length - offset]], offset)
        if got == 0:
            break
        check.update(memoryview(block)[:got])
        offset += got
    if check.length != length or check.value != expected:
        raise ChecksumMismatch(
            f"{where} failed: the file holds {check.length} bytes with crc32c "
            f"{encode_crc32c(check.value)}, written were {length} with "
            f"{encode_crc32c(expected)}; nothing was published",
            operation="write", bucket=bucket, name=name)
    os.fsync(fd)
    st = os.fstat(fd)
    try:
        os.setxattr(fd, _XATTR, struct.pack(_XATTR_FORMAT, st.st_size, st.st_mtime_ns,
                                             expected))
    except OSError:
        pass  # no user xattrs here (some tmpfs, old NFS): reads check the length only
    path = _path(bucket, name)
    if if_generation_match == 0:
        try:
            os.link(temp, path)  # atomic "only if absent"
        except FileExistsError:
            raise PreconditionFailed(f"{where} failed: the file exists (if_generation_match"
                                     "=0)", operation="write", bucket=bucket, name=name,
                                     status=412) from None
        os.unlink(temp)
    else:
        if if_generation_match is not None:
            _check_generation("write", bucket, name, path, if_generation_match)
        os.replace(temp, path)
    _fsync_directory(path.rpartition("/")[0])
    return _object(bucket, name, st, expected)


def _check_generation(op: str, bucket: str, name: str, path: str, wanted: int) -> None:
    try:
        current = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        current = 0
    if current != wanted:
        raise PreconditionFailed(f"{describe(op, bucket, name, 'file')} failed: generation "
                                 f"{current}, not {wanted}", operation=op, bucket=bucket,
                                 name=name, status=412)


def _write_whole(bucket: str, name: str, data: memoryview,
                 if_generation_match: int | None) -> ObjectInfo:
    temp, fd = _open_temp(bucket, name)
    try:
        _pwrite_all(fd, data, 0)
        return _publish(fd, temp, bucket, name, len(data), crc32c(data), if_generation_match)
    finally:
        os.close(fd)
        _unlink_quietly(temp)


def _copy(bucket: str, name: str, dest_bucket: str, dest_name: str) -> ObjectInfo:
    source = os.open(_path(bucket, name), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(source)
        temp, fd = _open_temp(dest_bucket, dest_name)
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
            return _publish(fd, temp, dest_bucket, dest_name, offset, check.value, None)
        finally:
            os.close(fd)
            _unlink_quietly(temp)
    finally:
        os.close(source)


def _delete(bucket: str, name: str, generation: int | None,
            if_generation_match: int | None) -> None:
    path = _path(bucket, name)
    st = os.stat(path)
    if not stat_mod.S_ISREG(st.st_mode):
        raise NotFound(f"{describe('delete', bucket, name, 'file')} failed: not a file",
                       operation="delete", bucket=bucket, name=name)
    if generation is not None and st.st_mtime_ns != generation:
        raise NotFound(f"{describe('delete', bucket, name, 'file')} failed: generation "
                       f"{generation} is gone", operation="delete", bucket=bucket, name=name)
    if if_generation_match is not None:
        _check_generation("delete", bucket, name, path, if_generation_match)
    os.unlink(path)
    # Directories are not objects: drop the ones this delete emptied.
    stop = _path(bucket, "")
    directory = path.rpartition("/")[0]
    while directory != stop and directory.startswith(stop + "/"):
        try:
            os.rmdir(directory)
        except OSError:
            break
        directory = directory.rpartition("/")[0]


def _temporaries(bucket: str, prefix: str) -> builtins.list[MultipartUploadInfo]:
    import datetime as _dt

    root = _path(bucket, "")
    found: builtins.list[MultipartUploadInfo] = []
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
                continue
            when = _dt.datetime.fromtimestamp(mtime, _dt.timezone.utc)
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


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
