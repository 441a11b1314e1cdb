"""HTTP transport: one aiohttp session per event loop, the client's bounded
semaphore, the retry loop, and the single place where aiohttp errors become
aioflux errors.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import re
import ssl
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn, TypeVar

import aiohttp

from ._auth import Auth
from ._bridge import close_at_shutdown
from ._config import ClientConfig
from ._errors import StorageError, TransportError, describe, error_for_status
from ._http import BodyTruncated, MediaPool, MediaResponse, ProtocolError
from ._retry import retry_async

__all__ = ["MediaResponse", "Op", "Transport", "TransportStats", "map_exception"]

log = logging.getLogger("aioflux.transport")
T = TypeVar("T")
ResponseHandler = Callable[[aiohttp.ClientResponse], Awaitable[T]]
MediaHandler = Callable[[MediaResponse], T]
_MAX_ERROR_BODY = 64 * 1024
_XML_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_XML_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")


class Op(NamedTuple):
    """What a request does, for error messages and logs."""

    operation: str
    bucket: str = ""
    name: str = ""


@dataclass
class TransportStats:
    """Counters of one transport (mutable, read them any time)."""

    requests: int = 0
    retries: int = 0
    failures: int = 0
    #: media GETs answered over aioflux's own connections (see _http)
    lean_reads: int = 0
    #: media GETs the lean client handed to aiohttp (unusual responses)
    lean_fallbacks: int = 0


@dataclass
class _LoopState:
    loop: asyncio.AbstractEventLoop
    pid: int
    session: aiohttp.ClientSession
    semaphore: asyncio.Semaphore
    media: MediaPool | None


class Transport:
    """Sends requests with bounded concurrency and retries.

    Args:
        config: client configuration.
        auth: supplies authentication headers.
        session_factory: builds the aiohttp session for a loop (tests inject).
        ssl_context: TLS settings of the lean media connections (default:
            the system's trust store, as aiohttp's).
    """

    def __init__(
        self,
        config: ClientConfig,
        auth: Auth,
        *,
        session_factory: Callable[[ClientConfig], aiohttp.ClientSession] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        self._ssl_context = ssl_context
        self.auth = auth
        self.stats = TransportStats()
        self._session_factory = session_factory or _default_session
        self._state: _LoopState | None = None

    def _current(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._state
        # A session belongs to one loop and one process: after fork or when
        # used from another loop (e.g. a DataLoader worker) build a new one.
        if state is None or state.loop is not loop or state.pid != os.getpid():
            state = _LoopState(
                loop=loop,
                pid=os.getpid(),
                session=self._session_factory(self.config),
                semaphore=asyncio.Semaphore(self.config.max_concurrency),
                media=self._media_pool(),
            )
            self._state = state
            close_at_shutdown(loop, self)
        return state

    def _media_pool(self) -> MediaPool | None:
        config = self.config
        if not config.lean_reads:
            return None
        t = config.timeouts
        return MediaPool(user_agent=config.user_agent, connect_timeout=t.connect,
                         read_stall=t.read_stall, idle_timeout=t.idle,
                         connection_limit=config.effective_connection_limit,
                         sockets_elsewhere=self._aiohttp_sockets, ssl_context=self._ssl_context)

    def _aiohttp_sockets(self) -> int:
        """Sockets of this loop's aiohttp connector (the lean pool's budget
        is ``connection_limit`` minus these)."""
        state = self._state
        connector: Any = state.session.connector if state is not None else None
        if connector is None:
            return 0
        # aiohttp has no public count: in use (or connecting) plus idle.
        idle = getattr(connector, "_conns", {})
        return len(getattr(connector, "_acquired", ())) + sum(len(c) for c in idle.values())

    @property
    def idle(self) -> bool:
        """True when this process holds no open session."""
        return self._state is None or self._state.pid != os.getpid()

    @property
    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session of the running loop (created on first use)."""
        return self._current().session

    async def request(
        self,
        op: Op,
        method: str,
        url: str,
        handler: ResponseHandler[T],
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        data: bytes | bytearray | memoryview | None = None,
        ok: tuple[int, ...] = (200,),
    ) -> T:
        """Send one logical request, retried per policy, and handle its response.

        ``handler`` runs inside the semaphore and the retry loop, so a body
        that is truncated or fails its checksum is fetched again.

        Args:
            op: operation, bucket and object, for errors.
            method: HTTP method.
            url: full URL.
            handler: consumes a successful response and returns the result.
            params: query parameters.
            headers: extra headers.
            data: request body (must be re-sendable, hence bytes-like).
            ok: statuses passed to ``handler``; other statuses >= 300 raise.

        Returns:
            What ``handler`` returned.

        Raises:
            StorageError: the most specific subclass for the failure.
        """

        async def send(state: _LoopState, request_headers: dict[str, str]) -> T:
            async with state.session.request(
                method, url, params=params, headers=request_headers, data=_payload(data),
            ) as resp:
                if resp.status not in ok and resp.status >= 300:
                    raise await _error_from_response(resp, op)
                return await handler(resp)

        return await self._retrying(lambda: self._attempt(op, headers, send))

    async def _attempt(self, op: Op, headers: Mapping[str, str] | None,
                       send: Callable[[_LoopState, dict[str, str]], Awaitable[T]]) -> T:
        """One attempt: a permit, auth headers, ``send``, errors mapped."""
        state = self._current()
        async with state.semaphore:
            self.stats.requests += 1
            request_headers = await self.auth.headers()
            if headers:
                request_headers.update(headers)
            try:
                return await send(state, request_headers)
            except Exception as exc:
                failure = exc
        _raise_mapped(failure, op)

    async def get_media(
        self,
        op: Op,
        url: str,
        handler: MediaHandler[T],
        *,
        headers: Mapping[str, str] | None = None,
        into: memoryview | None = None,
        limit: int | None = None,
    ) -> T:
        """GET an object body (or a range of it), retried per policy.

        The request goes over the lean HTTP/1.1 client (:mod:`aioflux._http`)
        unless ``ClientConfig.lean_reads`` is off or the response is one it
        leaves to aiohttp; either way ``handler`` sees the same
        :class:`MediaResponse`, inside the retry loop.

        Args:
            op: operation, bucket and object, for errors.
            url: full URL, query included.
            handler: checks the 200/206 response and returns the result.
            headers: extra headers.
            into: receive the body into this buffer (``body`` is then None).
                A body longer than the buffer is not read: ``expected`` says
                how long it is.
            limit: the most body bytes acceptable (a range's length, the
                object's known size): a 2xx declaring more fails the attempt
                before anything is allocated.

        Returns:
            What ``handler`` returned.

        Raises:
            StorageError: the most specific subclass for the failure.
        """

        async def send(state: _LoopState, request_headers: dict[str, str]) -> T:
            response = None
            if state.media is not None:
                response = await state.media.get(url, request_headers, into, limit=limit)
                if response is None:
                    self._lean_fell_back(state)
                else:
                    self.stats.lean_reads += 1
            if response is None:
                response = await self._get_with_aiohttp(state, op, url, request_headers, into,
                                                        limit)
            if response.status >= 300:
                raise _error_from_media(response, op)
            return handler(response)

        return await self._retrying(lambda: self._attempt(op, headers, send))

    def _lean_fell_back(self, state: _LoopState) -> None:
        stats = self.stats
        stats.lean_fallbacks += 1
        # Every fallback costs a second request. When most responses are
        # ones the lean client leaves to aiohttp (e.g. gzip-stored objects
        # that GCS serves decompressed, chunked), stop trying it.
        if stats.lean_fallbacks >= _LEAN_GIVE_UP and stats.lean_fallbacks > stats.lean_reads \
                and state.media is not None:
            state.media.close()
            state.media = None
            log.info("lean reads off for this client: %d of %d responses needed aiohttp",
                     stats.lean_fallbacks, stats.lean_fallbacks + stats.lean_reads)

    async def _get_with_aiohttp(self, state: _LoopState, op: Op, url: str,
                                headers: Mapping[str, str], into: memoryview | None,
                                limit: int | None = None) -> MediaResponse:
        async with state.session.get(url, headers=headers, allow_redirects=False) as resp:
            if resp.status >= 300:
                raise await _error_from_response(resp, op)
            found = {name: ",".join(resp.headers.getall(name)) for name in _MEDIA_HEADERS
                     if name in resp.headers}
            # A decoded (gzip) body is not Content-Length bytes long.
            coded = resp.headers.get("Content-Encoding", "identity").lower() != "identity"
            expected = None if coded else resp.content_length
            if limit is not None and expected is not None and expected > limit:
                raise ProtocolError(f"response declares {expected} body bytes, "
                                    f"over the {limit} asked for")
            if into is None:
                body = await resp.read()
                return MediaResponse(resp.status, found, body, len(body), expected)
            if expected is not None and expected > len(into):
                return MediaResponse(resp.status, found, None, 0, expected)
            received = 0
            async for chunk in resp.content.iter_any():
                end = received + len(chunk)
                if end > len(into):
                    return MediaResponse(resp.status, found, None, received, end)
                into[received:end] = chunk
                received = end
            return MediaResponse(resp.status, found, None, received, expected)

    async def run(
        self, op: Op, call: Callable[[aiohttp.ClientSession, dict[str, str]], Awaitable[T]]
    ) -> T:
        """Run a third-party call (gcloud-aio-storage) under our semaphore and retries.

        Args:
            op: operation, bucket and object, for errors.
            call: receives our session and auth headers and does one attempt.

        Returns:
            The call's result.

        Raises:
            StorageError: the most specific subclass for the failure.
        """

        async def send(state: _LoopState, request_headers: dict[str, str]) -> T:
            return await call(state.session, request_headers)

        return await self._retrying(lambda: self._attempt(op, None, send))

    def _count_retry(self, _exc: BaseException, _attempt: int, _delay: float) -> None:
        self.stats.retries += 1

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        try:
            return await retry_async(attempt, self.config.retry, on_retry=self._count_retry)
        except StorageError:
            self.stats.failures += 1
            raise

    async def aclose(self) -> None:
        """Close the session of the current loop, if this process owns it."""
        state, self._state = self._state, None
        if state is None or state.pid != os.getpid():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is state.loop:
            if state.media is not None:
                state.media.close()
            await state.session.close()


