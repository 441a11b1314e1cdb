"""Composable iterables in the style of the S3 IO DataPipes, sync and async.

``list_files("gs://b/p")`` yields URLs, ``load_files(urls)`` yields
``(url, bytes)`` with bounded concurrency, and :func:`stream` (behind
``AsyncClient.stream``) lists and downloads in one pipeline. The sync forms
run on the process's portal; ``load_files`` pulls its input in the caller's
thread, so it can consume ``list_files`` (or any blocking iterator).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from .._api.sync import Client
from .._core.portal import get_portal
from .._core.types import ObjectInfo
from .._core.urls import parse_url
from .._core.validate import check_bool, check_instance, check_int, check_str, list_args
from ..gcs._client import AsyncClient
from .download import Downloader, DownloadOptions
from .listing import DEFAULT_LIST_CONCURRENCY, iter_objects

__all__ = [
    "DEFAULT_LOAD_CONCURRENCY",
    "StreamItem",
    "alist_files",
    "aload_files",
    "list_files",
    "load_files",
    "stream",
    "stream_args",
]

# As many reads in flight as the client's default semaphore admits.
DEFAULT_LOAD_CONCURRENCY = 64


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One downloaded object.

    Attributes:
        info: its metadata from the listing.
        data: its bytes.
    """

    info: ObjectInfo
    data: bytes | bytearray

    @property
    def name(self) -> str:
        """The object name."""
        return self.info.name

    @property
    def url(self) -> str:
        """``gs://bucket/name``."""
        return self.info.url


def _urls(url: str | Sequence[str]) -> list[str]:
    return [url] if isinstance(url, str) else list(url)


async def alist_files(url: str | Sequence[str], *, client: AsyncClient | None = None,
                      concurrency: int = DEFAULT_LIST_CONCURRENCY) -> AsyncGenerator[str, None]:
    """Yield the URL of every object under each ``gs://bucket/prefix``.

    Args:
        url: one prefix URL or several.
        client: the client (default: a new one, closed at the end).
        concurrency: parallel listers per prefix.

    Yields:
        ``gs://bucket/name`` strings (folder placeholders and composites skipped).

    Raises:
        InvalidURL: a malformed URL.
        StorageError: listing failed.
    """
    own = client is None
    aclient = client or AsyncClient()
    try:
        for one in _urls(url):
            parsed = parse_url(one)
            async with aclosing(iter_objects(aclient, parsed.bucket, parsed.name,
                                             concurrency=concurrency)) as objs:
                async for obj in objs:
                    yield obj.url
    finally:
        if own:
            await aclient.aclose()


def list_files(url: str | Sequence[str], *, client: Client | None = None,
               concurrency: int = DEFAULT_LIST_CONCURRENCY) -> Iterator[str]:
    """Blocking :func:`alist_files`.

    Args:
        url: one prefix URL or several.
        client: a sync Client (default: a new one).
        concurrency: parallel listers per prefix.

    Returns:
        An iterator of ``gs://bucket/name`` strings.

    Raises:
        InvalidURL: a malformed URL (at once).
        InvalidArgument: a setting of the wrong type (at once).
        StorageError: listing failed (while iterating).
    """
    for one in _urls(url):
        parse_url(one)
    check_instance("list_files", "client", client, Client, optional=True)
    check_int("list_files", "concurrency", concurrency, minimum=1)
    return _list_files(url, client, concurrency)


def _list_files(url: str | Sequence[str], client: Client | None,
                concurrency: int) -> Iterator[str]:
    portal = get_portal()
    agen = alist_files(url, client=client.aio if client else None, concurrency=concurrency)
    try:
        while True:
            try:
                yield portal.call(anext(agen))  # type: ignore[arg-type]
            except StopAsyncIteration:
                return
    finally:
        portal.call(agen.aclose())


async def aload_files(urls: Iterable[str] | AsyncIterable[str], *,
                      client: AsyncClient | None = None,
                      concurrency: int = DEFAULT_LOAD_CONCURRENCY,
                      ordered: bool = True) -> AsyncGenerator[tuple[str, bytes], None]:
    """Download each URL, at most ``concurrency`` at once.

    Args:
        urls: ``gs://bucket/name`` URLs (a sync or async iterable, read lazily).
        client: the client (default: a new one, closed at the end).
        concurrency: downloads in flight.
        ordered: yield in input order; else as downloads complete.

    Yields:
        ``(url, bytes)``.

    Raises:
        InvalidURL: a malformed URL.
        StorageError: a download failed (pending ones are cancelled first).
    """
    own = client is None
    aclient = client or AsyncClient()
    pending: deque[tuple[str, asyncio.Task[bytes]]] = deque()

    async def source() -> AsyncGenerator[str, None]:
        if isinstance(urls, AsyncIterable):
            async for u in urls:
                yield u
        else:
            for u in urls:
                yield u

    def start(u: str) -> None:
        p = parse_url(u, require_object=True)
        pending.append((u, asyncio.create_task(aclient.read(p.bucket, p.name))))

    async def take() -> tuple[str, bytes]:
        if ordered:
            u, task = pending.popleft()
            return u, await task
        await asyncio.wait([t for _, t in pending], return_when=asyncio.FIRST_COMPLETED)
        pos = next(n for n, (_, t) in enumerate(pending) if t.done())
        u, task = pending[pos]
        del pending[pos]
        return u, task.result()

    try:
        async with aclosing(source()) as src:
            async for u in src:
                start(u)
                while len(pending) >= concurrency:
                    yield await take()
        while pending:
            yield await take()
    finally:
        for _, task in pending:
            task.cancel()
        await asyncio.gather(*(t for _, t in pending), return_exceptions=True)
        if own:
            await aclient.aclose()


