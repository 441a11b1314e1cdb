"""What both datasets share: settings, the per-process store, listing.

A dataset lists at construction (parallel listing, once, in the process
that builds it) and holds only settings and the object list, so it pickles
for ``spawn`` workers. Its :class:`DatasetSource` rebuilds the store for
the objects' URL scheme lazily in each process (``AsyncClient`` from
config/endpoint/credentials for ``gs``, ``LocalStore(config)`` for
``file``), through the process's portal (rebuilt after ``fork``), so
DataLoader workers never list.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import weakref
from collections.abc import Callable, Iterable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from ..._api.stores import check_account, new_store
from ..._core.checks.arguments import Credentials, check_credentials, endpoint_url
from ..._core.concurrency.portal import get_portal
from ..._core.concurrency.share import set_sharers
from ..._core.concurrency.window import gather_bounded
from ..._core.errors import BridgeError, InvalidArgument, InvalidURL, NotFound, add_note
from ..._core.memory.columns import ListedColumns, ListsColumns
from ..._core.memory.heap import keep_batches_in_heap
from ..._core.memory.object_index import IndexBuilder, ObjectIndex
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import folder_prefix, format_url, parse_url
from ..._core.settings.config import ClientConfig, RetryPolicy
from ..._core.storage.protocol import ObjectStore, PinsRevisions
from ..._engines.cache import CachedDownloader, DiskCache, cache_from_args
from ..._engines.compose import COMPOSED_PREFIX
from ..._engines.download import Data, Downloader, DownloadOptions
from ..._engines.listing import iter_pages
from ._settings import DatasetSettings

if TYPE_CHECKING:
    # A default for the sample type (PEP 696): ``ObjectMapDataset(objs)[0]`` is
    # ``bytes``, ``ObjectMapDataset(objs, transform=f)[0]`` is what ``f`` returns.
    # typing_extensions is for the type checker only.
    from typing_extensions import TypeVar

    Sample = TypeVar("Sample", default=bytes)
else:
    from typing import TypeVar

    Sample = TypeVar("Sample")

__all__ = ["DatasetSource", "Sample", "Transform",
           "build_source", "check_objects", "objects_scheme", "share_in_worker", "transformed"]

# ``bytes -> sample``. Typed ``bytes`` so that ``def decode(data: bytes)``
# type-checks; an object above the planner's ranged threshold (32 MiB)
# arrives as the bytearray it was downloaded into (same read API, buffer
# protocol), since copying it to bytes would double its peak memory.
Transform = Callable[[bytes], Sample]


def transformed(op: str, transform: Transform[Sample] | None, data: Data,
                obj: Callable[[], ObjectInfo]) -> Sample:
    """``transform(data)`` (``data`` itself without one), its error noted
    with the object ``data`` is.

    Args:
        op: the dataset class, for the note.
        transform: ``bytes -> sample``, or None.
        data: the object's bytes.
        obj: the object (called only on an error).

    Returns:
        The sample.

    Raises:
        Exception: what ``transform`` raised, its type kept (a loop's
            ``except`` of it still matches) and a note naming the object:
            a decoder's own error ("cannot identify image file") names none,
            and among a million objects the one to look at was unknown.
    """
    if transform is None:
        return data  # type: ignore[return-value]  # Sample defaults to Data
    try:
        return transform(data)  # type: ignore[arg-type]  # see Transform
    except Exception as exc:
        add_note(exc, f"{op}: the transform raised this on {obj().url}")
        raise


def share_in_worker() -> None:
    """In a DataLoader worker, size this process's thread pools made from now
    on to its share of the machine: one of ``num_workers`` processes
    (``_core/concurrency/share.py``), not a process that has the machine to itself."""
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    if info is not None:
        set_sharers(max(1, info.num_workers))


class DatasetSource:
    """Picklable settings; a store and downloader built lazily per process.

    ``scheme`` is the URL scheme of the dataset's objects: it picks the
    store each process builds. With a ``cache`` every read looks the
    object up on disk first (keyed by the listed version, so the listing or
    stat the dataset already made costs no extra request) and only the
    misses reach the download planner.
    """

    def __init__(self, *, config: ClientConfig | None, endpoint: str | None,
                 credentials: Credentials,
                 list_retry: RetryPolicy | None, download_retry: RetryPolicy | None,
                 download_options: DownloadOptions, scheme: str = "gs",
                 cache: DiskCache | None = None) -> None:
        self.config = config or ClientConfig()
        self.endpoint = endpoint
        self.credentials = credentials
        self.list_retry = list_retry
        self.download_retry = download_retry
        self.download_options = download_options
        self.scheme = scheme
        self.cache = cache
        #: the revisions the listing pinned (the Hub's commits): every store
        #: built here reads them, a DataLoader worker's too (``PinsRevisions``)
        self.pins: dict[tuple[str, str], str] = {}
        self._runtime: tuple[int, Downloader] | None = None
        # Closes the runtime's store when the dataset is collected; one at a
        # time, detached when that store is closed or left behind by a fork.
        self._finalizer: weakref.finalize[Any, Any] | None = None
        # Made where the DataLoader runs: its batches are received here.
        keep_batches_in_heap()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_runtime"] = None  # sessions belong to one process
        state["_finalizer"] = None
        return state

    def store(self, retry: RetryPolicy | None) -> ObjectStore:
        """A new store of this source's scheme (the caller closes it).

        Args:
            retry: the retry policy (default ``config.retry``).

        Returns:
            The store.
        """
        config = self.config if retry is None else self.config.replace(retry=retry)
        store = new_store(self.scheme, config, endpoint=self.endpoint,
                          credentials=self.credentials)
        if self.pins and isinstance(store, PinsRevisions):
            store._adopt_pins(self.pins)
        return store

    @property
    def downloader(self) -> Downloader:
        """This process's downloader (built on first use, again after fork)."""
        runtime = self._runtime
        if runtime is None or runtime[0] != os.getpid():
            share_in_worker()
            store = self.store(self.download_retry)
            options = self.download_options
            if not store.features.compose:
                # Nothing to compose on this store: every object is read directly.
                options = dataclasses.replace(options, disable_compose=True)
            downloader = (Downloader(store, options) if self.cache is None
                          else CachedDownloader(store, options, cache=self.cache))
            runtime = (os.getpid(), downloader)
            self._runtime = runtime
            # Unclosed, its session closes when the dataset is collected.
            self._detach_finalizer()  # a forked parent's: not this process's store
            self._finalizer = weakref.finalize(self, _close_later, store, os.getpid())
        return runtime[1]

    def close(self) -> None:
        """Close this process's store now (it is rebuilt on next use)."""
        runtime, self._runtime = self._runtime, None
        # Closed here: its finalizer would only keep the closed store (and
        # its downloader's memory) alive, one more each close and reuse.
        self._detach_finalizer()
        if runtime is not None and runtime[0] == os.getpid():
            get_portal().call(runtime[1].client.aclose())

    def _detach_finalizer(self) -> None:
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()

    def list_prefix(self, url: str, concurrency: int) -> ObjectIndex:
        """List the folder ``url`` names (sorted); it becomes this source's scheme.

        The listing goes into the index's columns a page at a time, never
        into a list of records (~640 bytes an object at its peak did).

        Args:
            url: ``gs://bucket[/folder]``, ``file:///dir`` or a path.
            concurrency: parallel listers.

        Returns:
            The objects.

        Raises:
            InvalidURL: a malformed URL.
            NotFound: the folder holds no objects.
        """
        parsed = parse_url(url)
        self.scheme = parsed.scheme
        folder = folder_prefix(parsed.name)
        builder = IndexBuilder()

        def add(page: list[ObjectInfo]) -> None:
            if parsed.scheme == "file":
                _refuse_unreadable_names(parsed.bucket, [obj.name for obj in page])
            builder.add(page)

        def add_columns(page: ListedColumns) -> None:
            # What iter_pages leaves out (a file's name never ends in "/").
            page = page.without(COMPOSED_PREFIX)
            if parsed.scheme == "file":
                _refuse_unreadable_names(parsed.bucket, page.names)
            builder.add_columns(page)

        async def run() -> None:
            store = self.store(self.list_retry)
            try:
                check_account(url, parsed, store)
            except InvalidArgument:
                await store.aclose()
                raise
            # ``gs://b/data`` names the folder ``data/`` and the object
            # ``data`` itself, as the CLI does: not ``data2/``. "data" sorts
            # before "data/...", so it is added first; it is asked for
            # beside the listing's first page, not a round trip before it.
            itself = (asyncio.ensure_future(store.stat(parsed.bucket, parsed.name))
                      if folder != parsed.name else None)

            async def add_itself() -> None:
                nonlocal itself
                if itself is not None:
                    try:
                        add([await itself])
                    except NotFound:
                        pass
                    itself = None

            try:
                if isinstance(store, ListsColumns):
                    # Files: each page as columns, no ObjectInfo a file
                    # (most of a listing's Python time).
                    columns = store.list_columns(parsed.bucket, folder)
                    async with aclosing(columns):
                        async for listed in columns:
                            await add_itself()
                            add_columns(listed)
                    await add_itself()
                    return
                pages = iter_pages(store, parsed.bucket, folder, concurrency=concurrency)
                async with aclosing(pages):
                    async for page in pages:
                        await add_itself()
                        add(page)
                await add_itself()
            finally:
                if itself is not None:
                    itself.cancel()
                    await asyncio.gather(itself, return_exceptions=True)
                self._keep_pins(store)
                await store.aclose()

        get_portal().call(run())
        if not builder.count:
            # Silence here would train on nothing: say what was looked for
            # (a raw name prefix such as gs://b/train/shard- names a folder).
            where = format_url(parsed.scheme, parsed.bucket, folder)
            raise NotFound(f"list {where}: no objects in that folder "
                           f"(a dataset URL names a folder, not a name prefix)",
                           operation="list", bucket=parsed.bucket, name=folder)
        ordered = builder.ordered
        index = builder.finish()
        if not ordered:
            # A store's own order that is not the names' (Azure's UTF-16
            # code units, past the BMP): sorted as every store's listing is.
            index = ObjectIndex(sorted(index, key=_name_of))
        return index

    def stat_all(self, urls: Sequence[str]) -> list[ObjectInfo]:
        """Stat object URLs concurrently (all of this source's scheme).

        Args:
            urls: object URLs.

        Returns:
            ObjectInfo per URL, in order.

        Raises:
            NotFound: a URL names no object.
        """
        parsed = [parse_url(u, require_object=True) for u in urls]

        async def run() -> list[ObjectInfo]:
            store = self.store(self.list_retry)
            try:
                for url, p in zip(urls, parsed, strict=True):
                    check_account(url, p, store)
                return await gather_bounded(store.stat(p.bucket, p.name) for p in parsed)
            finally:
                self._keep_pins(store)
                await store.aclose()

        return get_portal().call(run())

    def _keep_pins(self, store: ObjectStore) -> None:
        """Keep the revisions ``store`` read at: what it listed or stated is of
        them, so the dataset's reads are too."""
        if isinstance(store, PinsRevisions):
            self.pins.update(store._pins())


