"""A lean HTTP/1.1 client for object-body GETs, the data loader's hot path.

aiohttp's ClientSession spends ~300 us of Python per request (request and
response objects, header multidicts, a StreamReader that copies every
chunk). For a 100 KiB sample that is most of the client's CPU, so body
GETs go over keep-alive connections on a ``BufferedProtocol`` whose body
bytes land straight in their final buffer: about a third of aiohttp's
client CPU an epoch (perf/scenarios/loader_small.py).

The response head is parsed by llhttp (httptools), in
:mod:`aioflux._net.heads`: an HTTP/1.x status line, header names that are
tokens, values without control characters, one plain ``Content-Length``,
never both it and ``Transfer-Encoding``. A response that breaks those
rules, declares more body than the caller accepts, or sends bytes beyond
its declared body raises :class:`~aioflux._net.heads.MalformedResponse`
and the connection is dropped. The body is framed here, by its
``Content-Length``, so its bytes land in the caller's buffer without the
copy a parser's body callback makes. Interim 1xx heads are skipped, at most
:data:`MAX_INTERIM_RESPONSES` of them, and their bytes are no progress for
the pace rule. A response with a ``Content-Length`` and no transfer or
content coding is read here whatever its status (at most 64 KiB of a
non-200/206 body); so is a content-coded one where the coding is how the
object is stored (``coded``, ``Transport.stored_bytes``), its bytes kept as
they come. For chunked or (otherwise) compressed bodies, or one delimited
by the connection's close, :meth:`MediaPool.get` closes the connection and
returns ``None``, and the caller repeats the attempt through aiohttp.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .connection import (
    MAX_INTERIM_RESPONSES,
    BodyTruncated,
    MediaResponse,
    _Connection,
    _Stale,
)
from .heads import check_header

__all__ = ["MAX_INTERIM_RESPONSES", "BodyTruncated", "MediaPool", "MediaResponse"]


@dataclass(frozen=True, slots=True)
class _Origin:
    host: str
    port: int
    tls: bool
    host_header: str


class MediaPool:
    """Keep-alive connections for GETs of one event loop.

    Args:
        user_agent: sent as ``User-Agent``.
        connect_timeout: seconds to open a connection (TCP and TLS).
        read_stall: longest silence while waiting for response bytes.
        total: the longest a request may take from the call, the wait for
            a connection counted (``None``: no cap); a body past it ends as
            one cut short, so a read resumes after what arrived.
        idle_timeout: an unused connection is closed after this many seconds.
        connection_limit: most sockets open at once, counting the ones
            ``sockets_elsewhere`` reports (``None``: no limit).
        sockets_elsewhere: how many sockets another pool sharing the limit
            holds (the client's aiohttp connector).
        ssl_context: for ``https`` (default: the system's trust store).

    Raises:
        InvalidArgument: ``user_agent`` holds a control character.
    """

    def __init__(self, *, user_agent: str, connect_timeout: float, read_stall: float,
                 idle_timeout: float, total: float | None = None,
                 connection_limit: int | None = None,
                 sockets_elsewhere: Callable[[], int] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        check_header("User-Agent", user_agent)
        self._user_agent = user_agent
        self._connect_timeout = connect_timeout
        self._read_stall = read_stall
        self._total = total
        self._idle_timeout = idle_timeout
        self._limit = connection_limit
        self._elsewhere = sockets_elsewhere or (lambda: 0)
        self._ssl_context = ssl_context
        self._origins: dict[str, tuple[_Origin, int]] = {}
        self._idle: dict[_Origin, deque[_Connection]] = {}
        #: sockets open or being opened
        self.sockets = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._reaper: asyncio.TimerHandle | None = None
        self._closed = False
        # Connections mid-exchange, for abort().
        self._busy: set[_Connection] = set()

    async def get(self, url: str, headers: Mapping[str, str], into: memoryview | None = None,
                  *, limit: int | None = None, coded: bool = False,
                  summed: bool = False) -> MediaResponse | None:
        """Send ``GET url`` and receive the response.

        Args:
            url: absolute ``http``/``https`` URL, already quoted.
            headers: request headers (``Host`` and ``User-Agent`` are added).
            into: receive a 2xx body into this buffer instead of a new one.
            limit: the most body bytes the caller accepts (a range's length,
                the object's known size); ``None`` for no limit. A 2xx that
                declares more is not read: ``body`` is None, ``received`` 0
                and ``expected`` the declared length.
            coded: a ``Content-Encoding`` says how the object's bytes are
                stored (Azure's), and the body is read as it comes, not
                left to aiohttp to decode.
            summed: sum the crc32c of a large 2xx body as its bytes land
                (the response's ``crc``; see :data:`~aioflux._net.connection.SUMMED_FROM`).

        Returns:
            The response, or ``None`` when it is not one this client handles
            or every socket the connection limit allows belongs to the other
            pool (repeat the request through aiohttp).

        Raises:
            BodyTruncated: the connection closed mid-body.
            MalformedResponse: the response broke HTTP/1.1 or ran past its
                ``Content-Length``.
            TimeoutError: connecting, a silence or (``total``) the request
                took too long.
            OSError: the connection failed.
            InvalidArgument: a header name or value cannot be sent.
        """
        deadline = math.inf if self._total is None else \
            asyncio.get_running_loop().time() + self._total
        origin, target = self._split(url)
        request = self._request_bytes(origin, url[target:], headers)
        # An idle connection the server dropped (its close still in flight)
        # is replaced by a fresh one at once; a fresh one failing is an error.
        conn = await self._acquire(origin)
        reused = conn is not None and conn.used
        while True:
            if conn is None:
                return None
            if self._closed:
                # aborted while this request waited for a connection
                conn.abort()
                raise ConnectionAbortedError("the client's connections were closed")
            try:
                return await self._exchange(origin, conn, request, into, limit, deadline,
                                            coded, summed)
            except _Stale as exc:
                if not reused:
                    raise ConnectionResetError(str(exc)) from None
                conn, reused = await self._acquire(origin, fresh=True), False

    async def _exchange(self, origin: _Origin, conn: _Connection, request: bytes,
                        into: memoryview | None, limit: int | None,
                        deadline: float, coded: bool, summed: bool) -> MediaResponse | None:
        self._busy.add(conn)
        try:
            response = await conn.exchange(request, into, limit, self._read_stall, deadline,
                                           coded, summed)
        except BaseException:
            conn.abort()  # cancelled or failed mid-exchange: its state is unknown
            raise
        finally:
            self._busy.discard(conn)
        if conn.reusable and not conn.closed and not self._closed and not self._over(0):
            self._idle.setdefault(origin, deque()).append(conn)
            self._schedule_reap(conn.idle_since)
            self._wake()
        else:
            conn.close()
        return response

    async def _acquire(self, origin: _Origin, *, fresh: bool = False) -> _Connection | None:
        """An idle connection, a new one within the limit, or None (the limit
        is held by the other pool)."""
        while True:
            if not fresh:
                conn = self._take(origin)
                if conn is not None:
                    return conn
            if not self._over(1):
                return await self._connect(origin)
            if self._close_oldest_idle():
                continue
            if self.sockets == 0:
                # The other pool holds the limit. Pass the turn on: the next
                # waiter falls back too, where it waited for a socket of
                # ours to come back, of which none is left (a read hung).
                self._wake()
                return None
            # Every socket we may open is in use: wait for one to come back.
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if not waiter.cancelled():
                    self._wake()  # woken, then cancelled: pass the turn on
                raise
            fresh = False

    def _over(self, more: int) -> bool:
        return self._limit is not None and self.sockets + more + self._elsewhere() > self._limit

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _socket_gone(self) -> None:
        self.sockets -= 1
        self._wake()

    def _take(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        self._reap_expired(idle, time.monotonic())
        while idle:
            conn = idle.pop()  # the most recently used: least likely dropped
            if not conn.closed:
                return conn
        return None

    def _reap_expired(self, idle: deque[_Connection], now: float) -> None:
        # Oldest first at the left: every expired one is at the bottom.
        while idle and (idle[0].closed or now - idle[0].idle_since >= self._idle_timeout):
            idle.popleft().abort()

    def _close_oldest_idle(self) -> bool:
        oldest: deque[_Connection] | None = None
        for idle in self._idle.values():
            while idle and idle[0].closed:
                idle.popleft()
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest is None:
            return False
        oldest.popleft().abort()
        return True

    def _schedule_reap(self, since: float) -> None:
        if self._reaper is None:
            delay = max(0.0, since + self._idle_timeout - time.monotonic())
            self._reaper = asyncio.get_running_loop().call_later(delay, self._reap_all)

    def _reap_all(self) -> None:
        self._reaper = None
        now = time.monotonic()
        oldest: float | None = None
        for idle in self._idle.values():
            self._reap_expired(idle, now)
            if idle and (oldest is None or idle[0].idle_since < oldest):
                oldest = idle[0].idle_since
        if oldest is not None and not self._closed:
            self._schedule_reap(oldest)

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: Any = None
        if origin.tls:
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            tls = self._ssl_context
        made: list[_Connection] = []

        def protocol() -> _Connection:
            made.append(_Connection(loop, self._socket_gone))
            return made[0]

        self.sockets += 1
        try:
            try:
                _, conn = await asyncio.wait_for(loop.create_connection(
                    protocol, origin.host, origin.port, ssl=tls,
                    server_hostname=origin.host if tls else None), self._connect_timeout)
            except TimeoutError:
                raise TimeoutError(f"Timeouts.connect: connecting took over "
                                   f"{self._connect_timeout:g} s") from None
        except BaseException:
            # Counted back exactly once, whether or not asyncio got as far
            # as the protocol (whose close reports itself gone).
            if made:
                made[0].abort()
            else:
                self._socket_gone()
            raise
        return conn

    def _split(self, url: str) -> tuple[_Origin, int]:
        # The origin part of the URL repeats on every request: parse it once.
        slash = url.find("/", url.find("//") + 2)
        prefix = url if slash < 0 else url[:slash]
        cached = self._origins.get(prefix)
        if cached is None:
            scheme, _, authority = prefix.partition("://")
            if scheme not in ("http", "https") or not authority or "@" in authority:
                raise ValueError(f"not an http(s) URL: {prefix!r}")
            tls = scheme == "https"
            host, port = authority, 443 if tls else 80
            if authority.startswith("["):
                bracket = authority.index("]")
                host = authority[1:bracket]
                if authority[bracket + 1:bracket + 2] == ":":
                    port = int(authority[bracket + 2:])
            elif ":" in authority:
                host, _, digits = authority.rpartition(":")
                port = int(digits)
            cached = (_Origin(host, port, tls, authority), len(prefix))
            self._origins[prefix] = cached
        origin, target = cached
        return origin, target if slash >= 0 else len(url)

    def _request_bytes(self, origin: _Origin, target: str, headers: Mapping[str, str]) -> bytes:
        lines = [f"GET {target or '/'} HTTP/1.1", f"Host: {origin.host_header}",
                 f"User-Agent: {self._user_agent}"]
        for name, value in headers.items():
            check_header(name, value)
            lines.append(f"{name}: {value}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("latin-1")

    def close(self) -> None:
        """Close every idle connection; later exchanges close theirs when done."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for idle in self._idle.values():
            for conn in idle:
                conn.abort()
        self._idle.clear()

    def abort(self) -> None:
        """Close every connection, those mid-exchange too: their requests
        fail as on a dropped connection (the client closing with reads in
        flight, which must not run on until ``read_stall`` or to their end)."""
        self.close()
        for conn in list(self._busy):
            conn.abort()
