"""A lean HTTP/1.1 client for object-body GETs, the data loader's hot path.

aiohttp's ClientSession spends ~300 us of Python per request (request and
response objects, header multidicts, a StreamReader that copies every
chunk). For a 100 KiB sample that is most of the client's CPU: an epoch of
10,000 x 100 KiB took 3.2 s of client CPU through aiohttp and 0.95 s over
a keep-alive connection on a ``BufferedProtocol`` whose body bytes land
straight in their final buffer (perf/scenarios/loader_small.py, 2 cores).

Only the common shape of a GCS media response is handled here: a 2xx
status with ``Content-Length`` and no content or transfer encoding, or an
error status with a short ``Content-Length`` body. For anything else
(chunked, compressed, redirects, informational, long error bodies)
:meth:`MediaPool.get` closes the connection and returns ``None`` and the
caller repeats the attempt through aiohttp, which handles every case.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BodyTruncated", "MediaPool", "MediaResponse"]

# GCS response heads are ~1-2 KiB; the first read also takes the start of
# the body, which is copied once into the body buffer.
_HEAD_BUFFER = 16 * 1024
_MAX_HEAD = 64 * 1024
# Error bodies up to this size are read here; larger ones go to aiohttp.
_MAX_ERROR_BODY = 64 * 1024
# aiohttp's default keep-alive: idle connections older than this are not
# reused (servers close idle connections after a while; GCS after minutes).
_IDLE_SECONDS = 15.0
_OK = (200, 206)


class BodyTruncated(ConnectionError):
    """The connection closed before the whole body arrived.

    ``response`` holds the head and the bytes that did arrive (in ``body``,
    or in the caller's buffer), so a read can resume after them.
    """

    def __init__(self, message: str, response: MediaResponse | None = None) -> None:
        super().__init__(message)
        self.response = response


class _Stale(ConnectionError):
    """A reused connection closed before answering (the server dropped it idle)."""


@dataclass(slots=True)
class MediaResponse:
    """One response: status, headers, and the body or how much of it landed.

    Args:
        status: HTTP status.
        headers: lower-case names; a repeated header's values joined by ``,``.
        body: the body, unless it was received into the caller's buffer
            (or did not fit it, see ``expected``).
        received: body bytes received.
        expected: ``Content-Length``, when the server sent one.
    """

    status: int
    headers: Mapping[str, str]
    body: bytearray | bytes | None
    received: int
    expected: int | None


@dataclass(slots=True)
class _Exchange:
    """The state of one request on a connection."""

    waiter: asyncio.Future[MediaResponse | None]
    into: memoryview | None
    stall: float
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    dest: memoryview | None = None
    body: bytearray | None = None
    expected: int = 0
    got: int = 0
    progress: int = 0
    keep_alive: bool = True
    timer: asyncio.TimerHandle | None = None


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive connection; one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self.idle_since = time.monotonic()
        self.used = False
        self._head = bytearray(_HEAD_BUFFER)
        self._head_len = 0
        self._exchange: _Exchange | None = None

    # -- asyncio protocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        ex = self._exchange
        if ex is not None and ex.dest is not None:
            return ex.dest[ex.got:]
        if self._head_len == len(self._head):
            if len(self._head) >= _MAX_HEAD:
                # Unsolicited bytes after a full head buffer: buffer_updated
                # fails the connection, so these are thrown away.
                return memoryview(bytearray(1024))
            grown = bytearray(min(_MAX_HEAD, 2 * len(self._head)))
            grown[:self._head_len] = self._head[:self._head_len]
            self._head = grown
        return memoryview(self._head)[self._head_len:]

    def buffer_updated(self, nbytes: int) -> None:
        ex = self._exchange
        if ex is None:
            # Bytes nobody asked for: the stream is out of step, drop it.
            self._fail(ConnectionError("unsolicited bytes from the server"))
            return
        ex.progress += nbytes
        if ex.dest is not None:
            ex.got += nbytes
        else:
            old = self._head_len
            self._head_len += nbytes
            end = self._head.find(b"\r\n\r\n", max(0, old - 3), self._head_len)
            if end < 0:
                if self._head_len >= _MAX_HEAD:
                    self._fail(ConnectionError(f"response head over {_MAX_HEAD} bytes"))
                return
            if not self._start_body(ex, end):
                return
        if ex.dest is not None and ex.got >= ex.expected:
            self._finish(ex)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        ex = self._exchange
        if ex is None or ex.waiter.done():
            return
        if ex.dest is not None:
            error: Exception = BodyTruncated(
                f"connection closed after {ex.got} of {ex.expected} body bytes",
                MediaResponse(ex.status, ex.headers, ex.body, ex.got, ex.expected))
        elif ex.progress == 0 and self.used:
            error = _Stale("reused connection closed before answering")
        else:
            error = ConnectionResetError("connection closed before the response head")
        self._fail(error)

    # -- exchange --------------------------------------------------------------

    async def exchange(self, request: bytes, into: memoryview | None,
                       stall: float) -> MediaResponse | None:
        """Send one request and wait for its response (see MediaPool.get)."""
        transport = self.transport
        if transport is None or self.closed:
            raise _Stale("connection closed while idle")
        ex = _Exchange(self._loop.create_future(), into, stall)
        self._exchange = ex
        self._head_len = 0
        ex.timer = self._loop.call_later(stall, self._check_stall, ex, 0)
        transport.write(request)
        try:
            return await ex.waiter
        finally:
            ex.timer.cancel()
            self._exchange = None
            self.used = True
            self.idle_since = time.monotonic()

    def _check_stall(self, ex: _Exchange, seen: int) -> None:
        if ex.waiter.done():
            return
        if ex.progress == seen:
            message = f"no response bytes for {ex.stall:g} s"
            if ex.dest is not None:
                # Mid-body: hand over what arrived, so the read resumes.
                self._fail(BodyTruncated(
                    f"{message} after {ex.got} of {ex.expected} body bytes",
                    MediaResponse(ex.status, ex.headers, ex.body, ex.got, ex.expected)))
            else:
                self._fail(TimeoutError(message))
        else:
            ex.timer = self._loop.call_later(ex.stall, self._check_stall, ex, ex.progress)

    def _start_body(self, ex: _Exchange, end: int) -> bool:
        """Parse the head ending at ``end``; set up the body. False when done."""
        parsed = _parse_head(bytes(self._head[:end]))
        if parsed is None:
            return self._give_up(ex)
        ex.status, ex.headers, ex.keep_alive = parsed
        headers = ex.headers
        length = _content_length(headers)
        if (length is None or "transfer-encoding" in headers
                or headers.get("content-encoding", "identity").lower() != "identity"):
            return self._give_up(ex)
        if ex.status not in _OK and not (ex.status >= 400 and length <= _MAX_ERROR_BODY):
            return self._give_up(ex)
        ex.expected = length
        if ex.status in _OK and ex.into is not None:
            if length > len(ex.into):
                # Does not fit: report the size without reading the body.
                self.reusable = False
                self._resolve(ex, MediaResponse(ex.status, headers, None, 0, length))
                return False
            ex.dest = ex.into[:length]
        else:
            ex.body = bytearray(length)
            ex.dest = memoryview(ex.body)
        start = end + 4
        extra = self._head_len - start
        if extra > length:
            self.reusable = False  # more than one response's worth: out of step
            extra = length
        ex.dest[:extra] = self._head[start:start + extra]
        ex.got = extra
        return True

    def _finish(self, ex: _Exchange) -> None:
        if not ex.keep_alive:
            self.reusable = False
        body = ex.body
        if ex.into is not None and ex.status in _OK:
            body = None
        self._resolve(ex, MediaResponse(ex.status, ex.headers, body, ex.expected, ex.expected))

    def _give_up(self, ex: _Exchange) -> bool:
        self.reusable = False
        self._resolve(ex, None)
        return False

    def _resolve(self, ex: _Exchange, result: MediaResponse | None) -> None:
        ex.dest = None
        self._exchange = None  # anything the server sends from here on is unsolicited
        if not ex.waiter.done():
            ex.waiter.set_result(result)

    def _fail(self, error: Exception) -> None:
        self.reusable = False
        ex = self._exchange
        if ex is not None and not ex.waiter.done():
            ex.waiter.set_exception(error)
        self.abort()

    def close(self) -> None:
        """Close the connection politely (its exchange is complete)."""
        self.reusable = False
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once (its state is unknown or unwanted)."""
        self.reusable = False
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _parse_head(raw: bytes) -> tuple[int, dict[str, str], bool] | None:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name[-1] in " \t" or line[0] in " \t":
            return None  # obsolete folding or a malformed line: leave it to aiohttp
        name = name.lower()
        value = value.strip(" \t")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
    return int(code), headers, keep_alive


def _content_length(headers: Mapping[str, str]) -> int | None:
    value = headers.get("content-length")
    if value is None or not value.isdigit():
        return None  # absent, repeated ("10,10") or malformed
    return int(value)


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
        ssl_context: for ``https`` (default: the system's trust store).
    """

    def __init__(self, *, user_agent: str, connect_timeout: float, read_stall: float,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._user_agent = user_agent
        self._connect_timeout = connect_timeout
        self._read_stall = read_stall
        self._ssl_context = ssl_context
        self._origins: dict[str, tuple[_Origin, int]] = {}
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._closed = False

    async def get(self, url: str, headers: Mapping[str, str],
                  into: memoryview | None = None) -> MediaResponse | None:
        """Send ``GET url`` and receive the response.

        Args:
            url: absolute ``http``/``https`` URL, already quoted.
            headers: request headers (``Host`` and ``User-Agent`` are added).
            into: receive a 2xx body into this buffer instead of a new one.

        Returns:
            The response, or ``None`` when it is not one this client handles
            (the connection is closed; repeat the request through aiohttp).

        Raises:
            BodyTruncated: the connection closed mid-body.
            TimeoutError: connecting, or a silence, took too long.
            OSError: the connection failed.
            ValueError: a header value contains a line break.
        """
        origin, target = self._split(url)
        request = self._request_bytes(origin, url[target:], headers)
        # An idle connection the server dropped (its close still in flight)
        # is replaced by a fresh one at once; a fresh one failing is an error.
        conn = self._take(origin)
        reused = conn is not None
        while True:
            if conn is None:
                conn = await self._connect(origin)
            try:
                return await self._exchange(origin, conn, request, into)
            except _Stale as exc:
                if not reused:
                    raise ConnectionResetError(str(exc)) from None
                conn, reused = None, False

    async def _exchange(self, origin: _Origin, conn: _Connection, request: bytes,
                        into: memoryview | None) -> MediaResponse | None:
        try:
            response = await conn.exchange(request, into, self._read_stall)
        except BaseException:
            conn.abort()  # cancelled or failed mid-exchange: its state is unknown
            raise
        if conn.reusable and not conn.closed and not self._closed:
            self._idle.setdefault(origin, []).append(conn)
        else:
            conn.close()
        return response

    def _take(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < _IDLE_SECONDS:
                return conn
            conn.abort()
        return None

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: Any = None
        if origin.tls:
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            tls = self._ssl_context
        _, conn = await asyncio.wait_for(loop.create_connection(
            lambda: _Connection(loop), origin.host, origin.port, ssl=tls,
            server_hostname=origin.host if tls else None), self._connect_timeout)
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
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise ValueError(f"header {name!r} contains a line break")
            lines.append(f"{name}: {value}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("latin-1")

    def close(self) -> None:
        """Close every idle connection; later exchanges close theirs when done."""
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.abort()
        self._idle.clear()
