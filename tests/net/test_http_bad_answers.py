"""Hostile HTTP/1.1 responses, through both read paths.

Every response here comes byte for byte from a scripted TCP server
(RawServer): the shapes no real server library would send. Each goes through
``AsyncClient.read`` on the lean client and with ``lean_reads=False``
(aiohttp); the outcome is the object's exact bytes or an exact aioflux
error, never other bytes.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    RetryPolicy,
    StorageError,
    Timeouts,
    TransportError,
)
from aioflux._core.auth import AnonymousAuth
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._net.failures import drain
from aioflux._net.http import MediaPool
from aioflux._net.transport import Op, Transport
from tests.servers.raw_server import Listener, RawServer, serving

BODY = os.urandom(3000)
HASH = f"crc32c={encode_crc32c(crc32c(BODY))}"
RETRY = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)


def head(status: str = "HTTP/1.1 200 OK", *, length: int | None = len(BODY),
         extra: str = "", hashed: bool = True) -> bytes:
    lines = [status]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if hashed:
        lines.append(f"x-goog-hash: {HASH}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode("latin-1")


def _chunked() -> bytes:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(BODY[i:i + 1000]), BODY[i:i + 1000])
                      for i in range(0, len(BODY), 1000))
    return head(length=None, extra="Transfer-Encoding: chunked\r\n") + chunks + b"0\r\n\r\n"


def _gzipped() -> bytes:
    packed = gzip.compress(BODY)
    return head(length=len(packed), extra="Content-Encoding: gzip\r\n", hashed=False) + packed


OK = head() + BODY
Answer = bytes | tuple[bytes, str] | None

# name -> (answer for every request, outcome): the bytes, or the error class.
CASES: dict[str, tuple[Answer, bytes | type[Exception]]] = {
    "plain": (OK, BODY),
    "no reason phrase": (head("HTTP/1.1 200") + BODY, BODY),
    "http/1.0 keep-alive": (head("HTTP/1.0 200 OK", extra="Connection: keep-alive\r\n")
                            + BODY, BODY),
    "http/1.0 close": (head("HTTP/1.0 200 OK") + BODY, BODY),
    "100-continue first": (b"HTTP/1.1 100 Continue\r\n\r\n" + OK, BODY),
    "103 early hints first": (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK, BODY),
    "chunked": (_chunked(), BODY),
    "gzip": (_gzipped(), BODY),
    "length too long, closed": ((head(length=len(BODY) + 10) + BODY, "close"), TransportError),
    "length too long, stalled": ((head(length=len(BODY) + 10) + BODY, "stall"), TransportError),
    "length huge, closed": ((head(length=1 << 40) + BODY[:10], "close"), TransportError),
    "length too short": (head(length=len(BODY) - 10) + BODY, TransportError),
    "length repeated, differing": (head(extra="Content-Length: 5\r\n") + BODY, TransportError),
    "length repeated, identical": (head(extra=f"Content-Length: {len(BODY)}\r\n") + BODY,
                                   TransportError),
    "length non-ascii digit": (head(length=None, extra="Content-Length: \xb2\r\n") + BODY,
                               TransportError),
    "length with a space inside": (head(length=None, extra="Content-Length: 1 2\r\n") + BODY,
                                   TransportError),
    "length negative": (head(length=None, extra="Content-Length: -1\r\n") + BODY,
                        TransportError),
    "length and chunked": (head(extra="Transfer-Encoding: chunked\r\n") + BODY, TransportError),
    "head over 64 KiB": (head(extra=f"X-Pad: {'a' * 70_000}\r\n") + BODY, TransportError),
    "status 2000": (head("HTTP/1.1 2000 OK") + BODY, TransportError),
    "status 20": (head("HTTP/1.1 20 OK") + BODY, TransportError),
    "HTTP/1.2 status line": (head("HTTP/1.2 200 OK") + BODY, TransportError),
    "HTTP/2 status line": (head("HTTP/2 200 OK") + BODY, TransportError),
    "FOO status line": (head("FOO 200 OK") + BODY, TransportError),
    "NUL in a value": (head(extra="X-Evil: a\x00b\r\n") + BODY, TransportError),
    "CR in a value": (head(extra="X-Evil: a\rb\r\n") + BODY, TransportError),
    "LF in a value": (head(extra="X-Evil: a\nb\r\n") + BODY, TransportError),
    "space in a name": (head(extra="X Evil: a\r\n") + BODY, TransportError),
    "empty name": (head(extra=": a\r\n") + BODY, TransportError),
    "obsolete folding": (head(extra="X-Folded: a\r\n b\r\n") + BODY, BODY),
    "no response": (None, TransportError),
}


def _read_config(lean: bool, **changes: Any) -> ClientConfig:
    return ClientConfig(lean_reads=lean, retry=RETRY,
                        timeouts=Timeouts(read_stall=0.3, connect=2), **changes)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
@pytest.mark.parametrize("case", list(CASES))
async def test_hostile_response(case: str, lean: bool) -> None:
    answer, outcome = CASES[case]
    server = RawServer(lambda conn, i: answer)
    async with server as base, AsyncClient(_read_config(lean), endpoint=base) as client:
        if isinstance(outcome, bytes):
            assert await client.read("bkt", "obj") == outcome
            assert await client.read("bkt", "obj") == outcome
        else:
            for _ in range(2):
                with pytest.raises(StorageError) as info:
                    await client.read("bkt", "obj")
                assert type(info.value) is outcome, info.value
                assert "bkt" in str(info.value) and "obj" in str(info.value)
                # Retried, and given up: an attempt that received bytes does
                # not count against max_attempts (it resumes after them).
                assert info.value.attempts >= 2
        stats = client.transport.stats
    if case.startswith("http/1.0 close"):
        assert server.connections == 2  # not reused without keep-alive
    elif case.startswith(("plain", "http/1.0 keep-alive", "100", "103")):
        assert server.connections == 1  # kept alive
    if lean and case in ("chunked", "gzip", "obsolete folding"):
        assert stats.lean_fallbacks == 2 and stats.lean_reads == 0
    elif lean:
        assert stats.lean_fallbacks == 0


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_redirect_and_no_content_are_typed_errors(lean: bool) -> None:
    answers = [head("HTTP/1.1 302 Found", length=0, extra="Location: /elsewhere\r\n"),
               head("HTTP/1.1 307 Temporary Redirect", length=5) + b"moved"]
    server = RawServer(lambda conn, i: answers[len(server.requests) % 2 - 1])
    async with server as base, AsyncClient(_read_config(lean), endpoint=base) as client:
        for status in (302, 307):
            with pytest.raises(StorageError) as info:
                await client.read("bkt", "obj")
            assert info.value.status == status and info.value.attempts == 1
    # nothing was followed: every request went to the scripted server
    assert len(server.requests) == 2 and b"/elsewhere" not in b"".join(server.requests)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_crc_catches_bytes_of_a_longer_body(lean: bool) -> None:
    # A correct Content-Length of the wrong bytes: only the crc32c can tell.
    other = bytes(len(BODY))
    server = RawServer(lambda conn, i: head() + other)
    async with server as base, AsyncClient(_read_config(lean), endpoint=base) as client:
        with pytest.raises(ChecksumMismatch):
            await client.read("bkt", "obj")


class _StreamServer:
    """A TCP server whose ``answer`` talks to each connection; on exit it
    closes what the client left open and waits for every handler (a handler
    cancelled at loop teardown leaks a ResourceWarning into the next test)."""

    def __init__(self) -> None:
        self.connections = 0
        self._listener = Listener(self._serve)
        self._open: set[asyncio.StreamWriter] = set()
        self._idle = asyncio.Event()

    async def __aenter__(self) -> str:
        return f"http://127.0.0.1:{await self._listener.start()}"

    async def __aexit__(self, *exc: object) -> None:
        await self._listener.close()
        if self._open:
            await asyncio.wait_for(self._idle.wait(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(writer)
        self._idle.clear()
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                await self.answer(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self._open.discard(writer)
            if not self._open:
                self._idle.set()

    async def answer(self, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class _UnsolicitedServer(_StreamServer):
    """Answers each request, then, when the test says so, sends a stray
    response nobody asked for (``strayed`` is set once it is sent)."""

    def __init__(self) -> None:
        super().__init__()
        self.stray_now = asyncio.Event()
        self.strayed = asyncio.Event()

    async def answer(self, writer: asyncio.StreamWriter) -> None:
        writer.write(OK)
        await writer.drain()
        await self.stray_now.wait()
        self.stray_now.clear()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG")
        await writer.drain()
        self.strayed.set()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_unsolicited_bytes_between_responses(lean: bool) -> None:
    server = _UnsolicitedServer()
    async with server as base, AsyncClient(_read_config(lean), endpoint=base) as client:
        for _ in range(3):
            assert await client.read("bkt", "obj") == BODY
            server.stray_now.set()  # the stray response arrives while idle
            await server.strayed.wait()
            server.strayed.clear()
            # On loopback the sent bytes are readable at once: the client's
            # side sees them in its next turns of the loop.
            for _ in range(10):
                await asyncio.sleep(0)
    # a connection that spoke out of turn is never reused
    assert server.connections == 3


@pytest.mark.parametrize("method", ["DELETE", "POST"])
async def test_no_request_goes_out_on_a_connection_that_spoke_out_of_turn(method: str) -> None:
    # aiohttp wrote a request on the idle connection whose stray response
    # failed it, then the retry sent it again on a fresh one: a DELETE or a
    # POST without a body (S3's CreateMultipartUpload) reached the server
    # twice, and the DELETE's retry answered 404 for an object it deleted.
    seen: list[tuple[int, str]] = []
    released, strayed = asyncio.Event(), asyncio.Event()
    connections = itertools.count()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = next(connections)
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                seen.append((conn, request.split(b" ", 1)[0].decode()))
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                await writer.drain()
                if len(seen) == 1:
                    await released.wait()  # the connection is idle in the pool
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG")
                    await writer.drain()
                    strayed.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    config = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0))
    async with serving(serve) as base:
        transport = Transport(config, AnonymousAuth(), endpoint=base)
        try:
            await transport.request(Op("stat"), "GET", f"{base}/o", drain, ok=(204,))
            released.set()
            await strayed.wait()
            # Until the idle connection has read the stray answer (a few turns
            # of the loop: the server is on it too).
            for _ in range(10_000):
                if _stray_taken(transport):
                    break
                await asyncio.sleep(0)
            assert _stray_taken(transport)
            await transport.request(Op(method.lower(), "bkt", "o"), method, f"{base}/o", drain,
                                    ok=(204,))
        finally:
            await transport.aclose()
    assert [m for _, m in seen] == ["GET", method]  # sent once, and not on the stray one
    assert seen[1][0] == 1


def _stray_taken(transport: Transport) -> bool:
    connector: Any = transport.session.connector
    return any(proto._buffer for idle in connector._conns.values() for proto, _ in idle)

# -- a head and body split across reads ------------------------------------------

VALID = {
    "200": OK,
    "http/1.0 keep-alive": head("HTTP/1.0 200 OK", extra="Connection: keep-alive\r\n") + BODY,
    "100 then 200": b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
    "404": b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nX-A: b\r\n\r\nnot found",
    "empty": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
}


class _SplitServer(_StreamServer):
    """Sends each answer in the pieces it is told, pausing between them."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[bytes] = []

    async def answer(self, writer: asyncio.StreamWriter) -> None:
        for piece in self.pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.0005)  # the client reads this piece alone


