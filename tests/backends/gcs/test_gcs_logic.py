"""The GCS client's logic without sockets: ``AsyncClient`` on ``aioflux.testing.MockTransport``.

Handlers, error mapping, retries and ``Retry-After``, preconditions, redirect
refusal, credentials for the endpoint only, checked media reads and the
resumable upload's status handling, each against scripted answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

import aioflux._core.settings.retry as retry_module
from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    Conflict,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    ObjectInfo,
    PermissionDenied,
    PreconditionFailed,
    ProtocolError,
    RateLimited,
    RetryPolicy,
    ServerError,
    StorageError,
    TransportError,
)
from aioflux._core.auth import AuthRequest, StaticTokenAuth
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._net.transport import Op
from aioflux.gcs._resumable import CHUNK_GRANULARITY, ResumableUpload
from aioflux.testing import MockRequest, MockResponse, MockTransport

ENDPOINT = "https://storage.example"
B = "bkt"
RETRY = RetryPolicy(max_attempts=4, initial_delay=0.001, max_delay=0.002)
CONFIG = ClientConfig(retry=RETRY)
Handler = Callable[[MockRequest], MockResponse]


def make(handler: Handler, *, auth: Any = None,
         config: ClientConfig = CONFIG) -> tuple[AsyncClient, MockTransport]:
    transport = MockTransport(handler, config=config, auth=auth, endpoint=ENDPOINT)
    return AsyncClient(transport=transport, endpoint=ENDPOINT), transport


def resource(name: str, data: bytes, generation: int = 7) -> dict[str, str]:
    return {"bucket": B, "name": name, "size": str(len(data)), "generation": str(generation),
            "crc32c": encode_crc32c(crc32c(data))}


def error(status: int, reason: str, headers: Any = ()) -> MockResponse:
    return MockResponse.from_json(
        {"error": {"code": status, "message": "details here", "errors": [{"reason": reason}]}},
        status, headers)


def script(*answers: MockResponse | BaseException) -> Handler:
    """Answer the requests in turn (an exception is raised, as a connection's)."""
    queue: Iterator[MockResponse | BaseException] = iter(answers)

    def handle(request: MockRequest) -> MockResponse:
        answer = next(queue)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return handle


def media(data: bytes, *, status: int = 200, headers: Any = (), body: bytes | None = None,
          generation: int = 5) -> MockResponse:
    base = {"x-goog-hash": f"crc32c={encode_crc32c(crc32c(data))},md5=xx",
            "x-goog-generation": str(generation),
            "x-goog-stored-content-length": str(len(data))}
    base.update(dict(headers))
    return MockResponse(status, base, data if body is None else body)


# -- JSON handlers ---------------------------------------------------------------------


async def test_stat_sends_a_json_get_and_parses_the_object() -> None:
    client, transport = make(script(MockResponse.from_json(
        {**resource("dir/a b", b"hello"), "metageneration": "2", "contentType": "text/x"})))
    async with client:
        info = await client.stat(B, "dir/a b")
    [request] = transport.requests
    assert (request.method, request.url) == ("GET", f"{ENDPOINT}/storage/v1/b/bkt/o/dir%2Fa%20b")
    assert request.params == {"prettyPrint": "false"} and request.body == b""
    assert (info.name, info.size, info.generation, info.metageneration, info.content_type) == (
        "dir/a b", 5, 7, 2, "text/x")
    assert info.crc32c == crc32c(b"hello")


async def test_a_body_that_is_not_a_json_object_is_a_protocol_error() -> None:
    client, transport = make(script(MockResponse(200, {"Content-Type": "text/html"},
                                                 b"<html>captive portal</html>")))
    async with client:
        with pytest.raises(ProtocolError, match=r"stat gs://bkt/o failed: HTTP 200 with a body "
                                                r"that is not a JSON object"):
            await client.stat(B, "o")
    assert len(transport.requests) == 1


async def test_listing_follows_page_tokens_and_sends_every_parameter() -> None:
    pages = [
        MockResponse.from_json({"items": [resource("p/a", b"1")], "prefixes": ["p/d/"],
                                "nextPageToken": "tok"}),
        MockResponse.from_json({"items": [resource("p/b", b"22")]}),
    ]
    client, transport = make(script(*pages))
    async with client:
        got = [page async for page in client.list(B, "p/", delimiter="/", start_offset="p/0",
                                                 end_offset="p/z", page_size=5)]
    first, second = transport.requests
    assert first.url == f"{ENDPOINT}/storage/v1/b/bkt/o"
    assert first.params == {"maxResults": "5", "prettyPrint": "false", "prefix": "p/",
                            "delimiter": "/", "startOffset": "p/0", "endOffset": "p/z",
                            "fields": "nextPageToken,prefixes,items(name,size,generation,"
                                      "crc32c)"}
    assert second.params == {**first.params, "pageToken": "tok"}
    assert [[o.name for o in p.objects] for p in got] == [["p/a"], ["p/b"]]
    assert [p.prefixes for p in got] == [["p/d/"], []]
    assert [p.next_page_token for p in got] == ["tok", None]


# -- error mapping -----------------------------------------------------------------------


@pytest.mark.parametrize(("status", "reason", "kind"), [
    (404, "notFound", NotFound),
    (412, "conditionNotMet", PreconditionFailed),
    (304, "notModified", PreconditionFailed),
    (401, "required", PermissionDenied),
    (403, "forbidden", PermissionDenied),
    (409, "conflict", Conflict),
    (400, "invalid", InvalidRequest),
    (416, "requestedRangeNotSatisfiable", InvalidRequest),
])
async def test_final_statuses_map_to_typed_errors_at_once(
        status: int, reason: str, kind: type[StorageError]) -> None:
    client, transport = make(script(error(status, reason)), auth=StaticTokenAuth("s3cr3t"))
    async with client:
        with pytest.raises(kind) as caught:
            await client.stat(B, "obj")
    exc = caught.value
    assert type(exc) is kind
    assert (exc.status, exc.reason, exc.operation, exc.bucket, exc.name, exc.attempts) == (
        status, reason, "stat", B, "obj", 1)
    assert str(exc) == f"stat gs://bkt/obj failed: HTTP {status} {reason}: details here"
    assert "s3cr3t" not in repr(exc.__dict__) + str(exc)
    assert len(transport.requests) == 1 and transport.stats.retries == 0


@pytest.mark.parametrize(("status", "kind"), [(429, RateLimited), (503, ServerError),
                                              (500, ServerError), (408, ServerError)])
async def test_transient_statuses_are_retried_and_counted(
        status: int, kind: type[StorageError]) -> None:
    answers = [error(status, "backendError"), error(status, "backendError"),
               MockResponse.from_json(resource("obj", b"x"))]
    client, transport = make(script(*answers))
    async with client:
        info = await client.stat(B, "obj")
    assert info.generation == 7
    assert len(transport.requests) == 3
    assert (transport.stats.requests, transport.stats.retries, transport.stats.failures) == (
        3, 2, 0)
    # ...and give up after max_attempts with the typed error (a throttle
    # too once the rate controller is off; with it on, a throttle is retried
    # until throttle_deadline: tests/core/rate/test_throttle.py).
    client, transport = make(script(*[error(status, "slowDown")] * 4),
                             config=CONFIG.replace(request_rate="off"))
    async with client:
        with pytest.raises(kind, match="gave up after 4 attempts") as caught:
            await client.stat(B, "obj")
    assert caught.value.attempts == 4 and len(transport.requests) == 4
    assert (transport.stats.retries, transport.stats.failures) == (3, 1)


async def test_connection_failures_are_retried_as_transport_errors() -> None:
    client, transport = make(script(aiohttp.ServerDisconnectedError(),
                                    MockResponse.from_json(resource("obj", b"x"))))
    async with client:
        assert (await client.stat(B, "obj")).size == 1
    assert transport.stats.retries == 1
    client, transport = make(script(*[asyncio.TimeoutError()] * 4))
    async with client:
        with pytest.raises(TransportError, match=r"stat gs://bkt/obj failed: timed out"):
            await client.stat(B, "obj")
    assert len(transport.requests) == 4


@pytest.fixture
def delays(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The retry loop's sleeps, recorded instead of slept."""
    slept: list[float] = []
    real = asyncio.sleep

    async def sleep(delay: float) -> None:
        slept.append(delay)
        await real(0)

    monkeypatch.setattr(retry_module, "asyncio", SimpleNamespace(sleep=sleep))
    return slept


async def test_retry_after_sets_the_delay_capped_by_the_policy(delays: list[float]) -> None:
    policy = RetryPolicy(max_attempts=5, initial_delay=0.001, max_delay=30, jitter=False)
    client, transport = make(script(
        error(429, "rateLimitExceeded", {"Retry-After": "7"}),
        error(503, "backendError", {"Retry-After": "3600"}),
        error(503, "backendError"),
        MockResponse.from_json(resource("obj", b"x"))),
        config=ClientConfig(retry=policy, request_rate="off"))
    async with client:
        await client.stat(B, "obj")
    # 7 s as asked, an hour capped at max_delay, then the policy's own backoff.
    assert delays == [7.0, 30.0, 0.004]
    assert transport.stats.retries == 3


async def test_the_final_error_keeps_retry_after(delays: list[float]) -> None:
    client, _ = make(script(*[error(429, "rateLimitExceeded", {"Retry-After": "0.5"})] * 4),
                     config=CONFIG.replace(request_rate="off"))
    async with client:
        with pytest.raises(RateLimited) as caught:
            await client.stat(B, "obj")
    assert caught.value.retry_after == 0.5  # type: ignore[attr-defined]
    assert delays == [RETRY.max_delay] * 3  # 0.5 s capped at this policy's max_delay


# -- redirects and credentials ------------------------------------------------------------


async def test_a_redirect_is_refused_and_nothing_goes_to_its_target() -> None:
    moved = MockResponse(302, {"Location": "https://elsewhere.example/steal"})
    client, transport = make(script(moved, moved), auth=StaticTokenAuth("tok"))
    async with client:
        with pytest.raises(ProtocolError, match="HTTP 302") as caught:
            await client.stat(B, "obj")
        assert caught.value.status == 302
        with pytest.raises(ProtocolError, match="HTTP 302"):
            await client.read(B, "obj")
    assert [r.url.split("/")[2] for r in transport.requests] == ["storage.example"] * 2


async def test_a_call_that_lets_the_session_follow_redirects_is_stopped_too() -> None:
    # Transport.run hands calls the session itself; the session refuses to
    # follow even when a call forgets allow_redirects=False.
    client, transport = make(script(MockResponse(307, {"Location": f"{ENDPOINT}.evil/x"})))

    async def call(session: aiohttp.ClientSession, headers: dict[str, str]) -> None:
        async with session.get(f"{ENDPOINT}/x", headers=headers) as resp:
            await resp.read()

    async with client:
        with pytest.raises(ProtocolError, match="HTTP 307: the API does not redirect"):
            await transport.run(Op("probe", B, "x"), "GET", f"{ENDPOINT}/x", call)
    assert [r.url for r in transport.requests] == [f"{ENDPOINT}/x"]


@pytest.mark.parametrize(("url", "credentials"), [
    (f"{ENDPOINT}/storage/v1/b", True),
    ("https://storage.example:443/x", True),
    ("https://STORAGE.example/x", True),
    ("http://storage.example/x", False),
    ("https://storage.example:8443/x", False),
    ("https://storage.example.evil.com/x", False),
    ("https://evil.com/storage.example/x", False),
])
async def test_authorization_goes_only_to_the_endpoint_origin(url: str,
                                                               credentials: bool) -> None:
    transport = MockTransport(script(MockResponse(200)), config=CONFIG,
                              auth=StaticTokenAuth("tok"), endpoint=ENDPOINT)

    async def drain(resp: aiohttp.ClientResponse) -> bytes:
        return await resp.read()

    await transport.request(Op("probe"), "GET", url, drain)
    await transport.aclose()
    [request] = transport.requests
    assert request.headers.get("Authorization") == ("Bearer tok" if credentials else None)


async def test_a_resumable_session_elsewhere_is_refused_before_any_chunk() -> None:
    client, transport = make(script(MockResponse(200, {"Location": "https://evil.example/u"})),
                             auth=StaticTokenAuth("tok"))
    async with client:
        with pytest.raises(StorageError, match="not on the endpoint's origin"):
            await client.write(B, "obj", b"data", resumable=True)
    assert [r.method for r in transport.requests] == ["POST"]


class RecordingAuth:
    """A request-aware Auth: signs method, URL, query and the body's SHA-256."""

    def __init__(self) -> None:
        self.seen: list[AuthRequest] = []

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        self.seen.append(request)
        query = "&".join(f"{k}={v}" for k, v in sorted(request.params.items()))
        return {"x-signed": f"{request.method} {request.url}?{query} "
                            f"{request.payload_sha256()}"}


async def test_a_request_aware_auth_sees_method_url_params_and_payload_hash() -> None:
    data = b"payload to sign" * 100
    auth = RecordingAuth()
    client, transport = make(script(MockResponse.from_json(resource("obj", data)),
                                    MockResponse.from_json(resource("obj", data))), auth=auth)
    async with client:
        await client.write(B, "obj", data, if_generation_match=0)
        await client.stat(B, "obj")
    upload, stat = transport.requests
    signed = auth.seen[0]
    assert (signed.method, signed.url) == ("POST", f"{ENDPOINT}/upload/storage/v1/b/bkt/o")
    assert dict(signed.params) == {"uploadType": "multipart", "prettyPrint": "false",
                                   "ifGenerationMatch": "0"}
    # The hash covers exactly the bytes that were sent.
    assert signed.payload_sha256() == hashlib.sha256(upload.body).hexdigest()
    assert upload.headers["x-signed"] == (
        f"POST {ENDPOINT}/upload/storage/v1/b/bkt/o?ifGenerationMatch=0&prettyPrint=false"
        f"&uploadType=multipart {hashlib.sha256(upload.body).hexdigest()}")
    assert stat.headers["x-signed"].endswith(hashlib.sha256(b"").hexdigest())
    assert auth.seen[1].method == "GET" and auth.seen[1].payload is None


# -- preconditions and writes ---------------------------------------------------------------


async def test_write_sends_the_precondition_and_the_crc32c() -> None:
    data = b"\x00\x01payload"
    client, transport = make(script(MockResponse.from_json(resource("obj", data, 9))))
    async with client:
        info = await client.write(B, "obj", data, if_generation_match=0, metadata={"k": "v"})
    [request] = transport.requests
    assert request.params["ifGenerationMatch"] == "0"
    boundary = request.headers["Content-Type"].partition("boundary=")[2]
    parts = request.body.split(f"--{boundary}".encode())
    meta = json.loads(parts[1].split(b"\r\n\r\n", 1)[1])
    assert meta == {"name": "obj", "contentType": "application/octet-stream",
                    "crc32c": encode_crc32c(crc32c(data)), "metadata": {"k": "v"}}
    assert parts[2].split(b"\r\n\r\n", 1)[1] == data + b"\r\n"
    assert info.generation == 9


async def test_a_failed_precondition_is_precondition_failed() -> None:
    client, transport = make(script(error(412, "conditionNotMet")))
    async with client:
        with pytest.raises(PreconditionFailed, match=r"write gs://bkt/obj failed: HTTP 412"):
            await client.write(B, "obj", b"x", if_generation_match=3)
    assert transport.requests[0].params["ifGenerationMatch"] == "3"


async def test_a_write_stored_with_other_bytes_is_deleted_that_generation_only() -> None:
    client, transport = make(script(
        MockResponse.from_json(resource("obj", b"other bytes", 11)), MockResponse(204)))
    async with client:
        with pytest.raises(ChecksumMismatch, match="the object was deleted"):
            await client.write(B, "obj", b"the bytes")
    delete = transport.requests[1]
    assert (delete.method, delete.url) == ("DELETE", f"{ENDPOINT}/storage/v1/b/bkt/o/obj")
    assert delete.params == {"generation": "11", "ifGenerationMatch": "11"}


async def test_compose_passes_source_and_destination_preconditions() -> None:
    a = ObjectInfo(B, "a", 1, 3, crc32c(b"A"))
    b = ObjectInfo(B, "b", 1, 4, crc32c(b"B"))
    client, transport = make(script(MockResponse.from_json(resource("ab", b"AB", 12))))
    async with client:
        info = await client.compose(B, "ab", [a, b, "c"], if_generation_match=0)
    [request] = transport.requests
    assert request.url == f"{ENDPOINT}/storage/v1/b/bkt/o/ab/compose"
    assert request.params["ifGenerationMatch"] == "0"
    assert request.json()["sourceObjects"] == [
        {"name": "a", "objectPreconditions": {"ifGenerationMatch": "3"}},
        {"name": "b", "objectPreconditions": {"ifGenerationMatch": "4"}},
        {"name": "c"}]
    assert info.generation == 12


# -- delete ----------------------------------------------------------------------------


async def test_delete_is_a_json_delete_with_its_preconditions() -> None:
    client, transport = make(script(MockResponse(204), error(404, "notFound"),
                                    error(404, "notFound")))
    async with client:
        await client.delete(B, "a/b", generation=3, if_generation_match=5)
        with pytest.raises(NotFound, match=r"delete gs://bkt/a/b failed: HTTP 404"):
            await client.delete(B, "a/b")
        await client.delete(B, "a/b", missing_ok=True)
    first = transport.requests[0]
    assert (first.method, first.url) == ("DELETE", f"{ENDPOINT}/storage/v1/b/bkt/o/a%2Fb")
    assert first.params == {"generation": "3", "ifGenerationMatch": "5"}


async def test_a_404_to_a_retried_delete_is_success() -> None:
    # The first attempt's answer was lost: it may have deleted the object.
    client, transport = make(script(error(503, "backendError"), error(404, "notFound")))
    async with client:
        await client.delete(B, "obj")
    assert len(transport.requests) == 2


# -- checked media reads -------------------------------------------------------------------


@pytest.mark.parametrize("into", [False, True])
async def test_a_body_cut_short_is_resumed_with_range_on_the_same_generation(
        into: bool) -> None:
    data = bytes(range(256)) * 4
    cut = media(data, headers={"Content-Length": str(len(data))}, body=data[:400])
    rest = media(data, status=206, headers={"Content-Range": f"bytes 400-1023/{len(data)}"},
                 body=data[400:])
    client, transport = make(script(cut, rest))
    buffer = bytearray(len(data))
    async with client:
        got = await client.read(B, "obj", into=buffer if into else None)
    assert (buffer if into else got) == data
    first, second = transport.requests
    assert first.params == {"alt": "media"} and "Range" not in first.headers
    assert second.headers["Range"] == "bytes=400-"
    assert second.params == {"alt": "media", "generation": "5"}
    assert transport.stats.retries == 1


@pytest.mark.parametrize(("answer", "message"), [
    (media(b"x" * 100, status=206, headers={"Content-Range": "bytes 0-9/100"},
           body=b"x" * 10), "asked for bytes from 10, the server sent Content-Range bytes 0-9"),
    (media(b"x" * 100, status=206, body=b"x" * 10), "HTTP 206 without a valid Content-Range"),
    (media(b"x" * 100, status=206, headers={"Content-Range": "bytes 10-29/100"},
           body=b"x" * 20), r"asked for bytes \[10, 20\), the server sent Content-Range"),
    (media(b"x" * 100, body=b"x" * 100), r"sent the whole object \(HTTP 200\) instead"),
    (media(b"x" * 100, status=206, headers={"Content-Range": "bytes 10-19/200"},
           body=b"x" * 10), "says the object has 200 bytes, expected 100"),
])
async def test_a_range_other_than_asked_is_a_protocol_error(answer: MockResponse,
                                                            message: str) -> None:
    client, transport = make(script(answer))
    async with client:
        with pytest.raises(ProtocolError, match=message) as caught:
            await client.read(B, "obj", start=10, end=20)
    assert caught.value.name == "obj" and len(transport.requests) == 1
    assert transport.requests[0].headers["Range"] == "bytes=10-19"


async def test_a_length_other_than_announced_is_a_protocol_error() -> None:
    answer = MockResponse(200, {"x-goog-stored-content-length": "50"}, b"x" * 40)
    client, transport = make(script(answer))
    async with client:
        with pytest.raises(ProtocolError, match="Content-Length says the object has 40 "
                                                "bytes, expected 50"):
            await client.read(B, "obj")
    assert len(transport.requests) == 1


async def test_a_crc32c_mismatch_is_read_again_then_reported() -> None:
    data = b"the real bytes"
    corrupt = media(data, body=b"the REAL bytes")
    client, transport = make(script(corrupt, media(data)))
    async with client:
        assert await client.read(B, "obj") == data
    assert len(transport.requests) == 2
    client, transport = make(script(*[corrupt] * 4))
    async with client:
        with pytest.raises(ChecksumMismatch, match=r"read gs://bkt/obj failed: crc32c") as exc:
            await client.read(B, "obj")
    assert exc.value.attempts == 4 and len(transport.requests) == 4


# -- resumable uploads ---------------------------------------------------------------------

_RANGE = re.compile(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)")


class ResumableServer:
    """A resumable session as GCS keeps it: bytes must continue exactly where
    the persisted ones end (a chunk sent twice or with a gap is refused)."""

    def __init__(self, *, persist_only: dict[int, int] | None = None,
                 lose_answer: set[int] | None = None) -> None:
        self.stored = bytearray()
        self.chunks = 0
        self.persist_only = persist_only or {}  # chunk number -> bytes kept of it
        self.lose_answer = lose_answer or set()  # chunk numbers whose answer is lost
        self.resource: dict[str, Any] = {}
        self.ranges: list[str] = []
        self.final_hash = ""

    def __call__(self, request: MockRequest) -> MockResponse:
        if request.method == "POST":
            self.resource = request.json()
            return MockResponse(200, {"Location": f"{ENDPOINT}/upload/session?upload_id=S"})
        assert (request.method, request.params) == ("PUT", {"upload_id": "S"})
        content_range = request.headers["Content-Range"]
        self.ranges.append(content_range)
        match = _RANGE.fullmatch(content_range)
        assert match is not None
        first, total = match.group(1), match.group(3)
        if first is not None:
            if int(first) != len(self.stored):
                return error(400, "invalid")  # a gap or an overlap
            self.chunks += 1
            body = request.body[:self.persist_only.get(self.chunks, len(request.body))]
            self.stored += body
            if total != "*" and len(self.stored) == int(total):
                self.final_hash = request.headers.get("X-Goog-Hash", "")
            if self.chunks in self.lose_answer:
                self.lose_answer.discard(self.chunks)
                raise aiohttp.ClientConnectionError("answer lost")
        if total != "*" and len(self.stored) == int(total):
            return MockResponse.from_json(resource(self.resource["name"], bytes(self.stored)))
        headers = {"Range": f"bytes=0-{len(self.stored) - 1}"} if self.stored else {}
        return MockResponse(308, headers)


DATA = bytes(range(251)) * 3000  # ~735 KiB: 3 chunks of 256 KiB


async def _upload(server: ResumableServer) -> tuple[ObjectInfo, MockTransport]:
    client, transport = make(server)
    async with client:
        upload = ResumableUpload(client, B, "big", chunk_size=CHUNK_GRANULARITY,
                                 crc32c=crc32c(DATA))
        await upload.start()
        info = await upload.finish(DATA)
    return info, transport


async def test_a_resumable_upload_sends_its_chunks_and_the_crc32c() -> None:
    server = ResumableServer()
    info, _ = await _upload(server)
    assert bytes(server.stored) == DATA and info.size == len(DATA)
    assert server.ranges == [f"bytes 0-{CHUNK_GRANULARITY - 1}/*",
                             f"bytes {CHUNK_GRANULARITY}-{2 * CHUNK_GRANULARITY - 1}/*",
                             f"bytes {2 * CHUNK_GRANULARITY}-{len(DATA) - 1}/{len(DATA)}"]
    assert server.resource["crc32c"] == encode_crc32c(crc32c(DATA))
    assert server.final_hash == f"crc32c={encode_crc32c(crc32c(DATA))}"


async def test_a_resumable_chunk_persisted_in_part_is_continued_from_the_308_range() -> None:
    server = ResumableServer(persist_only={2: 1000})
    info, _ = await _upload(server)
    assert bytes(server.stored) == DATA and info.crc32c == crc32c(DATA)
    resent_from = CHUNK_GRANULARITY + 1000
    assert server.ranges[2] == f"bytes {resent_from}-{2 * CHUNK_GRANULARITY - 1}/*"


async def test_a_lost_resumable_answer_is_followed_by_a_status_query() -> None:
    server = ResumableServer(lose_answer={2})
    info, transport = await _upload(server)
    assert bytes(server.stored) == DATA and info.size == len(DATA)
    # A status query follows the lost answer, and no byte is sent twice
    # (the server refuses overlaps; each chunk's range appears once).
    assert server.ranges[2] == "bytes */*"
    # One query: the chunk turned out stored, so the next request is the
    # next chunk (not a second, empty status query).
    assert server.ranges[3] == f"bytes {2 * CHUNK_GRANULARITY}-{len(DATA) - 1}/{len(DATA)}"
    sent = [r for r in server.ranges if r != "bytes */*"]
    assert sent == [f"bytes 0-{CHUNK_GRANULARITY - 1}/*",
                    f"bytes {CHUNK_GRANULARITY}-{2 * CHUNK_GRANULARITY - 1}/*",
                    f"bytes {2 * CHUNK_GRANULARITY}-{len(DATA) - 1}/{len(DATA)}"]
    assert transport.stats.retries == 1


# -- XML multipart, and the mock itself ----------------------------------------------------


async def test_an_xml_part_stored_with_another_crc32c_is_sent_again() -> None:
    part = bytes(range(256)) * 8192  # 2 MiB: the transport sends it in 1 MiB slices
    good = encode_crc32c(crc32c(part))
    answers = [
        # The hash arrives in two headers, as GCS sends it; the first stored other bytes.
        MockResponse(200, [("x-goog-hash", "md5=xx"), ("x-goog-hash", "crc32c=AAAAAA=="),
                           ("ETag", '"bad"')]),
        MockResponse(200, [("x-goog-hash", "md5=xx"), ("x-goog-hash", f"crc32c={good}"),
                           ("ETag", '"e1"')]),
    ]
    client, transport = make(script(*answers))
    async with client:
        info = await client.upload_part(B, "obj", "UP", 3, part)
    assert (info.number, info.etag, info.size) == (3, '"e1"', len(part))
    assert len(transport.requests) == 2
    request = transport.requests[1]
    assert (request.method, request.url) == ("PUT", f"{ENDPOINT}/bkt/obj")
    assert request.params == {"partNumber": "3", "uploadId": "UP"}
    assert request.headers["x-goog-hash"] == f"crc32c={good}" and request.body == part


async def test_an_async_handler_is_awaited() -> None:
    async def handler(request: MockRequest) -> MockResponse:
        await asyncio.sleep(0)
        return MockResponse.from_json(resource("obj", b"abc"))

    transport = MockTransport(handler, config=CONFIG, endpoint=ENDPOINT)
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        assert (await client.stat(B, "obj")).size == 3


async def test_a_handler_that_answers_something_else_is_a_type_error() -> None:
    client, _ = make(lambda request: "200 OK")  # type: ignore[arg-type, return-value]
    async with client:
        with pytest.raises(TypeError, match="must return a MockResponse, got str"):
            await client.stat(B, "obj")


@pytest.mark.parametrize("call, message", [
    (lambda c: c.upload_part("bkt", "n", "u", "1", b"x"), "part_number must be an int"),
    (lambda c: c.upload_part("bkt", "n", 5, 1, b"x"), "upload_id must be a str"),
    (lambda c: c.upload_part("bkt", "n", "u", 1, "text"), "data must be bytes"),
    (lambda c: c.complete_multipart("bkt", "n", "u", None), "parts must be a list"),
    (lambda c: c.complete_multipart("bkt", "n", "u", [("1", "e")]), r"parts\[...\] must be"),
    (lambda c: c.list_multipart_uploads("bkt", prefix=5), "prefix must be a str"),
    (lambda c: c.initiate_multipart("bkt", "n", metadata=5), "metadata must be a dict"),
    (lambda c: c.initiate_multipart("bkt", "n", metadata={"k": "a\nb"}),
     "custom metadata 'k' cannot go in an XML API header"),
    (lambda c: c.initiate_multipart("bkt", "n", content_type="a\nb"), "control character"),
    (lambda c: c.abort_multipart("bkt", "n", None), "upload_id must be a str"),
    (lambda c: c.list_parts("bkt", "n", 7), "upload_id must be a str"),
], ids=["part-number", "upload-id", "data", "parts", "part", "prefix", "metadata",
        "metadata-header", "content-type", "abort", "list-parts"])
async def test_xml_multipart_calls_refuse_wrong_arguments_before_any_request(
        call: Callable[[AsyncClient], Any], message: str) -> None:
    # Bare TypeError / AttributeError / aiohttp's ValueError from deep inside
    # before, some after a request had gone.
    client, transport = make(script())
    with pytest.raises(InvalidArgument, match=message):
        await call(client)
    assert transport.requests == []
