"""A request-capping HTTP/1.1 proxy for the tests (and for the perf scenario
``az_throttle``, which puts it in front of Azurite): a token bucket of
``rate`` requests a second in front of a real server (fake-gcs-server,
moto, Azurite), answering what the store answers past its cap, and
relaying every other request and its answer byte for byte.

It runs on an event loop in a thread of its own, bound to 127.0.0.1, so the
processes a test spawns share the one cap, as a bucket's clients share the
service's. The refusals, as each service sends them:

- ``gcs``: 429 with the JSON API's error body, reason ``rateLimitExceeded``;
- ``s3``: 503 with an XML ``<Error>`` whose code is ``SlowDown``;
- ``azure``: 503 ``ServerBusy``, in the ``x-ms-error-code`` header and an
  XML ``<Error>`` body.

A HEAD's refusal has the headers only (HTTP: no body to a HEAD). No
``Retry-After``: none of the three sends one to a throttled data request.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import Literal
from urllib.parse import urlsplit

from tests.servers.raw_server import Listener

__all__ = ["BURST_SECONDS", "CappingProxy", "Dialect"]

Dialect = Literal["gcs", "s3", "azure"]

_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding: *[^\r]*chunked", re.IGNORECASE)
_CLOSE = re.compile(rb"\r\nconnection: *close", re.IGNORECASE)
_PIECE = 64 * 1024
#: seconds of tokens the bucket holds by default: a service does not say
#: how much burst it allows, and it is often small
BURST_SECONDS = 0.1
# The proxy's record of the requests it admitted: per this many seconds.
_BIN = 0.1
#: seconds the bucket waits at most for ``refill_when`` (clients that never
#: pace fail the test on its counts, not by hanging)
REFILL_MOST = 30.0


def _refusal(dialect: Dialect) -> tuple[str, dict[str, str], bytes]:
    """The status line, headers and body of ``dialect``'s throttle."""
    if dialect == "gcs":
        message = "The rate of requests is too high; please slow down."
        body = json.dumps({"error": {"code": 429, "message": message, "errors": [
            {"message": message, "domain": "usageLimits", "reason": "rateLimitExceeded"}]}})
        return ("429 Too Many Requests", {"Content-Type": "application/json; charset=UTF-8"},
                body.encode())
    if dialect == "s3":
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
                "<Message>Please reduce your request rate.</Message>"
                "<RequestId>4442587FB7D0A2F9</RequestId><HostId>capping-proxy</HostId></Error>")
        return "503 Slow Down", {"Content-Type": "application/xml"}, body.encode()
    body = ("\ufeff<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>ServerBusy</Code>"
            "<Message>Operations per second is over the account limit.\n"
            "RequestId:00000000-0000-0000-0000-000000000000\n"
            "Time:2026-11-26T00:00:00.0000000Z</Message></Error>")
    return ("503 Operations per second is over the account limit.",
            {"Content-Type": "application/xml", "x-ms-error-code": "ServerBusy"},
            body.encode())


