"""Hostile servers: no read returns wrong bytes, none hangs, retries resume,
tokens stay home.

Scripted servers (tests/servers/raw_server.py) answer what a real GCS never would:
redirects, ranges other than asked, short and cut bodies, garbled heads,
bad ``Retry-After``, an untrusted certificate. Every scenario runs on the
lean media path and on aiohttp (``lean_reads=False``).
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    Downloader,
    DownloadOptions,
    ObjectInfo,
    ProtocolError,
    ReaderOptions,
    RetryPolicy,
    StorageError,
    TLSError,
    TransportError,
)
from aioflux._core.concurrency.portal import get_portal
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._engines.reader import ObjectReader
from aioflux._net.transport import Op
from tests.conftest import unique_bucket
from tests.servers.raw_server import RawServer
from tests.servers.tls_cert import self_signed

OBJ = bytes(range(256)) * 400  # 102,400 bytes
OBJ_CRC = crc32c(OBJ)
RETRY = RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0)
LEAN = pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
_RANGE = re.compile(rb"\r\nrange: *bytes=(\d+)-(\d*)\r\n", re.IGNORECASE)


def _http(status: str, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _range(head: bytes) -> str | None:
    match = _RANGE.search(head)
    return None if match is None else f"bytes={match[1].decode()}-{match[2].decode()}"


def _ranges(server: RawServer) -> list[str | None]:
    return [_range(head) for head in server.requests]


class ObjectServer(RawServer):
    """Serves ``data`` honouring Range, with faults.

    Args:
        short: 206 bodies carry at most this many bytes (also to a read
            without Range, which then gets a partial 206).
        cut: close every response after this many body bytes.
        crc: the crc32c to announce in ``x-goog-hash`` (None: no header).
    """

    def __init__(self, data: bytes = OBJ, *, short: int | None = None, cut: int | None = None,
                 crc: int | None = OBJ_CRC) -> None:
        super().__init__(self._answer)
        self.data, self.short, self.cut, self.crc = data, short, cut, crc

    def _answer(self, conn: int, index: int) -> bytes | tuple[bytes, str]:
        match = _RANGE.search(self.requests[-1])
        first, last, status = 0, len(self.data) - 1, "200 OK"
        if match is not None:
            first, status = int(match[1]), "206 Partial Content"
            if match[2]:
                last = min(last, int(match[2]))
        if self.short is not None:
            last, status = min(last, first + self.short - 1), "206 Partial Content"
        body = self.data[first:last + 1]
        headers = {"x_goog_generation": "7"}
        if self.crc is not None:
            headers["x_goog_hash"] = f"crc32c={encode_crc32c(self.crc)}"
        if status.startswith("206"):
            headers["Content_Range"] = f"bytes {first}-{last}/{len(self.data)}"
        response = _http(status, body, **headers)
        if self.cut is not None and self.cut < len(body):
            return response[:len(response) - len(body) + self.cut], "close"
        return response


def _client(base: str, lean: bool, **config: Any) -> AsyncClient:
    config.setdefault("retry", RETRY)
    return AsyncClient(ClientConfig(lean_reads=lean, **config), endpoint=base)


# -- 1. no redirect is followed ------------------------------------------------------------


@LEAN
async def test_redirects_are_errors_on_every_path(lean: bool) -> None:
    elsewhere = RawServer(lambda conn, i: _http("200 OK", b"<html>login</html>"))
    async with elsewhere as other:
        page = f"{other}/login"
        server = RawServer(lambda conn, i: (_http("302 Found", b"moved", Location=page,
                                                  Connection="close"),
                                            "close"))
        async with server as base, _client(base, lean) as client:
            calls = {
                "read": client.read("bkt", "o"),
                "ranged read": client.read("bkt", "o", start=5, end=10),
                "stat": client.stat("bkt", "o"),
                "list": client.list("bkt").__anext__(),
                "delete": client.delete("bkt", "o"),
                "copy": client.copy("bkt", "o", "bkt", "o2"),
                "write": client.write("bkt", "o", b"0123456789", resumable=False),
            }
            for what, call in calls.items():
                with pytest.raises(ProtocolError, match="HTTP 302") as info:
                    await call
                assert info.value.attempts == 1, what
    assert elsewhere.requests == []


# -- 2. every response checked against the request --------------------------------------


@LEAN
@pytest.mark.parametrize(("answer", "read", "message"), [
    # asked for [10, 20), got the first ten bytes
    (_http("206 Partial Content", b"ABCDEFGHIJ", Content_Range="bytes 0-9/20"),
     {"start": 10, "end": 20}, "Content-Range bytes 0-9/20"),
    (_http("206 Partial Content", b"ABCDEFGHIJ"), {"start": 10, "end": 20},
     "without a valid Content-Range"),
    (_http("206 Partial Content", b"ABCDEFGHIJ", Content_Range="bytes 10-29/40"),
     {"start": 10, "end": 20}, r"asked for bytes \[10, 20\)"),
    (_http("206 Partial Content", b"ABCDE", Content_Range="bytes 0-4/*"), {},
     "does not give the object's size"),
    (_http("204 No Content"), {}, "unexpected HTTP 204"),
    # Content-Length shorter than the range it claims to carry
    (_http("206 Partial Content", b"ABCDE", Content_Range="bytes 10-19/20"),
     {"start": 10, "end": 20}, "Content-Length 5 disagrees"),
    # ... or than the stored object
    (_http("200 OK", b"ABCDEFGHIJ", x_goog_stored_content_length="20"), {},
     "Content-Length says the object has 10 bytes, expected 20"),
    (_http("200 OK", b"ABCDEFGHIJ"), {"start": 2, "end": 4}, "whole object"),
])
async def test_responses_must_match_the_request(lean: bool, answer: bytes, read: dict[str, int],
                                               message: str) -> None:
    server = RawServer(lambda conn, i: answer)
    async with server as base, _client(base, lean) as client:
        with pytest.raises(ProtocolError, match=message) as info:
            await client.read("bkt", "o", **read)
    assert info.value.attempts == 1 and "gs://bkt/o" in str(info.value)


@LEAN
async def test_corrupt_bytes_are_retried_then_raised(lean: bool) -> None:
    server = ObjectServer(crc=OBJ_CRC ^ 1)
    async with server as base, _client(base, lean) as client:
        with pytest.raises(ChecksumMismatch, match="gave up after 3 attempts"):
            await client.read("bkt", "o")
        # a whole object assembled from a resumed read is checked too
        server.short = 40_000
        with pytest.raises(ChecksumMismatch):
            await client.read("bkt", "o", into=bytearray(len(OBJ)))
        assert _ranges(server)[-5:] == [None, "bytes=40000-", "bytes=80000-", None,
                                        "bytes=40000-"]


# -- 2/4. short and cut bodies are resumed --------------------------------------------------


@LEAN
async def test_short_206_is_resumed(lean: bool) -> None:
    server = ObjectServer(OBJ[:20], short=5, crc=None)
    async with server as base, _client(base, lean, retry=RetryPolicy(max_attempts=1)) as client:
        assert await client.read("bkt", "o", start=10, end=20) == OBJ[10:20]
        assert _ranges(server) == ["bytes=10-19", "bytes=15-19"]
        server.requests.clear()
        # A whole read answered with a partial 206 (no hash to catch it).
        assert await client.read("bkt", "o") == OBJ[:20]
        assert _ranges(server) == [None, "bytes=5-", "bytes=10-", "bytes=15-"]
        # ... and a resumed one lands in the caller's buffer.
        server.requests.clear()
        buf = bytearray(30)
        assert await client.read("bkt", "o", into=buf) == 20 and buf[:20] == OBJ[:20]
        assert _ranges(server) == [None, "bytes=5-", "bytes=10-", "bytes=15-"]


@LEAN
@pytest.mark.parametrize("into", [False, True], ids=["bytes", "into"])
async def test_cut_connections_resume_after_the_last_byte(lean: bool, into: bool) -> None:
    # Three cuts with max_attempts=2: only attempts without progress count.
    server = ObjectServer(cut=30_000)
    async with server as base, _client(base, lean, retry=RetryPolicy(
            max_attempts=2, initial_delay=0, max_delay=0)) as client:
        buf = bytearray(len(OBJ))
        got = await client.read("bkt", "o", into=buf if into else None)
        assert (buf if into else got) == OBJ
        assert _ranges(server) == [None, "bytes=30000-", "bytes=60000-", "bytes=90000-"]
        # the resumed requests pin the generation the first response named
        assert all(b"generation=7" in head for head in server.requests[1:])
        server.requests.clear()
        got = await client.read("bkt", "o", start=1000, end=101_000,
                                into=memoryview(buf)[:100_000] if into else None)
        assert (buf[:100_000] if into else got) == OBJ[1000:101_000]
        assert _ranges(server) == ["bytes=1000-100999", "bytes=31000-100999",
                                   "bytes=61000-100999", "bytes=91000-100999"]
        assert client.transport.stats.retries == 6


@LEAN
async def test_cuts_without_progress_give_up(lean: bool) -> None:
    server = ObjectServer(cut=0)
    async with server as base, _client(base, lean) as client:
        with pytest.raises(TransportError, match=r"truncated.*gave up after 3 attempts"):
            await client.read("bkt", "o", start=100, end=200)
    assert len(server.requests) == 3


# -- 3. ObjectReader and the ranged planner never spin -----------------------------------


def _info(size: int = len(OBJ), crc: int | None = OBJ_CRC) -> ObjectInfo:
    return ObjectInfo("bkt", "o", size, generation=7, crc32c=crc)


@pytest.mark.timeout(20)
@LEAN
async def test_reader_and_planner_with_short_bodies(lean: bool) -> None:
    server = ObjectServer(short=7_000)
    async with server as base, _client(base, lean) as client:
        # The reader drives its own client on the portal loop (this loop
        # serves the scripted server meanwhile).
        reader_client = _client(base, lean)

        def load(info: ObjectInfo) -> bytes:
            with ObjectReader(reader_client, "bkt", "o", options=ReaderOptions(block_size=16_384,
                                                                               read_ahead=2),
                              info=info) as reader:
                return reader.read()

        try:
            assert await asyncio.to_thread(load, _info()) == OBJ
            # metadata larger than the object: a typed error, not a busy loop
            with pytest.raises(ProtocolError, match="102400 bytes, expected 103400"):
                await asyncio.to_thread(load, _info(len(OBJ) + 1000))
            with pytest.raises(ChecksumMismatch, match="crc32c"):
                await asyncio.to_thread(load, _info(crc=OBJ_CRC ^ 1))
        finally:
            await asyncio.to_thread(get_portal().call, reader_client.aclose())

        planner = Downloader(client, DownloadOptions(ranged_threshold=1, range_size=16_384,
                                                     disable_compose=True))
        assert await planner.download(_info()) == OBJ
        with pytest.raises(ProtocolError, match="expected 103400"):
            await planner.download(_info(len(OBJ) + 1000))
        with pytest.raises(ChecksumMismatch, match="listed"):
            await planner.download(_info(crc=OBJ_CRC ^ 1))


# -- 5. Retry-After ---------------------------------------------------------------------------


@LEAN
@pytest.mark.parametrize("retry_after", ["soon-ish", "-5", "nan", "Wed, 21 Oct 2015 07:28:00 GMT"])
async def test_unusable_retry_after_backs_off_normally(lean: bool, retry_after: str) -> None:
    server = ObjectServer()
    answer = server.script
    server.script = lambda conn, i: (
        _http("503 Service Unavailable", b"busy", Retry_After=retry_after)
        if len(server.requests) == 1 else answer(conn, i))
    async with server as base, _client(base, lean) as client:
        assert await client.read("bkt", "o") == OBJ
        assert client.transport.stats.retries == 1


# -- 7. credentials go only to the endpoint's origin ---------------------------------------


def _auth_of(head: bytes) -> bool:
    return b"\r\nauthorization:" in head.lower()


async def test_token_stays_on_the_endpoint_origin() -> None:
    resource = {"bucket": "bkt", "name": "o", "size": "10", "generation": "1",
                "crc32c": encode_crc32c(crc32c(b"0123456789"))}
    other = RawServer(lambda conn, i: (_http("200 OK", json.dumps(resource).encode()), "close"))
    async with other as elsewhere:
        home = RawServer(lambda conn, i: (
            _http("200 OK", b"{}", Location=f"{elsewhere}/upload?upload_id=1")
            if b"uploadType=resumable" in home.requests[-1]
            else _http("200 OK", json.dumps(resource).encode()), "close"))
        async with home as base, AsyncClient(ClientConfig(retry=RETRY), endpoint=base,
                                             credentials="secret-token") as client:
            # A session Location on another origin is refused outright (its
            # chunks would carry our credentials there).
            with pytest.raises(StorageError, match="not on the endpoint's origin"):
                await client.write("bkt", "o", b"0123456789", resumable=True)
            # Any request off the endpoint's origin goes without the token.
            await client.transport.get_media(Op("read", "bkt", "o"), f"{elsewhere}/x",
                                             lambda resp: resp)
    assert len(home.requests) == 1 and b"secret-token" in home.requests[0]
    assert len(other.requests) == 1 and not _auth_of(other.requests[0])
    assert b"secret-token" not in other.requests[0]


def test_same_origin_rules() -> None:
    client = AsyncClient(ClientConfig(), endpoint="https://storage.example.com",
                         credentials="t")
    same = client.transport.same_origin
    assert same("https://storage.example.com/upload/x")
    assert same("https://STORAGE.example.com:443/x")
    assert not same("http://storage.example.com/x")
    assert not same("https://storage.example.com:8443/x")
    assert not same("https://storage.example.com.evil.test/x")
    assert not same("https://evil.test/?https://storage.example.com/")


# -- 10. TLS: failures are final; a private CA is trusted on every path ------------------


@LEAN
async def test_tls_failures_are_final_and_a_private_ca_works(lean: bool,
                                                            tmp_path: Path) -> None:
    resource = {"bucket": "bkt", "name": "o", "size": str(len(OBJ)), "generation": "1"}

    async def obj(request: web.Request) -> web.Response:
        if request.query.get("alt") == "media":
            return web.Response(body=OBJ, headers={"x-goog-hash": f"crc32c="
                                                   f"{encode_crc32c(OBJ_CRC)}"})
        return web.json_response(resource)

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"items": [resource]})

    app = web.Application()
    app.router.add_get("/storage/v1/b/bkt/o/o", obj)
    app.router.add_delete("/storage/v1/b/bkt/o/o", _no_content)
    app.router.add_get("/storage/v1/b/bkt/o", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self_signed(tmp_path)[0])
    await site.start()
    base = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with _client(base, lean, retry=RetryPolicy(max_attempts=8, initial_delay=1,
                                                         max_delay=1)) as client:
            for call in (client.read("bkt", "o"), client.stat("bkt", "o"),
                         client.list("bkt").__anext__(), client.delete("bkt", "o")):
                with pytest.raises(TLSError, match="certificate") as info:
                    await asyncio.wait_for(call, 5)  # no 8 attempts with 1 s sleeps
                assert info.value.attempts == 1
        cafile = str(tmp_path / "cert.pem")
        trusting = [ClientConfig(lean_reads=lean, ca_file=cafile),
                    ClientConfig(lean_reads=lean,
                                 ssl_context=ssl.create_default_context(cafile=cafile))]
        for config in trusting:
            async with AsyncClient(config, endpoint=base) as client:
                assert await client.read("bkt", "o") == OBJ
                assert (await client.stat("bkt", "o")).size == len(OBJ)
                assert [o.name async for o in client.list_objects("bkt")] == ["o"]
                await client.delete("bkt", "o")  # aiohttp's session, not the lean pool
                assert client.transport.stats.lean_reads == (1 if lean else 0)
    finally:
        await runner.cleanup()


async def _no_content(request: web.Request) -> web.Response:
    return web.Response(status=204)


# -- 14. a garbled response is a transport error, not the server's HTTP 400 ---------------


@LEAN
@pytest.mark.parametrize("garbage", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nno colon here\r\n\r\nhello",
    b"HTTP/1.1 2x0 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
])
async def test_garbled_responses_are_retried_transport_errors(lean: bool,
                                                              garbage: bytes) -> None:
    server = RawServer(lambda conn, i: (garbage, "close"))
    async with server as base, _client(base, lean) as client:
        for call in (client.read("bkt", "o"), client.stat("bkt", "o"), client.delete("bkt", "o")):
            with pytest.raises(TransportError) as info:
                await call
            assert info.value.attempts == 3
            assert "HTTP 400" not in str(info.value)


# -- 4. resume against the emulator's cut bodies ------------------------------------------


@LEAN
async def test_emulator_cut_bodies_resume(lean: bool, faults: Any) -> None:
    import os

    from aioflux.testing import Faults

    data = os.urandom(2_000_000)
    config = ClientConfig(lean_reads=lean, retry=RetryPolicy(max_attempts=2, initial_delay=0,
                                                             max_delay=0))
    async with AsyncClient(config, endpoint=faults.endpoint) as client:
        bucket = unique_bucket("hostile")
        await client.create_bucket(bucket)
        info = await client.write(bucket, "o", data)
        # every body cut after about half: only resuming can finish
        faults.faults = Faults(p_reset=1.0, seed=3)
        assert await client.read(bucket, "o", start=0, end=1 << 20) == data[:1 << 20]
        assert await client.read(bucket, "o") == data
        planner = Downloader(client, DownloadOptions(ranged_threshold=1, range_size=700_000))
        assert await planner.download(info) == data
        assert client.transport.stats.retries >= 3


@LEAN
async def test_a_stall_mid_body_resumes(lean: bool) -> None:
    from aioflux import Timeouts

    server = ObjectServer()
    answer = server.script
    server.script = lambda conn, i: (
        (answer(conn, i)[:-60_000], "stall") if len(server.requests) == 1 else answer(conn, i))
    async with server as base, _client(base, lean, timeouts=Timeouts(read_stall=0.3)) as client:
        assert await client.read("bkt", "o") == OBJ
    assert _ranges(server) == [None, f"bytes={len(OBJ) - 60_000}-"]