def _name_of(obj: ObjectInfo) -> str:
    return obj.name


def _close_later(store: ObjectStore, pid: int) -> None:
    if pid == os.getpid():
        try:
            get_portal().submit(store.aclose())
        except BridgeError:
            pass  # interpreter exit: the portal is gone and so is the socket


def objects_scheme(op: str, schemes: Iterable[str]) -> str | None:
    """The one scheme a dataset's objects are on (None for no objects).

    Args:
        op: the operation, for the message.
        schemes: the scheme of every object or URL.

    Returns:
        The scheme.

    Raises:
        InvalidArgument: objects on more than one store.
    """
    found = sorted(set(schemes))
    if len(found) > 1:
        raise InvalidArgument(f"{op}: objects must all be on one store, got "
                              f"{', '.join(s + '://' for s in found)}")
    return found[0] if found else None


def build_source(op: str, objects: object, settings: DatasetSettings) -> DatasetSource:
    """Check a per-object dataset's settings (before any request) and build its source.

    Args:
        op: the dataset class, for messages.
        objects: the objects given to the constructor.
        settings: the dataset's settings.

    Returns:
        The source.

    Raises:
        InvalidArgument: a setting of the wrong type.
        InvalidURL: a malformed endpoint.
    """
    if isinstance(objects, (str, bytes)) or not isinstance(objects, Iterable):
        raise InvalidArgument(f"{op}: objects must be a sequence of ObjectInfo, got "
                              f"{type(objects).__name__} (use from_prefix or from_objects "
                              "for URLs)")
    settings.check(op)
    endpoint = endpoint_url(op, settings.endpoint)
    check_credentials(op, settings.credentials)
    cache = cache_from_args(op, settings.cache_dir, settings.cache_limit)
    options = settings.download_options or DownloadOptions()
    if settings.hedge_after is not None:
        options = dataclasses.replace(options, hedge_after=settings.hedge_after)
    return DatasetSource(config=settings.config, endpoint=endpoint,
                         credentials=settings.credentials, list_retry=settings.list_retry,
                         download_retry=settings.download_retry, download_options=options,
                         cache=cache)


