"""Composable iterables in the style of the S3 IO DataPipes, sync and async.

``list_files(url)`` yields URLs, ``load_files(urls)`` yields ``(url, bytes)``
with bounded concurrency; each URL's scheme picks its store. The sync forms
run on the process's portal; ``load_files`` pulls its input in the caller's
thread, so it can consume ``list_files`` (or any blocking iterator).
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from contextlib import aclosing

from .._core.checks.arguments import check_bool, check_instance, check_int
from .._core.concurrency.portal import get_portal, iterate
from .._core.concurrency.window import window, window_sync
from .._core.errors import InvalidArgument
from .._core.records.types import ObjectInfo
from .._core.records.urls import parse_url
from .._core.storage.protocol import ObjectStore
from .._engines.cache import DiskCache, Replaced, cache_from_args, read_listed
from .._engines.download import DEFAULT_PREFETCH_BYTES, Data
from .._engines.hedge import DEFAULT_HEDGE_BUDGET, HedgeAfter, Hedger, check_hedge
from .._engines.iterables import DEFAULT_LOAD_CONCURRENCY
from .._engines.listing import DEFAULT_LIST_CONCURRENCY, iter_objects
from .stores import AnyStore, store_for_url
from .sync_store import SyncStore

__all__ = ["alist_files", "aload_files", "list_files", "load_files"]


# One prefix or several; a path may be an os.PathLike (pathlib.Path).
_URLs = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

# URLs handed over per hop to the caller's thread: a listing page's worth,
# queued ahead while the caller works through the previous ones.
_LIST_BATCH = 1000


def _urls(url: _URLs) -> list[str | os.PathLike[str]]:
    if isinstance(url, (str, os.PathLike)) or not isinstance(url, Iterable) \
            or isinstance(url, (bytes, bytearray)):
        # One URL, or no URL at all, whose type parse_url names (list(5)
        # would be a bare TypeError, and a bytes path's items each "got int").
        return [url]  # type: ignore[list-item]
    return list(url)


def _check_urls(op: str, urls: object) -> None:
    """Refuse a ``urls`` that is no iterable of URLs: one URL (iterated, a
    str gave "'g' names no bucket" or "'/' names the filesystem root") or
    no iterable at all (a bare TypeError)."""
    if isinstance(urls, (str, bytes, os.PathLike)):
        raise InvalidArgument(f"{op}: urls must be an iterable of URLs, got the one URL "
                              f"{urls!r} (pass [url])")
    if not isinstance(urls, (Iterable, AsyncIterable)):
        raise InvalidArgument(f"{op}: urls must be an iterable of URLs, got "
                              f"{type(urls).__name__}")


async def alist_files(url: _URLs, *, client: AnyStore | None = None,
                      concurrency: int = DEFAULT_LIST_CONCURRENCY,
                      ordered: bool = False) -> AsyncGenerator[str, None]:
    """Yield the URL of every object under each prefix URL.

    A prefix is a name prefix, as the S3 IO DataPipes' lister takes it:
    ``gs://b/data`` also lists ``data2/y`` and ``data.txt``; ``gs://b/data/``
    is the folder alone.

    Args:
        url: one prefix URL (``gs://bucket/prefix``, ``s3://bucket/prefix``,
            ``az://container/prefix``, ``file:///dir/``, a path as ``str`` or
            ``os.PathLike``) or several.
        client: the store that serves the URLs' scheme (an ``AsyncClient``,
            ``S3Store``, ``AzureStore``..., or a blocking ``SyncStore``); default: a
            process-wide store per scheme, from the environment. Files need none.
        concurrency: parallel listers per prefix.
        ordered: each prefix's URLs in name order, the same every run (the
            listers still run in parallel, handing their key ranges over
            lowest first); else in the order their pages arrive.

    Yields:
        Object URLs (folder placeholders and composites skipped), prefix
        after prefix; each prefix's in name order with ``ordered``, else in
        the order its parallel listers bring their pages (name order
        within a page, not across pages).

    Raises:
        InvalidURL: a malformed URL.
        StorageError: listing failed.
    """
    for one in _urls(url):
        store, parsed = store_for_url(one, client)
        async with aclosing(iter_objects(store, parsed.bucket, parsed.name,
                                         concurrency=concurrency, ordered=ordered)) as objs:
            async for obj in objs:
                yield obj.url


def list_files(url: _URLs, *, client: AnyStore | None = None,
               concurrency: int = DEFAULT_LIST_CONCURRENCY,
               ordered: bool = False) -> Iterator[str]:
    """Blocking ``alist_files``: the URL of every object under each prefix URL.

    A prefix is a name prefix: ``gs://b/data`` also lists ``data2/y``;
    ``gs://b/data/`` is the folder alone.

    Args:
        url: one prefix URL (``gs://bucket/prefix``, ``s3://bucket/prefix``,
            ``az://container/prefix``, ``file:///dir/``, a path as ``str`` or
            ``os.PathLike``) or several.
        client: the store that serves the URLs' scheme (an ``AsyncClient``,
            ``S3Store``, ``AzureStore``..., or a blocking ``SyncStore``); default: a
            process-wide store per scheme, from the environment. Files need none.
        concurrency: parallel listers per prefix.
        ordered: each prefix's URLs in name order (see ``alist_files``).

    Returns:
        An iterator of object URLs, in ``alist_files``' order.

    Raises:
        InvalidURL: a malformed URL (at once).
        InvalidArgument: a setting of the wrong type (at once).
        StorageError: listing failed (while iterating).
    """
    for one in _urls(url):
        parse_url(one)
    check_instance("list_files", "client", client, (ObjectStore, SyncStore), optional=True)
    check_int("list_files", "concurrency", concurrency, minimum=1)
    check_bool("list_files", "ordered", ordered)
    # The portal's pump: Ctrl-C cancels the listing and waits for it before
    # closing it, and an iterator the garbage collector finalizes on the
    # portal thread cancels it instead of blocking there.
    return iterate(alist_files(url, client=client, concurrency=concurrency, ordered=ordered),
                   batch=_LIST_BATCH)


async def _read(url: str, client: AnyStore | None, cache: DiskCache | None,
                hedger: Hedger | None) -> bytes:
    store, parsed = store_for_url(url, client, require_object=True)

    async def read(bucket: str, name: str, generation: int | None = None) -> bytes:
        if hedger is None:
            return await store.read(bucket, name, generation=generation)
        return await hedger.run(lambda: store.read(bucket, name, generation=generation))

    if cache is None:
        return await read(parsed.bucket, parsed.name)
    # A URL carries no version, and the cache keys on it: one stat
    # (metadata only) per URL learns it; the body comes from disk on a hit.
    info = await store.stat(parsed.bucket, parsed.name)

    async def fetch(objects: list[ObjectInfo]) -> list[bytes | bytearray | Replaced]:
        return [await _at_version(read, o) for o in objects]

    data = await cache.get(info, fetch)
    return data if isinstance(data, bytes) else bytes(data)


async def _at_version(read: Callable[[str, str, int | None], Awaitable[bytes]],
                      obj: ObjectInfo) -> Data | Replaced:
    """``obj``'s bytes for the cache to store under its version: checked
    against its crc32c by the cache, or without one read at that version
    (``aioflux._engines.cache.read_listed``)."""
    if obj.crc32c is not None or not obj.generation:
        return await read(obj.bucket, obj.name, None)  # the cache checks the crc32c
    return await read_listed(obj, lambda o, generation: read(o.bucket, o.name, generation))


def _hedger(op: str, hedge_after: HedgeAfter) -> Hedger | None:
    try:
        check_hedge(op, hedge_after, DEFAULT_HEDGE_BUDGET)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    # No gate: the URLs may be on several stores, each with its own permits.
    return None if hedge_after is None else Hedger(hedge_after)


async def aload_files(urls: Iterable[str] | AsyncIterable[str], *,
                      client: AnyStore | None = None,
                      concurrency: int = DEFAULT_LOAD_CONCURRENCY,
                      ordered: bool = True,
                      cache_dir: str | os.PathLike[str] | None = None,
                      cache_limit: int | None = None,
                      hedge_after: HedgeAfter = None) -> AsyncGenerator[tuple[str, bytes], None]:
    """Download each URL, at most ``concurrency`` at once.

    Args:
        urls: object URLs (``gs://``, ``s3://``, ``az://``, ``file://`` or
            paths; a sync or async iterable, read lazily).
        client: the store that serves the URLs' scheme (an ``AsyncClient``,
            ``S3Store``, ``AzureStore``..., or a blocking ``SyncStore``); default: a
            process-wide store per scheme, from the environment. Files need none.
        concurrency: downloads in flight.
        ordered: yield in input order (a late download does not hold the
            ones behind it: they go on, their bytes waiting within 256 MiB);
            else as downloads complete.
        cache_dir: a local disk cache across passes (shared by processes);
            each URL is then ``stat``-ed (one metadata request) to learn the
            version the cache keys on, and its body read from disk on a hit.
        cache_limit: most bytes in ``cache_dir`` (LRU eviction); None: no limit.
        hedge_after: a second GET for a read not done after this many
            seconds, or ``"auto"`` (see ``DownloadOptions.hedge_after``;
            at most 5% more requests).

    Yields:
        ``(url, bytes)``.

    Raises:
        InvalidURL: a malformed URL.
        InvalidArgument: ``cache_limit`` without ``cache_dir``,
            ``hedge_after`` out of range, or ``urls`` one URL or no iterable.
        StorageError: a download failed (pending ones are cancelled first).
    """
    _check_urls("aload_files", urls)
    cache = cache_from_args("aload_files", cache_dir, cache_limit)
    hedger = _hedger("aload_files", hedge_after)
    async with aclosing(_loaded(urls, client, concurrency, ordered, cache, hedger)) as loaded:
        async for pair in loaded:
            yield pair


def load_files(urls: Iterable[str], *, client: AnyStore | None = None,
               concurrency: int = DEFAULT_LOAD_CONCURRENCY,
               ordered: bool = True, cache_dir: str | os.PathLike[str] | None = None,
               cache_limit: int | None = None,
               hedge_after: HedgeAfter = None) -> Iterator[tuple[str, bytes]]:
    """Blocking ``aload_files``: download each URL, at most ``concurrency``
    at once; ``urls`` is iterated in the caller's thread (a list or tuple,
    which nothing can block, on aioflux's loop: its results come over a
    batch at a time).

    Args:
        urls: object URLs (``gs://``, ``s3://``, ``az://``, ``file://`` or
            paths; e.g. from ``list_files``).
        client: the store that serves the URLs' scheme (an ``AsyncClient``,
            ``S3Store``, ``AzureStore``..., or a blocking ``SyncStore``); default: a
            process-wide store per scheme, from the environment. Files need none.
        concurrency: downloads in flight.
        ordered: yield in input order (as for ``aload_files``); else as downloads
            complete.
        cache_dir: a local disk cache (see ``aload_files``).
        cache_limit: most bytes in ``cache_dir``; None: no limit.
        hedge_after: as for ``aload_files``.

    Returns:
        An iterator of ``(url, bytes)``.

    Raises:
        InvalidArgument: a setting of the wrong type, or ``urls`` one URL
            or no iterable (at once).
        InvalidURL: a malformed URL (while iterating: ``urls`` is lazy).
        StorageError: a download failed (pending ones are cancelled first).
    """
    _check_urls("load_files", urls)
    check_instance("load_files", "client", client, (ObjectStore, SyncStore), optional=True)
    check_int("load_files", "concurrency", concurrency, minimum=1)
    check_bool("load_files", "ordered", ordered)
    cache = cache_from_args("load_files", cache_dir, cache_limit)
    hedger = _hedger("load_files", hedge_after)
    if isinstance(urls, (list, tuple)):
        # Iterating it cannot block the loop, so the window runs there and
        # the results come over a batch a hop: a hop a URL (window_sync)
        # cost ~40 us more CPU an object (perf scenario read_small). What
        # waits for the caller is bounded as Client.stream's hand-off is.
        pairs = _loaded(list(urls), client, concurrency, ordered, cache, hedger)
        return iterate(pairs, nbytes=_pair_bytes, max_bytes=DEFAULT_PREFETCH_BYTES // 4)
    portal = get_portal()

    def start(url: str) -> concurrent.futures.Future[bytes]:
        # The window then waits for the read: on the loop thread, that would
        # block the loop that reads, for good.
        portal.refuse_loop_thread(f"load_files {url}")
        return portal.submit(_read(url, client, cache, hedger))

    return window_sync(urls, start, limit=concurrency, ordered=ordered,
                       max_bytes=DEFAULT_PREFETCH_BYTES, measure=len)


async def _loaded(urls: Iterable[str] | AsyncIterable[str], client: AnyStore | None,
                  concurrency: int, ordered: bool, cache: DiskCache | None,
                  hedger: Hedger | None) -> AsyncGenerator[tuple[str, bytes], None]:
    """The downloads of ``aload_files`` (and ``load_files`` of a list), on the
    running loop."""
    async with aclosing(window(urls, lambda u: _read(u, client, cache, hedger), limit=concurrency,
                               ordered=ordered, max_bytes=DEFAULT_PREFETCH_BYTES,
                               nbytes=_unknown, measure=len)) as loaded:
        async for pair in loaded:
            yield pair


def _pair_bytes(pair: tuple[str, bytes]) -> int:
    return len(pair[1])


def _unknown(url: str) -> int:
    """A URL's bytes before its read: unknown (counted once read)."""
    return 0
