"""Capped reads of the bodies that are not an object's bytes: a metadata
answer (``read_metadata``) and a body read only to be dropped (``drain``).

A hostile or broken server's huge or endless body must cost a bounded read
and end in a typed error, never an allocation as large as it likes.
"""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from aioflux import (
    AsyncClient,
    ClientConfig,
    NotFound,
    ProtocolError,
    RetryPolicy,
    ServerError,
)
from aioflux._core.auth import StaticTokenAuth
from aioflux._core.settings.retry import is_retryable
from aioflux._net import failures
from aioflux._net.failures import drain, error_from_response, read_metadata
from aioflux._net.transport import Op
from aioflux.testing import MockRequest, MockResponse, MockTransport

SECRET = "hdr-secret-4f1c"
OP = Op("list", "bkt", "pre/fix", "s3")
LIMIT = 1000


class _Stream:
    """A body of ``size`` bytes (None: endless), handed out ``piece`` at a
    time (fewer if the reader asks for fewer); counts what left it."""

    def __init__(self, size: int | None, piece: int) -> None:
        self.size = size
        self.piece = piece
        self.delivered = 0

    async def read(self, n: int = -1) -> bytes:
        assert n > 0, "a capped read never asks for the whole body"
        left = self.piece if self.size is None else min(self.piece, self.size - self.delivered)
        chunk = bytes((self.delivered + i) % 251 for i in range(min(n, left)))
        self.delivered += len(chunk)
        return chunk

    async def iter_any(self) -> AsyncIterator[bytes]:
        raise AssertionError("not used by a capped read")
        yield b""  # pragma: no cover


class _Response:
    """An :class:`HttpResponse` with a scripted body and a header that must
    never reach a message."""

    def __init__(self, size: int | None, *, announced: int | None = None,
                 piece: int = 64, status: int = 200) -> None:
        self.status = status
        self.reason = "OK"
        headers = CIMultiDict({"X-Goog-Upload-Token": SECRET, "Set-Cookie": SECRET})
        if announced is not None:
            headers["Content-Length"] = str(announced)
        self.headers = CIMultiDictProxy(headers)
        self.content_length = announced
        self.content = _Stream(size, piece)


