"""How answers and failures become aioflux errors: the one place where an
HTTP error status, an aiohttp or OS exception, or a redirect turns into the
most specific class of the tree in :mod:`aioflux._core.errors`, with a message
that names the operation, bucket and object and never a header.

Also how much of an answer that is not an object's bytes is read: an error's
body, a metadata answer (:func:`read_metadata`) and a body read only to be
dropped (:func:`drain`) each have a cap, so a hostile or broken server's huge
or endless body costs a bounded amount of memory.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import ssl
from collections.abc import Mapping
from typing import Any, NamedTuple, NoReturn

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from .._core.errors import (
    ProtocolError,
    StorageError,
    TLSError,
    TransportError,
    describe,
    error_for_status,
)
from .._core.secrets import scrub
from .._core.settings.retry import parse_retry_after
from . import slow_drip
from .http import BodyTruncated, MediaResponse
from .proxies import proxy_note
from .responses import HttpResponse
from .slow_drip import Pace, SlowTransfer

__all__ = ["MAX_METADATA_BODY", "Op", "Redirected", "auth_failure", "drain",
           "error_from_media", "error_from_response", "map_exception", "not_found_detail",
           "parse_error_body", "raise_mapped", "read_metadata", "without_secrets"]

_MAX_ERROR_BODY = 64 * 1024
# The most a metadata answer (a listing page, an object resource, a
# multipart-upload document) may be. The largest legitimate ones stay under
# 20 MB: a GCS JSON page of 1,000 full object resources, each with a 1 KiB
# name (written four times: name, id, and percent-encoded in selfLink and
# mediaLink) and 8 KiB of custom metadata (GCS's limit); an S3 ListObjectsV2
# page of 1,000 URL-encoded 1 KiB keys is ~4 MB, a ListParts page ~0.3 MB.
# 64 MiB leaves three times that, so no one needs to tune it (hence no
# ClientConfig field): past it the answer is a server's fault, not a big
# page. A client holds at most max_concurrency such bodies at once.
MAX_METADATA_BODY = 64 * 1024 * 1024
# A body read only to be dropped (a DELETE's, a part upload's) is empty or a
# few hundred bytes; past this much, closing the connection costs less than
# reading on.
_MAX_DRAINED = 64 * 1024
# What one read asks of aiohttp: its StreamReader stops reading the socket
# at twice the largest read asked (set_read_chunk_size), and inflates a
# compressed body in steps of that size; asking for the whole cap at once
# would let it buffer (or inflate) twice the cap before we count a byte.
_READ_PIECE = 256 * 1024
# How long an answer a server holds open while it works may take. S3 answers
# CompleteMultipartUpload and CopyObject with 200 at once, then "periodically
# sends white space characters to keep the connection from timing out" for
# what AWS calls "several minutes": a legitimate drip the pace rule would cut.
KEPT_ALIVE_DEADLINE = 30 * 60.0
_XML_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_XML_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")


class Op(NamedTuple):
    """What a request does, for error messages and logs."""

    operation: str
    bucket: str = ""
    name: str = ""
    #: the store's URL scheme, for messages (``s3://bucket/key``)
    scheme: str = "gs"


class Redirected(Exception):
    """aiohttp was about to follow a redirect (the trace hook stops it)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status} redirect")
        self.status = status


def auth_failure(exc: StorageError, op: Op) -> StorageError:
    """``exc``, raised while a request of ``op`` was being authenticated (a
    google-auth refresh, botocore's credential chain), as that request's error.

    The credential code serves every request and knows none of them: its
    message says what to fix about the credentials, never which call failed.
    This one names the operation, bucket and object first, then that; the
    class, status and reason stay (a timeout is still a retryable
    TransportError). Like every message here, no credential is in it: the
    auth code builds its messages without any.

    Args:
        exc: what the auth raised.
        op: the request's operation, bucket and object.

    Returns:
        A new error of the same class.
    """
    failure = copy.copy(exc)  # the class and its attributes, on a new instance
    failure.args = (f"{describe(op.operation, op.bucket, op.name, op.scheme)}: {exc}",)
    failure.operation, failure.bucket, failure.name = op.operation, op.bucket, op.name
    return failure


