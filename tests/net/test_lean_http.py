"""The lean media-GET client (aioflux._net.http) against real servers.

Our emulator and fake-gcs-server for the normal path; small scripted
servers for what they never do (chunked bodies, redirects, idle
connections dropped, stalls, truncation, TLS).
"""

from __future__ import annotations

import asyncio
import gzip
import os
import ssl
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from aioflux import (
    AsyncClient,
    ClientConfig,
    InvalidArgument,
    NotFound,
    ProtocolError,
    RateLimited,
    RetryPolicy,
    ServerError,
    StorageError,
    Timeouts,
    TransportError,
)
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._net import http
from aioflux._net.http import BodyTruncated, MediaPool
from aioflux.testing import Emulator, Faults
from tests.conftest import FAST_RETRY, unique_bucket
from tests.servers.raw_server import RawServer, serving
from tests.servers.tls_cert import self_signed


async def test_reads_go_over_the_lean_client(client: AsyncClient, bucket: str) -> None:
    blobs = {f"o{i}": os.urandom(size) for i, size in enumerate((0, 1, 4096, 100_000, 3 << 20))}
    for name, data in blobs.items():
        await client.write(bucket, name, data)
    stats = client.transport.stats
    before = stats.lean_reads
    for name, data in blobs.items():
        assert await client.read(bucket, name) == data
        if data:
            assert await client.read(bucket, name, start=1, end=len(data)) == data[1:]
            buf = bytearray(len(data) + 7)
            assert await client.read(bucket, name, into=buf) == len(data)
            assert buf[:len(data)] == data
    # 13 reads; the empty range [1, 1) of the 1-byte object sends no request
    assert stats.lean_reads - before == 12
    assert stats.lean_fallbacks == 0


async def test_lean_reads_off_uses_aiohttp(emulator: Emulator, bucket: str) -> None:
    config = ClientConfig(retry=FAST_RETRY, lean_reads=False)
    async with AsyncClient(config, endpoint=emulator.endpoint) as client:
        await client.write(bucket, "x", b"payload")
        assert await client.read(bucket, "x") == b"payload"
        assert await client.read(bucket, "x", start=3) == b"load"
        with pytest.raises(NotFound):
            await client.read(bucket, "missing")
    assert client.transport.stats.lean_reads == 0


async def test_errors_over_the_lean_client(faults: Emulator, client: AsyncClient,
                                           bucket: str) -> None:
    with pytest.raises(NotFound, match=r"gs://.*/missing") as info:
        await client.read(bucket, "missing")
    assert info.value.attempts == 1
    await client.write(bucket, "o", b"data")
    faults.faults = Faults(p_429=1.0)
    # A client whose rate controller is off gives up on throttles after
    # max_attempts (on, it retries until throttle_deadline).
    async with AsyncClient(client.transport.config.replace(request_rate="off"),
                           endpoint=faults.endpoint) as off:
        with pytest.raises(RateLimited):
            await off.read(bucket, "o")
        assert off.transport.stats.lean_fallbacks == 0
    with pytest.raises(InvalidArgument, match="do not fit a buffer of 2"):
        faults.faults = Faults()
        await client.read(bucket, "o", into=bytearray(2))
    assert await client.read(bucket, "o") == b"data"  # the pool survived all of it


async def test_fake_gcs_server_reads_over_the_lean_client(fake_gcs: Any) -> None:
    async with AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=fake_gcs.endpoint) as client:
        bucket = unique_bucket("lean")
        await client.create_bucket(bucket)
        data = os.urandom(3_000_000)
        await client.write(bucket, "big", data)
        reads = await asyncio.gather(*(client.read(bucket, "big", start=s, end=s + 300_000)
                                       for s in range(0, len(data), 300_000)))
        assert b"".join(reads) == data
        assert await client.read(bucket, "big") == data
        with pytest.raises(NotFound):
            await client.read(bucket, "missing")
    assert client.transport.stats.lean_reads == 12
    assert client.transport.stats.lean_fallbacks == 0


# -- scripted servers ---------------------------------------------------------------

BODY = os.urandom(200_000)
HASH = f"crc32c={encode_crc32c(crc32c(BODY))}"


