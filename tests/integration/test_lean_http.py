"""The lean media-GET client (aioflux._http) against real servers.

Our emulator and fake-gcs-server for the normal path; small scripted
servers for what they never do (chunked bodies, redirects, idle
connections dropped, stalls, truncation, TLS).
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import os
import ssl
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
from aioflux._crc import crc32c, encode_crc32c
from aioflux._http import MediaPool
from aioflux.testing import Emulator, Faults

from ..conftest import FAST_RETRY, unique_bucket
from ..raw_server import RawServer


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
    with pytest.raises(RateLimited):
        await client.read(bucket, "o")
    assert client.transport.stats.lean_fallbacks == 0
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
        # The API never redirects: aiohttp must not follow one either.
        with pytest.raises(ProtocolError, match="HTTP 302"):
            await transport.get_media(_op("/redirect"), base + "/redirect", lambda r: r)
        stats = transport.stats
        assert (stats.lean_fallbacks, stats.lean_reads) == (3, 0)
        with pytest.raises(ServerError, match="HTTP 503"):
            await transport.get_media(_op("/error"), base + "/error", lambda r: r)
        assert stats.lean_fallbacks == 5  # both attempts
        got = await transport.get_media(_op("/plain"), base + "/plain",
                                        lambda r: bytes(r.body or b""))
        assert got == BODY and stats.lean_reads == 1


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
    from aioflux._transport import Op

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
        while server.connections == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if server.closed:
                break
            await asyncio.sleep(0.01)
        assert server.closed == 1  # the half-read connection was not pooled
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
    pool = MediaPool(user_agent="t", connect_timeout=1, read_stall=1)
    with pytest.raises(ValueError, match="line break"):
        await pool.get("http://127.0.0.1:9/x", {"Range": "bytes=0-1\r\nEvil: 1"})


def _self_signed(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp / "cert.pem").write_bytes(cert_pem)
    (tmp / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    client = ssl.create_default_context(cadata=cert_pem.decode())
    return server, client


async def test_tls(web_server: Any, tmp_path: Path) -> None:
    server_ctx, client_ctx = _self_signed(tmp_path)
    base = await web_server({"/plain": _plain}, ssl_context=server_ctx)
    pool = MediaPool(user_agent="t", connect_timeout=5, read_stall=5, ssl_context=client_ctx)
    try:
        for _ in range(2):
            resp = await pool.get(base + "/plain", {})
            assert resp is not None and resp.status == 200 and bytes(resp.body or b"") == BODY
        into = bytearray(len(BODY))
        resp = await pool.get(base + "/plain", {}, memoryview(into))
        assert resp is not None and resp.body is None and into == BODY
        # Without the test CA the system store refuses the certificate.
        strict = MediaPool(user_agent="t", connect_timeout=5, read_stall=5)
        with pytest.raises(ssl.SSLError):
            await strict.get(base + "/plain", {})
        strict.close()
    finally:
        pool.close()
