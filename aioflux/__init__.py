"""aioflux: fast object storage for PyTorch, asyncio first.

Public API (everything else lives in private modules and may change):

- stores, async: :class:`GcsStore` (``gs://``; ``AsyncClient`` is another
  name for it), :class:`S3Store` (``s3://`` and S3-compatible stores; the
  ``s3`` extra), :class:`AzureStore` (``az://``; the ``azure`` extra),
  :class:`LocalStore` (``file://`` and plain paths), :class:`HttpStore`
  (read-only ``http(s)://``), :class:`HfStore` (read-only ``hf://``, the
  Hugging Face Hub); the :class:`ObjectStore` protocol they share;
- the blocking face of any store, :class:`SyncStore`; GCS's, built from its
  settings, :class:`Client`;
- settings: :class:`ClientConfig`, :class:`RetryPolicy`, :class:`Timeouts`,
  :class:`WriterOptions`, :class:`ReaderOptions`;
- records: :class:`ObjectInfo`, :class:`ListPage`, :class:`PartInfo`,
  :class:`MultipartUploadInfo`, :class:`StreamItem`, :class:`StoreURL`;
- files and URLs: :func:`open`, :func:`parse_url`;
- iterables: :func:`list_files`, :func:`load_files` and the async
  :func:`alist_files`, :func:`aload_files`;
- the download planner: :class:`Downloader`, :class:`DownloadOptions`,
  :class:`DownloadStats`;
- errors: :class:`AiofluxError` and its subclasses; the warning a writer
  dropped unclosed gives, :class:`UnclosedWriterWarning`.

The async client is importable without torch; datasets and checkpointing
live in :mod:`aioflux.torch`, the emulator in :mod:`aioflux.testing`.

Each name is imported on its first use (``aioflux.open`` brings aiohttp
and the stores): ``import aioflux`` alone imports nothing else.
"""

# Not typing's TYPE_CHECKING: importing typing is a cost of its own (mypy
# reads any name TYPE_CHECKING as its flag). Deleted below: not a public name.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._api.iterables import alist_files, aload_files, list_files, load_files
    from ._api.open import open
    from ._api.sync import Client
    from ._api.sync_store import SyncStore
    from ._core.errors import (
        AiofluxError,
        BridgeError,
        ChecksumMismatch,
        Conflict,
        InvalidArgument,
        InvalidRequest,
        InvalidURL,
        NotFound,
        PermissionDenied,
        PreconditionFailed,
        ProtocolError,
        RateLimited,
        ServerError,
        ShardFormatError,
        StorageError,
        TLSError,
        TransportError,
    )
    from ._core.records.types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
    from ._core.records.urls import StoreURL, parse_url
    from ._core.settings.config import ClientConfig, RetryPolicy, Timeouts
    from ._core.settings.options import ReaderOptions, WriterOptions
    from ._core.storage.protocol import ObjectStore
    from ._engines.download import Downloader, DownloadOptions, DownloadStats
    from ._engines.download import download_many as download_many  # deprecated
    from ._engines.iterables import StreamItem
    from ._engines.writer import UnclosedWriterWarning
    from ._version import __version__
    from .azure import AzureStore
    from .gcs._client import AsyncClient as AsyncClient  # GcsStore's other name (_ALIASES)
    from .gcs._client import GcsStore
    from .hf import HfStore
    from .http import HttpStore
    from .local import LocalStore
    from .s3 import S3Store

    GcsURL = StoreURL  # deprecated (_DEPRECATED below), typed as what replaces it