@pytest.fixture
async def web_server() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """Start an aiohttp app from a route table; yields its base URL."""
    runners: list[web.AppRunner] = []

    async def start(routes: dict[str, Any], ssl_context: ssl.SSLContext | None = None) -> str:
        app = web.Application()
        for path, handler in routes.items():
            app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def _chunked(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"x-goog-hash": HASH})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for start in range(0, len(BODY), 65536):
        await resp.write(BODY[start:start + 65536])
    await resp.write_eof()
    return resp


async def _gzipped(request: web.Request) -> web.Response:
    return web.Response(body=gzip.compress(BODY), headers={"Content-Encoding": "gzip"})


async def _redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/plain")


async def _plain(request: web.Request) -> web.Response:
    return web.Response(body=BODY, headers={"x-goog-hash": HASH})


async def _long_error(request: web.Request) -> web.Response:
    return web.Response(status=503, body=b"x" * 100_000)


async def test_unusual_responses_go_to_aiohttp(web_server: Any) -> None:
    base = await web_server({"/chunked": _chunked, "/gzip": _gzipped,
                             "/redirect": _redirect, "/plain": _plain,
                             "/error": _long_error})
    config = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
    async with AsyncClient(config, endpoint="http://unused.invalid") as client:
        transport = client.transport
        for path in ("/chunked", "/gzip"):
            got = await transport.get_media(_op(path), base + path, lambda r: bytes(r.body or b""))
            assert got == BODY, path
        stats = transport.stats
        assert (stats.lean_fallbacks, stats.lean_reads) == (2, 0)
        # The API never redirects: a 3xx is answered here, never followed.
        with pytest.raises(ProtocolError, match="HTTP 302") as info:
            await transport.get_media(_op("/redirect"), base + "/redirect", lambda r: r)
        assert info.value.status == 302
        # A long error body: its first 64 KiB are read here, the connection dropped.
        with pytest.raises(ServerError, match="HTTP 503"):
            await transport.get_media(_op("/error"), base + "/error", lambda r: r)
        assert stats.lean_fallbacks == 2 and stats.lean_reads == 3  # 1 + both attempts
        got = await transport.get_media(_op("/plain"), base + "/plain",
                                        lambda r: bytes(r.body or b""))
        assert got == BODY and stats.lean_reads == 4


async def test_lean_reads_stop_when_most_responses_need_aiohttp(web_server: Any) -> None:
    base = await web_server({"/chunked": _chunked, "/plain": _plain})
    async with AsyncClient(ClientConfig(), endpoint="http://unused.invalid") as client:
        transport = client.transport
        await transport.get_media(_op("/plain"), base + "/plain", lambda r: r)
        for _ in range(40):
            got = await transport.get_media(_op("/chunked"), base + "/chunked",
                                            lambda r: bytes(r.body or b""))
            assert got == BODY
        stats = transport.stats
        # 32 fallbacks outnumber the 1 lean read: the rest went to aiohttp directly
        assert (stats.lean_reads, stats.lean_fallbacks, stats.requests) == (1, 32, 41)
        await transport.get_media(_op("/plain"), base + "/plain", lambda r: r)
        assert stats.lean_reads == 1


def _op(path: str) -> Any:
    from aioflux._net.transport import Op

    return Op("read", "scripted", path)


def _response(body: bytes = BODY, *, status: str = "200 OK", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nx-goog-hash: {HASH}\r\n"
            f"{extra}\r\n").encode() + body


async def _read(base: str, *, stall: float = 60.0, attempts: int = 3,
                pool_check: Callable[[AsyncClient], None] | None = None) -> tuple[bytes, Any]:
    config = ClientConfig(timeouts=Timeouts(read_stall=stall),
                          retry=RetryPolicy(max_attempts=attempts, initial_delay=0, max_delay=0))
    async with AsyncClient(config, endpoint=base) as client:
        data = await client.read("bkt", "obj")
        data += await client.read("bkt", "obj")
        if pool_check:
            pool_check(client)
        return data, client.transport.stats


async def test_keep_alive_reuses_one_connection() -> None:
    server = RawServer(lambda conn, i: _response())
    async with server as base:
        data, stats = await _read(base)
    assert data == BODY * 2 and server.connections == 1 and stats.lean_reads == 2


