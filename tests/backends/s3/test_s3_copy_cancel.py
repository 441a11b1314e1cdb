"""A copy in parts cancelled while its multipart upload is being created
leaves no upload open.

S3 creates the upload when the request arrives; its id is known only once
the answer is read. A copy cancelled in between (Ctrl-C during ``aioflux
cp`` of an object past 5 GiB) dropped the answer, so no abort could name
the upload, and it stayed open until ``aioflux clean`` found it. The
writer's uploads wait for that answer and abort; so does a copy now. The
server is scripted (tests/servers/web_server.py): it holds the answer to the
creation until the test has cancelled the copy.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from aioflux import ClientConfig, RetryPolicy, S3Store
from aioflux.s3 import _copy
from tests.servers.web_server import Served, Server

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
MIB = 1024 * 1024


class SlowCreation:
    """A source of 7 MiB; the creation of an upload answered once released."""

    def __init__(self) -> None:
        self.creating = asyncio.Event()
        self.release = asyncio.Event()

    async def answer(self, request: web.Request, served: Served) -> web.Response:
        if request.method == "HEAD":
            return web.Response(headers={"Content-Length": str(7 * MIB),
                                         "ETag": '"0123456789abcdef0123456789abcdef"'})
        if request.method == "POST" and "uploads" in request.query:
            self.creating.set()
            await self.release.wait()
            return web.Response(body=f'<?xml version="1.0"?><InitiateMultipartUploadResult '
                                     f"{NS}><UploadId>U1</UploadId>"
                                     "</InitiateMultipartUploadResult>".encode(),
                                content_type="application/xml")
        if request.method == "DELETE":
            return web.Response(status=204)
        return web.Response(status=500)  # no part copy gets this far


async def test_a_copy_cancelled_while_its_upload_is_created_aborts_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_copy, "SINGLE_COPY_LIMIT", 6 * MIB)
    monkeypatch.setattr(_copy, "COPY_PART_SIZE", 5 * MIB)
    server = SlowCreation()
    async with Server(server.answer) as (endpoint, served), S3Store(
            ClientConfig(retry=RetryPolicy(max_attempts=1)), endpoint=endpoint,
            region="us-east-1", addressing="path", anonymous=True) as store:
        task = asyncio.create_task(store.copy("bkt", "src", "bkt", "dst"))
        await server.creating.wait()
        task.cancel()  # lands before the held answer can arrive
        server.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [p for p in served.paths if not p.startswith("HEAD")] == [
            "POST /bkt/dst?uploads", "DELETE /bkt/dst?uploadId=U1"]
