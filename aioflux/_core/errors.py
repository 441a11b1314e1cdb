"""The aioflux exception tree.

::

    AiofluxError
    ├── InvalidURL                 (also ValueError)   bad gs:// URL or object name
    ├── InvalidArgument            (also ValueError)   unusable argument, setting or state
    ├── BridgeError                (also RuntimeError) sync API misused (e.g. from the loop thread)
    ├── ShardFormatError           (also ValueError)   a shard's bytes are not its format
    └── StorageError                                   a request to storage failed
        ├── NotFound               (also FileNotFoundError)   404
        ├── PermissionDenied       (also PermissionError)     401, 403; a GCS requester-pays
        │                                                     bucket's 400 UserProjectMissing
        ├── PreconditionFailed                                412 (and 304)
        ├── Conflict                                          409
        ├── InvalidRequest         (also ValueError)          other 4xx
        ├── RateLimited                                       429
        ├── ServerError                                       5xx, 408
        ├── TransportError         (also ConnectionError)     reset, refused, timeout
        │   └── TLSError                                      certificate rejected (final)
        ├── ProtocolError                                     redirect, wrong range or body (final)
        └── ChecksumMismatch                                  crc32c or length mismatch

Every message names the operation, bucket and object. No message carries an
access token or a signed URL: errors are built here from plain fields, never
from aiohttp's request info (which holds the Authorization header).

Exceptions survive pickling, so DataLoader workers can send them to the main
process intact. The public ones are named ``aioflux.X`` (their
``__module__``, set at the end of this module), as tracebacks show and
pickles look them up.
"""

from __future__ import annotations

from typing import Any

from .secrets import query_names, scrub

__all__ = [
    "AiofluxError",
    "BridgeError",
    "ChecksumMismatch",
    "Conflict",
    "InvalidArgument",
    "InvalidRequest",
    "InvalidURL",
    "NotFound",
    "PermissionDenied",
    "PreconditionFailed",
    "ProtocolError",
    "RateLimited",
    "ServerError",
    "ShardFormatError",
    "StorageError",
    "TLSError",
    "TransportError",
    "add_note",
    "error_for_status",
    "out_of_memory",
]

_MAX_DETAIL = 300


class AiofluxError(Exception):
    """Base class of every error aioflux raises on purpose."""


class InvalidURL(AiofluxError, ValueError):
    """A ``gs://`` URL, bucket name or object name is malformed."""


class InvalidArgument(AiofluxError, ValueError):
    """An argument, setting or call sequence that cannot work (e.g. a buffer
    too small for the object, a memory budget exceeded)."""


class BridgeError(AiofluxError, RuntimeError):
    """The sync API was called where it would deadlock or after shutdown."""


class ShardFormatError(AiofluxError, ValueError):
    """A shard (or its index) is not what its format says: a corrupt tar
    header, a member running past the end, a truncated or damaged index.
    The message names the shard and the byte offset."""