async def test_connection_close_is_honoured() -> None:
    server = RawServer(lambda conn, i: _response(extra="Connection: close\r\n") if i == 0
                       else None)
    async with server as base:
        data, stats = await _read(base)
    assert data == BODY * 2 and server.connections == 2 and stats.retries == 0


async def test_idle_connection_dropped_by_server_is_replaced_at_once() -> None:
    # The server closes a kept-alive connection when the next request comes
    # (the race of an idle timeout): the client must not count it a failure.
    server = RawServer(lambda conn, i: _response() if i == 0 else None)
    async with server as base:
        data, stats = await _read(base)
    assert data == BODY * 2
    assert server.connections == 2 and stats.retries == 0


async def test_truncated_body_is_retried() -> None:
    server = RawServer(lambda conn, i: (_response()[:-1000], "close") if conn == 0
                       else _response())
    async with server as base:
        data, stats = await _read(base)
    assert data == BODY * 2 and stats.retries == 1


async def test_truncated_body_gives_a_typed_error() -> None:
    server = RawServer(lambda conn, i: (_response()[:-1000], "close"))
    async with server as base:
        with pytest.raises(TransportError, match="truncated"):
            await _read(base, attempts=2)


async def test_stall_times_out_and_is_retried() -> None:
    server = RawServer(lambda conn, i: (_response()[:5000], "stall") if conn == 0
                       else _response())
    async with server as base:
        data, stats = await _read(base, stall=0.2)
    assert data == BODY * 2 and stats.retries == 1


async def test_cancelled_read_discards_its_connection() -> None:
    server = RawServer(lambda conn, i: (_response()[:5000], "stall") if conn == 0
                       else _response())
    async with server as base, AsyncClient(ClientConfig(), endpoint=base) as client:
        task = asyncio.create_task(client.read("bkt", "obj"))
        media = await _wait_for_media(client)
        await _wait_for(lambda: _progress(media) == 5000, HANG)  # mid-body
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert media.sockets == 0  # dropped, not pooled
        await _wait_for(lambda: server.closed == 1, HANG)  # the server saw it go
        assert await client.read("bkt", "obj") == BODY
    assert server.connections == 2


@pytest.mark.parametrize("lean", [True, False])
async def test_a_server_ignoring_range_is_an_error(lean: bool) -> None:
    # A proxy that drops Range answers 200 with the whole object: returning
    # those bytes for [1000, 2000) would hand out the wrong ones.
    server = RawServer(lambda conn, i: _response())
    async with server as base:
        config = ClientConfig(lean_reads=lean, retry=FAST_RETRY)
        async with AsyncClient(config, endpoint=base) as client:
            with pytest.raises(StorageError, match="whole object") as info:
                await client.read("bkt", "obj", start=1000, end=2000)
            assert info.value.attempts == 1
            with pytest.raises(StorageError, match="whole object"):
                await client.read("bkt", "obj", start=0, end=10)
            # A range that covers the whole object may come back as a 200.
            assert await client.read("bkt", "obj", start=0, end=len(BODY)) == BODY


async def test_header_line_breaks_are_refused() -> None:
    pool = MediaPool(user_agent="t", connect_timeout=1, read_stall=1, idle_timeout=5)
    for name, value in (("Range", "bytes=0-1\r\nEvil: 1"), ("Range", "a\nb"),
                        ("X-Nul", "a\x00b"), ("Bad Name", "v"), ("X\r\nY", "v")):
        with pytest.raises(InvalidArgument, match="header") as info:
            await pool.get("http://127.0.0.1:9/x", {name: value})
        assert repr(name) in str(info.value) or name[:40] in str(info.value)
    assert pool.sockets == 0  # refused before connecting
    with pytest.raises(InvalidArgument, match="User-Agent"):
        MediaPool(user_agent="a\r\nEvil: 1", connect_timeout=1, read_stall=1, idle_timeout=5)
    with pytest.raises(InvalidArgument, match="User-Agent"):
        ClientConfig(user_agent="aioflux\r\nX-Evil: 1")
    assert ClientConfig(user_agent="aioflux/1.0 (tab\tok)").user_agent.endswith("ok)")


