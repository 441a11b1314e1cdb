"""Where the emulator answered more leniently than GCS or S3 do, checked
with plain aiohttp against what the real services answer.

- An object stored with ``Content-Encoding: gzip``: GCS keeps the coding
  (``contentEncoding``, ``x-goog-stored-content-encoding``) and serves it
  decompressed to a reader that does not accept gzip (Range ignored, 200,
  no Content-Length, ``x-guploader-response-body-transformations``, the
  stored bytes' hashes); as stored, with ``Content-Encoding: gzip`` and
  ranges honoured, to one that does. S3 never transforms: it names the
  coding and serves the stored bytes.
- An XML or S3 PUT with ``Content-Encoding: gzip`` stores the bytes sent
  (the emulator's HTTP server inflated them first, so the object held
  other bytes than the client's hashes were of).
- The JSON API refuses an unknown ``uploadType``, and a multipart upload
  without ``contentType`` in its metadata takes the media part's.
"""

from __future__ import annotations

import base64
import gzip
import json
import uuid
from collections.abc import AsyncIterator, Iterator

import aiohttp
import google_crc32c
import pytest

from aioflux.testing import Emulator, running_emulator

PLAIN = b"".join(b"line %d of a compressible text\n" % i for i in range(4000))
PACKED = gzip.compress(PLAIN)
IDENTITY = {"Accept-Encoding": "identity"}
GZIP = {"Accept-Encoding": "gzip"}


def b64crc(data: bytes) -> str:
    return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with running_emulator() as emulator:
        yield emulator


