"""``stream``: list a prefix in parallel and download each object as it is listed.

Behind ``AsyncClient.stream`` and the URL-level iterables of
``aioflux._api.iterables`` (``list_files``, ``load_files``...).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

from .._core.checks.arguments import check_bool, check_instance, check_int, check_str, list_args
from .._core.concurrency.window import window
from .._core.errors import InvalidArgument
from .._core.records.types import ObjectInfo
from .._core.records.urls import parse_url
from .._core.storage.protocol import ObjectStore
from .cache import CachedDownloader, DiskCache
from .download import Downloader, DownloadOptions
from .listing import DEFAULT_LIST_CONCURRENCY, iter_objects

__all__ = [
    "DEFAULT_LOAD_CONCURRENCY",
    "StreamItem",
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


def stream_args(op: str, bucket: object, prefix: object, concurrency: object, ordered: object,
                list_concurrency: object, options: object) -> None:
    """Check the arguments of ``stream`` before anything starts.

    Raises:
        InvalidURL: a malformed bucket or URL.
        InvalidArgument: a wrong type.
    """
    if isinstance(bucket, str) and "://" in bucket:
        parse_url(bucket)
        check_str(op, "prefix", prefix)
    else:
        list_args(op, bucket, prefix)
    check_int(op, "concurrency", concurrency, minimum=1, optional=True)
    check_bool(op, "ordered", ordered)
    check_int(op, "list_concurrency", list_concurrency, minimum=1, optional=True)
    check_instance(op, "options", options, DownloadOptions, optional=True)


async def stream(client: ObjectStore, bucket: str, prefix: str = "", *,
                 concurrency: int | None = None, ordered: bool = False,
                 list_concurrency: int | None = None,
                 options: DownloadOptions | None = None,
                 cache: DiskCache | None = None) -> AsyncGenerator[StreamItem, None]:
    """List ``prefix`` in parallel and download every object as it is listed.

    Args:
        client: the client.
        bucket: bucket name, or a ``gs://bucket/prefix`` URL (then ``prefix``
            must be empty).
        prefix: only names starting with this.
        concurrency: downloads in flight (``None``: ``DEFAULT_LOAD_CONCURRENCY``),
            holding at most ``options.prefetch_bytes`` with the downloaded
            objects not yet yielded (one object always downloads).
        ordered: yield in listing order, the order one listing of the
            store gives (name order), the same every run whatever
            ``list_concurrency``: the parallel listers' pages are put back
            in order, holding at most some five pages a lister. Else as
            downloads complete.
        list_concurrency: parallel listers (``None``: ``DEFAULT_LIST_CONCURRENCY``).
        options: planner settings (large objects are read in ranged chunks;
            compose is not used here: objects arrive one page at a time).
        cache: look each object up in this disk cache first (keyed by the
            listed version: no extra request) and store what is downloaded.

    Yields:
        StreamItem (``.name``, ``.data``, ``.info``) for every object once.

    Raises:
        InvalidURL: a malformed URL.
        StorageError: listing or a download failed (pending work is cancelled).
    """
    if "://" in bucket:
        parsed = parse_url(bucket)
        if parsed.scheme != client.features.scheme:
            raise InvalidArgument(f"stream {bucket}: this store serves "
                                  f"{client.features.scheme}:// URLs")
        if prefix:
            raise InvalidArgument(f"stream {bucket}: prefix={prefix!r} beside a URL; put "
                                  "the whole prefix in the URL")
        bucket, prefix = parsed.bucket, parsed.name
    if concurrency is None:
        concurrency = DEFAULT_LOAD_CONCURRENCY
    if list_concurrency is None:
        list_concurrency = DEFAULT_LIST_CONCURRENCY
    downloader = (Downloader(client, options) if cache is None
                  else CachedDownloader(client, options, cache=cache))
    objects = iter_objects(client, bucket, prefix, concurrency=list_concurrency,
                           ordered=ordered)
    async with aclosing(objects):
        async with aclosing(window(objects, downloader.download, limit=concurrency,
                                   ordered=ordered, max_bytes=downloader.options.prefetch_bytes,
                                   nbytes=_listed_size, measure=len)) as done:
            async for info, data in done:
                yield StreamItem(info, data)


def _listed_size(obj: ObjectInfo) -> int:
    return obj.size