async def test_tls(web_server: Any, tmp_path: Path) -> None:
    server_ctx, client_ctx = self_signed(tmp_path)
    base = await web_server({"/plain": _plain}, ssl_context=server_ctx)
    pool = MediaPool(user_agent="t", connect_timeout=5, read_stall=5, idle_timeout=5,
                     ssl_context=client_ctx)
    try:
        for _ in range(2):
            resp = await pool.get(base + "/plain", {})
            assert resp is not None and resp.status == 200 and bytes(resp.body or b"") == BODY
        into = bytearray(len(BODY))
        resp = await pool.get(base + "/plain", {}, memoryview(into))
        assert resp is not None and resp.body is None and into == BODY
        # Without the test CA the system store refuses the certificate.
        strict = MediaPool(user_agent="t", connect_timeout=5, read_stall=5, idle_timeout=5)
        with pytest.raises(ssl.SSLError):
            await strict.get(base + "/plain", {})
        strict.close()
    finally:
        pool.close()


# -- limits: body size, sockets, idle time, stalls ----------------------------------

async def test_a_declared_length_over_the_limit_fails_before_allocating() -> None:
    server = RawServer(lambda conn, i: (_response(b"x" * 10)
                                        .replace(b"Content-Length: 10", b"Content-Length: "
                                                 + str(1 << 30).encode()), "stall"))
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)
    async with server as base:
        tracemalloc.start()
        try:
            # Over the limit: the head is reported, the body never read.
            over = await pool.get(base + "/o", {}, limit=100)
            assert over is not None and over.body is None
            assert (over.received, over.expected) == (0, 1 << 30)
            # No limit: the buffer grows with what arrives, not what is declared.
            task = asyncio.create_task(pool.get(base + "/o", {}))
            await _wait_for(lambda: _progress(pool) > 0, HANG)  # the head is in
            _, peak = tracemalloc.get_traced_memory()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20
        assert pool.sockets == 0  # both connections dropped
    pool.close()


async def test_a_body_without_a_limit_is_received_whole() -> None:
    big = os.urandom(3 << 20)  # the buffer grows 1 -> 2 -> 3 MiB
    server = RawServer(lambda conn, i: _response(big))
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)
    async with server as base:
        for limit in (None, len(big)):
            resp = await pool.get(base + "/o", {}, limit=limit)
            assert resp is not None and resp.body == big and resp.received == len(big)
    pool.close()


async def test_a_small_body_arrives_as_bytes_and_a_cut_one_as_what_arrived() -> None:
    # A 2xx body that fits the first buffer lands in the bytes handed out
    # (no bytearray copied afterwards); cut short, only its bytes count.
    small = os.urandom(100 << 10)
    server = RawServer(lambda conn, i: _response(small) if i == 0
                       else (_response(small)[:-1000], "close"))
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)
    async with server as base:
        resp = await pool.get(base + "/o", {}, limit=len(small))
        assert resp is not None and type(resp.body) is bytes and resp.body == small
        with pytest.raises(BodyTruncated) as cut:
            await pool.get(base + "/o", {}, limit=len(small))
    arrived = cut.value.response
    assert arrived is not None and arrived.received == len(small) - 1000
    assert arrived.body == small[:-1000]
    pool.close()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_get_media_limit_on_both_paths(lean: bool) -> None:
    server = RawServer(lambda conn, i: _response())
    config = ClientConfig(lean_reads=lean, retry=RetryPolicy(max_attempts=2, initial_delay=0,
                                                             max_delay=0))
    async with server as base, AsyncClient(config, endpoint=base) as client:
        # Over the limit both paths report the head and read no body.
        over = await client.transport.get_media(_op("/o"), base + "/o", lambda r: r,
                                                limit=len(BODY) - 1)
        assert over.body is None and over.received < over.expected == len(BODY)
        got = await client.transport.get_media(_op("/o"), base + "/o",
                                               lambda r: bytes(r.body or b""), limit=len(BODY))
        assert got == BODY


def _peak_counting(server_ref: list[RawServer], peaks: list[int],
                   answer: bytes) -> Callable[[int, int], bytes]:
    def script(conn: int, index: int) -> bytes:
        server = server_ref[0]
        peaks.append(server.connections - server.closed)
        return answer
    return script


