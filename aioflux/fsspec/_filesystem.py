"""``AiofluxFileSystem``: an ``fsspec.asyn.AsyncFileSystem`` over the storage protocol.

One class serves every store aioflux has (``scheme``: ``gs``, ``s3``,
``file``); its methods are the store's checked reads and all-or-nothing
writes. Sync calls run on aioflux's process-wide portal loop (fsspec's
``self.loop``), so no second loop thread starts, and a process forked
from one that used the filesystem gets its own loop and store (fsspec's
own loop refuses to run after a fork).

The class is fsspec's API; the work behind it lives beside it: entries of
``info``/``ls``/``find`` in ``_entries``, what the store says of paths in
``_listing``, ``cat_ranges`` in ``_ranges``, ``get_file``/``put_file`` in
``_transfers``, and the files ``open`` returns in ``_read_file``,
``_write_file`` and ``_async_file``.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import hashlib
import io
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import fsspec.asyn
import fsspec.compression
import fsspec.core
from fsspec.callbacks import DEFAULT_CALLBACK, Callback

from .._api.open import TextWriter
from .._api.stores import new_store
from .._core.config import ClientConfig
from .._core.errors import InvalidArgument, InvalidRequest, NotFound, PreconditionFailed
from .._core.portal import close_soon, get_portal
from .._core.store import ObjectStore, delete_all
from .._core.validate import Credentials
from .._core.window import LoopSemaphore, gather_bounded
from .._engines.async_writer import AsyncObjectWriter
from .._engines.reader import ObjectReader
from ._async_file import AsyncReadFile, AsyncWriteFile
from ._listing import entry_of, list_folder, list_tree, recent_object
from ._options import settings_of
from ._paths import join, split, strip_protocol
from ._ranges import cat_ranges
from ._read_file import ReadFile
from ._recent import EXPIRY_S, Listings, RecentMetadata
from ._transfers import STREAMING_PUTS, TRANSFER_BLOCKS, get_file, put_file
from ._write_file import CompressedWriteFile, WriteFile

__all__ = ["AiofluxFileSystem", "protocol_class"]

_SCHEMES = ("gs", "s3", "az", "file")
_store_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _store_lock
    _store_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_held(held: list[tuple[int, ObjectStore]]) -> None:
    """Close a collected filesystem's store, if this process built it."""
    pid, store = held[0]
    if pid == os.getpid():
        close_soon(store)


def _strip_local(path: Any) -> Any:
    """``_strip_protocol`` of a file filesystem made on this class."""
    if isinstance(path, list):
        return [_strip_local(p) for p in path]
    return strip_protocol(os.fspath(path), local=True)