class StorageError(AiofluxError):
    """A storage operation failed.

    Args:
        message: what failed, naming the operation, bucket and object.
        operation: what was attempted, e.g. ``"read"``, ``"compose"``.
        bucket: bucket name, if any.
        name: object name, if any.
        status: HTTP status, if the server answered.
        reason: the server's machine-readable reason, if any.
        attempts: how many attempts were made before giving up.

    Attributes:
        operation: what was attempted, e.g. ``"read"``, ``"compose"``.
        bucket: bucket name, if any.
        name: object name, if any.
        status: HTTP status, if the server answered.
        reason: the server's machine-readable reason (``notFound``,
            ``NoSuchKey``...), if any.
        attempts: how many attempts were made before giving up.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str = "",
        bucket: str = "",
        name: str = "",
        status: int | None = None,
        reason: str = "",
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.bucket = bucket
        self.name = name
        self.status = status
        self.reason = reason
        self.attempts = attempts

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError subclasses pickle their args by position; keep one path for all.
        return (_rebuild, (type(self), str(self.args[0]) if self.args else ""), self.__dict__)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _rebuild(cls: type[StorageError], message: str) -> StorageError:
    return cls(message)


class NotFound(StorageError, FileNotFoundError):
    """The bucket, object or upload does not exist (404)."""


class PermissionDenied(StorageError, PermissionError):
    """The credentials may not do this (401, 403), or a requester-pays
    bucket's request names no project to bill (GCS's 400, reason
    ``UserProjectMissing``; on S3 a 403): the message says what to set."""


class PreconditionFailed(StorageError):
    """A generation or metageneration precondition did not hold (412)."""


class Conflict(StorageError):
    """The resource already exists or is being changed concurrently (409)."""


class InvalidRequest(StorageError, ValueError):
    """The server rejected the request as malformed (400 and other 4xx).

    A read starting at or past the object's end is one (416); one starting
    below the size its reader knows is a ``ProtocolError`` instead.
    """


class RateLimited(StorageError):
    """Too many requests (429), after retries were exhausted."""


class ServerError(StorageError):
    """The server failed (5xx or 408), after retries were exhausted."""


class TransportError(StorageError, ConnectionError):
    """The connection failed, was reset, or timed out."""


class TLSError(TransportError):
    """The TLS handshake failed (e.g. the server's certificate is not trusted).

    Not retried: the same certificate fails again. Trust a private CA with
    ``ClientConfig(ca_file=...)`` or ``ClientConfig(ssl_context=...)``.
    """


class ProtocolError(StorageError):
    """The server's answer breaks the JSON/XML API's protocol: a redirect
    (the APIs never redirect), a range other than the one asked for, an
    object size other than the one known (a range starting below it refused
    as past the end, 416, included: the object is shorter than said), an
    unexpected status, a body that is not what the headers announce, or a
    metadata answer (a listing page, an object resource) over its 64 MiB cap.

    Not retried: a server or proxy that answers this way does so again.
    """


class ChecksumMismatch(StorageError):
    """Bytes received or stored do not match their crc32c or length."""


def as_operation(exc: NotFound, operation: str) -> NotFound:
    """``exc``, raised by a step of ``operation`` (the stat before a copy or
    a pinned delete), as ``operation``'s own error: it named the step
    ("stat s3://b/o failed") where the caller had asked to copy or delete."""
    message = str(exc)
    if exc.operation and message.startswith(exc.operation + " "):
        message = operation + message[len(exc.operation):]
    return type(exc)(message, operation=operation, bucket=exc.bucket, name=exc.name,
                     status=exc.status, reason=exc.reason, attempts=exc.attempts)


def describe(operation: str, bucket: str, name: str, scheme: str = "gs") -> str:
    """Render ``operation gs://bucket/name`` (``file:///bucket/name``...) for
    messages; a web URL's query with its values cut (a signed URL's
    signature rides there: :func:`~aioflux._core.secrets.query_names`)."""
    if not bucket:
        return operation
    root = f"file:///{bucket}" if scheme == "file" else f"{scheme}://{bucket}"
    if scheme in ("http", "https"):
        name = query_names(name)
    return f"{operation} {root}/{name}" if name else f"{operation} {root}"


def out_of_memory(operation: str, bucket: str, name: str, scheme: str,
                  size: int) -> StorageError:
    """The error for ``size`` bytes of an object that could not be allocated.

    Raised ``from`` the ``MemoryError``: a read too large for the process
    is the object's failure, named like any other, not a bare MemoryError.

    Args:
        operation: the operation that failed.
        bucket: bucket name.
        name: object name.
        scheme: the store's URL scheme, for the message.
        size: the bytes that did not fit.

    Returns:
        The error to raise.
    """
    return StorageError(f"{describe(operation, bucket, name, scheme)} failed: {size} bytes "
                        "do not fit in memory", operation=operation, bucket=bucket, name=name)


# S3 (and Azure) error codes (``<Error><Code>``) whose class the status alone gets
# wrong: AWS's retry guidance treats these as transient (throttling, a
# request the server timed out), and token problems as authentication.
_S3_CODES: dict[str, type[StorageError]] = {
    "SlowDown": RateLimited,
    "Throttling": RateLimited,
    "ThrottlingException": RateLimited,
    "ThrottledException": RateLimited,
    "RequestThrottled": RateLimited,
    "RequestThrottledException": RateLimited,
    "TooManyRequestsException": RateLimited,
    "ProvisionedThroughputExceededException": RateLimited,
    "TransactionInProgressException": RateLimited,
    "RequestLimitExceeded": RateLimited,
    "BandwidthLimitExceeded": RateLimited,
    "LimitExceededException": RateLimited,
    "EC2ThrottledException": RateLimited,
    "RequestTimeout": ServerError,
    "RequestTimeoutException": ServerError,
    "PriorRequestNotComplete": ServerError,
    "InternalError": ServerError,
    "ExpiredToken": PermissionDenied,
    "ExpiredTokenException": PermissionDenied,
    "InvalidAccessKeyId": PermissionDenied,
    "SignatureDoesNotMatch": PermissionDenied,
    "InvalidToken": PermissionDenied,
    "NoSuchKey": NotFound,
    "NoSuchBucket": NotFound,
    "NoSuchUpload": NotFound,
    "NoSuchVersion": NotFound,
    "PreconditionFailed": PreconditionFailed,
    "InvalidRange": InvalidRequest,
    # Azure Blob's (x-ms-error-code, <Error><Code>): ServerBusy is its
    # throttling (503, "ingress/egress over the account limit"),
    # OperationTimedOut a request the service gave up on (500).
    "ServerBusy": RateLimited,
    "OperationTimedOut": ServerError,
    "AuthenticationFailed": PermissionDenied,
    "ConditionNotMet": PreconditionFailed,
    "BlobNotFound": NotFound,
    "ContainerNotFound": NotFound,
}


# What GCS answers a request of a requester-pays bucket that names no
# project to bill: 400 "required" on the JSON API (only its message tells it
# from other missing fields), 400 UserProjectMissing on the XML API.
_USER_PROJECT_MISSING = "UserProjectMissing"
_USER_PROJECT_HINT = ("the bucket is requester-pays: name the Google Cloud project to bill "
                      "with user_project= (AsyncClient, Client, new_store, the storage "
                      "option; or gcsfs's requester_pays=) or the CLI's --user-project")


def _user_project_missing(status: int, reason: str, detail: str) -> bool:
    return status == 400 and (reason == _USER_PROJECT_MISSING or (
        reason == "required" and "requester pays" in detail.lower()))


def error_for_status(
    status: int,
    detail: str,
    *,
    operation: str,
    bucket: str = "",
    name: str = "",
    reason: str = "",
    attempts: int = 1,
    scheme: str = "gs",
) -> StorageError:
    """Map an HTTP error status to the most specific exception.

    An S3 error code that AWS documents as retryable or as an
    authentication failure decides over the status (``RequestTimeout`` and
    ``Throttling`` come as 400, ``ExpiredToken`` as 400). GCS's refusal of
    a requester-pays bucket's request that names no project to bill (a 400)
    is a :class:`PermissionDenied` with reason ``UserProjectMissing``, its
    message saying what to set.

    Args:
        status: HTTP status code (>= 300).
        detail: the server's message, shortened.
        operation: the operation that failed.
        bucket: bucket name.
        name: object name.
        reason: machine-readable reason from the error body.
        attempts: attempts made.
        scheme: the store's URL scheme, for the message.

    Returns:
        The exception instance to raise.
    """
    cls: type[StorageError]
    by_code = _S3_CODES.get(reason)
    hint = ""
    if scheme == "gs" and _user_project_missing(status, reason, detail):
        cls, reason, hint = PermissionDenied, _USER_PROJECT_MISSING, _USER_PROJECT_HINT
    elif by_code is not None:
        cls = by_code
    elif status == 404:
        cls = NotFound
    elif status in (401, 403):
        cls = PermissionDenied
    elif status in (304, 412):
        cls = PreconditionFailed
    elif 300 <= status < 400:
        # The JSON and XML APIs never redirect: following one would trust
        # another server's bytes (or send it our token).
        cls = ProtocolError
    elif status == 409:
        cls = Conflict
    elif status == 429:
        cls = RateLimited
    elif status == 408 or status >= 500:
        cls = ServerError
    else:
        cls = InvalidRequest
    # What a server says may echo the request (a proxy's error page, a
    # signature's "string to sign"): its credentials are cut before it
    # goes into the message.
    detail = " ".join(scrub(detail).split())[:_MAX_DETAIL]
    suffix = f" after {attempts} attempts" if attempts > 1 else ""
    message = f"{describe(operation, bucket, name, scheme)} failed: HTTP {status}"
    if reason:
        message += f" {reason}"
    if detail:
        message += f": {detail}"
    if hint:
        message += f"; {hint}"
    return cls(
        message + suffix,
        operation=operation,
        bucket=bucket,
        name=name,
        status=status,
        reason=reason,
        attempts=attempts,
    )


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` where Python has it (3.11+); on 3.10 the note
    is kept in ``__notes__`` as 3.11 keeps it, unprinted (the method is
    3.11's: called there, it raises ``AttributeError`` in place of the
    error it annotates)."""
    adding = getattr(exc, "add_note", None)
    if adding is not None:
        adding(note)
        return
    notes = getattr(exc, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
    notes.append(note)
    try:
        exc.__notes__ = notes  # type: ignore[attr-defined]
    except AttributeError:
        pass  # an exception that takes no attributes: its note is lost, not its error


# Tracebacks name an error as users import and catch it (aioflux.NotFound),
# not by its private home; pickles (a DataLoader worker's error) find it
# there too (the package imports it from here on first use). Set here, not
# in the package, which imports nothing until a name is asked for: an error
# raised before anyone asked for aioflux.NotFound is named so too.
for _name in __all__:
    _item = globals()[_name]
    if isinstance(_item, type) and issubclass(_item, AiofluxError):
        _item.__module__ = "aioflux"
del _name, _item