def _expected(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


@pytest.mark.parametrize("size", [0, 1, 999, LIMIT])
@pytest.mark.parametrize("announced", [True, False], ids=["length", "chunked"])
async def test_a_body_within_the_cap_is_read_whole_and_exact(size: int, announced: bool) -> None:
    resp = _Response(size, announced=size if announced else None, piece=97)
    assert await read_metadata(resp, OP, LIMIT) == _expected(size)
    assert resp.content.delivered == size


async def test_a_body_announced_over_the_cap_is_refused_before_any_byte() -> None:
    resp = _Response(None, announced=LIMIT + 1)
    with pytest.raises(ProtocolError) as info:
        await read_metadata(resp, OP, LIMIT)
    assert resp.content.delivered == 0
    assert "announces a body over 1000 bytes" in str(info.value)


@pytest.mark.parametrize("piece", [1, 64, 999, 1000, 1001, 5000])
@pytest.mark.parametrize("size", [LIMIT + 1, 10 * LIMIT, None], ids=["one-over", "10x", "endless"])
async def test_a_longer_body_stops_one_byte_past_the_cap(piece: int, size: int | None) -> None:
    # Chunked, or a Content-Length that lies low: counted as it arrives.
    resp = _Response(size, piece=piece)
    with pytest.raises(ProtocolError) as info:
        await read_metadata(resp, OP, LIMIT)
    assert resp.content.delivered == LIMIT + 1
    assert "sent a body over 1000 bytes" in str(info.value)


async def test_the_error_is_final_names_the_request_and_holds_no_header() -> None:
    with pytest.raises(ProtocolError) as info:
        await read_metadata(_Response(None, piece=4096), OP, LIMIT)
    err = info.value
    assert str(err).startswith("list s3://bkt/pre/fix failed: HTTP 200 ")
    assert (err.operation, err.bucket, err.name, err.status) == ("list", "bkt", "pre/fix", 200)
    assert SECRET not in str(err) and SECRET not in repr(err.__dict__)
    assert not is_retryable(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ProtocolError and str(back) == str(err)


async def test_the_default_cap_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    assert failures.MAX_METADATA_BODY == 64 * 1024 * 1024
    monkeypatch.setattr(failures, "MAX_METADATA_BODY", 10)
    assert await read_metadata(_Response(10), OP) == _expected(10)
    resp = _Response(None)
    with pytest.raises(ProtocolError, match="over 10 bytes"):
        await read_metadata(resp, OP)
    assert resp.content.delivered == 11


async def test_pieces_asked_of_aiohttp_stay_small() -> None:
    # aiohttp buffers up to twice the largest read asked before it pauses
    # the socket: a 64 MiB cap must not become one 64 MiB read.
    asked: list[int] = []
    resp = _Response(3 * failures._READ_PIECE, piece=1 << 30)
    read = resp.content.read

    async def spy(n: int = -1) -> bytes:
        asked.append(n)
        return await read(n)

    resp.content.read = spy  # type: ignore[method-assign]
    assert len(await read_metadata(resp, OP)) == 3 * failures._READ_PIECE
    assert max(asked) == failures._READ_PIECE


@pytest.mark.parametrize("size", [0, 10, LIMIT])
async def test_drain_reads_a_short_body_to_its_end(size: int) -> None:
    resp = _Response(size, announced=size, piece=7)
    assert await drain(resp, LIMIT) == _expected(size)
    assert resp.content.delivered == size


@pytest.mark.parametrize("announced", [None, 1 << 40])
async def test_drain_stops_at_its_cap_without_an_error(announced: int | None) -> None:
    resp = _Response(None, announced=announced, piece=300)
    assert await drain(resp, LIMIT) == _expected(LIMIT)
    assert resp.content.delivered == LIMIT
    default = _Response(None, piece=4096)
    assert len(await drain(default)) == 64 * 1024 == default.content.delivered


async def test_a_client_refuses_an_oversized_answer_once_without_sockets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Through the transport: the handler's read is capped, the error is not
    # retried and keeps the token out.
    monkeypatch.setattr(failures, "MAX_METADATA_BODY", 2048)
    resource = {"bucket": "bkt", "name": "obj", "size": "1", "generation": "1",
                "metadata": {"pad": "x" * 4096}}

    def handler(request: MockRequest) -> MockResponse:
        return MockResponse.from_json(resource)

    config = ClientConfig(retry=RetryPolicy(max_attempts=5, initial_delay=0, max_delay=0))
    transport = MockTransport(handler, config=config, auth=StaticTokenAuth("tok-9d2e"),
                              endpoint="https://storage.example")
    async with AsyncClient(transport=transport, endpoint="https://storage.example") as client:
        with pytest.raises(ProtocolError) as info:
            await client.stat("bkt", "obj")
    assert str(info.value).startswith("stat gs://bkt/obj failed: HTTP 200 announces a body "
                                      "over 2048 bytes")
    assert "tok-9d2e" not in str(info.value)
    assert len(transport.requests) == 1


class _Pieces(_Stream):
    """``body``, handed out ``piece`` bytes a read, as a body arriving in
    several TCP segments or TLS records is."""

    def __init__(self, body: bytes, piece: int) -> None:
        super().__init__(len(body), piece)
        self.body = body

    async def read(self, n: int = -1) -> bytes:
        chunk = self.body[self.delivered:self.delivered + min(n, self.piece)]
        self.delivered += len(chunk)
        return chunk


@pytest.mark.parametrize("piece", [16, 1 << 20])
async def test_an_error_body_in_several_pieces_is_read_whole(piece: int) -> None:
    # S3 sends RequestTimeout as a 400 whose code alone says it is to be
    # retried: a first piece of the body is not enough to tell.
    body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>RequestTimeout</Code>"
            b"<Message>Your socket connection to the server was not read from or written "
            b"to within the timeout period.</Message></Error>")
    resp = _Response(len(body), announced=len(body), status=400)
    resp.content = _Pieces(body, piece)
    err = await error_from_response(resp, OP)
    assert type(err) is ServerError and err.reason == "RequestTimeout" and is_retryable(err)
    assert "not read from or written to within the timeout period" in str(err)


async def test_an_endless_error_body_is_read_no_further_than_its_cap() -> None:
    resp = _Response(None, status=503, piece=1000)
    err = await error_from_response(resp, OP)
    assert type(err) is ServerError and err.status == 503
    assert resp.content.delivered == 64 * 1024


async def test_an_error_body_cut_short_is_still_the_status_error() -> None:
    # The connection dropped mid-way through a 404's body: the status is the
    # finding (and the connection is not reused: its body was not read whole).
    def handler(request: MockRequest) -> MockResponse:
        return MockResponse(404, {"Content-Length": "500"},
                            b'{"error": {"code": 404, "message": "No such object: bkt/o"')

    config = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0))
    transport = MockTransport(handler, config=config, endpoint="https://storage.example")
    async with AsyncClient(transport=transport, endpoint="https://storage.example") as client:
        with pytest.raises(NotFound) as info:
            await client.stat("bkt", "o")
    assert len(transport.requests) == 1
    assert "HTTP 404" in str(info.value)