@pytest.fixture
def bkt(emu: Emulator) -> str:
    return emu.create_bucket(f"strict-{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # auto_decompress off: the test sees the bytes on the wire.
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield session


async def _upload_gzip(http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    meta = {"name": "gz", "contentType": "text/plain", "contentEncoding": "gzip"}
    body = (b"--B\r\nContent-Type: application/json\r\n\r\n" + json.dumps(meta).encode()
            + b"\r\n--B\r\nContent-Type: text/plain\r\n\r\n" + PACKED + b"\r\n--B--\r\n")
    async with http.post(f"{emu.endpoint}/upload/storage/v1/b/{bkt}/o",
                         params={"uploadType": "multipart"}, data=body,
                         headers={"Content-Type": "multipart/related; boundary=B"}) as r:
        assert r.status == 200, await r.text()
        doc = await r.json()
    assert doc["contentEncoding"] == "gzip"
    assert doc["size"] == str(len(PACKED))
    assert doc["crc32c"] == b64crc(PACKED)


@pytest.mark.parametrize("api", ["json", "xml"])
async def test_a_gzip_object_is_served_decompressed_unless_gzip_is_accepted(
        http: aiohttp.ClientSession, emu: Emulator, bkt: str, api: str) -> None:
    await _upload_gzip(http, emu, bkt)
    url = (f"{emu.endpoint}/storage/v1/b/{bkt}/o/gz?alt=media" if api == "json"
           else f"{emu.endpoint}/{bkt}/gz")
    # Not accepting gzip: decompressive transcoding, and the Range is ignored.
    async with http.get(url, headers={**IDENTITY, "Range": "bytes=5-9"}) as r:
        assert r.status == 200
        assert await r.read() == PLAIN
        assert r.headers["x-guploader-response-body-transformations"] == "gunzipped"
        assert "Content-Encoding" not in r.headers
        assert "Content-Length" not in r.headers
        assert "Content-Range" not in r.headers
        assert r.headers["x-goog-stored-content-encoding"] == "gzip"
        assert r.headers["x-goog-stored-content-length"] == str(len(PACKED))
        assert f"crc32c={b64crc(PACKED)}" in r.headers["x-goog-hash"]
    # Accepting gzip: the stored bytes, coded, ranges honoured.
    async with http.get(url, headers=GZIP) as r:
        assert r.status == 200
        assert await r.read() == PACKED
        assert r.headers["Content-Encoding"] == "gzip"
        assert "x-guploader-response-body-transformations" not in r.headers
    async with http.get(url, headers={**GZIP, "Range": "bytes=5-9"}) as r:
        assert r.status == 206
        assert await r.read() == PACKED[5:10]
        assert r.headers["Content-Range"] == f"bytes 5-9/{len(PACKED)}"
    # A zero weight refuses gzip.
    async with http.get(url, headers={"Accept-Encoding": "gzip;q=0, identity"}) as r:
        assert await r.read() == PLAIN


async def test_a_plain_object_is_never_transformed(
        http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    async with http.post(f"{emu.endpoint}/upload/storage/v1/b/{bkt}/o",
                         params={"uploadType": "media", "name": "p"}, data=PACKED) as r:
        assert r.status == 200
        assert "contentEncoding" not in await r.json()
    async with http.get(f"{emu.endpoint}/storage/v1/b/{bkt}/o/p?alt=media",
                        headers=IDENTITY) as r:
        assert await r.read() == PACKED
        assert r.headers["x-goog-stored-content-encoding"] == "identity"
        assert r.headers["Content-Length"] == str(len(PACKED))


@pytest.mark.parametrize("face", ["gcs-xml", "s3"])
async def test_a_gzip_coded_put_stores_the_bytes_sent(
        http: aiohttp.ClientSession, emu: Emulator, bkt: str, face: str) -> None:
    base = emu.endpoint if face == "gcs-xml" else emu.s3_endpoint
    headers = {"Content-Encoding": "gzip", "Content-Type": "text/plain"}
    if face == "gcs-xml":
        headers["x-goog-hash"] = f"crc32c={b64crc(PACKED)}"
    else:
        headers["x-amz-checksum-crc32c"] = b64crc(PACKED)
    async with http.put(f"{base}/{bkt}/coded", data=PACKED, headers=headers) as r:
        assert r.status == 200, await r.text()
    rec = emu.store.get(bkt, "coded")
    assert bytes(rec.data) == PACKED
    assert rec.content_encoding == "gzip"
    if face == "s3":
        # S3 never transforms an object: the stored bytes, their coding named.
        async with http.get(f"{base}/{bkt}/coded", headers=IDENTITY) as r:
            assert r.status == 200
            assert r.headers["Content-Encoding"] == "gzip"
            assert await r.read() == PACKED


async def test_an_s3_aws_chunked_coding_is_not_kept(
        http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    body = b"5\r\nhello\r\n0\r\n\r\n"
    headers = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "5"}
    async with http.put(f"{emu.s3_endpoint}/{bkt}/framed", data=body, headers=headers) as r:
        assert r.status == 200, await r.text()
    async with http.get(f"{emu.s3_endpoint}/{bkt}/framed") as r:
        assert await r.read() == b"hello"
        assert "Content-Encoding" not in r.headers


async def test_a_json_upload_may_be_gzip_compressed_in_transit(
        http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    # On the JSON API the request's Content-Encoding is transport only.
    async with http.post(f"{emu.endpoint}/upload/storage/v1/b/{bkt}/o",
                         params={"uploadType": "media", "name": "t"}, data=PACKED,
                         headers={"Content-Encoding": "gzip"}) as r:
        assert r.status == 200, await r.text()
        doc = await r.json()
    assert doc["size"] == str(len(PLAIN))
    assert "contentEncoding" not in doc
    assert bytes(emu.store.get(bkt, "t").data) == PLAIN


async def test_an_unknown_upload_type_is_refused(
        http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    async with http.post(f"{emu.endpoint}/upload/storage/v1/b/{bkt}/o",
                         params={"uploadType": "bogus", "name": "u"}, data=b"x") as r:
        assert r.status == 400
        assert (await r.json())["error"]["errors"][0]["reason"] == "invalid"
    assert "u" not in emu.store.bucket(bkt).objects


async def test_a_multipart_upload_takes_the_media_parts_content_type(
        http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    body = (b"--B\r\nContent-Type: application/json\r\n\r\n{\"name\": \"m\"}"
            b"\r\n--B\r\nContent-Type: image/png\r\n\r\nPNG\r\n--B--\r\n")
    async with http.post(f"{emu.endpoint}/upload/storage/v1/b/{bkt}/o",
                         params={"uploadType": "multipart"}, data=body,
                         headers={"Content-Type": "multipart/related; boundary=B"}) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["contentType"] == "image/png"