class CappingProxy:
    """A token bucket of ``rate`` requests/s (holding ``burst`` tokens,
    default :data:`BURST_SECONDS` of them) in front of ``upstream``; use it
    as a context manager, ``with CappingProxy(...) as endpoint``.

    Args:
        upstream: the server's ``http://127.0.0.1:PORT``.
        rate: requests admitted per second.
        dialect: whose refusal to answer past the cap.
        burst: tokens the bucket holds (default ``rate * BURST_SECONDS``,
            at least 1).

    ``refill_when``, if set (before the first request), keeps the bucket
    from refilling until it returns true (or for ``REFILL_MOST`` seconds
    from the first request): past its first ``burst`` tokens every request
    is refused, however slowly the clients send (on a busy machine they
    could trickle in under the cap, and nothing would be refused).

    ``stats`` counts ``requests`` (all received), ``relayed`` and
    ``throttled``; read it once the requests are done, as
    :meth:`served_after_throttle`.
    """

    def __init__(self, upstream: str, rate: float, dialect: Dialect,
                 burst: float | None = None) -> None:
        parts = urlsplit(upstream)
        assert parts.scheme == "http" and parts.hostname and parts.port, upstream
        self._host, self._port = parts.hostname, parts.port
        self.rate = rate
        self.burst = max(1.0, rate * BURST_SECONDS) if burst is None else burst
        self.stats: Counter[str] = Counter()
        status, headers, body = _refusal(dialect)
        lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()),
                 f"Content-Length: {len(body)}"]
        self._refused_head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        self._refused_body = body
        self._tokens = self.burst
        self._filled_at: float | None = None
        self.refill_when: Callable[[], bool] | None = None
        self._first = 0.0  # when the first request came
        self._throttled_at: float | None = None  # when the first refusal came
        # Requests admitted per _BIN seconds since the first request.
        self._admitted: Counter[int] = Counter()
        self._loop = asyncio.new_event_loop()
        self._listener = Listener(self._serve)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="capping-proxy")

    def __enter__(self) -> str:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._listener.start(), self._loop).result(10)
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._listener.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _admit(self) -> bool:
        now = self._loop.time()
        if self._filled_at is None:
            self._first = now
        elif self._refills(now):
            self._tokens = min(self.burst, self._tokens + (now - self._filled_at) * self.rate)
        self._filled_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self._admitted[int((now - self._first) / _BIN)] += 1
            return True
        if self._throttled_at is None:
            self._throttled_at = now - self._first
        return False

    def served_after_throttle(self, start: float, end: float) -> float | None:
        """Requests admitted a second from ``start`` to ``end`` seconds after
        the first refusal (None: none came, or the clients ended before
        ``end``); read it once the requests are done."""
        if self._throttled_at is None or not self._admitted:
            return None
        first = math.ceil((self._throttled_at + start) / _BIN - 1e-9)
        last = math.ceil((self._throttled_at + end) / _BIN - 1e-9)
        if max(self._admitted) < last:
            return None
        return sum(self._admitted[k] for k in range(first, last)) / ((last - first) * _BIN)

    def _refills(self, now: float) -> bool:
        when = self.refill_when
        if when is None or now - self._first > REFILL_MOST or when():
            self.refill_when = None  # once on, for good
            return True
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                    request = head + await _body(reader, head)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed its connection
                self.stats["requests"] += 1
                is_head = head.startswith(b"HEAD ")
                if not self._admit():
                    self.stats["throttled"] += 1
                    writer.write(self._refused_head if is_head
                                 else self._refused_head + self._refused_body)
                    await writer.drain()
                    continue
                self.stats["relayed"] += 1
                if upstream is None:
                    upstream = await self._listener.connect(self._host, self._port)
                upstream[1].write(request)
                await upstream[1].drain()
                if not await _relay(upstream[0], writer, is_head):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()


async def _body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    """A request's body as it came (a Content-Length's, or chunks)."""
    if _CHUNKED.search(head):
        return await _chunks(reader, None)
    length = _LENGTH.search(head)
    return await reader.readexactly(int(length[1])) if length else b""


async def _chunks(reader: asyncio.StreamReader, out: asyncio.StreamWriter | None) -> bytes:
    """A chunked body to its last chunk and trailers, passed to ``out``
    as it comes (returned whole if there is no ``out``)."""
    kept = bytearray()

    def put(data: bytes) -> None:
        if out is not None:
            out.write(data)
        else:
            kept.extend(data)

    while True:
        line = await reader.readuntil(b"\r\n")
        put(line)
        size = int(line.split(b";", 1)[0], 16)
        if size == 0:
            while True:  # trailers, then the empty line
                trailer = await reader.readuntil(b"\r\n")
                put(trailer)
                if trailer == b"\r\n":
                    return bytes(kept)
        put(await reader.readexactly(size + 2))


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 is_head: bool) -> bool:
    """Pass one answer on, byte for byte; whether the connection stays open."""
    status = 100
    while 100 <= status < 200:  # an interim answer (100 Continue) comes first
        head = await reader.readuntil(b"\r\n\r\n")
        writer.write(head)
        status = int(head.split(b" ", 2)[1])
    keep = not _CLOSE.search(head)
    if is_head or status in (204, 304):
        pass
    elif _CHUNKED.search(head):
        await _chunks(reader, writer)
    elif (length := _LENGTH.search(head)) is not None:
        left = int(length[1])
        while left:
            piece = await reader.readexactly(min(left, _PIECE))
            writer.write(piece)
            left -= len(piece)
            await writer.drain()
    else:
        while piece := await reader.read(_PIECE):  # to the end of the connection
            writer.write(piece)
        keep = False
    await writer.drain()
    return keep