def _refuse_unreadable_names(bucket: str, names: Sequence[str]) -> None:
    """Refuse a listed file whose name is not UTF-8 (``os.fsdecode`` escapes
    its bytes): object names are UTF-8, so no read could name it, and an
    epoch would fail at that sample; better at the listing, naming it."""
    try:
        "".join(names).encode()
        return  # one check a page; the name it fails on is found below
    except UnicodeEncodeError:
        pass
    for name in names:
        try:
            name.encode()
        except UnicodeEncodeError:
            raise InvalidURL(f"list {format_url('file', bucket, name)!r}: the file name is "
                             "not valid UTF-8, and object names are; rename the file or move "
                             "it out of the dataset's folder") from None


def check_objects(op: str, source: DatasetSource, objects: object) -> ObjectIndex:
    """Check that ``objects`` are ObjectInfo on one store; ``source`` reads that store.

    The constructors and the ``objects`` setters both go through here: objects
    set on a dataset built for another store are read from theirs.

    Args:
        op: the dataset class, for messages.
        source: the dataset's source (its scheme is set from the objects).
        objects: the objects (an :class:`ObjectIndex` is kept as it is).

    Returns:
        The objects as an ObjectIndex.

    Raises:
        InvalidArgument: not a sequence of ObjectInfo, or they span stores.
    """
    if isinstance(objects, ObjectIndex):
        # Every record is an ObjectInfo; they are built one at a time for
        # their scheme, never as a list (200 bytes an object).
        index = objects
    else:
        if isinstance(objects, (str, bytes)) or not isinstance(objects, Iterable):
            raise InvalidArgument(f"{op}: objects must be a sequence of ObjectInfo, got "
                                  f"{type(objects).__name__}")
        items = list(objects)
        for obj in items:
            if not isinstance(obj, ObjectInfo):
                raise InvalidArgument(f"{op}: objects must hold ObjectInfo, got "
                                      f"{type(obj).__name__} {obj!r:.60} "
                                      "(from_objects takes URLs)")
        index = ObjectIndex(items)
    scheme = objects_scheme(op, index.schemes())
    if scheme is not None and scheme != source.scheme:
        source.close()  # this process's store reads the old scheme's objects
        source.scheme = scheme
    return index