async def test_connection_limit_bounds_lean_sockets() -> None:
    peaks: list[int] = []
    ref: list[RawServer] = []
    server = RawServer(_peak_counting(ref, peaks, _response()))
    ref.append(server)
    config = ClientConfig(max_concurrency=8, connection_limit=2, retry=FAST_RETRY)
    async with server as base, AsyncClient(config, endpoint=base) as client:
        got = await asyncio.gather(*(client.read("bkt", "obj") for _ in range(16)))
        assert got == [BODY] * 16
        assert client.transport.stats.lean_reads == 16
    assert server.connections == 2 and max(peaks) <= 2


async def _aiohttp_get(client: AsyncClient, url: str) -> bytes:
    async def body(resp: Any) -> bytes:
        return bytes(await resp.read())
    return await client.transport.request(_op("/meta"), "GET", url, body)


async def test_connection_limit_counts_aiohttp_sockets_too() -> None:
    peaks: list[int] = []
    ref: list[RawServer] = []
    server = RawServer(_peak_counting(ref, peaks, _response()))
    ref.append(server)
    config = ClientConfig(max_concurrency=8, connection_limit=2, retry=FAST_RETRY)
    async with server as base, AsyncClient(config, endpoint=base) as client:
        assert await _aiohttp_get(client, base + "/meta") == BODY  # aiohttp keeps it idle
        got = await asyncio.gather(*(client.read("bkt", "obj") for _ in range(8)))
        assert got == [BODY] * 8 and client.transport.stats.lean_reads == 8
    # one socket for aiohttp, one for the lean reads
    assert server.connections == 2 and max(peaks) <= 2


async def test_lean_reads_give_way_when_aiohttp_holds_the_limit() -> None:
    server = RawServer(lambda conn, i: _response())
    config = ClientConfig(max_concurrency=8, connection_limit=1, retry=FAST_RETRY)
    async with server as base, AsyncClient(config, endpoint=base) as client:
        assert await _aiohttp_get(client, base + "/meta") == BODY
        assert await client.read("bkt", "obj") == BODY
        stats = client.transport.stats
        assert (stats.lean_reads, stats.lean_fallbacks) == (0, 1)
    assert server.connections == 1  # aiohttp's socket, reused


# What the tests below wait for is an event; this only bounds how long a
# wait may take before the event counts as never coming (a hang), far
# beyond what any step takes on a loaded machine.
HANG = 30.0


async def _wait_for(check: Callable[[], bool], limit: float) -> float:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < limit, "condition not reached in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def _wait_for_media(client: AsyncClient) -> MediaPool:
    """The client's lean pool, once it holds a connection mid-exchange."""
    media = client.transport._current().media
    assert media is not None
    await _wait_for(lambda: bool(media._busy), HANG)
    return media


def _progress(pool: MediaPool) -> int:
    """Response bytes (head and body) the pool's one exchange under way has received."""
    exchanges = [conn._exchange for conn in pool._busy if conn._exchange is not None]
    return sum(ex.progress for ex in exchanges)


async def _received(pool: MediaPool, total: int) -> None:
    """Until the pool's exchange has received ``total`` response bytes."""
    await _wait_for(lambda: _progress(pool) == total, HANG)