# Bodies go to the socket in slices of this size, each followed by a drain, so
# the event loop's transport never buffers a second copy of a whole part.
_BODY_SLICE = 1 << 20


class _SlicedPayload(aiohttp.BytesPayload):
    async def write(self, writer: Any) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        view = memoryview(self._value).cast("B")
        if content_length is not None:
            view = view[:content_length]
        for start in range(0, len(view), _BODY_SLICE):
            await writer.write(view[start:start + _BODY_SLICE])


def _payload(data: bytes | bytearray | memoryview | None) -> aiohttp.BytesPayload | None:
    if data is None:
        return None
    # aiohttp warns about bodies over 1 MiB given as bytes; a part is sent
    # from the caller's buffer on purpose, without an extra copy.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        if len(data) > _BODY_SLICE:
            return _SlicedPayload(data)
        return aiohttp.BytesPayload(data)


def _default_session(config: ClientConfig) -> aiohttp.ClientSession:
    t = config.timeouts
    connector = aiohttp.TCPConnector(
        limit=config.effective_connection_limit,
        limit_per_host=config.connection_limit_per_host,
        keepalive_timeout=t.idle,
        ttl_dns_cache=300,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=t.total, connect=t.connect, sock_read=t.read_stall),
        headers={"User-Agent": config.user_agent},
        # Object names may contain characters yarl would re-encode; we quote
        # them ourselves exactly once.
        requote_redirect_url=False,
    )


