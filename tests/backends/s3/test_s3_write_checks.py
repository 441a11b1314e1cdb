"""Writes the server makes from parts or copies, held to what was sent.

A multipart upload to an S3-compatible store that keeps no checksums (it
echoes no ``x-amz-checksum-crc32c``): each part's ETag must be the MD5 of
the bytes sent, the object's the MD5 of the parts', and the answer must
name the object written. A copy copies the source version a HEAD saw and
must have its size and checksums. A failed check deletes only the version
the completion or copy made; a writer that replaced it since keeps its
object.

A server that reports the data's CRC-32 where S3 reports its CRC-32C
(moto without the ``crc32c`` package) is refused like any other, and the
error says so.

The server is scripted (tests/servers/web_server.py): it stores what it is sent,
with the fault a test asks for, and says so honestly in its ETags.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import sys
import zlib
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from aioflux import ChecksumMismatch, ClientConfig, ProtocolError, RetryPolicy, S3Store
from aioflux._core.integrity.crc import Crc32c
from aioflux.s3._crc32_note import PLAIN_CRC32
from tests.conftest import MotoS3, unique_bucket
from tests.servers.web_server import Answer, Served, Server

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
PART = 5 << 20
RETRY = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def _xml(body: str) -> web.Response:
    return web.Response(body=f'<?xml version="1.0"?>{body}'.encode(),
                        content_type="application/xml")


@dataclass
class NoChecksumStore:
    """Stores parts and assembles them, with one fault:

    ``corrupt``: flips a byte of every part stored; ``swap``: assembles
    the parts in reverse order; ``key``: names another key in the answer;
    ``replaced``: another writer's object is there by the HEAD.
    """

    fault: str = ""
    parts: dict[int, bytes] = field(default_factory=dict)
    data: bytes = b""
    etag: str = ""

    async def answer(self, request: web.Request, served: Served) -> web.Response:
        q = request.query
        if request.method == "POST" and "uploads" in q:
            return _xml(f"<InitiateMultipartUploadResult {NS}><UploadId>U1</UploadId>"
                        "</InitiateMultipartUploadResult>")
        if request.method == "PUT" and "partNumber" in q:
            body = bytearray(await request.read())
            if self.fault == "corrupt":
                body[10] ^= 0xFF
            self.parts[int(q["partNumber"])] = bytes(body)
            return web.Response(headers={"ETag": _etag(bytes(body))})
        if request.method == "POST" and "uploadId" in q:
            order = sorted(self.parts, reverse=self.fault == "swap")
            self.data = b"".join(self.parts[n] for n in order)
            digests = b"".join(hashlib.md5(self.parts[n]).digest() for n in order)
            self.etag = f'"{hashlib.md5(digests).hexdigest()}-{len(order)}"'
            key = "other" if self.fault == "key" else request.path.split("/", 2)[2]
            return _xml(f"<CompleteMultipartUploadResult {NS}><Bucket>bkt</Bucket>"
                        f"<Key>{key}</Key><ETag>{self.etag}</ETag>"
                        "</CompleteMultipartUploadResult>")
        if request.method == "HEAD":
            if self.fault == "replaced":
                return web.Response(headers={"Content-Length": "3", "ETag": _etag(b"new")})
            return web.Response(headers={"Content-Length": str(len(self.data)),
                                         "ETag": self.etag})
        if request.method == "DELETE":
            return web.Response(status=204)
        return web.Response(status=404)


async def _upload(store: S3Store, first: bytes, tail: bytes) -> object:
    upload = store.start_upload("bkt", "big")
    running = Crc32c()
    running.update(first)
    running.update(tail)
    try:
        await upload.put(1, memoryview(first))
        return await upload.finish(2, memoryview(tail), running)
    except BaseException:
        await upload.abort()
        raise


def _store(endpoint: str) -> S3Store:
    return S3Store(ClientConfig(retry=RETRY), endpoint=endpoint, region="us-east-1",
                   addressing="path", anonymous=True)


def _deletes(served: Served) -> list[str]:
    return [p for p in served.paths if p.startswith("DELETE")]


async def test_parts_and_object_are_held_to_their_md5_etags() -> None:
    first, tail = os.urandom(PART), os.urandom(1000)
    server = NoChecksumStore()
    async with Server(server.answer) as (endpoint, served), _store(endpoint) as store:
        info = await _upload(store, first, tail)
        assert server.data == first + tail and not _deletes(served)
        assert info.size == PART + 1000  # type: ignore[attr-defined]


async def test_a_part_stored_corrupt_fails_and_nothing_is_published() -> None:
    server = NoChecksumStore("corrupt")
    async with Server(server.answer) as (endpoint, served), _store(endpoint) as store:
        with pytest.raises(ChecksumMismatch, match=r"upload part 1.*not the MD5"):
            await _upload(store, os.urandom(PART), b"tail")
        assert not any("uploadId=U1" in p and p.startswith("POST") for p in served.paths)
        assert _deletes(served) == ["DELETE /bkt/big?uploadId=U1"]  # the abort


async def test_parts_assembled_out_of_order_are_deleted() -> None:
    server = NoChecksumStore("swap")
    async with Server(server.answer) as (endpoint, served), _store(endpoint) as store:
        with pytest.raises(ChecksumMismatch, match=r"ETag of the 2 parts sent.*deleted"):
            await _upload(store, os.urandom(PART), os.urandom(PART))
        assert _deletes(served) == ["DELETE /bkt/big"]


async def test_an_answer_naming_another_key_is_refused() -> None:
    server = NoChecksumStore("key")
    async with Server(server.answer) as (endpoint, _), _store(endpoint) as store:
        with pytest.raises(ProtocolError, match="names Key 'other'"):
            await _upload(store, os.urandom(PART), b"tail")


async def test_an_object_replaced_since_is_not_deleted() -> None:
    # Another writer's object, of another size, is there by the HEAD: ours
    # was published and checked by its ETag; theirs is left alone.
    first, tail = os.urandom(PART), os.urandom(1000)
    server = NoChecksumStore("replaced")
    async with Server(server.answer) as (endpoint, served), _store(endpoint) as store:
        info = await _upload(store, first, tail)
        assert info.size == PART + 1000  # type: ignore[attr-defined]
        assert not _deletes(served)


# -- a server that reports CRC-32 for CRC-32C -----------------------------------------


def _b64_crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


@dataclass
class Crc32Store:
    """Keeps checksums, but computes CRC-32 where CRC-32C was asked for:
    for the whole object (a PUT's, a completed upload's) and, with
    ``parts``, for every part too (else it echoes the part's, as moto
    does). ``corrupt`` flips a byte of what it stores."""

    corrupt: bool = False
    parts: bool = False
    stored: dict[int, bytes] = field(default_factory=dict)
    data: bytes = b""

    def _keep(self, body: bytes) -> bytes:
        if not self.corrupt:
            return body
        return body[:10] + bytes([body[10] ^ 0xFF]) + body[11:]

    async def answer(self, request: web.Request, served: Served) -> web.Response:
        q = request.query
        if request.method == "POST" and "uploads" in q:
            return _xml(f"<InitiateMultipartUploadResult {NS}><UploadId>U1</UploadId>"
                        "</InitiateMultipartUploadResult>")
        if request.method == "PUT" and "partNumber" in q:
            body = await request.read()
            self.stored[int(q["partNumber"])] = body
            said = _b64_crc32(body) if self.parts else request.headers["x-amz-checksum-crc32c"]
            return web.Response(headers={"ETag": _etag(body), "x-amz-checksum-crc32c": said})
        if request.method == "PUT":
            self.data = self._keep(await request.read())
            return web.Response(headers={"ETag": _etag(self.data),
                                         "x-amz-checksum-crc32c": _b64_crc32(self.data)})
        if request.method == "POST" and "uploadId" in q:
            self.data = self._keep(b"".join(self.stored[n] for n in sorted(self.stored)))
            return _xml(f"<CompleteMultipartUploadResult {NS}><Bucket>bkt</Bucket>"
                        f"<Key>big</Key><ETag>{self._etag()}</ETag><ChecksumCRC32C>"
                        f"{_b64_crc32(self.data)}</ChecksumCRC32C>"
                        "</CompleteMultipartUploadResult>")
        headers = {"ETag": self._etag(), "x-amz-checksum-crc32c": _b64_crc32(self.data)}
        if request.method == "HEAD":
            return web.Response(headers={**headers, "Content-Length": str(len(self.data))})
        if request.method == "GET":
            first, last = map(int, request.headers["Range"].removeprefix("bytes=").split("-"))
            last = min(last, len(self.data) - 1)
            headers["Content-Range"] = f"bytes {first}-{last}/{len(self.data)}"
            return web.Response(status=206, headers=headers, body=self.data[first:last + 1])
        if request.method == "DELETE":
            return web.Response(status=204)
        return web.Response(status=404)

    def _etag(self) -> str:
        return f'"{hashlib.md5(b"".join(self.stored.values())).hexdigest()}-{len(self.stored)}"'


@pytest.mark.parametrize(("how", "corrupt"), [
    ("put", False), ("put", True), ("multipart", False), ("multipart", True), ("part", False)])
async def test_a_crc32_for_a_crc32c_is_refused_and_named(how: str, corrupt: bool) -> None:
    server = Crc32Store(corrupt=corrupt, parts=how == "part")
    async with Server(server.answer) as (endpoint, served), _store(endpoint) as store:
        with pytest.raises(ChecksumMismatch) as caught:
            if how == "put":
                await store.write("bkt", "big", os.urandom(1000))
            else:
                await _upload(store, os.urandom(PART), os.urandom(PART // 2))
    said = str(caught.value)
    # Named only when the bytes are the ones sent: a flipped byte is a flipped byte.
    assert (PLAIN_CRC32 in said) is not corrupt, said
    # Refused all the same: the object (or the open upload) is deleted.
    assert _deletes(served) == (["DELETE /bkt/big?uploadId=U1"] if how == "part"
                                else ["DELETE /bkt/big"])
    reads = [p for p in served.paths if p.startswith("GET")]
    # Only an object the server assembled is read back, to tell its bytes from ours.
    assert bool(reads) is (how == "multipart"), served.paths


async def test_moto_without_the_crc32c_package_fails_multipart_uploads_and_says_why(
        moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> None:
    # tests/conftest.py gives moto a crc32c module; None in sys.modules
    # makes its import fail, as on a machine without the package.
    monkeypatch.setitem(sys.modules, "crc32c", None)
    bucket = unique_bucket("s3")
    async with S3Store(ClientConfig(retry=RETRY), endpoint=moto_s3.endpoint) as store:
        await store.create_bucket(bucket)
        upload = store.start_upload(bucket, "big")
        first, tail = os.urandom(PART), os.urandom(1000)
        running = Crc32c()
        running.update(first + tail)
        await upload.put(1, memoryview(first))
        wanted = f"write s3://{bucket}/big: .*{re.escape(PLAIN_CRC32)}; the object was deleted"
        with pytest.raises(ChecksumMismatch, match=wanted):
            await upload.finish(2, memoryview(tail), running)
        assert not await store.exists(bucket, "big")


# -- CopyObject --------------------------------------------------------------------


def _copier(fault: str, requests: list[web.Request]) -> Answer:
    """A source ``src`` of 1000 bytes; the copy ``dst`` is stored with
    ``fault``: ``truncate`` (short), ``replaced`` (another writer's by the
    HEAD) or none."""
    old = b"x" * 1000
    copy = {"data": b""}

    async def answer(request: web.Request, served: Served) -> web.Response:
        requests.append(request)
        key = request.path.split("/", 2)[2]
        if request.method == "PUT":
            copy["data"] = old[:500] if fault == "truncate" else old
            return _xml(f"<CopyObjectResult {NS}><ETag>{_etag(copy['data'])}</ETag>"
                        "</CopyObjectResult>")
        if request.method == "HEAD":
            data = old if key == "src" else copy["data"]
            if key == "dst" and fault == "replaced":
                data = b"theirs"
            return web.Response(headers={"Content-Length": str(len(data)),
                                         "ETag": _etag(data)})
        if request.method == "DELETE":
            return web.Response(status=204)
        return web.Response(status=404)

    return answer


@pytest.mark.parametrize("fault", ["", "truncate", "replaced"])
async def test_a_copy_is_pinned_to_its_source_and_held_to_it(fault: str) -> None:
    requests: list[web.Request] = []
    async with Server(_copier(fault, requests)) as (endpoint, _), \
            _store(endpoint) as store:
        if fault == "truncate":
            with pytest.raises(ChecksumMismatch, match=r"copy s3://bkt/dst: the copy's size "
                                                       r"and MD5 differ.*deleted"):
                await store.copy("bkt", "src", "bkt", "dst")
        else:
            info = await store.copy("bkt", "src", "bkt", "dst")
            assert info.size == 1000
    put = next(r for r in requests if r.method == "PUT")
    assert put.headers["x-amz-copy-source-if-match"] == _etag(b"x" * 1000)
    deletes = [r for r in requests if r.method == "DELETE"]
    assert [r.headers.get("If-Match") for r in deletes] == (
        [_etag(b"x" * 500)] if fault == "truncate" else [])
