"""HTTP transport: one aiohttp session per event loop, the client's bounded
semaphore, the retry loop, credentials for the endpoint's origin only. What
a failure becomes is decided in :mod:`aioflux._net.failures`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import yarl

from .._core.auth import Auth, AuthRequest, RenewableAuth
from .._core.config import ClientConfig
from .._core.errors import (
    InvalidArgument,
    ProtocolError,
    StorageError,
    describe,
)
from .._core.metrics import Attempt, RequestStats
from .._core.portal import close_at_shutdown
from .._core.retry import retry_async
from .failures import (
    Op,
    auth_failure,
    error_from_media,
    error_from_response,
    raise_mapped,
)
from .http import BodyTruncated, MediaPool, MediaResponse
from .loops import LoopState, close_with_loop
from .pace import Pace, SlowTransfer, timed_out_early
from .proxies import proxy_for
from .responses import HttpBody, HttpResponse
from .sessions import forbid_redirects, new_session, request_body

__all__ = ["HttpBody", "HttpResponse", "MediaResponse", "Op", "Transport"]

log = logging.getLogger("aioflux.transport")
T = TypeVar("T")
# Handlers are typed on aiohttp's response (the backends' annotations) but
# read only its HttpResponse part (:mod:`.responses`), which a mock response provides.
ResponseHandler = Callable[["HttpResponse"], Awaitable[T]]
MediaHandler = Callable[[MediaResponse], T]
_DEFAULT_ENDPOINT = "https://storage.googleapis.com"
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Transport:
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
        self.config = config
        if ssl_context is None:
            try:
                ssl_context = config.tls_context()
            except (OSError, ssl.SSLError) as exc:
                raise InvalidArgument(f"ClientConfig.ca_file {config.ca_file!r} cannot be "
                                      f"loaded: {exc}") from exc
        self._ssl_context = ssl_context
        self.auth = auth
        self.endpoint = (endpoint or _DEFAULT_ENDPOINT).rstrip("/")
        self._origin = _origin_of(self.endpoint)
        # URLs under this prefix are the endpoint's origin without parsing.
        self._origin_prefix = self.endpoint.split("/", 3)[:3]
        self._trusted = trusted
        self._exact_urls = exact_urls
        #: The proxy of the environment this endpoint goes through, or None.
        self.proxy = proxy_for(self.endpoint)
        self.stats = RequestStats()
        self._session_factory = session_factory or self._default_session
        self._state: LoopState | None = None
        # The sessions of the other loops that used this transport lately
        # (an asynchronous fsspec filesystem runs on its caller's loop and
        # its sync files on the portal's): kept, so that going back to a
        # loop reuses its connections instead of opening new ones.
        self._other_states: list[LoopState] = []
        # Who closed this transport for good (``aclose(owner=...)``): its
        # next session would be one nothing closes.
        self._closed_by: str | None = None

    def _current(self, op: Op | None = None) -> LoopState:
        loop = asyncio.get_running_loop()
        state = self._state
        # A session belongs to one loop and one process: after fork or when
        # used from another loop (e.g. a DataLoader worker) build a new one.
        if state is None or state.loop is not loop or state.pid != os.getpid():
            if self._closed_by is not None:
                raise self._closed_error(op)
            kept = self._switch_to(loop)
            if kept is not None:
                return kept
            session = self._session_factory(self.config)
            forbid_redirects(session)
            state = LoopState(
                loop=loop,
                pid=os.getpid(),
                session=session,
                semaphore=asyncio.Semaphore(self.config.max_concurrency),
                media=self._media_pool(),
                reads=asyncio.Semaphore(self.config.max_concurrency),
            )
            self._state = state
            close_with_loop(state)
            close_at_shutdown(loop, self)
        return state

    def _switch_to(self, loop: asyncio.AbstractEventLoop) -> LoopState | None:
        """The state ``loop`` kept from its last use, made current; the one
        it replaces kept in turn (None: ``loop`` has none to go back to)."""
        pid = os.getpid()
        # A loop's run that ended closed its state (see loops.py); a forked
        # child's copies are the parent's.
        others = [o for o in self._other_states if o.pid == pid and not o.closed
                  and not o.loop.is_closed()]
        found = next((o for o in others if o.loop is loop), None)
        if found is not None:
            others.remove(found)
        current = self._state
        if current is not None and current.pid == pid and not current.closed:
            others.append(current)
        # Bounded: the oldest loop's session is closed on its loop.
        while len(others) > _KEPT_LOOPS:
            _close_state(others.pop(0), loop)
        self._other_states = others
        if found is not None:
            self._state = found
        return found

    def admit_read(self, op: Op) -> asyncio.Semaphore:
        """The gate an object read passes before anything of it is built.

        As many reads as the client has permits go on at once; the rest of
        a gathered batch waits here, at its top. Past it, each was built
        (URL, checks, retry state, one coroutine frame per layer) and parked
        at the request semaphore: 5,000 gathered reads ran 0.13 s of that
        while the first answers waited to be read (perf scenario read_small:
        1.10 s to 1.00 s). A read keeps its place through its retries, so a
        store that throttles sees no more reads than permits.

        Args:
            op: the read, for the error if the client is closed.

        Returns:
            The running loop's read gate (an ``asyncio.Semaphore``).
        """
        return self._current(op).reads

    def _closed_error(self, op: Op | None) -> InvalidArgument:
        owner = self._closed_by
        what = describe(op.operation, op.bucket, op.name, op.scheme) if op else "request"
        return InvalidArgument(f"{what}: the {owner} is closed (its aclose() or close() was "
                               f"called, or its with block ended); make a new {owner}")

    @property
    def closed(self) -> bool:
        """True once the owning client or store was closed (``aclose(owner=...)``)."""
        return self._closed_by is not None

    def _media_pool(self) -> MediaPool | None:
        """The lean client of a new loop's media GETs, or None to send them
        through the session (a mock transport has no sockets to give it)."""
        config = self.config
        if not config.lean_reads or self.proxy is not None:
            return None  # proxied bodies go through aiohttp, which speaks CONNECT
        t = config.timeouts
        return MediaPool(user_agent=config.user_agent, connect_timeout=t.connect,
                         read_stall=t.read_stall, idle_timeout=t.idle, total=t.total,
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
        pid = os.getpid()
        return all(state is None or state.pid != pid or state.closed
                   for state in (self._state, *self._other_states))

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

    def _default_session(self, config: ClientConfig) -> aiohttp.ClientSession:
        return new_session(config, self._ssl_context, proxy=self.proxy)

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
                       body_size: Callable[[], int] | None = None, *, renew: bool = True) -> T:
        """One attempt: a permit, authentication of ``request``, ``send``, errors
        mapped; its latency, outcome and (``body_size``) the object bytes it
        received go to :attr:`stats`. A 401 to credentials that can be
        renewed (``renew``) is sent once more with renewed ones."""
        state = self._current(op)
        async with state.semaphore:
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
                        raise self._closed_error(op) from exc
                    failure = ConnectionAbortedError("the client's connections were closed")
                    failure.__cause__ = exc
            else:
                stats.observe(Attempt(op.operation, request.method,
                                      time.perf_counter() - started, "",
                                      body_size() if body_size is not None else 0))
                return result
        try:
            raise_mapped(failure, op)
        except StorageError as mapped:
            stats.observe(Attempt(op.operation, request.method, time.perf_counter() - started,
                                  type(mapped).__name__))
            auth = self.auth
            if not (renew and authenticated and mapped.status == 401
                    and isinstance(auth, RenewableAuth) and auth.invalidate(request_headers)):
                raise
            stats.count_retry(type(mapped).__name__)
        # A token the server no longer accepts (revoked, or expired early by
        # clock skew) is renewed and the request sent once more, as
        # google-auth's AuthorizedSession does; outside max_attempts, and
        # only once, so credentials that stay rejected do not loop.
        return await self._attempt(op, request, send, body_size, renew=False)

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
                                                     limit=limit, coded=self.stored_bytes)
                except BodyTruncated as exc:
                    response = _partial(exc) if keep_partial else None
                    if response is None:
                        raise
                if response is None:
                    self._lean_fell_back(state)
                else:
                    self.stats.lean_reads += 1
            if response is None:
                response = await self._get_with_aiohttp(state, op, url, request_headers, into,
                                                        limit, keep_partial)
            if response.status >= 300:
                raise error_from_media(response, op)
            received = response.received
            return handler(response)

        return await self._attempt(op, AuthRequest("GET", url, {}, headers or {}), send,
                                   lambda: received)

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

    async def _get_with_aiohttp(self, state: LoopState, op: Op, url: str,
                                headers: Mapping[str, str], into: memoryview | None,
                                limit: int | None, keep_partial: bool) -> MediaResponse:
        # Only where the body is kept as stored: a session_factory's session
        # (MockTransport's) need not know the keyword.
        raw: dict[str, Any] = {"auto_decompress": False} if self.stored_bytes else {}
        async with state.session.get(self._wire_url(url), headers=headers,
                                     allow_redirects=False, ssl=self._aiohttp_ssl(),
                                     **raw) as resp:
            if resp.status >= 300:
                raise await error_from_response(resp, op)
            found = {name: ",".join(resp.headers.getall(name)) for name in _MEDIA_HEADERS
                     if name in resp.headers}
            # A decoded (gzip) body is not Content-Length bytes long.
            coded = not self.stored_bytes and \
                resp.headers.get("Content-Encoding", "identity").lower() != "identity"
            if coded:
                # Decoded here, as GCS decodes what it transcodes: its
                # x-goog-hash and stored length are of the coded bytes, and
                # the coding's own check (gzip's CRC32) covers the decoding.
                found.setdefault(_TRANSFORMED, "decoded by the client")
            expected = None if coded else resp.content_length
            if into is not None and expected is not None and expected > len(into):
                return MediaResponse(resp.status, found, None, 0, expected)
            cap = len(into) if into is not None else limit
            inflated = into is None and _TRANSFORMED in found
            if inflated:
                # A range asked of a transcoded object is answered whole: its
                # length is no base for the cap, the stored size is.
                cap = _inflation_cap(None if "Range" in headers else limit,
                                     resp.headers.get("x-goog-stored-content-length"))
            body = bytearray() if into is None else None
            received = 0
            clock = state.loop.time
            speed = Pace(self.config.timeouts.read_stall, clock())
            try:
                async for chunk in resp.content.iter_any():
                    end = received + len(chunk)
                    if cap is not None and end > cap:
                        if inflated:
                            raise ProtocolError(
                                f"{describe(op.operation, op.bucket, op.name, op.scheme)} "
                                f"failed: the body served decompressed passed {cap} bytes, "
                                f"{_MAX_INFLATION} times its stored size", status=resp.status,
                                operation=op.operation, bucket=op.bucket, name=op.name)
                        # More than fits or was asked for: report the length
                        # without buffering it.
                        return MediaResponse(resp.status, found, None, received, end)
                    if into is not None:
                        into[received:end] = chunk
                    else:
                        body += chunk  # type: ignore[operator]
                    received = end
                    speed.check(received, clock(), "response bytes")
            except SlowTransfer:
                if not keep_partial or expected is None:
                    raise
                # As the lean client does: what arrived is kept, but a drip's
                # bytes are no progress.
                return MediaResponse(resp.status, found, body, received, expected, slow=True)
            except (aiohttp.ClientPayloadError, aiohttp.ServerTimeoutError,
                    asyncio.TimeoutError, aiohttp.ClientConnectionError) as exc:
                if not keep_partial or expected is None or received >= expected:
                    raise
                # Cut mid-body: hand over what arrived so a read resumes
                # from there; received < expected tells the handler.
                return MediaResponse(resp.status, found, body, received, expected,
                                     slow=isinstance(exc, asyncio.TimeoutError)
                                     and timed_out_early(received))
            return MediaResponse(resp.status, found, body, received,
                                 expected if expected is not None else received)

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

    def _count_retry(self, exc: BaseException, _attempt: int, _delay: float) -> None:
        self.stats.count_retry(type(exc).__name__)

    async def retrying(self, attempt: Callable[[], Awaitable[T]],
                       progress: Callable[[], int] | None = None) -> T:
        """Run ``attempt`` under the client's retry policy, counting retries.

        Args:
            attempt: one attempt (e.g. :meth:`get_media_once`).
            progress: see :func:`aioflux._core.retry.retry_async`.

        Returns:
            The first successful result.

        Raises:
            StorageError: the last attempt's error.
        """
        try:
            return await retry_async(attempt, self.config.retry, on_retry=self._count_retry,
                                     progress=progress)
        except StorageError:
            self.stats.failures += 1
            raise

    async def aclose(self, *, owner: str | None = None) -> None:
        """Close this process's session, on its own loop.

        Args:
            owner: the client or store closing for good (``"client"``,
                ``"S3Store"``): every later request raises InvalidArgument
                naming it instead of opening a session nothing would close.
                None (the portal at shutdown, a dataset between uses)
                closes the connections only; the next request reopens them.
        """
        if owner is not None:
            self._closed_by = owner
        states = [self._state, *self._other_states]
        self._state, self._other_states = None, []
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for state in states:
            if state is None or state.pid != os.getpid():
                continue
            if running is state.loop and state.ends_with_loop is not None:
                await state.ends_with_loop.aclose()
            else:
                _close_state(state, running)


# Loops besides the current one whose sessions a transport keeps.
_KEPT_LOOPS = 4


def _close_state(state: LoopState, running: asyncio.AbstractEventLoop | None) -> None:
    """Close ``state``'s session on its own loop, from ``running`` (another
    loop, or none): handed there, as a session closes on its own loop."""
    closing = state.ends_with_loop
    if closing is None or state.loop is running or state.loop.is_closed():
        return
    asyncio.run_coroutine_threadsafe(closing.aclose(), state.loop)


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


# Fallbacks after which, if they outnumber lean responses, lean reads stop.
_LEAN_GIVE_UP = 32

_TRANSFORMED = "x-guploader-response-body-transformations"
# DEFLATE's greatest ratio (zlib's technical notes): a gzip-stored object
# served decompressed is at most this many times its stored size.
_MAX_INFLATION = 1032


def _inflation_cap(stored: int | None, header: str | None) -> int | None:
    """The most bytes a body served decompressed may have, from the stored
    size the caller knows, else the one the answer reports (None: unknown)."""
    if stored is None and header is not None and header.isascii() and header.isdigit():
        stored = int(header)
    return None if stored is None else stored * _MAX_INFLATION


# What a media handler looks at (the aiohttp fallback keeps only these).
_MEDIA_HEADERS = ("x-goog-hash", _TRANSFORMED,
                  "content-range", "x-goog-stored-content-length", "x-goog-generation",
                  "etag", "x-amz-checksum-crc32c", "x-amz-checksum-type",
                  "x-ms-meta-aioflux_crc32c", "x-ms-blob-content-md5", "content-md5")


