"""Answers S3 keeps alive with whitespace while it works (CompleteMultipartUpload,
CopyObject, UploadPartCopy): the 200 comes at once, whitespace follows, then
the document, which may start with its XML declaration (S3's and MinIO's do:
minio/minio#7198, minio-py#792). XML forbids anything before a declaration, so
the whitespace is dropped before parsing: a completion that published was
reported failed (and its upload "aborted"), and an ``<Error>`` it carried was
not retried as its code says. An answer that ends unparsable failed after
its 200 and is retried, as botocore does: a completion that had published
is then known by what it published.

The answers come from moto, through a proxy that holds each such answer
back behind whitespace, as S3 does.
"""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from aioflux import ClientConfig
from aioflux._core.integrity.crc import Crc32c, crc32c
from aioflux.s3 import S3Store
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket
from tests.servers.web_server import Served, Server

MIB = 1024 * 1024
_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'
_FAILED = (_DECLARATION + b"<Error><Code>InternalError</Code><Message>We encountered an "
           b"internal error. Please try again.</Message></Error>")
_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


class _KeptAlive:
    """A proxy to moto that answers completions and copies as S3 does:
    200 at once, whitespace, then the document (the first ``fail`` of them
    an InternalError instead, nothing forwarded)."""

    def __init__(self, upstream: str, fail: int = 0) -> None:
        self.upstream = upstream
        self.fail = fail
        #: forward the next this many, then end their answers after the
        #: whitespace and declaration (the request was done, its answer lost)
        self.cut = 0
        self.kept_alive = 0
        self.session: aiohttp.ClientSession | None = None

    async def answer(self, request: web.Request, served: Served) -> web.StreamResponse:
        assert self.session is not None
        body = await request.read()
        slow = (request.method == "POST" and "uploadId" in request.query) or \
            "x-amz-copy-source" in request.headers
        if slow:
            self.kept_alive += 1
            resp = web.StreamResponse(headers={"Content-Type": "application/xml"})
            await resp.prepare(request)
            await resp.write(b" \n\r\n ")
            if self.fail:
                self.fail -= 1
                await resp.write(b"  \n" + _FAILED)
                return resp
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self.session.request(request.method, self.upstream + request.path_qs,
                                        headers=headers, data=io.BytesIO(body),
                                        allow_redirects=False) as up:
            answer = await up.read()
            if slow and self.cut:
                self.cut -= 1
                await resp.write(b"\n  \n" + _DECLARATION)
                return resp
            if slow:
                await resp.write(b"\n  \n" + (answer if answer.startswith(b"<?xml")
                                              else _DECLARATION + answer))
                return resp
            kept = {k: v for k, v in up.headers.items() if k.lower() not in _HOP}
            if request.method == "HEAD":  # the object's length, no body
                kept["Content-Length"] = up.headers.get("Content-Length", "0")
                return web.Response(status=up.status, headers=kept)
            return web.Response(status=up.status, body=answer, headers=kept)


@pytest.fixture
async def proxied(moto_s3: MotoS3) -> AsyncIterator[tuple[_KeptAlive, S3Store, str]]:
    proxy = _KeptAlive(moto_s3.endpoint)
    async with aiohttp.ClientSession(auto_decompress=False) as session, \
            Server(proxy.answer) as (endpoint, _):
        proxy.session = session
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint) as store:
            bucket = unique_bucket("alive")
            await store.create_bucket(bucket)
            yield proxy, store, bucket


@pytest.mark.parametrize("fail", [0, 1])
async def test_a_completion_kept_alive_before_its_declaration_publishes(
        proxied: tuple[_KeptAlive, S3Store, str], fail: int) -> None:
    proxy, store, bucket = proxied
    proxy.fail = fail
    parts = [os.urandom(5 * MIB), os.urandom(1000)]
    whole = b"".join(parts)
    running = Crc32c()
    running.update(whole)
    upload = store.start_upload(bucket, "obj", part_size=5 * MIB)
    await upload.put(1, memoryview(parts[0]))
    info = await upload.finish(2, memoryview(parts[1]), running)
    assert (info.size, info.crc32c) == (len(whole), crc32c(whole))
    assert await store.read(bucket, "obj") == whole
    assert await store.list_multipart_uploads(bucket) == []
    assert proxy.kept_alive == 1 + fail  # the InternalError was retried, once
    assert store.stats.retries == fail


@pytest.mark.parametrize("fail", [0, 1])
async def test_a_copy_kept_alive_before_its_declaration_is_done(
        proxied: tuple[_KeptAlive, S3Store, str], fail: int) -> None:
    proxy, store, bucket = proxied
    data = os.urandom(3000)
    await store.write(bucket, "src", data)
    proxy.fail = fail
    info = await store.copy(bucket, "src", bucket, "dst")
    assert (info.name, info.size) == ("dst", len(data))
    assert await store.read(bucket, "dst") == data
    assert proxy.kept_alive == 1 + fail


async def test_a_completion_whose_kept_alive_answer_ends_unparsable_is_retried(
        proxied: tuple[_KeptAlive, S3Store, str]) -> None:
    # The first completion published; its answer ended after the
    # declaration. Retried, it finds no upload, and the object holds exactly
    # the bytes written: the write succeeded (it was reported failed).
    proxy, store, bucket = proxied
    proxy.cut = 1
    parts = [os.urandom(5 * MIB), os.urandom(1000)]
    whole = b"".join(parts)
    running = Crc32c()
    running.update(whole)
    upload = store.start_upload(bucket, "obj", part_size=5 * MIB)
    await upload.put(1, memoryview(parts[0]))
    info = await upload.finish(2, memoryview(parts[1]), running)
    assert (info.size, info.crc32c) == (len(whole), crc32c(whole))
    assert await store.read(bucket, "obj") == whole
    assert proxy.kept_alive == 2
    assert await store.list_multipart_uploads(bucket) == []


async def test_a_copy_whose_kept_alive_answer_ends_unparsable_is_retried(
        proxied: tuple[_KeptAlive, S3Store, str]) -> None:
    proxy, store, bucket = proxied
    data = os.urandom(3000)
    await store.write(bucket, "src", data)
    proxy.cut = 1
    info = await store.copy(bucket, "src", bucket, "dst")
    assert (info.name, info.size) == ("dst", len(data))
    assert await store.read(bucket, "dst") == data
    assert proxy.kept_alive == 2