async def error_from_response(resp: HttpResponse, op: Op) -> StorageError:
    """The typed error of a response with an error status (its body read, capped)."""
    body = await _error_body(resp)
    message, reason = parse_error_body(body)
    reason = reason or _header_code(resp.headers)
    if not body and not reason and resp.status == 503 and op.scheme == "s3":
        # S3 answers a HEAD it throttles "503 Slow Down" with no body to
        # carry the code (a HEAD has none): that is its SlowDown.
        reason = "SlowDown"
    detail = not_found_detail(resp.status, reason, message, op) or message or resp.reason or ""
    return _with_retry_after(
        error_for_status(resp.status, detail, operation=op.operation,
                         bucket=op.bucket, name=op.name, reason=reason, scheme=op.scheme),
        resp.headers.get("Retry-After"),
    )


# The codes S3 and Azure give a missing object and a missing bucket (GCS's
# JSON API says "No such object: b/n" itself).
_NO_OBJECT = frozenset({"NoSuchKey", "BlobNotFound"})
_NO_BUCKET = frozenset({"NoSuchBucket", "ContainerNotFound"})


def not_found_detail(status: int, reason: str, message: str, op: Op) -> str:
    """What a 404 for a missing object or bucket says, the same on every
    store, naming it as GCS does (``No such object: bucket/name``); ``""``
    for any other error, whose server's own words stay.

    S3 said "The specified key does not exist." and, to a HEAD (whose
    answer has no body), only its status line ("HTTP 404: NOT FOUND");
    Azure added a request id and a time.

    Args:
        status: the HTTP status.
        reason: the error's code (S3's ``<Code>``, Azure's header).
        message: the server's message (empty: the answer had no body).
        op: the operation, bucket and object asked for.

    Returns:
        The detail for the error's message, or ``""``.
    """
    if status != 404 or not op.bucket:
        return ""
    if reason in _NO_BUCKET:
        return f"No such {'container' if op.scheme == 'az' else 'bucket'}: {op.bucket}"
    if not op.name:
        return ""
    if reason in _NO_OBJECT:
        return f"No such object: {op.bucket}/{op.name}"
    if not reason and not message:
        # A HEAD's 404 (S3's stat) has no body to say which is missing.
        return (f"No such object: {op.bucket}/{op.name} (or no bucket {op.bucket}: the "
                "answer does not say which)")
    return ""


async def _error_body(resp: HttpResponse) -> bytes:
    """An error's body, read to its end or 64 KiB: one read hands over what
    has arrived, maybe a first piece, and a code further on may decide the
    error's class (S3's 400 ``RequestTimeout`` is retried). A body cut,
    silent or dripping ends the read: the status is the finding, and what
    arrived still names it."""
    chunks: list[bytes] = []
    try:
        await _read_capped(resp, _MAX_ERROR_BODY, chunks)
    except (aiohttp.ClientError, OSError):  # OSError: timeouts and SlowTransfer too
        pass
    return b"".join(chunks)


