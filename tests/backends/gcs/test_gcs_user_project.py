"""The user project on the wire, request by request (``MockTransport``).

A client given ``user_project=`` names it in every request, as
google-cloud-storage does: the JSON API's in the ``userProject`` query
parameter (metadata, listings, media reads, uploads in one request and
resumable ones, every chunk of a session whose URL the server gave without
it, compose, rewrite, delete, bucket creation), the XML API's in the
``x-goog-user-project`` header (each multipart call). A client given none
sends neither. The errors of a requester-pays bucket say what to set.
"""

from __future__ import annotations

import pytest

from aioflux import AsyncClient, ClientConfig, PermissionDenied, RetryPolicy
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._core.records.types import PartInfo
from aioflux.gcs._resumable import CHUNK_GRANULARITY
from aioflux.testing import MockRequest, MockResponse, MockTransport

ENDPOINT = "https://storage.example"
B = "bkt"
DATA = b"d" * 100
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.002))


def _resource(name: str, data: bytes = DATA) -> dict[str, str]:
    return {"bucket": B, "name": name, "size": str(len(data)), "generation": "7",
            "crc32c": encode_crc32c(crc32c(data))}


def _answer(request: MockRequest) -> MockResponse:
    """A GCS that answers whatever the client asks, plausibly."""
    params, path, method = request.params, request.url[len(ENDPOINT):], request.method
    name = path.rsplit("/", 1)[-1]
    if path.startswith("/storage/v1/") or path.startswith("/upload/storage/v1/"):
        if params.get("uploadType") == "resumable" and method == "POST":
            # A session URL without the query it was opened with.
            return MockResponse(200, {"Location": f"{ENDPOINT}/upload/storage/v1/b/{B}/o"
                                                  "?upload_id=session-1"})
        if "upload_id" in params:
            size = len(request.body)
            if request.headers.get("Content-Range", "").endswith(f"/{len(BIG)}"):
                return MockResponse.from_json(_resource("big", BIG))
            return MockResponse(308, {"Range": f"bytes=0-{size - 1}"})
        if params.get("alt") == "media":
            asked = request.headers.get("Range")
            if asked:
                first, last = (int(n) for n in asked.removeprefix("bytes=").split("-"))
                return MockResponse(206, {"Content-Range": f"bytes {first}-{last}/{len(DATA)}"},
                                    DATA[first:last + 1])
            return MockResponse(200, {"x-goog-hash": f"crc32c={encode_crc32c(crc32c(DATA))}"},
                                DATA)
        if method == "DELETE":
            return MockResponse(204)
        if path == "/storage/v1/b":
            return MockResponse.from_json({"name": "new-bucket"})
        if path == f"/storage/v1/b/{B}/o":
            return MockResponse.from_json({"items": [_resource("a")]})
        if "/rewriteTo/" in path:
            return MockResponse.from_json({"done": True, "resource": _resource("copied")})
        if path.endswith("/compose"):
            return MockResponse.from_json(_resource(path.split("/")[-2]))
        if params.get("uploadType") == "multipart":
            return MockResponse.from_json(_resource("written"))
        return MockResponse.from_json(_resource(name))
    # The XML API.
    if "uploads" in params and method == "POST":
        return MockResponse(200, {}, b"<InitiateMultipartUploadResult><UploadId>u1</UploadId>"
                                     b"</InitiateMultipartUploadResult>")
    if "uploads" in params:
        return MockResponse(200, {}, b"<ListMultipartUploadsResult><IsTruncated>false"
                                     b"</IsTruncated></ListMultipartUploadsResult>")
    if "partNumber" in params:
        return MockResponse(200, {"ETag": '"e1"'})
    if method == "POST":
        return MockResponse(200, {"x-goog-generation": "9"},
                            b"<CompleteMultipartUploadResult/>")
    if method == "GET":
        return MockResponse(200, {}, b"<ListPartsResult><IsTruncated>false</IsTruncated>"
                                     b"</ListPartsResult>")
    return MockResponse(204)


BIG = bytes(CHUNK_GRANULARITY) + b"tail"