class _Timer:
    __slots__ = ("args", "callback", "cancelled", "due")

    def __init__(self, due: float, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.due, self.callback, self.args, self.cancelled = due, callback, args, False

    def cancel(self) -> None:
        self.cancelled = True

    def when(self) -> float:
        return self.due


class _Clock:
    """The loop a lean connection sees, on a clock the test moves.

    A connection reads the time and arms its stall timer through its loop
    (``time``, ``call_later``); here that time stands still until
    :meth:`advance`, which fires the timers due in order. Which timer fired,
    and when it was due, then follow from what the test sent and when it
    said so, not from how long anything took: bytes still arrive over a real
    socket, each stamped with the clock's time.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.now = 0.0
        self._timers: list[_Timer] = []
        #: when each timer that fired was due, in order
        self.fired: list[float] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> _Timer:
        timer = _Timer(self.now + delay, callback, args)
        self._timers.append(timer)
        return timer

    def create_future(self) -> asyncio.Future[Any]:
        return self._loop.create_future()

    def advance(self, to: float) -> None:
        """Move the clock to ``to``, firing every timer due by then."""
        for _ in range(1000):  # a timer re-armed for no time at all would spin
            due = [t for t in self._timers if not t.cancelled and t.due <= to]
            if not due:
                self.now = to
                return
            timer = min(due, key=lambda t: t.due)
            self._timers.remove(timer)
            self.now = max(self.now, timer.due)
            self.fired.append(timer.due)
            timer.callback(*timer.args)
        raise AssertionError("timers kept firing without the clock moving")


def _clocked(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    """Lean connections opened from now on run on a :class:`_Clock`."""
    clock = _Clock(asyncio.get_running_loop())

    class Clocked(http._Connection):
        def __init__(self, loop: asyncio.AbstractEventLoop, on_gone: Callable[[], None]) -> None:
            super().__init__(clock, on_gone)  # type: ignore[arg-type]

    monkeypatch.setattr(http, "_Connection", Clocked)
    return clock


async def _settled(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` ends once the loop has run what is ready: a timer's
    error reaches a read at its next turn, not after any time passes."""
    for _ in range(10):
        await asyncio.sleep(0)
    return task.done()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_idle_connections_close_after_the_idle_timeout(lean: bool) -> None:
    server = RawServer(lambda conn, i: _response())
    config = ClientConfig(lean_reads=lean, timeouts=Timeouts(idle=0.3), retry=FAST_RETRY)
    async with server as base, AsyncClient(config, endpoint=base) as client:
        # Timed from before the request: the connection went idle later, so
        # a close earlier than this after it is a close before its time.
        started = time.monotonic()
        assert await client.read("bkt", "obj") == BODY
        if lean:
            # Reaped by a timer armed for the connection's expiry, at most
            # the idle timeout from now (not at the next request, nor after
            # a second interval).
            media = client.transport._current().media
            assert media is not None and media._reaper is not None
            assert media._reaper.when() - asyncio.get_running_loop().time() <= 0.3
        await _wait_for(lambda: server.closed == 1, HANG)
        assert time.monotonic() - started >= 0.3  # not before its time
        assert len(server.requests) == 1  # closed on its own, no request asked
        assert await client.read("bkt", "obj") == BODY
    assert server.connections == 2
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match=r"Timeouts\.idle"):
            Timeouts(idle=bad)


async def test_expired_connections_under_the_top_of_the_stack_are_reaped() -> None:
    server = RawServer(lambda conn, i: _response())
    # Nothing expires by the clock during the test: the bottom connection is
    # made to look idle for longer than this instead, so the top one, used
    # again at once, stays fresh however slow the machine is.
    idle = 60.0
    config = ClientConfig(timeouts=Timeouts(idle=idle), retry=FAST_RETRY)
    async with server as base, AsyncClient(config, endpoint=base) as client:
        assert await asyncio.gather(*(client.read("bkt", "obj") for _ in range(2))) == [BODY] * 2
        assert server.connections == 2
        media = client.transport._current().media
        assert media is not None and media.sockets == 2
        (stack,) = media._idle.values()
        bottom, top = stack
        bottom.idle_since -= idle  # expired, under the top of the stack
        for _ in range(3):  # the top connection is taken and comes back
            assert await client.read("bkt", "obj") == BODY
        assert bottom.closed and not top.closed and list(stack) == [top]
        await _wait_for(lambda: server.closed == 1, HANG)
        assert server.connections == 2 and media.sockets == 1


async def test_stall_fires_read_stall_after_the_last_byte(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clocked(monkeypatch)
    sends: asyncio.Queue[bytes] = asyncio.Queue()
    finished = asyncio.Event()

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            while data := await sends.get():
                writer.write(data)
            await reader.read()  # silent until the client gives up
        finally:
            writer.close()
            finished.set()

    head = b"HTTP/1.1 200 OK\r\nContent-Length: 60000\r\n\r\n"
    async with serving(trickle) as endpoint:
        pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=0.4, idle_timeout=5)
        try:
            get = asyncio.create_task(pool.get(f"{endpoint}/o", {}))
            # More than the 16 KiB a window must move (0-0.4, 0.4-0.8): only
            # the silence after 0.45 fails. The stall timer comes at 0.4
            # and 0.6 while bytes still flow, and at 0.8 for the pace window.
            for at, data in ((0.0, head + b"x" * 20000), (0.2, b"x" * 17000),
                             (0.45, b"x" * 17000)):
                clock.advance(at)
                arrived = _progress(pool) + len(data)
                sends.put_nowait(data)
                await _received(pool, arrived)
            sends.put_nowait(b"")
            # Re-armed for the silence left: quiet just short of read_stall
            # after the last byte, the read goes on...
            clock.advance(0.84)
            assert not await _settled(get)
            # ...and read_stall after it, it ends: not at the next 0.4 s
            # tick after that (1.2), which a timer checking every 0.4 s would
            # wait for.
            clock.advance(0.86)
            assert await _settled(get), "no read_stall error read_stall after the last byte"
            assert clock.fired[-1] == pytest.approx(0.45 + 0.4)
            # A stall mid-body hands over what arrived (the read resumes after it).
            with pytest.raises(BodyTruncated,
                               match=r"^Timeouts\.read_stall: no response bytes for 0\.4 s "
                                     r"after 54000 of 60000") as cut:
                await get
            arrived_body = cut.value.response
            assert arrived_body is not None and arrived_body.received == 54000
            assert bytes(arrived_body.body or b"")[:54000] == b"x" * 54000
            assert not arrived_body.slow  # silence, not a drip
            await asyncio.wait_for(finished.wait(), HANG)  # the client dropped the connection
        finally:
            pool.abort()


