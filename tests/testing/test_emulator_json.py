"""The emulator's JSON API, checked with plain aiohttp (not the aioflux client)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import google_crc32c
import pytest

from aioflux.testing import Emulator, running_emulator


def b64crc(data: bytes) -> str:
    return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


def b64md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with running_emulator() as emulator:
        yield emulator


@pytest.fixture
def bkt(emu: Emulator) -> str:
    return emu.create_bucket(f"json-{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def http(emu: Emulator) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=emu.endpoint) as session:
        yield session


def opath(bucket: str, name: str) -> str:
    return f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}"


async def upload(http: aiohttp.ClientSession, bucket: str, name: str, data: bytes) -> Any:
    async with http.post(
        f"/upload/storage/v1/b/{bucket}/o",
        params={"uploadType": "media", "name": name},
        data=data,
    ) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def assert_gcs_error(doc: Any, code: int, reason: str) -> None:
    assert set(doc) == {"error"}
    err = doc["error"]
    assert err["code"] == code
    assert isinstance(err["message"], str) and err["message"]
    assert err["errors"] == [{"message": err["message"], "domain": "global", "reason": reason}]


# -- buckets --------------------------------------------------------------


@pytest.mark.asyncio
async def test_bucket_lifecycle_and_iam(http: aiohttp.ClientSession) -> None:
    name = f"bk-{uuid.uuid4().hex[:10]}"
    async with http.post("/storage/v1/b", params={"project": "p"}, json={"name": name}) as r:
        assert r.status == 200
        assert (await r.json())["name"] == name
    async with http.post("/storage/v1/b", params={"project": "p"}, json={"name": name}) as r:
        assert r.status == 409
        assert_gcs_error(await r.json(), 409, "conflict")
    async with http.get(f"/storage/v1/b/{name}") as r:
        assert (await r.json())["kind"] == "storage#bucket"
    async with http.get("/storage/v1/b", params={"project": "p"}) as r:
        assert name in [b["name"] for b in (await r.json())["items"]]
    perms = [("permissions", "storage.objects.get"), ("permissions", "storage.objects.list")]
    async with http.get(f"/storage/v1/b/{name}/iam/testPermissions", params=perms) as r:
        doc = await r.json()
    assert doc == {
        "kind": "storage#testIamPermissionsResponse",
        "permissions": ["storage.objects.get", "storage.objects.list"],
    }
    async with http.delete(f"/storage/v1/b/{name}") as r:
        assert r.status == 204
    async with http.get(f"/storage/v1/b/{name}") as r:
        assert r.status == 404
        assert_gcs_error(await r.json(), 404, "notFound")


# -- listing --------------------------------------------------------------


@pytest.fixture
def listing_bucket(emu: Emulator, bkt: str) -> str:
    # Written straight into the store: 2500 uploads over HTTP would only slow the test.
    for i in range(2500):
        emu.store.put(bkt, f"data/{i:05d}", b"x" * (i % 7))
    for name in ("dir/a/1", "dir/a/2", "dir/b/1", "dir/c", "dir/d/", "top"):
        emu.store.put(bkt, name, b"y")
    return bkt


async def list_all(http: aiohttp.ClientSession, bucket: str, **params: str) -> list[Any]:
    pages: list[Any] = []
    token = None
    while True:
        query = dict(params)
        if token:
            query["pageToken"] = token
        async with http.get(f"/storage/v1/b/{bucket}/o", params=query) as r:
            assert r.status == 200, await r.text()
            page = await r.json()
        pages.append(page)
        token = page.get("nextPageToken")
        if not token:
            return pages


@pytest.mark.asyncio
async def test_list_pages_are_capped_at_1000(
    http: aiohttp.ClientSession, listing_bucket: str
) -> None:
    pages = await list_all(http, listing_bucket, prefix="data/", maxResults="5000")
    assert [len(p["items"]) for p in pages] == [1000, 1000, 500]
    names = [i["name"] for p in pages for i in p["items"]]
    assert names == [f"data/{i:05d}" for i in range(2500)]
    item = pages[0]["items"][3]
    assert item["size"] == "3" and item["bucket"] == listing_bucket
    assert item["crc32c"] == b64crc(b"xxx") and item["md5Hash"] == b64md5(b"xxx")
    assert item["generation"].isdigit() and item["metageneration"] == "1"


@pytest.mark.asyncio
async def test_list_max_results_and_offsets(
    http: aiohttp.ClientSession, listing_bucket: str
) -> None:
    pages = await list_all(
        http,
        listing_bucket,
        startOffset="data/00100",
        endOffset="data/00350",
        maxResults="100",
    )
    assert [len(p["items"]) for p in pages] == [100, 100, 50]
    names = [i["name"] for p in pages for i in p["items"]]
    assert names[0] == "data/00100" and names[-1] == "data/00349"


@pytest.mark.asyncio
async def test_list_prefix_delimiter(http: aiohttp.ClientSession, listing_bucket: str) -> None:
    (page,) = await list_all(http, listing_bucket, delimiter="/")
    assert page["prefixes"] == ["data/", "dir/"]
    assert [i["name"] for i in page["items"]] == ["top"]
    (page,) = await list_all(http, listing_bucket, prefix="dir/", delimiter="/")
    assert page["prefixes"] == ["dir/a/", "dir/b/", "dir/d/"]
    assert [i["name"] for i in page["items"]] == ["dir/c"]
    (page,) = await list_all(
        http, listing_bucket, prefix="dir/", delimiter="/", includeTrailingDelimiter="true"
    )
    assert [i["name"] for i in page["items"]] == ["dir/c", "dir/d/"]
    # maxResults counts prefixes too, and a token resumes after a whole prefix.
    pages = await list_all(http, listing_bucket, prefix="dir/", delimiter="/", maxResults="1")
    seen = [(p.get("prefixes", []), [i["name"] for i in p.get("items", [])]) for p in pages]
    assert seen == [(["dir/a/"], []), (["dir/b/"], []), ([], ["dir/c"]), (["dir/d/"], [])]


@pytest.mark.asyncio
async def test_list_fields_trimming(http: aiohttp.ClientSession, listing_bucket: str) -> None:
    fields = "items(name,size,generation,crc32c),nextPageToken,prefixes"
    async with http.get(
        f"/storage/v1/b/{listing_bucket}/o",
        params={"prefix": "data/", "maxResults": "2", "fields": fields},
    ) as r:
        page = await r.json()
    assert set(page) == {"items", "nextPageToken"}
    assert [set(i) for i in page["items"]] == [{"name", "size", "generation", "crc32c"}] * 2


@pytest.mark.asyncio
async def test_list_bad_token_and_missing_bucket(http: aiohttp.ClientSession, bkt: str) -> None:
    async with http.get(f"/storage/v1/b/{bkt}/o", params={"pageToken": "!!!"}) as r:
        assert r.status == 400
    async with http.get("/storage/v1/b/no-such-bucket-x/o") as r:
        assert r.status == 404
        assert_gcs_error(await r.json(), 404, "notFound")


@pytest.mark.asyncio
async def test_list_filters_the_emulator_lacks_are_refused(http: aiohttp.ClientSession,
                                                          bkt: str) -> None:
    # GCS would list other objects for these: an answer ignoring them misleads.
    await upload(http, bkt, "a.txt", b"x")
    await upload(http, bkt, "b.bin", b"x")
    url = f"/storage/v1/b/{bkt}/o"
    for name, value in (("matchGlob", "**.txt"), ("filter", 'contexts."k"="v"'),
                        ("softDeleted", "true")):
        async with http.get(url, params={name: value}) as r:
            assert r.status == 400
            doc = await r.json()
            assert_gcs_error(doc, 400, "invalid")
            assert doc["error"]["message"].startswith(f"{name} is not implemented")
    # These list the same objects here: no noncurrent or soft-deleted ones.
    for name, value in (("versions", "true"), ("softDeleted", "false"),
                        ("includeFoldersAsPrefixes", "true")):
        async with http.get(url, params={name: value, "delimiter": "/"}) as r:
            assert [i["name"] for i in (await r.json())["items"]] == ["a.txt", "b.bin"]


@pytest.mark.asyncio
async def test_json_is_indented_unless_prettyprint_false(
    http: aiohttp.ClientSession, emu: Emulator, bkt: str
) -> None:
    # GCS's default is prettyPrint=true; clients that parse a lot ask for
    # compact bodies. The same document either way, and object bytes that
    # happen to be JSON are never reformatted.
    payload = b'{"a":1,"b":[2,3]}'
    async with http.post(f"/upload/storage/v1/b/{bkt}/o", data=payload,
                         params={"uploadType": "media", "name": "doc.json"},
                         headers={"Content-Type": "application/json"}) as r:
        assert r.status == 200 and (await r.json())["contentType"] == "application/json"
    path = f"/storage/v1/b/{bkt}/o"
    fields = {"fields": "items(name,size,generation,crc32c)"}  # as a listing asks
    before = emu.stats["pretty_printed"]
    async with http.get(path, params=fields) as r:
        pretty = await r.read()
        assert r.headers["Content-Length"] == str(len(pretty))
    async with http.get(path, params={**fields, "prettyPrint": "false"}) as r:
        compact = await r.read()
    assert emu.stats["pretty_printed"] == before + 1
    assert b'\n  "items": [' in pretty and b"\n" not in compact
    assert json.loads(pretty) == json.loads(compact)
    assert len(pretty) > len(compact) * 1.4
    async with http.get(opath(bkt, "doc.json"), params={"alt": "media"}) as r:
        assert await r.read() == payload
    async with http.get(f"/download{opath(bkt, 'doc.json')}") as r:
        assert await r.read() == payload
    async with http.get(opath(bkt, "missing")) as r:
        assert r.status == 404 and b"\n" in await r.read()
    async with http.get(opath(bkt, "missing"), params={"prettyPrint": "false"}) as r:
        body = await r.read()
        assert r.status == 404 and b"\n" not in body
        assert_gcs_error(json.loads(body), 404, "notFound")


# -- reads ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_metadata_and_media_with_ranges(http: aiohttp.ClientSession, bkt: str) -> None:
    data = bytes(range(256)) * 40
    name = "dir/sub dir/obj%1?.bin"
    meta = await upload(http, bkt, name, data)
    async with http.get(opath(bkt, name)) as r:
        doc = await r.json()
    assert doc["name"] == name and doc["size"] == str(len(data))
    assert doc["crc32c"] == b64crc(data) and doc["md5Hash"] == b64md5(data)
    # google-cloud-storage downloads from mediaLink verbatim: it must be absolute.
    async with http.get(doc["mediaLink"]) as r:
        assert await r.read() == data
    async with http.get(f"/download{opath(bkt, name)}", params={"alt": "media"}) as r:
        assert r.status == 200 and await r.read() == data
        assert r.headers["x-goog-hash"] == f"crc32c={b64crc(data)},md5={b64md5(data)}"
        assert r.headers["x-goog-generation"] == meta["generation"]
    cases = {
        "bytes=10-19": (10, 20),
        "bytes=10000-": (10000, len(data)),
        "bytes=-100": (len(data) - 100, len(data)),
        "bytes=10200-999999": (10200, len(data)),
    }
    for header, (start, end) in cases.items():
        async with http.get(
            opath(bkt, name), params={"alt": "media"}, headers={"Range": header}
        ) as r:
            assert r.status == 206, header
            assert await r.read() == data[start:end], header
            assert r.headers["Content-Range"] == f"bytes {start}-{end - 1}/{len(data)}"
            assert r.headers["x-goog-hash"].startswith(f"crc32c={b64crc(data)}")
    headers = {"Range": f"bytes={len(data)}-"}
    async with http.get(opath(bkt, name), params={"alt": "media"}, headers=headers) as r:
        assert r.status == 416
        assert_gcs_error(await r.json(), 416, "requestedRangeNotSatisfiable")


@pytest.mark.asyncio
async def test_a_range_of_an_empty_object_is_416(http: aiohttp.ClientSession, bkt: str) -> None:
    # GCS answers 416 "bytes */0" to bytes=0- on an empty object (google-cloud-go
    # #242): a reader that always asks for a range must handle it. A non-zero
    # suffix is satisfiable (RFC 9110) and gets the whole, empty, object.
    await upload(http, bkt, "empty", b"")
    for header in ("bytes=0-", "bytes=0-0", "bytes=5-10"):
        async with http.get(opath(bkt, "empty"), params={"alt": "media"},
                            headers={"Range": header}) as r:
            assert r.status == 416, header
            assert r.headers["Content-Range"] == "bytes */0"
            assert_gcs_error(await r.json(), 416, "requestedRangeNotSatisfiable")
    async with http.get(opath(bkt, "empty"), params={"alt": "media"},
                        headers={"Range": "bytes=-5"}) as r:
        assert r.status == 200 and await r.read() == b""
    async with http.get(opath(bkt, "empty"), params={"alt": "media"}) as r:
        assert r.status == 200 and await r.read() == b""


@pytest.mark.asyncio
async def test_read_preconditions(http: aiohttp.ClientSession, bkt: str) -> None:
    gen = (await upload(http, bkt, "o", b"abc"))["generation"]
    url = opath(bkt, "o")
    async with http.get(url, params={"alt": "media", "generation": gen}) as r:
        assert r.status == 200
    async with http.get(url, params={"alt": "media", "generation": "1"}) as r:
        assert r.status == 404
    async with http.get(url, params={"alt": "media", "ifGenerationMatch": "1"}) as r:
        assert r.status == 412
        assert_gcs_error(await r.json(), 412, "conditionNotMet")
    async with http.get(url, params={"ifGenerationNotMatch": gen}) as r:
        assert r.status == 304
    async with http.get(url, params={"ifMetagenerationMatch": "2"}) as r:
        assert r.status == 412
    async with http.get(opath(bkt, "missing")) as r:
        assert r.status == 404
        doc = await r.json()
    assert_gcs_error(doc, 404, "notFound")
    assert doc["error"]["message"] == f"No such object: {bkt}/missing"


# -- uploads --------------------------------------------------------------


@pytest.mark.asyncio
async def test_multipart_upload_with_metadata(http: aiohttp.ClientSession, bkt: str) -> None:
    data = b"\r\n--not-the-boundary\r\n" + bytes(range(256)) * 8
    meta = {"name": "mp/obj", "contentType": "text/x-test", "metadata": {"k": "v"}}
    with aiohttp.MultipartWriter("related") as mp:
        mp.append_json(meta)
        mp.append(data, {"Content-Type": "text/x-test"})
    async with http.post(
        f"/upload/storage/v1/b/{bkt}/o", params={"uploadType": "multipart"}, data=mp
    ) as r:
        assert r.status == 200, await r.text()
        doc = await r.json()
    assert doc["name"] == "mp/obj" and doc["metadata"] == {"k": "v"}
    assert doc["contentType"] == "text/x-test" and doc["size"] == str(len(data))
    async with http.get(opath(bkt, "mp/obj"), params={"alt": "media"}) as r:
        assert await r.read() == data
        assert r.headers["Content-Type"] == "text/x-test"


@pytest.mark.asyncio
async def test_upload_hash_mismatch_stores_nothing(http: aiohttp.ClientSession, bkt: str) -> None:
    bad = b64crc(b"other")
    async with http.post(
        f"/upload/storage/v1/b/{bkt}/o",
        params={"uploadType": "media", "name": "h"},
        data=b"payload",
        headers={"x-goog-hash": f"crc32c={bad}"},
    ) as r:
        assert r.status == 400
        assert_gcs_error(await r.json(), 400, "invalid")
    with aiohttp.MultipartWriter("related") as mp:
        mp.append_json({"name": "h", "md5Hash": b64md5(b"other")})
        mp.append(b"payload")
    async with http.post(
        f"/upload/storage/v1/b/{bkt}/o", params={"uploadType": "multipart"}, data=mp
    ) as r:
        assert r.status == 400
    async with http.get(opath(bkt, "h")) as r:
        assert r.status == 404
    headers = {"x-goog-hash": f"crc32c={b64crc(b'payload')},md5={b64md5(b'payload')}"}
    async with http.post(
        f"/upload/storage/v1/b/{bkt}/o",
        params={"uploadType": "media", "name": "h"},
        data=b"payload",
        headers=headers,
    ) as r:
        assert r.status == 200


@pytest.mark.asyncio
async def test_write_preconditions_and_generations(http: aiohttp.ClientSession, bkt: str) -> None:
    url = f"/upload/storage/v1/b/{bkt}/o"
    params = {"uploadType": "media", "name": "p", "ifGenerationMatch": "0"}
    async with http.post(url, params=params, data=b"1") as r:
        assert r.status == 200
        gen1 = int((await r.json())["generation"])
    async with http.post(url, params=params, data=b"2") as r:
        assert r.status == 412
        assert_gcs_error(await r.json(), 412, "conditionNotMet")
    params["ifGenerationMatch"] = str(gen1)
    async with http.post(url, params=params, data=b"2") as r:
        gen2 = int((await r.json())["generation"])
    assert gen2 > gen1
    async with http.delete(opath(bkt, "p"), params={"ifGenerationMatch": str(gen1)}) as r:
        assert r.status == 412
    async with http.delete(opath(bkt, "p"), params={"generation": str(gen2)}) as r:
        assert r.status == 204
    async with http.delete(opath(bkt, "p")) as r:
        assert r.status == 404


@pytest.mark.asyncio
async def test_if_generation_not_match_needs_a_live_object(http: aiohttp.ClientSession,
                                                           bkt: str) -> None:
    # GCS: "If no live object exists, the precondition fails", for any value.
    url = f"/upload/storage/v1/b/{bkt}/o"
    for value in ("123", "0"):
        params = {"uploadType": "media", "name": "absent", "ifGenerationNotMatch": value}
        async with http.post(url, params=params, data=b"x") as r:
            assert r.status == 412
            assert_gcs_error(await r.json(), 412, "conditionNotMet")
    await upload(http, bkt, "src", b"s")
    copy = f"{opath(bkt, 'src')}/copyTo/b/{bkt}/o/absent"
    async with http.post(copy, params={"ifGenerationNotMatch": "123"}) as r:
        assert r.status == 412
    async with http.get(opath(bkt, "absent")) as r:
        assert r.status == 404
    # With a live object of another generation, the write goes ahead.
    async with http.post(copy, params={"ifGenerationMatch": "0"}) as r:
        assert r.status == 200
    async with http.post(copy, params={"ifGenerationNotMatch": "123"}) as r:
        assert r.status == 200


@pytest.mark.asyncio
async def test_expect_100_continue(http: aiohttp.ClientSession, bkt: str) -> None:
    async with http.post(
        f"/upload/storage/v1/b/{bkt}/o",
        params={"uploadType": "media", "name": "e"},
        data=b"continue",
        expect100=True,
    ) as r:
        assert r.status == 200
        assert (await r.json())["size"] == "8"


@pytest.mark.asyncio
async def test_resumable_upload_in_chunks(http: aiohttp.ClientSession, bkt: str) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    chunk = 256 * 1024
    async with http.post(
        f"/upload/storage/v1/b/{bkt}/o",
        params={"uploadType": "resumable", "name": "res/obj"},
        json={"contentType": "application/x-r", "metadata": {"a": "b"}, "crc32c": b64crc(data)},
    ) as r:
        assert r.status == 200
        session = r.headers["Location"]
    assert "upload_id=" in session
    for start in range(0, len(data) - chunk, chunk):
        headers = {"Content-Range": f"bytes {start}-{start + chunk - 1}/*"}
        async with http.put(session, data=data[start : start + chunk], headers=headers) as r:
            assert r.status == 308
            assert r.headers["Range"] == f"bytes=0-{start + chunk - 1}"
    # A status query, then a resend of an already committed chunk (ignored).
    async with http.put(session, headers={"Content-Range": "bytes */*"}) as r:
        assert r.status == 308 and r.headers["Range"] == f"bytes=0-{len(data) - chunk - 1}"
    async with http.put(
        session, data=data[:chunk], headers={"Content-Range": f"bytes 0-{chunk - 1}/*"}
    ) as r:
        assert r.status == 308
    async with http.get(opath(bkt, "res/obj")) as r:
        assert r.status == 404  # not visible before the final chunk
    last = len(data) - chunk
    headers = {"Content-Range": f"bytes {last}-{len(data) - 1}/{len(data)}"}
    async with http.put(session, data=data[last:], headers=headers) as r:
        assert r.status == 200
        doc = await r.json()
    assert doc["size"] == str(len(data)) and doc["crc32c"] == b64crc(data)
    assert doc["metadata"] == {"a": "b"} and doc["contentType"] == "application/x-r"
    async with http.put(session, headers={"Content-Range": f"bytes */{len(data)}"}) as r:
        assert r.status == 200
    async with http.get(opath(bkt, "res/obj"), params={"alt": "media"}) as r:
        assert await r.read() == data


@pytest.mark.asyncio
async def test_resumable_chunks_follow_the_256_kib_rule(
        http: aiohttp.ClientSession, bkt: str) -> None:
    # Real GCS: a non-final chunk under 256 KiB is a 400; of a longer one that
    # is not a multiple of 256 KiB only the multiple is persisted (the 308's
    # Range says so, the client resends the rest); a chunk past what the
    # session holds is a 503.
    kib256 = 256 * 1024
    data = bytes(range(256)) * (3 * kib256 // 256 + 40)
    async with http.post(f"/upload/storage/v1/b/{bkt}/o",
                         params={"uploadType": "resumable", "name": "chunky"}) as r:
        session = r.headers["Location"]
    async with http.put(session, data=data[:100_000],
                        headers={"Content-Range": "bytes 0-99999/*"}) as r:
        assert r.status == 400
        doc = await r.json()
    assert_gcs_error(doc, 400, "invalid")
    assert "equal or greater than 262144, except for the final request" in (
        doc["error"]["message"])
    async with http.put(session, headers={"Content-Range": "bytes */*"}) as r:
        assert r.status == 308 and "Range" not in r.headers  # nothing persisted
    first = kib256 + 1000
    async with http.put(session, data=data[:first],
                        headers={"Content-Range": f"bytes 0-{first - 1}/{len(data)}"}) as r:
        assert r.status == 308
        assert r.headers["Range"] == f"bytes=0-{kib256 - 1}"  # rounded down
    async with http.put(session, data=data[first:first + kib256],
                        headers={"Content-Range": f"bytes {first}-{first + kib256 - 1}/*"}) as r:
        assert r.status == 503  # starts past the 262144 bytes persisted
    async with http.put(session, headers={"Content-Range": "bytes */*"}) as r:
        assert r.status == 308 and r.headers["Range"] == f"bytes=0-{kib256 - 1}"
    # The final chunk may have any size; the object is exactly the bytes sent.
    rest = f"bytes {kib256}-{len(data) - 1}/{len(data)}"
    async with http.put(session, data=data[kib256:], headers={"Content-Range": rest}) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["crc32c"] == b64crc(data)
    async with http.get(opath(bkt, "chunky"), params={"alt": "media"}) as r:
        assert await r.read() == data


@pytest.mark.asyncio
async def test_resumable_final_request_checks_its_x_goog_hash(
        http: aiohttp.ClientSession, bkt: str) -> None:
    kib256 = 256 * 1024
    data = bytes(range(256)) * (kib256 // 256 + 7)
    whole = {"X-Goog-Hash": f"crc32c={b64crc(data)}"}
    wrong = {"X-Goog-Hash": f"crc32c={b64crc(data + b'!')}"}
    for name, hashes, status in (("bad", wrong, 400), ("good", whole, 200)):
        async with http.post(f"/upload/storage/v1/b/{bkt}/o",
                             params={"uploadType": "resumable", "name": name}) as r:
            session = r.headers["Location"]
        # A non-final chunk may carry the whole object's hash (aioflux sends it).
        first = {"Content-Range": f"bytes 0-{kib256 - 1}/{len(data)}", **whole}
        async with http.put(session, data=data[:kib256], headers=first) as r:
            assert r.status == 308
        last = {"Content-Range": f"bytes {kib256}-{len(data) - 1}/{len(data)}", **hashes}
        async with http.put(session, data=data[kib256:], headers=last) as r:
            assert r.status == status, name
            if status == 400:
                assert_gcs_error(await r.json(), 400, "invalid")
        async with http.get(opath(bkt, name), params={"alt": "media"}) as r:
            assert r.status == (404 if status == 400 else 200)
    async with http.put(session, headers={"Content-Range": f"bytes */{len(data)}"}) as r:
        assert r.status == 200  # the finished session answers with its object


@pytest.mark.asyncio
async def test_object_names_gcs_refuses(http: aiohttp.ClientSession, bkt: str) -> None:
    # Object naming requirements: 1-1024 bytes of UTF-8, no CR or LF, not "."
    # or "..", not under ".well-known/acme-challenge/".
    url = f"/upload/storage/v1/b/{bkt}/o"
    bad = ["a\nb", "a\rb", ".", "..", ".well-known/acme-challenge/x", "x" * 1025, "é" * 513]
    for name in bad:
        async with http.post(url, params={"uploadType": "media", "name": name},
                             data=b"x") as r:
            assert r.status == 400, name
            assert_gcs_error(await r.json(), 400, "invalid")
        async with http.post(url, params={"uploadType": "resumable", "name": name}) as r:
            assert r.status == 400, name
    for name in ("x" * 1024, "é" * 512, "a/./b", "..a"):
        await upload(http, bkt, name, b"fine")
    await upload(http, bkt, "src", b"s")
    async with http.post(f"{opath(bkt, 'src')}/copyTo/b/{bkt}/o/{quote('a' * 1025)}") as r:
        assert r.status == 400
    newline = "a\nb"
    async with http.post(f"{opath(bkt, newline)}/compose",
                         json={"sourceObjects": [{"name": "src"}]}) as r:
        assert r.status == 400
    async with http.get(f"/storage/v1/b/{bkt}/o") as r:
        names = [i["name"] for i in (await r.json())["items"]]
    assert sorted(names) == sorted(["x" * 1024, "é" * 512, "a/./b", "..a", "src"])


@pytest.mark.asyncio
async def test_resumable_cancel_and_precondition(http: aiohttp.ClientSession, bkt: str) -> None:
    await upload(http, bkt, "exists", b"x")
    async with http.post(
        f"/upload/storage/v1/b/{bkt}/o",
        params={"uploadType": "resumable", "name": "exists", "ifGenerationMatch": "0"},
    ) as r:
        assert r.status == 412
    async with http.post(
        f"/upload/storage/v1/b/{bkt}/o", params={"uploadType": "resumable", "name": "c"}
    ) as r:
        session = r.headers["Location"]
    async with http.delete(session) as r:
        assert r.status == 499
    async with http.put(session, data=b"x", headers={"Content-Range": "bytes 0-0/1"}) as r:
        assert r.status == 404


# -- compose, rewrite, copy -----------------------------------------------


@pytest.mark.asyncio
async def test_compose(http: aiohttp.ClientSession, bkt: str) -> None:
    parts = [bytes([i]) * (i + 1) for i in range(32)]
    gens = [(await upload(http, bkt, f"c/{i}", p))["generation"] for i, p in enumerate(parts)]
    sources = [
        {"name": f"c/{i}", "generation": g, "objectPreconditions": {"ifGenerationMatch": g}}
        for i, g in enumerate(gens)
    ]
    body = {"sourceObjects": sources, "destination": {"contentType": "application/x-c"}}
    async with http.post(f"{opath(bkt, 'out')}/compose", json=body) as r:
        assert r.status == 200, await r.text()
        doc = await r.json()
    whole = b"".join(parts)
    assert doc["crc32c"] == b64crc(whole) and doc["componentCount"] == 32
    assert doc["size"] == str(len(whole)) and "md5Hash" not in doc
    async with http.get(opath(bkt, "out"), params={"alt": "media"}) as r:
        assert await r.read() == whole
    body = {"sourceObjects": [{"name": "c/0"}] * 33}
    async with http.post(f"{opath(bkt, 'out')}/compose", json=body) as r:
        assert r.status == 400
        doc = await r.json()
    assert_gcs_error(doc, 400, "invalid")
    assert doc["error"]["message"] == (
        "The number of source components provided (33) exceeds the maximum (32)"
    )
    body = {"sourceObjects": [{"name": "c/0", "objectPreconditions": {"ifGenerationMatch": "1"}}]}
    async with http.post(f"{opath(bkt, 'out')}/compose", json=body) as r:
        assert r.status == 412
    async with http.post(
        f"{opath(bkt, 'out')}/compose", json={"sourceObjects": [{"name": "nope"}]}
    ) as r:
        assert r.status == 404
    params = {"ifGenerationMatch": "0"}
    body = {"sourceObjects": [{"name": "c/0"}]}
    async with http.post(f"{opath(bkt, 'out')}/compose", json=body, params=params) as r:
        assert r.status == 412


@pytest.mark.asyncio
async def test_rewrite_and_copy(http: aiohttp.ClientSession, emu: Emulator, bkt: str) -> None:
    other = emu.create_bucket(f"dst-{uuid.uuid4().hex[:12]}")
    data = b"rewrite me" * 100
    await upload(http, bkt, "src/o", data)
    url = f"{opath(bkt, 'src/o')}/rewriteTo/b/{other}/o/{quote('dst/o', safe='')}"
    async with http.post(url) as r:
        doc = await r.json()
    assert doc["kind"] == "storage#rewriteResponse" and doc["done"] is True
    assert doc["totalBytesRewritten"] == doc["objectSize"] == str(len(data))
    assert doc["resource"]["bucket"] == other and doc["resource"]["crc32c"] == b64crc(data)
    url = f"{opath(bkt, 'src/o')}/copyTo/b/{bkt}/o/copy"
    async with http.post(url) as r:
        doc = await r.json()
    assert doc["name"] == "copy" and doc["md5Hash"] == b64md5(data)
    async with http.get(opath(other, "dst/o"), params={"alt": "media"}) as r:
        assert await r.read() == data


@pytest.mark.asyncio
async def test_move_renames_within_the_bucket(http: aiohttp.ClientSession, bkt: str) -> None:
    # objects.move, which gcsfs's mv (torch's FsspecWriter's rename) uses.
    data = b"move me" * 100
    await upload(http, bkt, "a/src", data)
    await upload(http, bkt, "taken", b"x")
    url = f"{opath(bkt, 'a/src')}/moveTo/o/{quote('b/dst', safe='')}"
    async with http.post(url, params={"ifGenerationMatch": "0"}) as r:
        doc = await r.json()
    assert (doc["name"], doc["size"], doc["crc32c"]) == ("b/dst", str(len(data)), b64crc(data))
    async with http.get(opath(bkt, "b/dst"), params={"alt": "media"}) as r:
        assert await r.read() == data
    async with http.get(opath(bkt, "a/src")) as r:
        assert r.status == 404  # gone
    async with http.post(url) as r:
        assert r.status == 404  # no source
    await upload(http, bkt, "a/src", data)
    taken = f"{opath(bkt, 'a/src')}/moveTo/o/taken"
    async with http.post(taken, params={"ifGenerationMatch": "0"}) as r:
        assert r.status == 412  # the destination exists
    async with http.post(taken, params={"ifSourceGenerationMatch": "1"}) as r:
        assert r.status == 412  # not that source generation
    async with http.post(f"{opath(bkt, 'a/src')}/moveTo/o/{quote('a/src', safe='')}") as r:
        assert r.status == 400  # onto itself
    async with http.get(opath(bkt, "a/src")) as r:
        assert r.status == 200  # a refused move leaves the source


@pytest.mark.asyncio
async def test_patch_bumps_metageneration(http: aiohttp.ClientSession, bkt: str) -> None:
    await upload(http, bkt, "m", b"x")
    async with http.patch(opath(bkt, "m"), json={"metadata": {"a": "1"}}) as r:
        doc = await r.json()
    assert doc["metageneration"] == "2" and doc["metadata"] == {"a": "1"}
    async with http.patch(opath(bkt, "m"), params={"ifMetagenerationMatch": "1"}, json={}) as r:
        assert r.status == 412


async def test_stats_count_operations(emu: Emulator, http: aiohttp.ClientSession,
                                      bkt: str) -> None:
    # Each kind of request once, here: under xdist this module's other tests
    # may run in the other worker, against its own emulator.
    before = dict(emu.stats)
    await upload(http, bkt, "a", b"a")
    await upload(http, bkt, "b", b"b")
    body = {"sourceObjects": [{"name": "a"}, {"name": "b"}]}
    async with http.post(f"{opath(bkt, 'ab')}/compose", json=body) as r:
        assert r.status == 200, await r.text()
    async with http.get(opath(bkt, "ab"), params={"alt": "media"}) as r:
        assert await r.read() == b"ab"
    async with http.get(opath(bkt, "ab")) as r:
        assert (await r.json())["size"] == "2"
    async with http.get(f"/storage/v1/b/{bkt}/o") as r:
        assert [o["name"] for o in (await r.json())["items"]] == ["a", "ab", "b"]
    async with http.delete(opath(bkt, "a")) as r:
        assert r.status == 204
    counted = {op: emu.stats[op] - before.get(op, 0) for op in
               ("upload", "compose", "get_media", "get_metadata", "list", "delete")}
    assert counted == {"upload": 2, "compose": 1, "get_media": 1, "get_metadata": 1,
                       "list": 1, "delete": 1}
    assert emu.stats["requests"] - before.get("requests", 0) == 7
    json.dumps(dict(emu.stats))  # plain counters, serializable for reports


def test_pytest_plugin_fixtures(tmp_path: Path) -> None:
    test_file = tmp_path / "test_uses_plugin.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import urllib.request
            pytest_plugins = ["aioflux.testing.pytest_plugin"]
            seen = []

            def test_one(gcs_emulator, gcs_bucket):
                seen.append(gcs_bucket)
                url = f"{gcs_emulator.endpoint}/storage/v1/b/{gcs_bucket}"
                assert urllib.request.urlopen(url).status == 200

            def test_two(gcs_emulator, gcs_bucket):
                assert gcs_bucket not in seen
                assert seen[0] not in gcs_emulator.store.buckets  # cleaned up
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_pytest_plugin_under_xdist_cleans_up_after_failing_tests(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(
        """
        import os, threading
        pytest_plugins = ["aioflux.testing.pytest_plugin"]

        def pytest_sessionfinish(session):
            # After the session fixtures' teardown: what each worker left running.
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            names = [t.name for t in threading.enumerate()]
            with open(f"threads-{worker}.txt", "w") as f:
                f.write("\\n".join(names))
        """))
    (tmp_path / "test_uses_plugin.py").write_text(textwrap.dedent(
        """
        import os
        import pytest
        from aioflux import Client
        from aioflux.testing import Faults

        @pytest.mark.parametrize("i", range(6))
        def test_write(gcs_emulator, gcs_bucket, i):
            assert gcs_emulator.faults == Faults()  # none leaked from a failed test
            assert list(gcs_emulator.store.buckets) == [gcs_bucket]  # the others deleted
            with Client(endpoint=gcs_emulator.endpoint) as client:
                client.write(gcs_bucket, "o", b"x")
            if i % 2:
                gcs_emulator.faults = Faults(p_503=1.0)
                raise AssertionError(f"fails on {os.environ['PYTEST_XDIST_WORKER']}")
        """))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "-p", "xdist", "test_uses_plugin.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "3 failed, 3 passed" in result.stdout, result.stdout + result.stderr
    assert "fails on gw" in result.stdout  # the tests ran in xdist's workers
    left = {p.name: p.read_text().split("\n") for p in tmp_path.glob("threads-gw*.txt")}
    assert set(left) == {"threads-gw0.txt", "threads-gw1.txt"}, left
    assert not [name for names in left.values() for name in names
                if name.startswith("aioflux-emulator")], left