class AiofluxFileSystem(fsspec.asyn.AsyncFileSystem):  # type: ignore[misc]
    """fsspec filesystem over aioflux's stores: ``gs``, ``s3`` or ``file``.

    Args:
        scheme: the store (a URL's protocol picks it when fsspec builds the
            filesystem from a URL; default ``gs``, or the protocol
            :func:`~aioflux.fsspec.register` made this class for).
        config: ClientConfig of the store.
        endpoint: API root (``gs``, ``s3``, ``az``); s3fs's and gcsfs's
            ``endpoint_url`` (also in ``client_kwargs``) is taken too.
        credentials: GCS credentials (``gs`` only; gcsfs's ``token="anon"``
            is ``"anonymous"``).
        region: the S3 region (``s3`` only; s3fs's
            ``client_kwargs={"region_name": ...}`` is taken too).
        asynchronous: fsspec's async mode (call the ``_`` coroutines on your loop).
        loop: ignored in sync mode (aioflux's portal loop runs the calls).
        **storage_options: fsspec's own settings (``skip_instance_cache``...),
            among them the metadata cache's: ``use_listings_cache=False``
            turns it off, ``listings_expiry_time`` is how long (seconds) an
            entry answers (default 10; ``None``: until invalidated). Off by
            default on ``file``, as in fsspec's ``LocalFileSystem``. Also
            the billing of requester-pays buckets: ``user_project=`` (the
            project ``gs`` requests bill; gcsfs's ``requester_pays=True``
            with ``project=``, or ``requester_pays="my-project"``) and
            ``requester_pays=True`` (``s3``, as s3fs names it).

    Raises:
        InvalidArgument: an unknown scheme, a setting of the wrong type, or
            one aioflux does not take (s3fs's ``key``, gcsfs's
            ``version_aware``...): said, not dropped.
    """

    protocol: tuple[str, ...] = ("aioflux-gs", "aioflux-s3", "aioflux-file")
    default_scheme = "gs"
    root_marker = ""
    async_impl = True
    cachable = True
    # The protocol of a class protocol_class() made (register()), else None.
    _registered_as: str | None = None

    def __init__(self, scheme: str | None = None, *, config: ClientConfig | None = None,
                 endpoint: str | None = None, credentials: Credentials = None,
                 region: str | None = None, asynchronous: bool = False, loop: Any = None,
                 **storage_options: Any) -> None:
        scheme = scheme or type(self).default_scheme
        if scheme not in _SCHEMES:
            raise InvalidArgument(f"AiofluxFileSystem: scheme must be one of "
                                  f"{', '.join(_SCHEMES)}, got {scheme!r}")
        settings = settings_of(scheme, endpoint, credentials, region, storage_options)
        # fsspec's loop thread is never started: sync calls go to the portal's (see loop).
        options = {"listings_expiry_time": EXPIRY_S,
                   # A local stat costs microseconds, and programs write beside
                   # the filesystem with plain open(): a remembered listing hid
                   # their files for the expiry.
                   "use_listings_cache": scheme != "file", **settings.fsspec}
        super().__init__(asynchronous=asynchronous,
                         loop=None if asynchronous else get_portal().loop, **options)
        self.dircache = Listings(**options)
        self.recent = RecentMetadata(self.dircache)
        self.scheme = scheme
        if scheme == "file" and type(self).default_scheme != "file":
            # fsspec asks the instance: here a path without a protocol is a
            # file's, relative to the working directory as in LocalFileSystem.
            self._strip_protocol = _strip_local  # type: ignore[method-assign]
        self._config, self._settings = config, settings
        self._blocks = LoopSemaphore(TRANSFER_BLOCKS)
        self._streaming_puts = LoopSemaphore(STREAMING_PUTS)
        # Built now so that bad settings fail here, and kept (not built twice).
        # Closed when the filesystem is collected: its connections stayed
        # open until exit (one filesystem a call, skip_instance_cache=True,
        # kept two descriptors each).
        self._held: list[tuple[int, ObjectStore]] = [(os.getpid(), self._new_store())]
        weakref.finalize(self, _close_held, self._held)

    def _new_store(self) -> ObjectStore:
        s = self._settings
        return new_store(self.scheme, self._config, endpoint=s.endpoint,
                         credentials=s.credentials, region=s.region,
                         user_project=s.user_project, requester_pays=s.requester_pays)

    def __reduce__(self) -> tuple[Any, ...]:
        # A class register() made exists only in the processes that called
        # it: unpickled elsewhere (a spawned DataLoader worker), it is made
        # again from its protocol.
        cls = type(self)
        if cls._registered_as is None:
            return super().__reduce__()  # type: ignore[no-any-return]
        return _rebuild, (cls._registered_as, cls.default_scheme, self.storage_args,
                          self.storage_options)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop sync calls run on: aioflux's portal (this process's)."""
        return None if self.asynchronous else get_portal().loop

    @property
    def store(self) -> ObjectStore:
        """This process's store (built on first use, again after a fork)."""
        held = self._held[0]
        if held[0] != os.getpid():
            # Under the lock: threads opening files at once (pyarrow's
            # writers) built a store each, and the connections of all but
            # the one kept were never closed.
            with _store_lock:
                held = self._held[0]
                if held[0] != os.getpid():
                    held = (os.getpid(), self._new_store())
                    self._held[0] = held
        return held[1]

    # -- paths ---------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return strip_protocol(os.fspath(path), local=cls.default_scheme == "file")

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        head = path.split("://", 1)[0] if "://" in path else ""
        scheme = head.removeprefix("aioflux-")
        return {"scheme": {"gcs": "gs", "s3a": "s3", "abfs": "az", "abfss": "az"}.get(
            scheme, scheme)} if scheme in (*_SCHEMES, "gcs", "s3a", "abfs", "abfss") else {}

    def unstrip_protocol(self, name: str) -> str:
        """The URL of a path.

        Args:
            name: a path (``b/k``) or URL.

        Returns:
            Its URL on this filesystem's store (``gs://b/k``, ``file:///p``).
        """
        path = strip_protocol(name, local=self.scheme == "file")
        return f"file://{path}" if self.scheme == "file" else f"{self.scheme}://{path}"

    def _split(self, path: str, *, folder: bool = False) -> tuple[str, str]:
        return split(self.scheme, path, folder=folder)

    def invalidate_cache(self, path: str | None = None) -> None:
        """Forget what recent listings and stats said of ``path`` and the
        folders above it, and of everything under it (all, if None).

        Args:
            path: a file or folder, or None.
        """
        if path is None:
            self.recent.clear()
        else:
            self.recent.forget(self._strip_protocol(path), tree=True)

    # -- metadata ------------------------------------------------------------

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        bucket, name = self._split(path, folder=True)
        entry = await entry_of(self.store, self.recent, self.scheme, bucket, name)
        if entry is None:
            raise FileNotFoundError(f"{self.unstrip_protocol(path)}: no such object or folder")
        return entry

    async def _ls(self, path: str, detail: bool = True, refresh: bool = False,
                  **kwargs: Any) -> list[Any]:
        bucket, name = self._split(path, folder=True)
        # gcsfs's prefix=: only the names in the folder that start with it.
        within = kwargs.get("prefix") or ""
        out = await list_folder(self.store, self.recent, self.scheme, bucket, name,
                                refresh=refresh, within=within)
        if not out and name:
            info = await self._info(path)  # a file lists as itself
            if info["type"] == "file" and not within:
                out = [info]
            # else: a folder that only held its placeholder lists empty.
        return out if detail else [e["name"] for e in out]

    async def _find(self, path: str, maxdepth: int | None = None, withdirs: bool = False,
                    detail: bool = False, **kwargs: Any) -> Any:
        # gcsfs's and s3fs's prefix=: only the names under path that start
        # with it (fsspec's own find dropped it, and listed everything).
        within = kwargs.pop("prefix", None) or ""
        if maxdepth is not None and not within:
            return await super()._find(path, maxdepth=maxdepth, withdirs=withdirs,
                                       detail=detail, **kwargs)
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        bucket, name = self._split(path, folder=True)
        found = await list_tree(self.store, self.recent, self.scheme, bucket, name,
                                withdirs=withdirs, within=within)
        if maxdepth is not None:  # levels below the path, as fsspec counts them
            depth = len(join(self.scheme, bucket, name))
            found = {k: v for k, v in found.items() if k[depth:].count("/") <= maxdepth}
        names = sorted(found)
        return {n: found[n] for n in names} if detail else names

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        try:
            await self._info(path)
        except (FileNotFoundError, NotFound):
            return False
        return True

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Object stores have no folders: nothing to make (a bucket must exist).
        Files keep that rule (the store removes the folders its deletes empty)."""

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Object stores have no folders: nothing to make."""

    # -- reads ---------------------------------------------------------------

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None,
                        **kwargs: Any) -> bytes:
        self._refuse_pins("cat_file", path, kwargs)
        bucket, name = self._split(path)
        if (start is None or start == 0) and end is None:
            return await self.store.read(bucket, name)  # whole: crc32c checked
        if (start is not None and start < 0) or (end is not None and end < 0):
            size = (await self.store.stat(bucket, name)).size
            start = start if start is None or start >= 0 else max(0, size + start)
            end = end if end is None or end >= 0 else max(0, size + end)
        start = start or 0
        if end is not None and end <= start:
            return b""
        try:
            return await self.store.read(bucket, name, start=start, end=end)
        except InvalidRequest:
            # A range starting at or past the end (a server's 416, a file's
            # refusal): fsspec's ranges slice like Python's, so it is empty.
            if (await self.store.stat(bucket, name)).size <= start:
                return b""
            raise

    async def _cat(self, path: str | list[str], recursive: bool = False,
                   on_error: str = "raise", batch_size: int | None = None,
                   **kwargs: Any) -> Any:
        # fsspec's own _cat wraps every read in wait_for and calls
        # asyncio.wait on up to 1,280 of them after each completion: a
        # quarter of the CPU of cat of 2,000 small objects (perf scenario
        # fsspec, op=cat). The store's semaphore bounds the requests anyway.
        paths = await self._expand_path(path, recursive=recursive)

        async def one(p: str) -> Any:
            try:
                return await self._cat_file(p, **kwargs)
            except Exception as exc:
                if on_error == "raise":
                    raise
                return exc

        limit = batch_size or self.batch_size or self.store.config.max_concurrency
        out = await gather_bounded((one(p) for p in paths), limit)
        if len(paths) > 1 or isinstance(path, list) or paths[0] != self._strip_protocol(path):
            return {k: v for k, v in zip(paths, out, strict=True)
                    if on_error != "omit" or not isinstance(v, Exception)}
        return out[0]

    async def _cat_ranges(self, paths: Sequence[str], starts: Sequence[int] | int,
                          ends: Sequence[int] | int, max_gap: int | None = None,
                          batch_size: int | None = None, on_error: str = "return",
                          **kwargs: Any) -> list[Any]:
        # As many at once as the store's semaphore lets through: a Parquet
        # reader's 192 column chunks took 0.19 s 64 at a time, 0.15 s at 256.
        return await cat_ranges(self._cat_file, [self._strip_protocol(p) for p in paths],
                                starts, ends, gap=max_gap, on_error=on_error,
                                limit=batch_size or self.store.config.max_concurrency)

    async def _get_file(self, rpath: str, lpath: str, callback: Callback = DEFAULT_CALLBACK,
                        **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            return
        bucket, name = self._split(rpath)
        info = recent_object(self.recent, self.scheme, bucket, name)
        recent = info is not None
        if info is None:
            info = await self.store.stat(bucket, name)
        await get_file(self.store, info, lpath, recent=recent, budget=self._blocks,
                       callback=callback)

    # -- writes --------------------------------------------------------------

    async def _pipe_file(self, path: str, value: bytes, mode: str = "overwrite",
                         **kwargs: Any) -> None:
        bucket, name = self._split(path)
        try:
            await self.store.write(bucket, name, value,
                                   if_generation_match=0 if mode == "create" else None,
                                   content_type=kwargs.get("content_type",
                                                           "application/octet-stream"),
                                   metadata=kwargs.get("metadata"))
        except PreconditionFailed as exc:
            raise FileExistsError(f"{self.unstrip_protocol(path)}: exists (mode 'create' "
                                  "writes only a new object)") from exc
        finally:  # even a failed write may have published (a lost answer)
            self.recent.forget(join(self.scheme, bucket, name))

    async def _put_file(self, lpath: str, rpath: str, mode: str = "overwrite",
                        callback: Callback = DEFAULT_CALLBACK, **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            return
        bucket, name = self._split(rpath)
        try:
            await put_file(self.store, lpath, bucket, name, create=mode == "create",
                           content_type=kwargs.get("content_type", "application/octet-stream"),
                           metadata=kwargs.get("metadata"), budget=self._blocks,
                           streaming=self._streaming_puts, callback=callback)
        except PreconditionFailed as exc:
            raise FileExistsError(f"{self.unstrip_protocol(rpath)}: exists (mode 'create' "
                                  "writes only a new object)") from exc
        finally:  # even a failed write may have published (a lost answer)
            self.recent.forget(join(self.scheme, bucket, name))

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        bucket, name = self._split(path)
        try:
            await self.store.delete(bucket, name)
        finally:
            self.recent.forget(join(self.scheme, bucket, name))

    async def _rm(self, path: str | list[str], recursive: bool = False,
                  maxdepth: int | None = None, batch_size: int | None = None,
                  **kwargs: Any) -> None:
        paths = await self._expand_path(path, recursive=recursive, maxdepth=maxdepth)
        if len(paths) == 1 and not recursive:
            # One path: a missing one is said, as LocalFileSystem and gcsfs say it.
            try:
                await self._rm_file(paths[0])
            except NotFound as exc:
                if await self._isdir(paths[0]):  # it said "no such object" of a folder
                    raise IsADirectoryError(f"{self.unstrip_protocol(paths[0])}: a folder "
                                            "(rm(path, recursive=True) removes what is "
                                            "under it)") from exc
                raise FileNotFoundError(f"{self.unstrip_protocol(paths[0])}: no such "
                                        "object") from exc
            return
        by_bucket: dict[str, list[str]] = {}
        for p in paths:
            bucket, name = self._split(p, folder=True)
            if name:
                by_bucket.setdefault(bucket, []).append(name)
                if recursive and self.scheme != "file":
                    # A folder's placeholder object ("d/", as consoles make
                    # them) is named without its slash in the expansion: left
                    # behind, the folder still existed after rm -r.
                    by_bucket[bucket].append(name + "/")
        # Folders in the expansion are no objects, nor files' names
        # placeholders: their deletes find nothing, which delete_all counts as
        # done (batched where the store can).
        try:
            for bucket, names in by_bucket.items():
                await delete_all(self.store, bucket, names, concurrency=batch_size or 64)
        finally:
            # Forgetting a tree scans every entry: once, not once a path.
            if len(paths) == 1:
                self.recent.forget(paths[0], tree=True)
            else:
                self.recent.clear()

    async def _copy(self, path1: str | list[str], path2: str | list[str],
                    recursive: bool = False, on_error: str | None = None,
                    maxdepth: int | None = None, batch_size: int | None = None,
                    **kwargs: Any) -> None:
        # fsspec drops a recursive copy's FileNotFoundErrors by default, for
        # the folders its expansion names: _cp_file passes over those
        # itself, and a missing destination bucket's NotFound was dropped
        # with them (the copy of a tree copied nothing and returned).
        await super()._copy(path1, path2, recursive=recursive, on_error=on_error or "raise",
                            maxdepth=maxdepth, batch_size=batch_size, **kwargs)

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        bucket, name = self._split(path1)
        dest_bucket, dest_name = self._split(path2)
        try:
            await self.store.copy(bucket, name, dest_bucket, dest_name)
        except NotFound as exc:
            # A recursive copy (and so mv) names the folders it walks too:
            # nothing to copy (folders are their objects' names). mv failed
            # there, leaving both trees.
            if await self._isdir(path1):
                return
            if not await self.store.exists(bucket, name):
                raise
            # The source is there: the destination's bucket is what is missing,
            # which the store's error (naming the source) did not say.
            raise NotFound(f"copy {self.unstrip_protocol(path1)} to "
                           f"{self.unstrip_protocol(path2)} failed: the destination was not "
                           f"found (no bucket {dest_bucket!r}?); the source exists",
                           operation="copy", bucket=dest_bucket, name=dest_name,
                           status=exc.status, reason=exc.reason) from exc
        finally:
            self.recent.forget(join(self.scheme, dest_bucket, dest_name))

    # -- files ---------------------------------------------------------------

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None,
              autocommit: bool = True, cache_options: dict[str, Any] | None = None,
              **kwargs: Any) -> Any:
        self._refuse_pins("open", path, kwargs)
        bucket, name = self._split(path)
        if mode in ("rb", "br"):
            return ReadFile(self._reader(bucket, name), self, join(self.scheme, bucket, name),
                            block_size or io.DEFAULT_BUFFER_SIZE)
        if mode in ("wb", "bw", "xb", "bx"):
            create = "x" in mode
            known = join(self.scheme, bucket, name)
            if create:
                self.recent.forget(known)  # asked of the store, not of a listing
                # On the portal loop, also for an asynchronous filesystem (its
                # own loop is the caller's, which open() must not block).
                if fsspec.asyn.sync(get_portal().loop, self._exists, path):
                    # Said at once, as fsspec's tests want; the publishing
                    # request checks it again (another writer may come first).
                    raise FileExistsError(f"{self.unstrip_protocol(path)}: exists (mode "
                                          "'xb' creates only)")
            return WriteFile(self.store, bucket, name, create=create, autocommit=autocommit,
                             content_type=kwargs.get("content_type",
                                                     "application/octet-stream"),
                             metadata=kwargs.get("metadata"),
                             published=functools.partial(self.recent.forget, known),
                             fs=self, path=known)
        raise ValueError(f"aioflux: mode {mode!r} is not supported (rb, wb, xb; objects "
                         "cannot be appended to or updated in place)")

    def _refuse_pins(self, op: str, path: str, kwargs: dict[str, Any]) -> None:
        """Refuse gcsfs's ``generation=`` and s3fs's ``version_id=``: dropped,
        the current version was read as if it were the one asked for."""
        for pin in ("generation", "version_id"):
            if kwargs.get(pin) is not None:
                raise InvalidArgument(f"{op} {self.unstrip_protocol(path)}: {pin}= is not "
                                      "supported (aioflux reads the current version, and a "
                                      "file keeps the version it opened)")

    def _reader(self, bucket: str, name: str) -> ObjectReader:
        """A reader of the object, at the version a recent entry names if
        one does. An entry without a crc32c (an S3 listing's) still saves
        the open its round trip: the stat that gives the checksum runs
        beside the first GET."""
        info = recent_object(self.recent, self.scheme, bucket, name, checksummed=False)
        return ObjectReader(self.store, bucket, name, info=info, recent=info is not None,
                            stat_beside=info is not None and info.crc32c is None)

    def open(self, path: str, mode: str = "rb", block_size: int | None = None,
             cache_options: dict[str, Any] | None = None, compression: str | None = None,
             **kwargs: Any) -> Any:
        """A file object, as ``fsspec``'s ``open``; text writes keep all-or-nothing.

        An exception inside ``with fs.open(path, "w")`` publishes nothing
        (fsspec's own text wrapper would close, so publish, the object).

        Args:
            path: the object (``bucket/key``, or a URL of this filesystem).
            mode: ``rb``, ``wb``, ``xb`` or their text forms (``r``, ``w``);
                no appends.
            block_size: the read buffer's size (reads); None: Python's
                default buffer size.
            cache_options: fsspec's read cache settings.
            compression: fsspec's compression name (``"infer"``: by the
                path's suffix), or None. A compressed write is closed with
                its file: ``close()`` ends the stream and publishes.
            **kwargs: ``encoding``, ``errors``, ``newline`` for text;
                ``content_type`` and ``metadata`` (custom, ``str`` to ``str``)
                of a written object; ``autocommit=False`` (inside
                ``fs.transaction``) stages the file until the commit.

        Returns:
            The file object.

        Raises:
            NotFound: reading a missing object (also ``FileNotFoundError``).
            FileExistsError: ``xb`` of an object that exists.
            InvalidArgument: ``generation=``, ``version_id=`` (not read), or a file's ``metadata``.
            ValueError: an append or update mode.
        """
        if mode[:1] in ("w", "x") and compression is not None:
            compression = fsspec.core.get_compression(path, compression)  # "infer": by suffix
        if mode[:1] in ("w", "x") and ("b" not in mode or compression is not None):
            autocommit = kwargs.pop("autocommit", not self._intrans)
            raw = self._open(self._strip_protocol(path), mode=mode[0] + "b",
                             block_size=block_size, autocommit=autocommit,
                             **{k: v for k, v in kwargs.items()
                                if k not in ("encoding", "errors", "newline")})
            if not autocommit:
                self.transaction.files.append(raw)  # as fsspec's open() does
            out = raw if compression is None else CompressedWriteFile(
                raw, fsspec.compression.compr[compression])
            if "b" in mode:
                return out
            return TextWriter(out, encoding=kwargs.get("encoding") or "utf-8",
                              errors=kwargs.get("errors"), newline=kwargs.get("newline"))
        return super().open(path, mode=mode, block_size=block_size,
                            cache_options=cache_options, compression=compression, **kwargs)

    async def open_async(self, path: str, mode: str = "rb",
                         **kwargs: Any) -> AsyncReadFile | AsyncWriteFile:
        """An async file (``await f.read()``, ``await f.write()``, ``await f.close()``).

        Args:
            path: the object.
            mode: ``rb`` (ranged reads pinned to the version found at open,
                or a recent listing named, checked against its crc32c when
                read front to back) or ``wb``
                (published whole by ``close()``; an exception inside
                ``async with`` publishes nothing).
            **kwargs: ``content_type`` and ``metadata`` of a written object.

        Returns:
            The file.

        Raises:
            ValueError: a text mode, compression, or a mode other than rb and wb.
            InvalidArgument: gcsfs's ``generation=`` or s3fs's ``version_id=`` (not read).
            NotImplementedError: ``autocommit=False`` (a transaction's files are
                ``fs.open``'s: its commit is sync).
            NotFound: ``rb`` of a missing object.
        """
        if "b" not in mode or kwargs.get("compression"):
            raise ValueError(f"aioflux: open_async takes binary modes without compression, "
                             f"not {mode!r}")
        self._refuse_pins("open_async", path, kwargs)
        bucket, name = self._split(path)
        if mode in ("rb", "br"):
            # From a recent entry with the crc32c it is checked against (else
            # a stat says): pinned to the entry's version, read anew if gone.
            info = recent_object(self.recent, self.scheme, bucket, name)
            if info is not None:
                return AsyncReadFile(self.store, info, recent=True)
            return AsyncReadFile(self.store, await self.store.stat(bucket, name))
        if mode in ("wb", "bw"):
            if not kwargs.get("autocommit", True):
                raise NotImplementedError("aioflux: open_async files are published on close; "
                                          "a transaction's files are fs.open's")
            return AsyncWriteFile(AsyncObjectWriter(
                self.store, bucket, name,
                content_type=kwargs.get("content_type", "application/octet-stream"),
                metadata=kwargs.get("metadata")),
                published=functools.partial(self.recent.forget, join(self.scheme, bucket, name)))
        raise ValueError(f"aioflux: open_async mode {mode!r} is not supported (rb, wb)")

    def ukey(self, path: str) -> str:
        """The object's version: changes whenever its content does.

        Args:
            path: the object.

        Returns:
            Its version token (else its crc32c, else its size), as text.

        Raises:
            NotFound: no such object.
        """
        info = self.info(path)
        return str(info.get("version") or info.get("crc32c") or info["size"])

    def modified(self, path: str) -> datetime.datetime:
        """When the object was last written (its metadata's ``updated``).

        Args:
            path: the object.

        Returns:
            A timezone-aware UTC datetime.

        Raises:
            NotFound: no such object.
            IsADirectoryError: a folder (object stores keep no time for one).
            ValueError: the store reported no time of the object.
        """
        info = self.info(path)
        if info["type"] != "file":
            raise IsADirectoryError(f"{self.unstrip_protocol(path)}: a folder has no time")
        if not info.get("updated"):
            raise ValueError(f"{self.unstrip_protocol(path)}: the store reported no time")
        return datetime.datetime.fromisoformat(info["updated"])

    def checksum(self, path: str) -> int:
        """An int that changes with the object's content (from its version).

        Args:
            path: the object.

        Returns:
            A non-negative int derived from :meth:`ukey`.

        Raises:
            NotFound: no such object.
        """
        # All of the key counts: its low bits alone (the last 8 characters)
        # gave two versions of a file whose times were whole seconds one
        # checksum.
        digest = hashlib.sha256(self.ukey(path).encode()).digest()
        return int.from_bytes(digest[:8], "big") >> 1


@functools.cache
def protocol_class(name: str, scheme: str) -> type[AiofluxFileSystem]:
    """The subclass serving ``name://`` URLs on ``scheme``'s store, which
    :func:`~aioflux.fsspec.register` installs.

    One class per protocol, made again by the same call wherever one of its
    instances is unpickled.

    Args:
        name: the protocol (``gs``, ``s3``...).
        scheme: the store serving it (``gs``, ``s3`` or ``file``).

    Returns:
        The class.
    """
    return type(f"AiofluxFileSystem_{name}", (AiofluxFileSystem,),
                {"protocol": (name, f"aioflux-{scheme}"), "default_scheme": scheme,
                 "_registered_as": name, "__module__": "aioflux.fsspec"})


def _rebuild(name: str, scheme: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> AiofluxFileSystem:
    return protocol_class(name, scheme)(*args, **kwargs)

