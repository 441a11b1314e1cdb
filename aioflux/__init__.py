"""aioflux: fast object storage for PyTorch, asyncio first.

Public API (everything else lives in private modules and may change):

- stores: :class:`AsyncClient` (GCS, ``gs://``) and its blocking twin
  :class:`Client`; :class:`S3Store` (``s3://``, and S3-compatible stores;
  needs ``aioflux-storage[s3]``); :class:`LocalStore` (``file://`` and plain paths); the
  :class:`ObjectStore` protocol they share;
- settings: :class:`ClientConfig`, :class:`RetryPolicy`, :class:`Timeouts`,
  :class:`WriterOptions`, :class:`ReaderOptions`;
- records: :class:`ObjectInfo`, :class:`ListPage`, :class:`PartInfo`,
  :class:`MultipartUploadInfo`, :class:`StreamItem`, :class:`StoreURL`;
- files and URLs: :func:`open`, :func:`parse_url`;
- iterables: :func:`list_files`, :func:`load_files` and the async
  :func:`alist_files`, :func:`aload_files`;
- the download planner: :func:`download_many`, :class:`Downloader`,
  :class:`DownloadOptions`, :class:`DownloadStats`;
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
    from ._core.config import ClientConfig, RetryPolicy, Timeouts
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
    from ._core.options import ReaderOptions, WriterOptions
    from ._core.store import ObjectStore
    from ._core.types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
    from ._core.urls import GcsURL, StoreURL, parse_url
    from ._engines.download import Downloader, DownloadOptions, DownloadStats, download_many
    from ._engines.iterables import StreamItem
    from ._engines.writer import UnclosedWriterWarning
    from ._version import __version__
    from .gcs._client import AsyncClient
    from .local import LocalStore
    from .s3 import S3Store

__all__ = [
    "AiofluxError",
    "AsyncClient",
    "BridgeError",
    "ChecksumMismatch",
    "Client",
    "ClientConfig",
    "Conflict",
    "DownloadOptions",
    "DownloadStats",
    "Downloader",
    "GcsURL",
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
    "TLSError",
    "Timeouts",
    "TransportError",
    "UnclosedWriterWarning",
    "WriterOptions",
    "__version__",
    "alist_files",
    "aload_files",
    "download_many",
    "list_files",
    "load_files",
    "open",
    "parse_url",
]

# Where each name lives: __getattr__ imports it from there on first use.
# tests/unit/test_lazy_imports.py holds it to the imports above, which are
# what mypy and IDEs read.
_HOMES = {
    "AiofluxError": "._core.errors",
    "AsyncClient": ".gcs._client",
    "BridgeError": "._core.errors",
    "ChecksumMismatch": "._core.errors",
    "Client": "._api.sync",
    "ClientConfig": "._core.config",
    "Conflict": "._core.errors",
    "DownloadOptions": "._engines.download",
    "DownloadStats": "._engines.download",
    "Downloader": "._engines.download",
    "GcsURL": "._core.urls",
    "InvalidArgument": "._core.errors",
    "InvalidRequest": "._core.errors",
    "InvalidURL": "._core.errors",
    "ListPage": "._core.types",
    "LocalStore": ".local",
    "MultipartUploadInfo": "._core.types",
    "NotFound": "._core.errors",
    "ObjectInfo": "._core.types",
    "ObjectStore": "._core.store",
    "PartInfo": "._core.types",
    "PermissionDenied": "._core.errors",
    "PreconditionFailed": "._core.errors",
    "ProtocolError": "._core.errors",
    "RateLimited": "._core.errors",
    "ReaderOptions": "._core.options",
    "RetryPolicy": "._core.config",
    "S3Store": ".s3",
    "ServerError": "._core.errors",
    "ShardFormatError": "._core.errors",
    "StorageError": "._core.errors",
    "StoreURL": "._core.urls",
    "StreamItem": "._engines.iterables",
    "TLSError": "._core.errors",
    "Timeouts": "._core.config",
    "TransportError": "._core.errors",
    "UnclosedWriterWarning": "._engines.writer",
    "WriterOptions": "._core.options",
    "__version__": "._version",
    "alist_files": "._api.iterables",
    "aload_files": "._api.iterables",
    "download_many": "._engines.download",
    "list_files": "._api.iterables",
    "load_files": "._api.iterables",
    "open": "._api.open",
    "parse_url": "._core.urls",
}


if not TYPE_CHECKING:  # mypy reads the imports above, and refuses a misspelt name

    def __getattr__(name: str) -> object:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(home, __name__), name)
        globals()[name] = value  # later uses find it without this call
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


del TYPE_CHECKING
