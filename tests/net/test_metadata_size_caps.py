"""Metadata answers too large to hold, from a real HTTP server.

An aiohttp server on 127.0.0.1 answers listings, object resources and
multipart-upload documents with bodies past the cap (lowered to 64 KiB
here): well-formed pages, announced by ``Content-Length`` or chunked, and
an endless chunked stream. Both backends must refuse them with a
``ProtocolError`` after reading at most the cap, not buffer them; a body
read only to be dropped is dropped at its own cap, and its connection
closed rather than reused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from aioflux import AsyncClient, ClientConfig, ProtocolError, RetryPolicy
from aioflux._net import failures
from aioflux.s3 import S3Store
from tests.servers.web_server import Served, Server

CAP = 64 * 1024
SECRET = "hdr-secret-7b3a"
TOKEN = "token-5e0c"
# Retries allowed, so a test sees that the refusal is final (one request).
RETRY = RetryPolicy(max_attempts=4, initial_delay=0, max_delay=0)
# The new code answers in milliseconds; the old one read an endless body
# until this gave up (at a throttled rate, so it allocates ~100 MB, not GBs).
PATIENCE = 5.0
PIECE = 16 * 1024


@pytest.fixture(autouse=True)
def _small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failures, "MAX_METADATA_BODY", CAP)


def _page(body: bytes, *, chunked: bool) -> Callable[[web.Request, Served],
                                                      Awaitable[web.StreamResponse]]:
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        headers = {"X-Goog-Upload-Token": SECRET}
        if not chunked:
            served.sent += len(body)
            return web.Response(body=body, headers=headers)
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        try:
            for at in range(0, len(body), PIECE):
                await resp.write(body[at:at + PIECE])
                served.sent += len(body[at:at + PIECE])
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client hung up: what it was meant to do
        return resp

    return answer


async def _endless(request: web.Request, served: Served) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"X-Goog-Upload-Token": SECRET})
    await resp.prepare(request)
    try:
        while True:
            await resp.write(b" " * PIECE)
            served.sent += PIECE
            await asyncio.sleep(0.001)
    except ConnectionResetError:
        pass
    return resp


def _gcs(endpoint: str) -> AsyncClient:
    return AsyncClient(ClientConfig(retry=RETRY), endpoint=endpoint, credentials=TOKEN)


def _s3(endpoint: str) -> S3Store:
    return S3Store(ClientConfig(retry=RETRY), endpoint=endpoint, region="us-east-1",
                   addressing="path")


def _gcs_listing(n: int) -> bytes:
    items = [{"bucket": "bkt", "name": f"pre/obj-{i:06d}", "size": "1", "generation": "1"}
             for i in range(n)]
    return json.dumps({"kind": "storage#objects", "items": items}).encode()


def _s3_listing(n: int) -> bytes:
    entries = "".join(f"<Contents><Key>pre/obj-{i:06d}</Key>"
                      f"<LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                      f"<ETag>&quot;9867ddc9cb5c19bb41459bf15cdc0675&quot;</ETag>"
                      f"<Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>"
                      for i in range(n))
    return ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
            'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name>'
            "<Prefix>pre</Prefix><EncodingType>url</EncodingType>"
            f"<IsTruncated>false</IsTruncated>{entries}</ListBucketResult>").encode()


def _parts(n: int) -> bytes:
    parts = "".join(f"<Part><PartNumber>{i}</PartNumber><ETag>&quot;{i:032x}&quot;</ETag>"
                    f"<Size>5242880</Size></Part>" for i in range(1, n + 1))
    return ('<?xml version="1.0" encoding="UTF-8"?><ListPartsResult '
            'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>bkt</Bucket>'
            f"<Key>obj</Key><UploadId>up1</UploadId><IsTruncated>false</IsTruncated>"
            f"{parts}</ListPartsResult>").encode()


def _refused(exc: ProtocolError, start: str) -> None:
    message = str(exc)
    assert message.startswith(start), message
    assert f"over {CAP} bytes" in message
    assert SECRET not in message and TOKEN not in message
    assert exc.status == 200


CHUNKED = pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])


@CHUNKED
@pytest.mark.parametrize("backend", ["gcs", "s3"])
async def test_listing_page_over_the_cap_is_refused(backend: str, chunked: bool) -> None:
    body = _gcs_listing(2000) if backend == "gcs" else _s3_listing(1000)
    assert len(body) > 2 * CAP
    scheme, path = ("gs", "/storage/v1/b/bkt/o") if backend == "gcs" else ("s3", "/bkt")
    async with Server(_page(body, chunked=chunked)) as (endpoint, served):
        store = _gcs(endpoint) if backend == "gcs" else _s3(endpoint)
        async with store:
            with pytest.raises(ProtocolError) as info:
                await asyncio.wait_for(_names(store.list_objects("bkt", "pre")), PATIENCE)
    _refused(info.value, f"list {scheme}://bkt/pre failed: HTTP 200")
    assert [p.split("?")[0] for p in served.paths] == [f"GET {path}"]


@CHUNKED
@pytest.mark.parametrize("backend", ["gcs", "s3"])
async def test_multipart_part_listing_over_the_cap_is_refused(backend: str,
                                                              chunked: bool) -> None:
    body = _parts(2000)
    assert len(body) > 2 * CAP
    scheme = "gs" if backend == "gcs" else "s3"
    async with Server(_page(body, chunked=chunked)) as (endpoint, served):
        store = _gcs(endpoint) if backend == "gcs" else _s3(endpoint)
        async with store:
            with pytest.raises(ProtocolError) as info:
                await asyncio.wait_for(store.list_parts("bkt", "obj", "up1"), PATIENCE)
    _refused(info.value, f"list parts {scheme}://bkt/obj failed: HTTP 200")
    assert served.paths == ["GET /bkt/obj?uploadId=up1"]


CALLS: dict[str, Callable[[Any], Awaitable[object]]] = {
    "gcs list": lambda c: _names(c.list_objects("bkt", "pre")),
    "gcs stat": lambda c: c.stat("bkt", "obj"),
    "gcs initiate multipart": lambda c: c.initiate_multipart("bkt", "obj"),
    "s3 list": lambda c: _names(c.list_objects("bkt", "pre")),
    "s3 list parts": lambda c: c.list_parts("bkt", "obj", "up1"),
    "s3 list multipart uploads": lambda c: c.list_multipart_uploads("bkt"),
}


@pytest.mark.parametrize("call", list(CALLS))
async def test_an_endless_metadata_answer_ends_in_a_protocol_error(call: str) -> None:
    async with Server(_endless) as (endpoint, served):
        store = _gcs(endpoint) if call.startswith("gcs") else _s3(endpoint)
        async with store:
            with pytest.raises(ProtocolError) as info:
                await asyncio.wait_for(CALLS[call](store), PATIENCE)
    assert f"sent a body over {CAP} bytes" in str(info.value)
    assert SECRET not in str(info.value) and TOKEN not in str(info.value)
    assert len(served.paths) == 1  # final: not retried


@pytest.mark.parametrize("backend", ["gcs", "s3"])
async def test_an_endless_body_of_a_delete_is_dropped_and_its_connection_closed(
        backend: str) -> None:
    async with Server(_endless) as (endpoint, served):
        store = _gcs(endpoint) if backend == "gcs" else _s3(endpoint)
        async with store:
            for _ in range(2):
                await asyncio.wait_for(store.delete("bkt", "obj", missing_ok=True), PATIENCE)
    assert [p.split("?")[0] for p in served.paths] == [
        "DELETE /storage/v1/b/bkt/o/obj" if backend == "gcs" else "DELETE /bkt/obj"] * 2
    # The first connection was closed with its junk unread, not reused.
    assert served.peers[0] != served.peers[1]


async def _names(objects: AsyncIterator[Any]) -> list[str]:
    return [o.name async for o in objects]
