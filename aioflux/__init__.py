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
- errors: :class:`AiofluxError` and its subclasses.

The async client is importable without torch; datasets and checkpointing
live in :mod:`aioflux.torch`, the emulator in :mod:`aioflux.testing`.
"""

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

# Tracebacks name an error as users import and catch it (aioflux.NotFound),
# not by its private home; pickles (a DataLoader worker's error) find it
# here too: importing any aioflux module imports this package first. Only
# the errors: other classes keep their home, where typing.get_type_hints
# resolves the names their annotations use.
for _name in __all__:
    _item = globals()[_name]
    if isinstance(_item, type) and issubclass(_item, AiofluxError):
        _item.__module__ = __name__
del _name, _item