async def _error_from_response(resp: aiohttp.ClientResponse, op: Op) -> StorageError:
    body = await resp.content.read(_MAX_ERROR_BODY)
    message, reason = parse_error_body(body)
    return _with_retry_after(
        error_for_status(resp.status, message or (resp.reason or ""), operation=op.operation,
                         bucket=op.bucket, name=op.name, reason=reason),
        resp.headers.get("Retry-After"),
    )


# Fallbacks after which, if they outnumber lean responses, lean reads stop.
_LEAN_GIVE_UP = 32

# What a media handler looks at (the aiohttp fallback keeps only these).
_MEDIA_HEADERS = ("x-goog-hash", "x-guploader-response-body-transformations")


def _error_from_media(resp: MediaResponse, op: Op) -> StorageError:
    message, reason = parse_error_body(bytes(resp.body or b""))
    return _with_retry_after(
        error_for_status(resp.status, message, operation=op.operation, bucket=op.bucket,
                         name=op.name, reason=reason),
        resp.headers.get("retry-after"),
    )


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
    if value:
        seconds: float | None
        try:
            seconds = float(value)
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(value) if value else None
            seconds = parsed.timestamp() - time.time() if parsed else None
        exc.retry_after = seconds  # type: ignore[attr-defined]
    return exc


def _raise_mapped(exc: Exception, op: Op) -> NoReturn:
    mapped = map_exception(exc, op)
    if mapped is exc:
        raise exc
    if isinstance(exc, aiohttp.ClientResponseError):
        # Its request_info holds the Authorization header: keep it out of the
        # chain (we raise outside the except block, so no __context__ either).
        raise mapped
    raise mapped from exc


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
    where = describe(op.operation, op.bucket, op.name)
    if isinstance(exc, aiohttp.ClientResponseError) and isinstance(
            exc.__cause__, aiohttp.http_exceptions.HttpProcessingError):
        # aiohttp's parser refused the response (its "400" is not the
        # server's status): a broken stream, as the lean client's ProtocolError.
        detail = " ".join(str(exc.__cause__.message).split())[:200]
        return TransportError(f"{where} failed: malformed response ({detail})",
                              operation=op.operation, bucket=op.bucket, name=op.name)
    if isinstance(exc, aiohttp.ClientResponseError):
        # Raised by gcloud-aio-storage; its message is "reason: body". Never
        # use str(exc): it embeds the request URL.
        message, reason = parse_error_body(exc.message.partition(": ")[2].encode())
        err = error_for_status(exc.status, message or exc.message, operation=op.operation,
                               bucket=op.bucket, name=op.name, reason=reason)
        retry_after = exc.headers.get("Retry-After") if exc.headers else None
        return _with_retry_after(err, retry_after)
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return TransportError(f"{where} failed: timed out", operation=op.operation,
                              bucket=op.bucket, name=op.name)
    if isinstance(exc, (aiohttp.ClientPayloadError, BodyTruncated)):
        return TransportError(f"{where} failed: response body truncated ({type(exc).__name__})",
                              operation=op.operation, bucket=op.bucket, name=op.name)
    if isinstance(exc, (aiohttp.ClientConnectionError, ConnectionError, OSError)):
        return TransportError(f"{where} failed: connection error ({type(exc).__name__}: "
                              f"{_safe(exc)})", operation=op.operation, bucket=op.bucket,
                              name=op.name)
    return exc


def _safe(exc: BaseException) -> str:
    # Connection errors name host and port, never headers; cap the length.
    return str(exc)[:200]
