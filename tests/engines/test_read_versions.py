"""Reads check what the answers promise beyond the bytes' count: every
answer comes from the version pinned (a server that ignores ``If-Match``
or ``generation=`` must not stitch two versions together), and where an
S3 object keeps no crc32c, the MD5 its ETag is.

The servers are scripted (tests/servers/web_server.py): they honour ``Range`` and
nothing else a careful server would.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from typing import Any

import pytest
from aiohttp import web

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    Downloader,
    DownloadOptions,
    NotFound,
    ObjectInfo,
    PreconditionFailed,
    ReaderOptions,
    RetryPolicy,
    S3Store,
)
from aioflux._core.concurrency.portal import get_portal
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._engines.reader import ObjectReader
from aioflux.s3._xml import generation_of
from tests.servers.web_server import Served, Server

OLD = bytes(range(256)) * 16  # 4 KiB
NEW = bytes(reversed(OLD))
RETRY = RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0)
LEAN = pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


class S3Object:
    """One object behind a scripted S3 face: the version served changes
    after ``switch_after`` GETs, and ``If-Match`` is ignored."""

    def __init__(self, *, switch_after: int | None = None, crc: bool = False,
                 corrupt: bool = False, headers: dict[str, str] | None = None,
                 etag: str | None = None) -> None:
        self.switch_after, self.crc, self.corrupt = switch_after, crc, corrupt
        self.extra, self.etag = headers or {}, etag
        self.gets = 0

    def _version(self) -> bytes:
        return NEW if self.switch_after is not None and self.gets > self.switch_after else OLD

    async def answer(self, request: web.Request, served: Served) -> web.StreamResponse:
        if request.method == "GET":
            self.gets += 1
        data = self._version()
        headers = {"ETag": self.etag or _etag(data), **self.extra}
        if self.crc:
            headers["x-amz-checksum-crc32c"] = encode_crc32c(crc32c(data))
        body = bytearray(data)
        if self.corrupt:
            body[100] ^= 1
        status, rng = 200, request.headers.get("Range")
        if rng:
            first, _, last = rng.removeprefix("bytes=").partition("-")
            stop = int(last) + 1 if last else len(body)
            body = body[int(first):stop]
            headers["Content-Range"] = f"bytes {first}-{stop - 1}/{len(data)}"
            status = 206
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(data))
            return web.Response(status=200, headers=headers)
        return web.Response(status=status, body=bytes(body), headers=headers)


def _s3(endpoint: str, lean: bool = True) -> S3Store:
    return S3Store(ClientConfig(retry=RETRY, lean_reads=lean), endpoint=endpoint,
                   region="us-east-1", addressing="path", anonymous=True)


def _listed(data: bytes = OLD) -> ObjectInfo:
    # As an S3 listing gives it: the ETag as the generation, no checksum.
    return ObjectInfo("bkt", "obj", len(data), generation_of(_etag(data)), scheme="s3")


@LEAN
async def test_ranges_of_two_versions_are_not_stitched(lean: bool) -> None:
    obj = S3Object(switch_after=1)
    async with Server(obj.answer) as (endpoint, _), _s3(endpoint, lean) as store:
        downloader = Downloader(store, DownloadOptions(ranged_threshold=1024,
                                                       range_size=1024))
        with pytest.raises(NotFound, match="no longer generation"):
            await downloader.download(_listed())


@LEAN
async def test_a_pinned_read_refuses_another_version(lean: bool) -> None:
    obj = S3Object(switch_after=0)
    async with Server(obj.answer) as (endpoint, _), _s3(endpoint, lean) as store:
        with pytest.raises(NotFound, match="no longer generation"):
            await store.read("bkt", "obj", start=10, end=20,
                             generation=generation_of(_etag(OLD)))


async def test_a_gcs_answer_of_another_generation_is_refused() -> None:
    async def answer(request: web.Request, served: Served) -> web.Response:
        # Ignores generation=, serves generation 8.
        return web.Response(body=OLD, headers={"x-goog-generation": "8"})

    async with Server(answer) as (endpoint, served), AsyncClient(
            ClientConfig(retry=RETRY), endpoint=endpoint, credentials=None) as client:
        with pytest.raises(PreconditionFailed, match="version 8 answered, not the 7"):
            await client.read("bkt", "obj", generation=7)
        assert len(served.paths) == 1  # final, not retried
        assert await client.read("bkt", "obj", generation=8) == OLD


@LEAN
@pytest.mark.parametrize("how", ["read", "download"])
async def test_a_corrupt_body_fails_its_md5_etag(lean: bool, how: str) -> None:
    obj = S3Object(corrupt=True)
    async with Server(obj.answer) as (endpoint, served), _s3(endpoint, lean) as store:
        with pytest.raises(ChecksumMismatch, match="MD5"):
            if how == "read":
                await store.read("bkt", "obj")
            else:
                options = DownloadOptions(ranged_threshold=1024, range_size=1024)
                await Downloader(store, options).download(_listed())
        if how == "read":
            assert len(served.paths) == RETRY.max_attempts  # read again, then raised
        obj.corrupt = False
        assert await store.read("bkt", "obj") == OLD
        assert bytes(await Downloader(store, DownloadOptions(
            ranged_threshold=1024, range_size=1024)).download(_listed())) == OLD


@pytest.mark.parametrize("headers,etag", [
    ({"x-amz-server-side-encryption": "aws:kms"}, '"0123456789abcdef0123456789abcdef"'),
    ({"x-amz-server-side-encryption-customer-algorithm": "AES256"},
     '"0123456789abcdef0123456789abcdef"'),
    ({}, '"0123456789abcdef0123456789abcdef-3"'),
    ({}, '"opaque"'),
], ids=["kms", "sse-c", "multipart", "opaque"])
async def test_an_etag_that_is_no_md5_is_not_held_to_one(headers: dict[str, str],
                                                         etag: str) -> None:
    obj = S3Object(headers=headers, etag=etag)
    async with Server(obj.answer) as (endpoint, _), _s3(endpoint) as store:
        assert await store.read("bkt", "obj") == OLD
        assert (await store.stat("bkt", "obj")).md5 is None


async def test_a_crc32c_is_preferred_and_stat_gives_the_md5() -> None:
    obj = S3Object(crc=True)
    async with Server(obj.answer) as (endpoint, _), _s3(endpoint) as store:
        info = await store.stat("bkt", "obj")
        assert info.md5 == base64.b64encode(hashlib.md5(OLD).digest()).decode()
        assert info.crc32c == crc32c(OLD)
        obj.corrupt = True
        with pytest.raises(ChecksumMismatch, match="crc32c"):
            await store.read("bkt", "obj")


async def test_a_large_md5_is_checked_off_the_loop(monkeypatch: Any) -> None:
    # Past 1 MiB the MD5 runs in a worker thread; the check is the same.
    import aioflux._core.integrity.md5 as md5
    monkeypatch.setattr(md5, "INLINE", 100)
    obj = S3Object(corrupt=True)
    async with Server(obj.answer) as (endpoint, _), _s3(endpoint) as store:
        with pytest.raises(ChecksumMismatch, match="MD5"):
            await store.read("bkt", "obj")
        obj.corrupt = False
        assert await store.read("bkt", "obj") == OLD


@pytest.mark.timeout(20)
async def test_the_reader_hashes_an_md5_object_as_it_is_consumed() -> None:
    obj = S3Object(corrupt=True)
    async with Server(obj.answer) as (endpoint, _):
        # The reader drives its own store on the portal loop (this loop
        # serves the scripted server meanwhile).
        store = _s3(endpoint)

        def load() -> bytes:
            info = get_portal().call(store.stat("bkt", "obj"))
            assert info.md5 is not None and info.crc32c is None
            options = ReaderOptions(block_size=1024, read_ahead=2)
            with ObjectReader(store, "bkt", "obj", options=options, info=info) as reader:
                return reader.read()

        try:
            with pytest.raises(ChecksumMismatch, match="MD5"):
                await asyncio.to_thread(load)
            obj.corrupt = False
            assert await asyncio.to_thread(load) == OLD
        finally:
            await asyncio.to_thread(get_portal().call, store.aclose())