async def test_a_drip_that_is_never_silent_fails_at_the_end_of_a_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A byte every 50 ms never leaves the socket silent for read_stall (0.4 s),
    # so without the pace rule this read would take 10,000 s.
    clock = _clocked(monkeypatch)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n"
    sends: asyncio.Queue[bytes] = asyncio.Queue()

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            while data := await sends.get():
                writer.write(data)
            await reader.read()
        finally:
            writer.close()

    async with serving(drip) as endpoint:
        pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=0.4, idle_timeout=5)
        try:
            get = asyncio.create_task(pool.get(f"{endpoint}/o", {}))
            await _wait_for(lambda: bool(pool._busy), HANG)
            sends.put_nowait(head)
            await _received(pool, len(head))
            for tick in range(1, 8):  # a byte at 0.05, 0.1 ... 0.35
                clock.advance(tick * 0.05)
                sends.put_nowait(b"x")
                await _received(pool, len(head) + tick)
            assert not await _settled(get)  # never silent for long, window still open
            clock.advance(0.4)
            assert await _settled(get), "the pace window closed without failing the drip"
            assert clock.fired == [0.4]  # the window's end, the first check
            with pytest.raises(BodyTruncated, match=rf"^only {len(head) + 7} response bytes in "
                                                     r"0\.4 s .* after 7 of 200000 body bytes"):
                await get
        finally:
            sends.put_nowait(b"")
            pool.abort()


async def test_a_waiting_read_takes_the_socket_a_failed_one_gives_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # conn 0 stalls mid-body and holds the only socket; the next read waits
    # for it instead of opening a second one, and gets a fresh one when the
    # stalled exchange times out.
    clock = _clocked(monkeypatch)
    server = RawServer(lambda conn, i: (_response()[:5000], "stall") if conn == 0
                       else _response())
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=0.3, idle_timeout=5,
                     connection_limit=1)
    async with server as base:
        first = asyncio.create_task(pool.get(base + "/o", {}))
        await _wait_for(lambda: _progress(pool) == 5000, HANG)
        waiting = asyncio.create_task(pool.get(base + "/o", {}))
        cancelled = asyncio.create_task(pool.get(base + "/o", {}))
        await _wait_for(lambda: len(pool._waiters) == 2, HANG)  # both queued for the socket
        assert pool.sockets == 1 and server.connections == 1 and not waiting.done()
        cancelled.cancel()
        # 5000 bytes, then silence: read_stall later the stall timer ends
        # the exchange (the pace window closes at the same moment).
        clock.advance(0.3)
        with pytest.raises(BodyTruncated, match=r"no response bytes for 0\.3 s"):
            await first
        resp = await waiting
        assert resp is not None and resp.body == BODY
        assert server.connections == 2 and pool.sockets == 1
        with pytest.raises(asyncio.CancelledError):
            await cancelled
    pool.close()
    # a connection that cannot be opened is not counted
    refused = MediaPool(user_agent="t", connect_timeout=2, read_stall=1, idle_timeout=5,
                        connection_limit=1)
    for _ in range(2):
        with pytest.raises(OSError):
            await refused.get(base + "/o", {})
    assert refused.sockets == 0