async def read_metadata(resp: HttpResponse, op: Op, limit: int | None = None, *,
                        kept_alive: bool = False) -> bytes:
    """The whole body of a metadata answer (a listing page, an object
    resource, a multipart-upload document), read only up to a cap.

    A body announced longer than the cap is not read at all; one that turns
    out longer (chunked) is read no further than one byte past it. Either
    way the rest stays unread, so aiohttp closes the connection instead of
    reusing it.

    Args:
        resp: the response being handled.
        op: operation, bucket and object, for the error.
        limit: most body bytes accepted (default :data:`MAX_METADATA_BODY`).
        kept_alive: the server may hold the answer open with whitespace
            while it works (S3's complete and copy): no pace rule then, but
            at most 30 minutes in all.

    Returns:
        The body.

    Raises:
        ProtocolError: the body is longer than ``limit`` (not retried: the
            same server answers the same way).
        SlowTransfer: less than 16 KiB arrived in a window of a minute
            (:mod:`aioflux._net.slow_drip`; retried as a ``TransportError``).
    """
    cap = MAX_METADATA_BODY if limit is None else limit
    announced = resp.content_length
    if announced is not None and announced > cap:
        raise _too_large(resp, op, f"announces a body over {cap} bytes", "not read")
    chunks: list[bytes] = []
    received = 0
    clock = asyncio.get_running_loop().time
    started = clock()
    speed = None if kept_alive else Pace(slow_drip.WINDOW, started)
    while True:
        # One byte past the cap is enough to know the body is too long.
        chunk = await resp.content.read(min(cap + 1 - received, _READ_PIECE))
        if not chunk:
            return b"".join(chunks)
        received += len(chunk)
        if received > cap:
            raise _too_large(resp, op, f"sent a body over {cap} bytes", "not read further")
        chunks.append(chunk)
        if speed is not None:
            speed.check(received, clock(), "body bytes")
        elif clock() - started > KEPT_ALIVE_DEADLINE:
            raise SlowTransfer(f"the answer was still coming after {KEPT_ALIVE_DEADLINE:g} s")


async def drain(resp: HttpResponse, limit: int | None = None) -> bytes:
    """Read a body whose content nobody needs, at most ``limit`` bytes of it.

    A short body is read to its end, so the keep-alive connection serves the
    next request; of a longer one the rest stays unread, and aiohttp closes
    a connection released with its body unread instead of reusing it. A
    response handler's result is not at stake: its status and headers have
    arrived.

    Args:
        resp: the response being handled.
        limit: most bytes read (default 64 KiB).

    Returns:
        What was read (for an error message), at most ``limit`` bytes.

    Raises:
        SlowTransfer: less than 16 KiB arrived in a window of a minute.
    """
    chunks: list[bytes] = []
    await _read_capped(resp, _MAX_DRAINED if limit is None else limit, chunks)
    return b"".join(chunks)


async def _read_capped(resp: HttpResponse, cap: int, chunks: list[bytes]) -> None:
    """Read a body into ``chunks`` to its end or ``cap`` bytes (what arrived
    stays there if the read fails).

    Raises:
        SlowTransfer: less than 16 KiB arrived in a window of a minute.
        aiohttp.ClientError, OSError: the read failed.
    """
    received = 0
    clock = asyncio.get_running_loop().time
    speed = Pace(slow_drip.WINDOW, clock())
    while received < cap:
        chunk = await resp.content.read(min(cap - received, _READ_PIECE))
        if not chunk:
            break
        received += len(chunk)
        chunks.append(chunk)
        speed.check(received, clock(), "body bytes")


def _too_large(resp: HttpResponse, op: Op, what: str, then: str) -> ProtocolError:
    # The cap only: no header value, no byte of the body.
    return ProtocolError(
        f"{describe(op.operation, op.bucket, op.name, op.scheme)} failed: HTTP {resp.status} "
        f"{what}, the most a metadata answer may be; {then}",
        operation=op.operation, bucket=op.bucket, name=op.name, status=resp.status)


def error_from_media(resp: MediaResponse, op: Op) -> StorageError:
    body = bytes(resp.body or b"")
    message, reason = parse_error_body(body)
    reason = reason or _header_code(resp.headers)
    if not body and not reason and resp.status == 503 and op.scheme == "s3":
        # S3 answers a HEAD it throttles "503 Slow Down" with no body to
        # carry the code (a HEAD has none): that is its SlowDown.
        reason = "SlowDown"
    detail = not_found_detail(resp.status, reason, message, op) or message
    return _with_retry_after(
        error_for_status(resp.status, detail, operation=op.operation, bucket=op.bucket,
                         name=op.name, reason=reason, scheme=op.scheme),
        resp.headers.get("retry-after"),
    )


