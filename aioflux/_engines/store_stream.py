"""``StreamingStore``: :class:`~aioflux._core.storage.base.StoreBase` with ``stream``.

``stream`` is the stream engine (:mod:`.iterables`) over the store itself,
so it lives a layer above the base: the object stores (GCS, S3, Azure)
and the filesystem build on this class; a store whose listing is not worth
streaming (the in-memory one, a read-only web one) on the base alone.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from .._core.storage.base import StoreBase
from .cache import cache_from_args
from .download import DownloadOptions
from .iterables import StreamItem, stream, stream_args

__all__ = ["StreamingStore"]


class StreamingStore(StoreBase):
    """A store that also streams a prefix's objects as they are listed."""

    def stream(self, bucket: str, prefix: str = "", *, concurrency: int | None = None,
               ordered: bool = False, list_concurrency: int | None = None,
               options: DownloadOptions | None = None,
               cache_dir: str | os.PathLike[str] | None = None,
               cache_limit: int | None = None) -> AsyncIterator[StreamItem]:
        """List ``prefix`` in parallel and download each object as it is listed.

        Args:
            bucket: bucket name, or a URL of the store (``prefix`` then empty).
            prefix: only names starting with this.
            concurrency: downloads in flight (``None``: 64).
            ordered: yield in listing order (name order); else as downloads complete.
            list_concurrency: parallel listers (``None``: 16).
            options: planner settings (large objects are read in ranged chunks).
            cache_dir: a local disk cache across passes, keyed by listed versions.
            cache_limit: most bytes in ``cache_dir`` (LRU eviction); None: no limit.

        Returns:
            An async iterator of StreamItem (``.name``, ``.data``, ``.info``).

        Raises:
            InvalidURL: a malformed bucket or URL (at once).
            StorageError: listing or a download failed (while iterating).
        """
        stream_args("stream", bucket, prefix, concurrency, ordered, list_concurrency, options)
        cache = cache_from_args("stream", cache_dir, cache_limit)
        return stream(self, bucket, prefix, concurrency=concurrency, ordered=ordered,
                      list_concurrency=list_concurrency, options=options, cache=cache)