async def _every_request(client: AsyncClient) -> None:
    await client.stat(B, "a")
    assert [o.name async for o in client.list_objects(B)] == ["a"]
    assert await client.read(B, "a") == DATA
    assert await client.read(B, "a", start=1, end=5, generation=7) is not None
    await client.write(B, "written", DATA, resumable=False)
    # A resumable session: its chunks go to the URL the server gave.
    from aioflux.gcs._resumable import ResumableUpload

    upload = ResumableUpload(client, B, "big", chunk_size=CHUNK_GRANULARITY)
    await upload.start()
    await upload.send(BIG[:CHUNK_GRANULARITY])
    await upload.finish(BIG[CHUNK_GRANULARITY:], crc32c=crc32c(BIG))
    await client.compose(B, "composite", ["a", "a"])
    await client.copy(B, "a", B, "copied")
    await client.delete(B, "a", generation=7)
    await client.create_bucket("new-bucket")
    upload_id = await client.initiate_multipart(B, "m")
    await client.upload_part(B, "m", upload_id, 1, DATA)
    await client.list_parts(B, "m", upload_id)
    await client.complete_multipart(B, "m", upload_id, [PartInfo(1, '"e1"', len(DATA))])
    await client.abort_multipart(B, "m", upload_id)
    await client.list_multipart_uploads(B)


def _is_json(request: MockRequest) -> bool:
    path = request.url[len(ENDPOINT):]
    return path.startswith(("/storage/v1/", "/upload/storage/v1/"))


async def test_every_json_request_names_the_user_project_and_every_xml_one_in_its_header(
) -> None:
    transport = MockTransport(_answer, config=CONFIG, endpoint=ENDPOINT)
    async with AsyncClient(transport=transport, endpoint=ENDPOINT,
                           user_project="payer-1") as client:
        await _every_request(client)
    json_requests = [r for r in transport.requests if _is_json(r)]
    xml_requests = [r for r in transport.requests if not _is_json(r)]
    assert len(json_requests) >= 12 and len(xml_requests) == 6
    for request in json_requests:
        assert request.params.get("userProject") == "payer-1", (request.method, request.url)
        assert "x-goog-user-project" not in request.headers
    # Session chunks included (the Location named no userProject).
    assert sum("upload_id" in r.params for r in json_requests) == 2
    for request in xml_requests:
        assert request.headers.get("x-goog-user-project") == "payer-1", request.url
        assert "userProject" not in request.params


async def test_a_client_without_a_user_project_names_none() -> None:
    transport = MockTransport(_answer, config=CONFIG, endpoint=ENDPOINT)
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        assert client.user_project is None
        await _every_request(client)
    assert all("userProject" not in r.params and "x-goog-user-project" not in r.headers
               for r in transport.requests)


@pytest.mark.parametrize(("answer", "lean"), [
    (MockResponse.from_json({"error": {
        "code": 400, "message": "Bucket is a requester pays bucket but no user project "
                                "provided.",
        "errors": [{"reason": "required",
                    "message": "Bucket is a requester pays bucket but no user project "
                               "provided."}]}}, 400), "json"),
    (MockResponse(400, {"Content-Type": "application/xml"},
                  b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>UserProjectMissing"
                  b"</Code><Message>Bucket is a Requester Pays bucket but no User Project "
                  b"provided.</Message></Error>"), "xml"),
])
async def test_a_requester_pays_refusal_is_permission_denied_saying_what_to_set(
        answer: MockResponse, lean: str) -> None:
    transport = MockTransport(lambda _request: answer, config=CONFIG, endpoint=ENDPOINT)
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        with pytest.raises(PermissionDenied) as caught:
            if lean == "json":
                await client.read(B, "o/x")
            else:
                await client.initiate_multipart(B, "o/x")
    exc = caught.value
    assert exc.status == 400 and exc.reason == "UserProjectMissing"
    assert exc.attempts == 1  # refused for good: not retried
    assert str(exc).startswith(("read gs://bkt/o/x failed: HTTP 400 UserProjectMissing",
                                "initiate multipart upload gs://bkt/o/x failed: HTTP 400"))
    assert "user_project=" in str(exc) and "--user-project" in str(exc)
    assert len(transport.requests) == 1


async def test_another_required_field_stays_an_invalid_request() -> None:
    from aioflux import InvalidRequest

    answer = MockResponse.from_json({"error": {"code": 400, "message": "Required",
                                               "errors": [{"reason": "required"}]}}, 400)
    transport = MockTransport(lambda _request: answer, config=CONFIG, endpoint=ENDPOINT)
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        with pytest.raises(InvalidRequest) as caught:
            await client.stat(B, "o")
    assert not isinstance(caught.value, PermissionDenied)
    assert "user_project" not in str(caught.value)