def _header_code(headers: Mapping[str, str]) -> str:
    """Azure's error code from its header: a HEAD's error has no body to
    name it (a missing blob and a missing container are both a bare 404)."""
    code = headers.get("x-ms-error-code", "")
    return code if code.isascii() and code.isalnum() and len(code) <= 64 else ""


def parse_error_body(body: bytes) -> tuple[str, str]:
    """Extract (message, reason) from a GCS JSON or XML error body.

    Args:
        body: the raw response body.

    Returns:
        The message and machine-readable reason, empty when absent.
    """
    text = body.strip()
    if text.startswith(b"{"):
        try:
            error = json.loads(text).get("error", {})
        except (ValueError, AttributeError):
            return text[:300].decode("utf-8", "replace"), ""
        if isinstance(error, str):
            return error, ""
        errors = error.get("errors") or [{}]
        return str(error.get("message", "")), str(errors[0].get("reason", ""))
    if text.startswith(b"<"):
        code = _XML_CODE.search(text)
        msg = _XML_MESSAGE.search(text)
        return (
            msg.group(1).decode("utf-8", "replace") if msg else "",
            code.group(1).decode("utf-8", "replace") if code else "",
        )
    return text[:300].decode("utf-8", "replace"), ""


def _with_retry_after(exc: StorageError, value: str | None) -> StorageError:
    seconds = parse_retry_after(value)
    if seconds is not None:
        exc.retry_after = seconds  # type: ignore[attr-defined]
    return exc


def raise_mapped(exc: Exception, op: Op) -> NoReturn:
    """Raise the typed error of what an attempt of ``op`` raised.

    Args:
        exc: what the attempt raised.
        op: the operation, for the message.

    Raises:
        StorageError: the mapped error; one naming only the class of an
            exception it cannot map and whose text it cannot cut a
            credential out of (aiohttp's ``InvalidUrlClientError`` shows
            the whole URL, a SAS signature included, whatever its args).
        Exception: ``exc`` itself, its text cut, when it maps to nothing.
    """
    mapped = map_exception(exc, op)
    if mapped is exc:
        if isinstance(exc, StorageError) or without_secrets(exc) is not None:
            raise exc
        raise StorageError(f"{describe(op.operation, op.bucket, op.name, op.scheme)} failed: "
                           f"{type(exc).__name__} (its text withheld: it may hold a "
                           "credential)", operation=op.operation, bucket=op.bucket,
                           name=op.name) from None
    if isinstance(exc, aiohttp.ClientResponseError):
        # Its request_info holds the Authorization header: keep it out of the
        # chain (we raise outside the except block, so no __context__ either).
        raise mapped
    # Chained, a traceback prints its text too: aiohttp writes the whole
    # URL into some ("Connection timeout to host https://...?...&sig=...").
    raise mapped from without_secrets(exc)


