"""The emulator's XML API and multipart upload, checked with plain aiohttp."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Iterator

import aiohttp
import google_crc32c
import pytest

from aioflux.testing import Emulator, running_emulator

MIB = 1024 * 1024


def b64crc(data: bytes) -> str:
    return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with running_emulator() as emulator:
        yield emulator


@pytest.fixture
def bkt(emu: Emulator) -> str:
    return emu.create_bucket(f"xml-{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def http(emu: Emulator) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=emu.endpoint) as session:
        yield session


S3 = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def xml_fields(text: str) -> dict[str, str]:
    root = ET.fromstring(text)
    return {child.tag.removeprefix(S3): child.text or "" for child in root}


def assert_xml_error(text: str, code: str, details: str | None = None) -> None:
    assert text.startswith("<?xml version='1.0' encoding='UTF-8'?><Error><Code>")
    fields = xml_fields(text)
    assert fields["Code"] == code
    assert fields["Message"]
    if details is not None:
        assert fields["Details"] == details


@pytest.mark.asyncio
async def test_put_get_head_delete(http: aiohttp.ClientSession, bkt: str) -> None:
    data = bytes(range(256)) * 100
    name = "a dir/obj+1.bin"
    headers = {"x-goog-hash": f"crc32c={b64crc(data)}", "Content-Type": "application/x-t"}
    async with http.put(f"/{bkt}/a%20dir/obj%2B1.bin", data=data, headers=headers) as r:
        assert r.status == 200
        assert r.headers["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        gen = r.headers["x-goog-generation"]
    async with http.get(f"/{bkt}/a%20dir/obj%2B1.bin") as r:
        assert r.status == 200 and await r.read() == data
        assert r.headers["x-goog-stored-content-length"] == str(len(data))
        assert r.headers["x-goog-generation"] == gen
        assert f"crc32c={b64crc(data)}" in r.headers["x-goog-hash"]
        assert r.headers["Content-Type"] == "application/x-t"
    async with http.get(f"/{bkt}/a%20dir/obj%2B1.bin", headers={"Range": "bytes=-10"}) as r:
        assert r.status == 206 and await r.read() == data[-10:]
        assert r.headers["Content-Range"] == f"bytes {len(data) - 10}-{len(data) - 1}/{len(data)}"
    async with http.get(f"/{bkt}/a%20dir/obj%2B1.bin", headers={"Range": "bytes=99999-"}) as r:
        assert r.status == 416
    async with http.head(f"/{bkt}/a%20dir/obj%2B1.bin") as r:
        assert r.status == 200 and r.headers["Content-Length"] == str(len(data))
        assert await r.read() == b""
    async with http.delete(f"/{bkt}/a%20dir/obj%2B1.bin") as r:
        assert r.status == 204
    async with http.get(f"/{bkt}/a%20dir/obj%2B1.bin") as r:
        assert r.status == 404
        assert_xml_error(await r.text(), "NoSuchKey", f"{bkt}/{name}")
    async with http.head(f"/{bkt}/a%20dir/obj%2B1.bin") as r:
        assert r.status == 404
    async with http.get("/no-such-bucket-xyz/o") as r:
        assert_xml_error(await r.text(), "NoSuchBucket")


@pytest.mark.asyncio
async def test_empty_objects_ranges_and_names(http: aiohttp.ClientSession, bkt: str) -> None:
    async with http.put(f"/{bkt}/empty", data=b"") as r:
        assert r.status == 200
    async with http.get(f"/{bkt}/empty", headers={"Range": "bytes=0-"}) as r:
        assert r.status == 416 and r.headers["Content-Range"] == "bytes */0"
        assert_xml_error(await r.text(), "InvalidRange")
    async with http.get(f"/{bkt}/empty") as r:
        assert r.status == 200 and await r.read() == b""
    for raw in ("a%0Ab", "x" * 1025):
        async with http.put(f"/{bkt}/{raw}", data=b"x") as r:
            assert r.status == 400, raw
        async with http.post(f"/{bkt}/{raw}?uploads") as r:
            assert r.status == 400, raw


@pytest.mark.asyncio
async def test_put_bad_digest_and_precondition(http: aiohttp.ClientSession, bkt: str) -> None:
    headers = {"x-goog-hash": f"crc32c={b64crc(b'other')}"}
    async with http.put(f"/{bkt}/d", data=b"data", headers=headers) as r:
        assert r.status == 400
        assert_xml_error(await r.text(), "BadDigest")
    async with http.get(f"/{bkt}/d") as r:
        assert r.status == 404
    async with http.put(f"/{bkt}/d", data=b"1", headers={"x-goog-if-generation-match": "0"}) as r:
        assert r.status == 200
    async with http.put(f"/{bkt}/d", data=b"2", headers={"x-goog-if-generation-match": "0"}) as r:
        assert r.status == 412
        assert_xml_error(await r.text(), "PreconditionFailed")


async def initiate(http: aiohttp.ClientSession, bkt: str, key: str) -> str:
    async with http.post(f"/{bkt}/{key}?uploads", headers={"Content-Type": "application/x-m"}) as r:
        assert r.status == 200
        fields = xml_fields(await r.text())
    assert fields["Bucket"] == bkt and fields["Key"] == key
    return fields["UploadId"]


async def put_part(
    http: aiohttp.ClientSession, bkt: str, key: str, upload_id: str, n: int, data: bytes
) -> str:
    params = {"partNumber": str(n), "uploadId": upload_id}
    headers = {"x-goog-hash": f"crc32c={b64crc(data)}"}
    # BytesIO: aiohttp warns (an error under -W error) on raw bytes over 1 MiB.
    body = io.BytesIO(data)
    async with http.put(f"/{bkt}/{key}", params=params, data=body, headers=headers) as r:
        assert r.status == 200, await r.text()
        etag = r.headers["ETag"]
        assert r.headers["x-goog-hash"].startswith(f"crc32c={b64crc(data)},md5=")
    assert etag == f'"{hashlib.md5(data).hexdigest()}"'
    return etag


def complete_body(parts: list[tuple[int, str]]) -> str:
    inner = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts)
    return f"<CompleteMultipartUpload>{inner}</CompleteMultipartUpload>"


@pytest.mark.asyncio
async def test_multipart_full_flow(http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    key = "ckpt/model.pt"
    upload_id = await initiate(http, bkt, key)
    chunks = [bytes([1]) * (5 * MIB), bytes([2]) * (5 * MIB), b"tail"]
    # Upload out of order; completion orders by part number.
    etags = {n: await put_part(http, bkt, key, upload_id, n, chunks[n - 1]) for n in (3, 1, 2)}
    async with http.get(f"/{bkt}/{key}", params={"uploadId": upload_id}) as r:
        root = ET.fromstring(await r.text())
    assert root.tag == f"{S3}ListPartsResult"
    listed = [
        (int(p.findtext(f"{S3}PartNumber") or 0), p.findtext(f"{S3}ETag"), p.findtext(f"{S3}Size"))
        for p in root.iter(f"{S3}Part")
    ]
    assert listed == [(n, etags[n], str(len(chunks[n - 1]))) for n in (1, 2, 3)]
    async with http.get(f"/{bkt}/{key}", params={"uploadId": upload_id, "max-parts": "2"}) as r:
        root = ET.fromstring(await r.text())
    assert len(list(root.iter(f"{S3}Part"))) == 2
    assert root.findtext(f"{S3}IsTruncated") == "true"
    async with http.get(f"/{bkt}", params={"uploads": ""}) as r:
        text = await r.text()
    assert re.search(rf"<Key>{key}</Key><UploadId>{upload_id}</UploadId><Initiated>", text)
    async with http.get(f"/{bkt}/{key}") as r:
        assert r.status == 404  # invisible until complete
    body = complete_body([(n, etags[n]) for n in (1, 2, 3)])
    async with http.post(f"/{bkt}/{key}", params={"uploadId": upload_id}, data=body) as r:
        assert r.status == 200, await r.text()
        fields = xml_fields(await r.text())
        whole = b"".join(chunks)
        assert r.headers["x-goog-hash"] == f"crc32c={b64crc(whole)}"
    assert fields["Bucket"] == bkt and fields["Key"] == key and fields["ETag"].endswith('-3"')
    async with http.get(f"/{bkt}/{key}") as r:
        assert await r.read() == whole
        assert r.headers["Content-Type"] == "application/x-m"
    # Stored as the parts it arrived in (no join), served across their seams.
    assert len(emu.store.get(bkt, key).data.pieces) >= 3
    seam = 5 * MIB
    headers = {"Range": f"bytes={seam - 3}-{2 * seam + 1}"}
    async with http.get(f"/{bkt}/{key}", headers=headers) as r:
        assert r.status == 206
        assert await r.read() == whole[seam - 3:2 * seam + 2]
    assert emu.stats["xml_put_part"] >= 3 and emu.stats["xml_complete"] >= 1
    async with http.get(f"/{bkt}", params={"uploads": ""}) as r:
        assert "<Upload>" not in await r.text()


@pytest.mark.asyncio
async def test_multipart_errors(http: aiohttp.ClientSession, bkt: str) -> None:
    key = "bad"
    upload_id = await initiate(http, bkt, key)
    small = await put_part(http, bkt, key, upload_id, 1, b"small")
    e2 = await put_part(http, bkt, key, upload_id, 2, b"x" * 10)
    url, params = f"/{bkt}/{key}", {"uploadId": upload_id}
    cases = [
        ([(1, small), (2, e2)], "EntityTooSmall"),
        ([(2, e2), (1, small)], "InvalidPartOrder"),
        ([(1, small), (3, e2)], "InvalidPart"),
        ([(1, '"0000"')], "InvalidPart"),
    ]
    for parts, code in cases:
        async with http.post(url, params=params, data=complete_body(parts)) as r:
            assert r.status == 400, code
            assert_xml_error(await r.text(), code)
    async with http.get(url) as r:
        assert r.status == 404
    bad_hash = {"x-goog-hash": f"crc32c={b64crc(b'nope')}"}
    async with http.put(
        url, params={"partNumber": "3", **params}, data=b"abc", headers=bad_hash
    ) as r:
        assert r.status == 400
        assert_xml_error(await r.text(), "BadDigest")
    for number in ("0", "10001"):
        async with http.put(url, params={"partNumber": number, **params}, data=b"a") as r:
            assert r.status == 400
            assert_xml_error(await r.text(), "InvalidArgument")
    # A single small part is a valid (last) part.
    async with http.post(url, params=params, data=complete_body([(2, e2)])) as r:
        assert r.status == 200
    async with http.get(url) as r:
        assert await r.read() == b"x" * 10


@pytest.mark.asyncio
async def test_multipart_abort(http: aiohttp.ClientSession, bkt: str) -> None:
    upload_id = await initiate(http, bkt, "ab")
    await put_part(http, bkt, "ab", upload_id, 1, b"abc")
    async with http.delete(f"/{bkt}/ab", params={"uploadId": upload_id}) as r:
        assert r.status == 204
    async with http.delete(f"/{bkt}/ab", params={"uploadId": upload_id}) as r:
        assert r.status == 404
        assert_xml_error(await r.text(), "NoSuchUpload")
    async with http.put(
        f"/{bkt}/ab", params={"partNumber": "1", "uploadId": upload_id}, data=b"x"
    ) as r:
        assert r.status == 404
    async with http.post(
        f"/{bkt}/ab", params={"uploadId": upload_id}, data=complete_body([(1, '"x"')])
    ) as r:
        assert_xml_error(await r.text(), "NoSuchUpload")
    async with http.get(f"/{bkt}/ab") as r:
        assert r.status == 404


@pytest.mark.asyncio
async def test_list_uploads_paging(http: aiohttp.ClientSession, bkt: str) -> None:
    ids = [(key, await initiate(http, bkt, key)) for key in ("k/b", "k/a", "k/b", "z")]
    expected = sorted(ids[:3], key=lambda kv: kv[0])  # by key, then by age
    seen: list[tuple[str, str]] = []
    params = {"uploads": "", "prefix": "k/", "max-uploads": "2"}
    for _ in range(3):
        async with http.get(f"/{bkt}", params=params) as r:
            root = ET.fromstring(await r.text())
        seen += [
            (u.findtext(f"{S3}Key") or "", u.findtext(f"{S3}UploadId") or "")
            for u in root.iter(f"{S3}Upload")
        ]
        if root.findtext(f"{S3}IsTruncated") != "true":
            break
        params["key-marker"] = root.findtext(f"{S3}NextKeyMarker") or ""
        params["upload-id-marker"] = root.findtext(f"{S3}NextUploadIdMarker") or ""
    assert seen == expected


@pytest.mark.asyncio
async def test_list_objects(http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    # GET /bucket lists, as GCS's XML API does for S3 clients (it was an empty
    # ListBucketResult whatever the bucket held).
    for name in ("a/1", "a/2", "b", "c/d/e"):
        emu.store.put(bkt, name, b"x")
    async with http.get(f"/{bkt}", params={"delimiter": "/"}) as r:
        root = ET.fromstring(await r.text())
    assert [k.text for k in root.iter(f"{S3}Key")] == ["b"]
    assert root.find(f"{S3}Contents/{S3}ChecksumAlgorithm") is None  # S3's, not GCS's
    prefixes = [p.findtext(f"{S3}Prefix") for p in root.iter(f"{S3}CommonPrefixes")]
    assert prefixes == ["a/", "c/"]
    seen: list[str | None] = []
    params = {"list-type": "2", "max-keys": "3"}
    while True:
        async with http.get(f"/{bkt}", params=params) as r:
            root = ET.fromstring(await r.text())
        seen += [k.text for k in root.iter(f"{S3}Key")]
        if root.findtext(f"{S3}IsTruncated") != "true":
            break
        params["continuation-token"] = root.findtext(f"{S3}NextContinuationToken") or ""
    assert seen == ["a/1", "a/2", "b", "c/d/e"]
    async with http.head(f"/{bkt}") as r:
        assert r.status == 200
    async with http.get("/no-such-bucket-xyz") as r:
        assert r.status == 404
        assert_xml_error(await r.text(), "NoSuchBucket")


@pytest.mark.asyncio
async def test_conditional_reads(http: aiohttp.ClientSession, bkt: str) -> None:
    # GET Object honours If-Match / If-None-Match and If-(Un)Modified-Since.
    async with http.put(f"/{bkt}/c", data=b"conditional") as r:
        etag = r.headers["ETag"]
    async with http.get(f"/{bkt}/c", headers={"If-None-Match": etag}) as r:
        assert r.status == 304 and await r.read() == b""
    async with http.get(f"/{bkt}/c", headers={"If-Match": '"0123"'}) as r:
        assert r.status == 412
        assert_xml_error(await r.text(), "PreconditionFailed")
    async with http.head(f"/{bkt}/c", headers={"If-Match": '"0123"'}) as r:
        assert r.status == 412
    async with http.get(f"/{bkt}/c", headers={"If-Match": etag}) as r:
        assert r.status == 200 and await r.read() == b"conditional"
    old = "Sat, 01 Jan 2000 00:00:00 GMT"
    async with http.get(f"/{bkt}/c", headers={"If-Unmodified-Since": old}) as r:
        assert r.status == 412
    async with http.get(f"/{bkt}/c", headers={"If-Modified-Since": old}) as r:
        assert r.status == 200
