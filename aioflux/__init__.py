"""aioflux: fast Google Cloud Storage for PyTorch, asyncio first.

The async client is importable without torch; datasets and checkpointing
live in :mod:`aioflux.torch`, the emulator in :mod:`aioflux.testing`.
"""

from ._bridge import call, get_portal, submit
from ._client import AsyncClient
from ._config import ClientConfig, RetryPolicy, Timeouts
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
    RateLimited,
    ServerError,
    StorageError,
    TransportError,
)
from ._open import open
from ._reader import ObjectReader
from ._resumable import ResumableUpload
from ._sync import Client
from ._types import ListPage, MultipartUploadInfo, ObjectInfo, PartInfo
from ._urls import GcsURL, parse_url
from ._writer import AsyncObjectWriter, ObjectWriter

__version__ = "0.1.0"

__all__ = [
    "AiofluxError",
    "AsyncClient",
    "AsyncObjectWriter",
    "BridgeError",
    "ChecksumMismatch",
    "Client",
    "ClientConfig",
    "Conflict",
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
    "RateLimited",
    "ResumableUpload",
    "RetryPolicy",
    "ServerError",
    "StorageError",
    "Timeouts",
    "TransportError",
    "__version__",
    "call",
    "get_portal",
    "open",
    "parse_url",
    "submit",
]