def map_exception(exc: BaseException, op: Op) -> BaseException:
    """Translate an aiohttp/OS error into the aioflux tree (the only place).

    Args:
        exc: what the attempt raised.
        op: the operation, for the message.

    Returns:
        The exception to raise (unchanged if not a transport error).
    """
    if isinstance(exc, StorageError):
        return exc
    where = describe(op.operation, op.bucket, op.name, op.scheme)
    fields: dict[str, Any] = {"operation": op.operation, "bucket": op.bucket, "name": op.name}
    if isinstance(exc, Redirected):
        return ProtocolError(f"{where} failed: HTTP {exc.status}: the API does not redirect; "
                             f"not followed", status=exc.status, **fields)
    if isinstance(exc, (ssl.SSLCertVerificationError, aiohttp.ClientConnectorCertificateError)):
        return TLSError(f"{where} failed: TLS certificate rejected ({_safe(exc)}); trust a "
                        f"private CA with ClientConfig(ca_file=...)", **fields)
    if isinstance(exc, (aiohttp.ClientSSLError, ssl.SSLError)) and not isinstance(
            exc, (ssl.SSLZeroReturnError, ssl.SSLEOFError)):
        return TLSError(f"{where} failed: TLS handshake failed ({_safe(exc)})", **fields)
    if isinstance(exc, HttpProcessingError) or (
            isinstance(exc, aiohttp.ClientResponseError)
            and isinstance(exc.__cause__, HttpProcessingError)):
        # aiohttp's parser rejected the response: garbled bytes on the wire,
        # not the server's verdict on our request (which a 400 would be).
        cause = exc.__cause__ if isinstance(exc.__cause__, HttpProcessingError) else exc
        return TransportError(f"{where} failed: malformed response "
                              f"({type(cause).__name__})", **fields)
    if isinstance(exc, aiohttp.ClientResponseError):
        # Raised by gcloud-aio-storage; its message is "reason: body". Never
        # use str(exc): it embeds the request URL.
        message, reason = parse_error_body(exc.message.partition(": ")[2].encode())
        err = error_for_status(exc.status, message or exc.message, operation=op.operation,
                               bucket=op.bucket, name=op.name, reason=reason, scheme=op.scheme)
        retry_after = exc.headers.get("Retry-After") if exc.headers else None
        return _with_retry_after(err, retry_after)
    if isinstance(exc, SlowTransfer) or (isinstance(exc, BodyTruncated)
                                         and exc.response is not None and exc.response.slow):
        slow = TransportError(f"{where} failed: too slow: {exc}", **fields)
        slow.slow = True  # type: ignore[attr-defined]  # bytes it moved are no progress
        return slow
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return TransportError(f"{where} failed: timed out{_which_timeout(exc)}{proxy_note()}",
                              operation=op.operation, bucket=op.bucket, name=op.name)
    if isinstance(exc, (aiohttp.ClientPayloadError, BodyTruncated, asyncio.IncompleteReadError)):
        return TransportError(f"{where} failed: response body truncated ({type(exc).__name__})",
                              operation=op.operation, bucket=op.bucket, name=op.name)
    if isinstance(exc, (aiohttp.ClientConnectionError, ConnectionError, OSError)):
        return TransportError(f"{where} failed: connection error ({type(exc).__name__}: "
                              f"{_safe(exc)}){proxy_note()}", operation=op.operation,
                              bucket=op.bucket, name=op.name)
    return exc


def _which_timeout(exc: BaseException) -> str:
    """Which of the client's timeouts ran out, to say in the message."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        # Raised for aiohttp's sock_connect (a new connection's set-up).
        return " connecting (Timeouts.connect)"
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return " waiting for response bytes (Timeouts.read_stall)"
    said = str(exc)  # the lean path's own say which
    if said and "Timeouts." in said:
        return f" ({said[:200]})"
    if type(exc) is TimeoutError and not said:
        # aiohttp's total timeout: a bare TimeoutError (its connect and read
        # timeouts are the subclasses above).
        return " (the request ran past Timeouts.total)"
    return ""


def _safe(exc: BaseException) -> str:
    # Connection errors name host and port, never headers, but aiohttp's
    # may name the whole URL or a proxy's password: cut, then capped.
    return scrub(str(exc))[:200]


# Links of an exception chain looked at (aiohttp's are two or three long).
_MAX_LINKS = 16


def without_secrets(exc: BaseException) -> BaseException | None:
    """``exc`` with :func:`scrub` applied to its text and to that of the
    exceptions chained to it, in place (they are the failed attempt's own).

    Args:
        exc: what an attempt raised, about to be chained to its error.

    Returns:
        ``exc``, or None where one's text cannot be rewritten (its
        ``__str__`` reads other fields): then chain nothing.
    """
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending and len(seen) < _MAX_LINKS:
        link = pending.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        text = str(link)
        if scrub(text) != text:
            if isinstance(link, OSError) and link.errno is not None \
                    and isinstance(link.strerror, str):
                link.strerror = scrub(link.strerror)  # what OSError's str shows
            link.args = tuple(scrub(a) if isinstance(a, str) else a for a in link.args)
            if scrub(str(link)) != str(link) or scrub(repr(link)) != repr(link):
                return None
        pending.extend(e for e in (link.__cause__, link.__context__) if e is not None)
    return exc if not pending else None
