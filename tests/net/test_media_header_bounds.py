"""Media answers whose headers would lift a read's bounds.

A gzip-stored object that GCS serves decompressed
(``x-guploader-response-body-transformations``) is longer than its stored
size, so the read's size cap was dropped: a small body inflating without
end was buffered whole. It is now bounded by DEFLATE's greatest ratio
(1032:1) over the stored size. A Unicode digit where a number belongs
(``x-goog-generation: ²``) is a header without a usable value, not a
``ValueError`` escaping the typed error tree.
"""

from __future__ import annotations

import asyncio
import gzip

import pytest
from aiohttp import web

from aioflux import AsyncClient, ClientConfig, ProtocolError, RetryPolicy, StorageError
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from tests.servers.raw_server import RawServer
from tests.servers.web_server import Served, Server

CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
TRANSFORMED = {"x-guploader-response-body-transformations": "gunzipped"}
# A wait this long is a hang: far beyond what any read here takes, however
# loaded the machine.
HANG = 30.0
STORED = 100  # the gzip object's stored size
# Where the "endless" body below does end, ~650 times past the bound: a
# client that does not stop at the bound then reads it whole (and the test
# fails on what it returns) instead of filling memory until the hang guard.
INFLATED = 64 << 20


def _endless_inflation(stored_header: bool) -> Server:
    """A decompressed body without end, for a client that stops at its
    bound (a gzip bomb, served inflated)."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        headers = dict(TRANSFORMED)
        if stored_header:
            headers["x-goog-stored-content-length"] = str(STORED)
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        try:
            for _ in range(INFLATED // 65536):
                await resp.write(b"\0" * 65536)
                served.sent += 65536
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass
        return resp

    return Server(answer)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
@pytest.mark.parametrize("stored_from", ["header", "listing"])
async def test_a_decompressed_body_is_bounded_by_the_stored_size(lean: bool,
                                                                 stored_from: str) -> None:
    config = ClientConfig(retry=CONFIG.retry, lean_reads=lean)
    async with _endless_inflation(stored_from == "header") as (endpoint, served), \
            AsyncClient(config, endpoint=endpoint) as client:
        read = (client.read("bkt", "o") if stored_from == "header"
                else client.fetch("bkt", "o", size=STORED))
        with pytest.raises(ProtocolError, match=rf"passed {STORED * 1032} bytes, 1032 times its "
                                                r"stored size") as info:
            await asyncio.wait_for(read, HANG)
    assert info.value.name == "o" and info.value.bucket == "bkt"
    # Not retried (the same server inflates the same way); the lean client
    # hands a chunked answer to aiohttp, which asks once more.
    assert len(served.paths) == (2 if lean else 1)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_a_decompressed_body_under_the_bound_is_read_whole(lean: bool) -> None:
    body = b"0123456789" * 10_000  # 100 KB from a few hundred stored bytes
    stored = gzip.compress(body)
    assert len(body) < 1032 * len(stored)

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        resp = web.StreamResponse(headers={**TRANSFORMED,
                                           "x-goog-stored-content-length": str(len(stored))})
        await resp.prepare(request)
        await resp.write(body)
        await resp.write_eof()
        return resp

    config = ClientConfig(retry=CONFIG.retry, lean_reads=lean)
    async with Server(answer) as (endpoint, _), AsyncClient(config, endpoint=endpoint) as client:
        assert await client.read("bkt", "o") == body
        assert (await client.fetch("bkt", "o", size=len(stored))).data == body


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
@pytest.mark.parametrize("header", ["x-goog-generation", "x-goog-stored-content-length"])
async def test_a_unicode_digit_is_no_number(lean: bool, header: str) -> None:
    # Latin-1 "²" (0xb2), which str.isdigit takes and int refuses.
    body = b"payload"
    answer = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n"
              f"x-goog-hash: crc32c={encode_crc32c(crc32c(body))}\r\n").encode() + \
        header.encode() + b": \xb2\r\n\r\n" + body
    config = ClientConfig(retry=CONFIG.retry, lean_reads=lean)
    async with RawServer(lambda conn, index: answer) as endpoint, \
            AsyncClient(config, endpoint=endpoint) as client:
        assert await asyncio.wait_for(client.read("bkt", "o"), HANG) == body



@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_an_object_served_gzip_coded_reads_decoded_without_a_false_mismatch(
        lean: bool) -> None:
    # Cache-Control: no-transform: GCS serves a gzip-stored object coded; its
    # x-goog-hash and stored length are of the coded bytes. Decoded (as gcloud
    # and google-cloud-storage hand it out), it failed them: a ChecksumMismatch
    # or ProtocolError after every retry. gzip's own CRC32 checks the decoding.
    body = b"hello world " * 1000
    stored = gzip.compress(body)

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        resp = web.StreamResponse(headers={
            "Content-Encoding": "gzip", "Content-Length": str(len(stored)),
            "x-goog-stored-content-encoding": "gzip",
            "x-goog-stored-content-length": str(len(stored)),
            "x-goog-hash": f"crc32c={encode_crc32c(crc32c(stored))}"})
        await resp.prepare(request)
        await resp.write(stored)
        await resp.write_eof()
        return resp

    config = ClientConfig(retry=CONFIG.retry, lean_reads=lean)
    async with Server(answer) as (endpoint, _), AsyncClient(config, endpoint=endpoint) as client:
        assert await client.read("bkt", "o") == body


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_a_damaged_gzip_coded_body_is_an_error_not_bytes(lean: bool) -> None:
    stored = bytearray(gzip.compress(b"payload " * 500))
    stored[-6] ^= 0xFF  # in the trailer's CRC32

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Encoding": "gzip",
                                           "Content-Length": str(len(stored))})
        await resp.prepare(request)
        await resp.write(bytes(stored))
        await resp.write_eof()
        return resp

    config = ClientConfig(retry=CONFIG.retry, lean_reads=lean)
    async with Server(answer) as (endpoint, _), AsyncClient(config, endpoint=endpoint) as client:
        with pytest.raises(StorageError):
            await client.read("bkt", "o")