__all__ = [
    "AiofluxError",
    "AzureStore",
    "BridgeError",
    "ChecksumMismatch",
    "Client",
    "ClientConfig",
    "Conflict",
    "DownloadOptions",
    "DownloadStats",
    "Downloader",
    "GcsStore",
    "HfStore",
    "HttpStore",
    "InvalidArgument",
    "InvalidRequest",
    "InvalidURL",
    "ListPage",
    "LocalStore",
    "MultipartUploadInfo",
    "NotFound",
    "ObjectInfo",
    "ObjectStore",
    "PartInfo",
    "PermissionDenied",
    "PreconditionFailed",
    "ProtocolError",
    "RateLimited",
    "ReaderOptions",
    "RetryPolicy",
    "S3Store",
    "ServerError",
    "ShardFormatError",
    "StorageError",
    "StoreURL",
    "StreamItem",
    "SyncStore",
    "TLSError",
    "Timeouts",
    "TransportError",
    "UnclosedWriterWarning",
    "WriterOptions",
    "__version__",
    "alist_files",
    "aload_files",
    "list_files",
    "load_files",
    "open",
    "parse_url",
]

# Where each name lives: __getattr__ imports it from there on first use.
# tests/api/test_lazy_imports.py holds it to the imports above, which are
# what mypy and IDEs read.
_HOMES = {
    "AiofluxError": "._core.errors",
    "AzureStore": ".azure",
    "BridgeError": "._core.errors",
    "ChecksumMismatch": "._core.errors",
    "Client": "._api.sync",
    "ClientConfig": "._core.settings.config",
    "Conflict": "._core.errors",
    "DownloadOptions": "._engines.download",
    "DownloadStats": "._engines.download",
    "Downloader": "._engines.download",
    "GcsStore": ".gcs._client",
    "HfStore": ".hf",
    "HttpStore": ".http",
    "InvalidArgument": "._core.errors",
    "InvalidRequest": "._core.errors",
    "InvalidURL": "._core.errors",
    "ListPage": "._core.records.types",
    "LocalStore": ".local",
    "MultipartUploadInfo": "._core.records.types",
    "NotFound": "._core.errors",
    "ObjectInfo": "._core.records.types",
    "ObjectStore": "._core.storage.protocol",
    "PartInfo": "._core.records.types",
    "PermissionDenied": "._core.errors",
    "PreconditionFailed": "._core.errors",
    "ProtocolError": "._core.errors",
    "RateLimited": "._core.errors",
    "ReaderOptions": "._core.settings.options",
    "RetryPolicy": "._core.settings.config",
    "S3Store": ".s3",
    "ServerError": "._core.errors",
    "ShardFormatError": "._core.errors",
    "StorageError": "._core.errors",
    "StoreURL": "._core.records.urls",
    "StreamItem": "._engines.iterables",
    "SyncStore": "._api.sync_store",
    "TLSError": "._core.errors",
    "Timeouts": "._core.settings.config",
    "TransportError": "._core.errors",
    "UnclosedWriterWarning": "._engines.writer",
    "WriterOptions": "._core.settings.options",
    "__version__": "._version",
    "alist_files": "._api.iterables",
    "aload_files": "._api.iterables",
    "list_files": "._api.iterables",
    "load_files": "._api.iterables",
    "open": "._api.open",
    "parse_url": "._core.records.urls",
}

# Other names of public ones, kept for good: not in __all__ (help() and
# the API reference show each class once, under its own name).
_ALIASES = {"AsyncClient": ("GcsStore", ".gcs._client")}

# Names on their way out (docs/migration/deprecations.md): each use warns, naming what
# replaces it. Not cached, not in __all__: each use is seen.
_DEPRECATED = {
    "GcsURL": ("._core.records.urls", "StoreURL", "aioflux.StoreURL"),
    "download_many": ("._engines.download", "download_many",
                      "aioflux.Downloader(store, options).download_many(objects)"),
}


if not TYPE_CHECKING:  # mypy reads the imports above, and refuses a misspelt name

    def __getattr__(name: str) -> object:
        from importlib import import_module

        home = _HOMES.get(name)
        if home is None:
            if name in _ALIASES:
                attr, home = _ALIASES[name]
                return getattr(import_module(home, __name__), attr)
            if name not in _DEPRECATED:
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
            home, attr, new = _DEPRECATED[name]
            from ._core.deprecation import warn_deprecated

            warn_deprecated(f"aioflux.{name}", new)
            return getattr(import_module(home, __name__), attr)
        value = getattr(import_module(home, __name__), name)
        globals()[name] = value  # later uses find it without this call
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


del TYPE_CHECKING
