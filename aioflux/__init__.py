"""aioflux: fast Google Cloud Storage for PyTorch, asyncio first.

The async client is importable without torch; datasets and checkpointing
live in :mod:`aioflux.torch`, the emulator in :mod:`aioflux.testing`.
"""

from ._async_writer import AsyncObjectWriter
from ._bridge import call, get_portal, submit
from ._clean import CleanReport, clean_bucket
from ._client import AsyncClient
from ._config import ClientConfig, RetryPolicy, Timeouts
from ._download import Downloader, DownloadOptions, DownloadStats, download_many
from ._errors import (
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
    StorageError,
    TLSError,
    TransportError,
)
from ._iterables import StreamItem, alist_files, aload_files, list_files, load_files
from ._listing import COMPOSED_PREFIX, list_objects_parallel
from ._open import open
from ._reader import ObjectReader
from ._resumable import ResumableUpload
from ._sync import Client
from ._types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from ._urls import GcsURL, parse_url
from ._writer import ObjectWriter

__version__ = "0.1.0"

__all__ = [
    "AiofluxError",
    "AsyncClient",
    "AsyncObjectWriter",
    "BridgeError",
    "COMPOSED_PREFIX",
    "ChecksumMismatch",
    "CleanReport",
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
    "MultipartUploadInfo",
    "NotFound",
    "ObjectInfo",
    "ObjectReader",
    "ObjectWriter",
    "PartInfo",
    "PermissionDenied",
    "PreconditionFailed",
    "ProtocolError",
    "RateLimited",
    "ResumableUpload",
    "RetryPolicy",
    "ServerError",
    "StorageError",
    "StreamItem",
    "TLSError",
    "Timeouts",
    "TransportError",
    "__version__",
    "alist_files",
    "aload_files",
    "call",
    "clean_bucket",
    "download_many",
    "get_portal",
    "list_files",
    "list_objects_parallel",
    "load_files",
    "open",
    "parse_url",
    "submit",
]
