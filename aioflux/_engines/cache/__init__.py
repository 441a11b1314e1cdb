"""The local disk cache across epochs (see :mod:`._disk`)."""

from ._disk import (
    DEFAULT_WAIT_LIMIT,
    FIRST_POLL,
    MAX_POLL,
    CacheStats,
    DiskCache,
    Fetch,
    Replaced,
    Unclaimable,
    cache_from_args,
    read_listed,
    version_token,
)
from ._downloader import CachedDownloader
from ._files import CacheInfo, clear, info, is_cache

__all__ = [
    "DEFAULT_WAIT_LIMIT",
    "FIRST_POLL",
    "MAX_POLL",
    "CacheInfo",
    "CacheStats",
    "CachedDownloader",
    "DiskCache",
    "Fetch",
    "Replaced",
    "Unclaimable",
    "cache_from_args",
    "read_listed",
    "clear",
    "info",
    "is_cache",
    "version_token",
]