def _expected(raw: bytes) -> tuple[int, bytes]:
    final = raw.split(b"\r\n\r\n", 1)[1] if raw.startswith(b"HTTP/1.1 100") else raw
    head_part, _, body = final.partition(b"\r\n\r\n")
    return int(head_part.split()[1]), body


async def _deliver_all(raw: bytes, splits: list[list[int]], into: bool) -> None:
    server = _SplitServer()
    pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=30)
    status, body = _expected(raw)
    async with server as base:
        try:
            for cuts in splits:
                bounds = [0, *sorted(set(cuts)), len(raw)]
                server.pieces = [raw[a:b] for a, b in itertools.pairwise(bounds) if b > a]
                buffer = bytearray(len(body))
                resp = await pool.get(base + "/o", {}, memoryview(buffer) if into else None)
                assert resp is not None and resp.status == status, cuts
                got = buffer if into and status == 200 else bytes(resp.body or b"")
                assert got == body, cuts
            assert server.connections == 1  # every response left the stream in step
        finally:
            pool.close()


@pytest.mark.parametrize("name", list(VALID))
async def test_every_single_split_gives_the_same_bytes(name: str) -> None:
    raw = VALID[name]
    # every boundary in the head and the first bytes of the body, then some
    cuts = [*range(1, min(len(raw), raw.find(b"\r\n\r\n") + 40)), *range(200, len(raw), 97)]
    await _deliver_all(raw, [[cut] for cut in cuts], into=name == "200")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(list(VALID)), data=st.data())
def test_random_splits_give_the_same_bytes(name: str, data: st.DataObject) -> None:
    raw = VALID[name]
    cuts = data.draw(st.lists(st.integers(1, len(raw) - 1), min_size=1, max_size=12))
    into = data.draw(st.booleans())
    asyncio.run(_deliver_all(raw, [cuts], into))

