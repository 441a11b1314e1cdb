"""HTTP transport: the client's bounded semaphore, the retry loop, each
attempt authenticated, credentials for the endpoint's origin only. Which
aiohttp session and semaphore serve the running loop is decided in
:mod:`aioflux._net.loop_sessions`, what a media GET the lean client leaves
to aiohttp receives in :mod:`aioflux._net.aiohttp_media`, what a failure
becomes in :mod:`aioflux._net.failures`.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TypeVar
from urllib.parse import urlsplit

import aiohttp
import yarl

from .._core.auth import Auth, AuthRequest, RenewableAuth
from .._core.errors import InvalidArgument, RateLimited, StorageError
from .._core.metrics import Attempt, RequestStats
from .._core.settings.config import ClientConfig
from .._core.settings.retry import retry_async
from .aiohttp_media import get_with_aiohttp
from .failures import (
    Op,
    auth_failure,
    error_from_media,
    error_from_response,
    raise_mapped,
    without_secrets,
)
from .http import BodyTruncated, MediaResponse
from .loop_sessions import LoopSessions
from .loops import LoopState
from .proxies import proxy_for
from .responses import HttpBody, HttpResponse
from .sessions import request_body
from .throttle import Gate, gate_key

__all__ = ["HttpBody", "HttpResponse", "MediaResponse", "Op", "Transport"]

log = logging.getLogger("aioflux.transport")
T = TypeVar("T")
# Handlers are typed on aiohttp's response (the backends' annotations) but
# read only its HttpResponse part (:mod:`.responses`), which a mock response provides.
ResponseHandler = Callable[["HttpResponse"], Awaitable[T]]
MediaHandler = Callable[[MediaResponse], T]
_DEFAULT_ENDPOINT = "https://storage.googleapis.com"
# The window of an attempt no slow start holds back.
_NO_WINDOW: AbstractAsyncContextManager[None] = contextlib.nullcontext()
# Bytes sent or read into a buffer from which an attempt skips the slow
# start: a request-rate cap is met by many small requests, and one this
# large is bandwidth-bound (5,000 of them a second would be 5 GB/s); the
# parts of a checkpoint are not held back behind a small window.
_BULK = 1 << 20
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Transport(LoopSessions):
    """Sends requests with bounded concurrency and retries.

    Args:
        config: client configuration.
        auth: supplies authentication headers.
        session_factory: builds the aiohttp session for a loop. This is where
            requests are actually sent (every request, the media GETs that
            the lean client leaves to aiohttp, and the calls of :meth:`run`),
            so it is the seam a mock replaces (:class:`aioflux.testing.MockTransport`):
            of a session, only ``request``/``get``/``put`` (as async context
            managers yielding an :class:`HttpResponse`) and ``close`` are used.
        ssl_context: TLS settings of every connection, aiohttp's and the
            lean ones (default: ``config.tls_context()``, else the system's
            trust store).
        endpoint: the API root. Credentials go only to its origin (scheme,
            host, port): a resumable-upload ``Location`` or any other URL
            elsewhere gets the request without them.
        trusted: also send credentials to URLs it accepts (S3's
            virtual-hosted ``bucket.s3.region.amazonaws.com`` origins
            of the same service).
        exact_urls: send every URL exactly as given, already percent-encoded
            (aiohttp would otherwise re-quote it, turning ``%3D`` into
            ``=`` and ``%2F`` in a query into ``/``: bytes other than those
            a SigV4 signature covers).

    Raises:
        InvalidArgument: ``config.ca_file`` cannot be loaded.
    """

    #: A media answer's body is the object's bytes as stored, whatever its
    #: ``Content-Encoding``: nothing is decompressed (aiohttp would, and the
    #: lean client would hand a coded answer to it). True where the service
    #: never transforms an object's bytes and its checksums are of them
    #: (Azure: a blob stored with ``Content-Encoding: gzip`` comes back
    #: gzipped whatever the request accepts). False keeps aiohttp's decoding.
    stored_bytes = False

    def __init__(
        self,
        config: ClientConfig,
        auth: Auth,
        *,
        session_factory: Callable[[ClientConfig], aiohttp.ClientSession] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        endpoint: str | None = None,
        trusted: Callable[[str], bool] | None = None,
        exact_urls: bool = False,
    ) -> None:
        if ssl_context is None:
            try:
                ssl_context = config.tls_context()
            except (OSError, ssl.SSLError) as exc:
                raise InvalidArgument(f"ClientConfig.ca_file {config.ca_file!r} cannot be "
                                      f"loaded: {exc}") from exc
        self.auth = auth
        self.endpoint = (endpoint or _DEFAULT_ENDPOINT).rstrip("/")
        self._origin = _origin_of(self.endpoint)
        # URLs under this prefix are the endpoint's origin without parsing.
        self._origin_prefix = self.endpoint.split("/", 3)[:3]
        self._trusted = trusted
        self._exact_urls = exact_urls
        self.stats = RequestStats()
        super().__init__(config, ssl_context, proxy_for(self.endpoint), session_factory)
        # The request-rate controller's gates per (bucket, is a write);
        # None when it is off.
        self._gates: dict[tuple[str, bool], Gate] | None = {} if config.paces else None
        # When a request last succeeded (time.perf_counter, the clock of
        # the retries): a throttled request gives up only after
        # throttle_deadline without one.
        self._progress_at = time.perf_counter()

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

        async def send(state: LoopState, request_headers: dict[str, str]) -> T:
            async with state.session.request(
                method, self._wire_url(url), params=params, headers=request_headers,
                data=request_body(data, window=self.config.timeouts.read_stall),
                allow_redirects=False, ssl=self._aiohttp_ssl(),
            ) as resp:
                if resp.status not in ok and resp.status >= 300:
                    raise await error_from_response(resp, op)
                return await handler(resp)

        request = AuthRequest(method, url, params or {}, headers or {}, data)
        return await self.retrying(lambda: self._attempt(op, request, send))

    def _wire_url(self, url: str) -> str | yarl.URL:
        return yarl.URL(url, encoded=True) if self._exact_urls else url

    def _aiohttp_ssl(self) -> ssl.SSLContext | bool:
        # True: aiohttp's default verification (its cached default context).
        return self._ssl_context if self._ssl_context is not None else True

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the configured endpoint's origin (scheme, host, port).

        Args:
            url: an absolute URL.

        Returns:
            True if credentials may be sent with a request to it.
        """
        parts = url.split("/", 3)
        if parts[:3] == self._origin_prefix:
            return True
        if self._trusted is not None and self._trusted(url):
            return True
        return _origin_of(url) == self._origin

    async def _attempt(self, op: Op, request: AuthRequest,
                       send: Callable[[LoopState, dict[str, str]], Awaitable[T]],
                       body_size: Callable[[], int] | None = None, *, renew: bool = True,
                       bulk: bool = False) -> T:
        """One attempt: a permit, authentication of ``request``, ``send``, errors
        mapped; its latency, outcome and (``body_size``) the object bytes it
        received go to :attr:`stats`. A 401 to credentials that can be
        renewed (``renew``) is sent once more with renewed ones. Once the
        service throttled the bucket's reads or writes, the attempt first
        waits for the request rate's budget (:mod:`aioflux._net.throttle`)."""
        state = self._current(op)
        gates = self._gates
        gate = None
        window: AbstractAsyncContextManager[None] = _NO_WINDOW
        if gates is not None:
            write = request.method not in _READ_METHODS
            gate = gates.get((op.bucket, write)) or self._gate(op.bucket, write)
            shared = gate.shared
            if shared.memory[shared.at] or gate.fixed:  # the pacing flag: one byte
                # Before the permit: a request waiting for budget must not
                # hold one another bucket's request could use.
                await gate.admit()
            elif gate.window is not None and not bulk and (
                    request.payload is None or len(request.payload) < _BULK):
                window = gate.window  # the slow start of a key new to the node
        async with window, state.semaphore:
            stats = self.stats
            stats.requests += 1
            started = time.perf_counter()
            # The one place credentials are added: never to another origin
            # (a resumable-upload Location, a listing's next link...).
            authenticated = self.same_origin(request.url)
            try:
                request_headers = await self.auth.headers(request) if authenticated else {}
            except StorageError as exc:
                raise auth_failure(exc, op) from exc
            if request.headers:
                request_headers.update(request.headers)
            if request.payload is not None:
                stats.bytes_sent += len(request.payload)
            try:
                if state.closed:
                    # Closed while this attempt waited for its permit or
                    # credentials: aiohttp would raise a bare RuntimeError
                    # ("Session is closed"), the lean pool open a socket.
                    raise ConnectionAbortedError("the client's connections were closed")
                result = await send(state, request_headers)
            except Exception as exc:
                failure = exc
                if state.closed and not isinstance(exc, StorageError):
                    # Closed under the attempt: for good, that is the error,
                    # not the dropped connection (or aiohttp's RuntimeError
                    # of a request it refuses) it caused; connections only
                    # (no owner), a retry goes out on new ones.
                    if self._closed_by is not None:
                        raise self._closed_error(op) from without_secrets(exc)
                    failure = ConnectionAbortedError("the client's connections were closed")
                    failure.__cause__ = exc
            else:
                ended = time.perf_counter()
                stats.observe(Attempt(op.operation, request.method, ended - started, "",
                                      body_size() if body_size is not None else 0))
                if gate is not None:
                    self._progress_at = ended
                    gate.succeeded(ended, started)
                return result
        try:
            raise_mapped(failure, op)
        except StorageError as mapped:
            stats.observe(Attempt(op.operation, request.method, time.perf_counter() - started,
                                  type(mapped).__name__))
            if isinstance(mapped, RateLimited):
                stats.throttled += 1
                if gate is not None:
                    gate.throttled(getattr(mapped, "retry_after", None), started)
            auth = self.auth
            if not (renew and authenticated and mapped.status == 401
                    and isinstance(auth, RenewableAuth) and auth.invalidate(request_headers)):
                raise
            stats.count_retry(type(mapped).__name__)
        # A token the server no longer accepts (revoked, or expired early by
        # clock skew) is renewed and the request sent once more, as
        # google-auth's AuthorizedSession does; outside max_attempts, and
        # only once, so credentials that stay rejected do not loop.
        return await self._attempt(op, request, send, body_size, renew=False, bulk=bulk)

    async def get_media(
        self,
        op: Op,
        url: str,
        handler: MediaHandler[T],
        *,
        headers: Mapping[str, str] | None = None,
        into: memoryview | None = None,
        limit: int | None = None,
        progress: Callable[[], int] | None = None,
    ) -> T:
        """GET an object body (or a range of it), retried per policy.

        The request goes over the lean HTTP/1.1 client (:mod:`aioflux._net.http`)
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
            limit: most body bytes accepted without ``into`` (the asked
                range's length or the known size): a longer body is not
                read, the handler sees ``body`` None and ``received <
                expected``.
            progress: see :func:`retry_async`; attempts that moved it do not
                count against ``max_attempts``.

        Returns:
            What ``handler`` returned.

        Raises:
            StorageError: the most specific subclass for the failure.
        """
        return await self.retrying(
            lambda: self.get_media_once(op, url, handler, headers=headers, into=into,
                                        limit=limit, keep_partial=False), progress)

    async def get_media_once(
        self,
        op: Op,
        url: str,
        handler: MediaHandler[T],
        *,
        headers: Mapping[str, str] | None = None,
        into: memoryview | None = None,
        limit: int | None = None,
        keep_partial: bool = True,
        summed: bool = False,
    ) -> T:
        """One attempt of :meth:`get_media` (no retries; for callers that
        change the request between attempts, e.g. to resume a range).

        A body cut short is not an error here: ``handler`` sees the
        response with ``received < expected`` (the bytes that did arrive are
        in ``body`` or ``into``), so it can keep them.

        Args:
            op: operation, bucket and object, for errors.
            url: full URL, query included.
            handler: checks the response and returns the result.
            headers: extra headers.
            into: as for :meth:`get_media`.
            limit: as for :meth:`get_media`.
            keep_partial: hand a body cut short to ``handler``; False raises
                a :class:`TransportError` instead (``handler`` then sees only
                complete bodies).
            summed: the lean client sums a large body's crc32c as it lands
                (the response's ``crc``; None where it did not).

        Returns:
            What ``handler`` returned.

        Raises:
            StorageError: the most specific subclass for the failure.
        """

        received = 0

        async def send(state: LoopState, request_headers: dict[str, str]) -> T:
            nonlocal received
            response = None
            if state.media is not None:
                try:
                    response = await state.media.get(url, request_headers, into,
                                                     limit=limit, coded=self.stored_bytes,
                                                     summed=summed)
                except BodyTruncated as exc:
                    response = _partial(exc) if keep_partial else None
                    if response is None:
                        raise
                if response is None:
                    self._lean_fell_back(state)
                else:
                    self.stats.lean_reads += 1
            if response is None:
                response = await get_with_aiohttp(
                    state.session, op, self._wire_url(url), request_headers, into, limit,
                    keep_partial, stored_bytes=self.stored_bytes, tls=self._aiohttp_ssl(),
                    read_stall=self.config.timeouts.read_stall, clock=state.loop.time)
            if response.status >= 300:
                raise error_from_media(response, op)
            received = response.received
            return handler(response)

        return await self._attempt(op, AuthRequest("GET", url, {}, headers or {}), send,
                                   lambda: received, bulk=into is not None and len(into) >= _BULK)

    def _lean_fell_back(self, state: LoopState) -> None:
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

    async def run(
        self, op: Op, method: str, url: str,
        call: Callable[[aiohttp.ClientSession, dict[str, str]], Awaitable[T]],
    ) -> T:
        """Run a call that sends on the session itself (the resumable upload's
        PUTs and status queries) under our semaphore and retries.

        Args:
            op: operation, bucket and object, for errors.
            method: the HTTP method the call sends (for authentication).
            url: the URL the call requests, on the endpoint (for authentication).
            call: receives our session and auth headers and does one attempt.

        Returns:
            The call's result.

        Raises:
            StorageError: the most specific subclass for the failure.
        """

        async def send(state: LoopState, request_headers: dict[str, str]) -> T:
            return await call(state.session, request_headers)

        request = AuthRequest(method, url)
        return await self.retrying(lambda: self._attempt(op, request, send))

    def _gate(self, bucket: str, write: bool) -> Gate:
        label = f"{bucket} {'write' if write else 'read'}"
        gate = Gate(gate_key(self.endpoint, bucket, write), label, self.config, self.stats)
        assert self._gates is not None
        # setdefault: two loops' threads may make the first one together.
        return self._gates.setdefault((bucket, write), gate)

    def _count_retry(self, exc: BaseException, _attempt: int, _delay: float) -> None:
        self.stats.count_retry(type(exc).__name__)

    def _progressed_at(self) -> float:
        return self._progress_at

    async def retrying(self, attempt: Callable[[], Awaitable[T]],
                       progress: Callable[[], int] | None = None) -> T:
        """Run ``attempt`` under the client's retry policy, counting retries.

        Args:
            attempt: one attempt (e.g. :meth:`get_media_once`).
            progress: see :func:`aioflux._core.settings.retry.retry_async`.

        Returns:
            The first successful result.

        Raises:
            StorageError: the last attempt's error.
        """
        paced = self._gates is not None
        try:
            return await retry_async(
                attempt, self.config.retry, on_retry=self._count_retry, progress=progress,
                throttle_deadline=self.config.throttle_deadline if paced else None,
                progressed_at=self._progressed_at, clock=time.perf_counter)
        except StorageError:
            self.stats.failures += 1
            raise


def _partial(exc: BodyTruncated) -> MediaResponse | None:
    # The lean client attaches the response (head and bytes so far) to a
    # body cut short.
    response = getattr(exc, "response", None)
    return response if isinstance(response, MediaResponse) else None


def _origin_of(url: str) -> tuple[str, str, int | None]:
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        return scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return "", "", None  # unparsable: matches no endpoint


# Requests that only read (counted apart from writes: buckets limit them apart).
_READ_METHODS = frozenset({"GET", "HEAD"})
# Fallbacks after which, if they outnumber lean responses, lean reads stop.
_LEAN_GIVE_UP = 32