def load_files(urls: Iterable[str], *, client: Client | None = None,
               concurrency: int = DEFAULT_LOAD_CONCURRENCY,
               ordered: bool = True) -> Iterator[tuple[str, bytes]]:
    """Blocking :func:`aload_files`; ``urls`` is iterated in the caller's thread.

    Args:
        urls: ``gs://bucket/name`` URLs (e.g. from :func:`list_files`).
        client: a sync Client (default: a new one).
        concurrency: downloads in flight.
        ordered: yield in input order; else as downloads complete.

    Returns:
        An iterator of ``(url, bytes)``.

    Raises:
        InvalidArgument: a setting of the wrong type (at once).
        InvalidURL: a malformed URL (while iterating: ``urls`` is lazy).
        StorageError: a download failed (pending ones are cancelled first).
    """
    check_instance("load_files", "client", client, Client, optional=True)
    check_int("load_files", "concurrency", concurrency, minimum=1)
    check_bool("load_files", "ordered", ordered)
    return _load_files(urls, client, concurrency, ordered)


def _load_files(urls: Iterable[str], client: Client | None, concurrency: int,
                ordered: bool) -> Iterator[tuple[str, bytes]]:
    portal = get_portal()
    aclient = client.aio if client is not None else AsyncClient()
    pending: deque[tuple[str, concurrent.futures.Future[bytes]]] = deque()

    def take() -> tuple[str, bytes]:
        if not ordered:
            concurrent.futures.wait([f for _, f in pending],
                                    return_when=concurrent.futures.FIRST_COMPLETED)
            pos = next(n for n, (_, f) in enumerate(pending) if f.done())
            pending.rotate(-pos)
        u, fut = pending.popleft()
        return u, fut.result()

    try:
        for u in urls:
            p = parse_url(u, require_object=True)
            pending.append((u, portal.submit(aclient.read(p.bucket, p.name))))
            while len(pending) >= concurrency:
                yield take()
        while pending:
            yield take()
    finally:
        for _, fut in pending:
            fut.cancel()
        concurrent.futures.wait([f for _, f in pending], timeout=30)
        if client is None:
            portal.call(aclient.aclose())


def stream_args(op: str, bucket: object, prefix: object, concurrency: object, ordered: object,
                list_concurrency: object, options: object) -> None:
    """Check the arguments of ``stream`` before anything starts.

    Raises:
        InvalidURL: a malformed bucket or URL.
        InvalidArgument: a wrong type.
    """
    if isinstance(bucket, str) and bucket.startswith("gs://"):
        parse_url(bucket)
        check_str(op, "prefix", prefix)
    else:
        list_args(op, bucket, prefix)
    check_int(op, "concurrency", concurrency, minimum=1, optional=True)
    check_bool(op, "ordered", ordered)
    check_int(op, "list_concurrency", list_concurrency, minimum=1, optional=True)
    check_instance(op, "options", options, DownloadOptions, optional=True)


async def stream(client: AsyncClient, bucket: str, prefix: str = "", *,
                 concurrency: int | None = None, ordered: bool = False,
                 list_concurrency: int | None = None,
                 options: DownloadOptions | None = None) -> AsyncGenerator[StreamItem, None]:
    """List ``prefix`` in parallel and download every object as it is listed.

    Args:
        client: the client.
        bucket: bucket name, or a ``gs://bucket/prefix`` URL (then ``prefix``
            must be empty).
        prefix: only names starting with this.
        concurrency: downloads in flight (``None``: ``DEFAULT_LOAD_CONCURRENCY``).
        ordered: yield in listing order; else as downloads complete.
        list_concurrency: parallel listers (``None``: ``DEFAULT_LIST_CONCURRENCY``).
        options: planner settings (large objects are read in ranged chunks;
            compose is not used here: objects arrive one page at a time).

    Yields:
        StreamItem (``.name``, ``.data``, ``.info``) for every object once.

    Raises:
        InvalidURL: a malformed URL.
        StorageError: listing or a download failed (pending work is cancelled).
    """
    if bucket.startswith("gs://"):
        parsed = parse_url(bucket)
        bucket, prefix = parsed.bucket, parsed.name + prefix
    if concurrency is None:
        concurrency = DEFAULT_LOAD_CONCURRENCY
    if list_concurrency is None:
        list_concurrency = DEFAULT_LIST_CONCURRENCY
    downloader = Downloader(client, options)
    pending: deque[tuple[ObjectInfo, asyncio.Task[bytes | bytearray]]] = deque()

    async def take() -> StreamItem:
        if not ordered:
            await asyncio.wait([t for _, t in pending], return_when=asyncio.FIRST_COMPLETED)
            pos = next(n for n, (_, t) in enumerate(pending) if t.done())
            pending.rotate(-pos)
        info, task = pending.popleft()
        return StreamItem(info, await task)

    try:
        async with aclosing(iter_objects(client, bucket, prefix,
                                         concurrency=list_concurrency)) as objs:
            async for obj in objs:
                pending.append((obj, asyncio.create_task(downloader.download(obj))))
                while len(pending) >= concurrency:
                    yield await take()
        while pending:
            yield await take()
    finally:
        for _, task in pending:
            task.cancel()
        await asyncio.gather(*(t for _, t in pending), return_exceptions=True)
