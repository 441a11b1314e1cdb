"""The http(s) store against scripted servers that break HTTP's promises
(issue 51): no ranges, a version changing between blocks, a redirect to
another host with the token, a body cut short, gzip on a range; and what
it refuses before any request (listing, writes)."""

from __future__ import annotations

import asyncio
import gzip
import re
from pathlib import Path

import pytest
from aiohttp import web

from aioflux import ClientConfig, RetryPolicy
from aioflux._core.errors import (
    InvalidRequest,
    InvalidURL,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    ProtocolError,
    TransportError,
)
from aioflux._core.integrity.crc import crc32c
from aioflux._core.records.urls import parse_url
from aioflux.http import HttpStore
from aioflux.http._store import TOKEN_ENV
from tests.servers.raw_server import RawServer, serving
from tests.servers.tls_cert import self_signed
from tests.servers.web_server import Served, Server

DATA = bytes(range(256)) * 4096  # 1 MiB
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0.0, max_delay=0.0))
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def _bucket(endpoint: str) -> str:
    return endpoint.removeprefix("http://")


def _ranged(request: web.Request, body: bytes, etag: str | None, *,
            honour_pin: bool = True) -> web.Response:
    """A correct answer to a GET or HEAD of ``body`` (ranges honoured)."""
    headers = {"Accept-Ranges": "bytes"}
    if etag is not None:
        headers["ETag"] = etag
    if request.method == "HEAD":
        headers["Content-Length"] = str(len(body))
        return web.Response(status=200, headers=headers)
    wanted = request.headers.get("If-Match")
    if honour_pin and wanted is not None and wanted != etag:
        return web.Response(status=412)
    match = _RANGE.match(request.headers.get("Range", ""))
    if match is None:
        return web.Response(body=body, headers=headers)
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) else len(body) - 1
    last = min(last, len(body) - 1)
    headers["Content-Range"] = f"bytes {first}-{last}/{len(body)}"
    return web.Response(status=206, body=body[first:last + 1], headers=headers)


async def test_read_stat_and_ranges_on_a_correct_server() -> None:
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        return _ranged(request, DATA, '"v1"')

    async with Server(answer) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
        bucket = _bucket(endpoint)
        info = await store.stat(bucket, "data/x.bin")
        assert info.size == len(DATA) and info.generation
        assert info.url == f"{endpoint}/data/x.bin"
        assert await store.read(bucket, "data/x.bin", start=10, end=5000) == DATA[10:5000]
        assert await store.read(bucket, "data/x.bin", generation=info.generation) == DATA
        buffer = bytearray(100)
        assert await store.read(bucket, "data/x.bin", start=7, end=107, into=buffer) == 100
        assert bytes(buffer) == DATA[7:107]
        fetched = await store.fetch(bucket, "data/x.bin", crc=crc32c(DATA), want_crc=True,
                                    size=len(DATA))
        assert fetched.crc == crc32c(DATA) and fetched.count == len(DATA)
        assert await store.exists(bucket, "data/x.bin")


async def test_a_server_ignoring_ranges_is_sliced() -> None:
    """No Accept-Ranges, and 200 with the whole body to every ranged GET:
    the bytes asked for, never the object's head in their place."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        if request.method == "HEAD":
            return web.Response(headers={"Content-Length": str(len(DATA)), "ETag": '"v1"'})
        return web.Response(body=DATA, headers={"ETag": '"v1"'})

    async with Server(answer) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
        bucket = _bucket(endpoint)
        for start, end in ((0, 10), (5000, 70_000), (len(DATA) - 3, None), (1, len(DATA))):
            got = await store.read(bucket, "x.bin", start=start, end=end)
            assert got == DATA[start:end], (start, end)
        with pytest.raises(InvalidRequest) as past:  # answered whole: no bytes there
            await store.read(bucket, "x.bin", start=len(DATA) + 1)
        assert past.value.status == 416


@pytest.mark.parametrize("head", [405, 501, "no-length"])
async def test_stat_without_a_usable_head_asks_for_the_first_byte(head: int | str) -> None:
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        if request.method == "HEAD":
            if head == "no-length":
                return web.StreamResponse(status=200, headers={"ETag": '"v1"'})
            return web.Response(status=int(head))
        return _ranged(request, DATA, '"v1"')

    async with Server(answer) as (endpoint, served), HttpStore(CONFIG, scheme="http") as store:
        info = await store.stat(_bucket(endpoint), "x.bin")
        assert info.size == len(DATA) and info.generation
        assert await store.read(_bucket(endpoint), "x.bin", start=3, end=9,
                                generation=info.generation) == DATA[3:9]
    assert served.paths[:2] == ["HEAD /x.bin", "GET /x.bin"]


@pytest.mark.parametrize("honour_pin", [True, False], ids=["412", "ignores-if-match"])
async def test_an_etag_changing_between_blocks_is_a_typed_error(honour_pin: bool) -> None:
    """The object is replaced after the first block: the next block is
    refused (412 from a server that honours If-Match; by the ETag it states
    from one that does not), never bytes of the second version."""
    versions = ['"v1"']

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        body = DATA if versions[-1] == '"v1"' else DATA[::-1]
        return _ranged(request, body, versions[-1], honour_pin=honour_pin)

    async with Server(answer) as (endpoint, served), HttpStore(CONFIG, scheme="http") as store:
        bucket = _bucket(endpoint)
        info = await store.stat(bucket, "x.bin")
        assert await store.read(bucket, "x.bin", end=4096, generation=info.generation) \
            == DATA[:4096]
        versions.append('"v2"')
        with pytest.raises(NotFound, match="changed while it was read") as caught:
            await store.read(bucket, "x.bin", start=4096, end=8192, generation=info.generation)
        assert caught.value.name == "x.bin"
        gets = [p for p in served.paths if p.startswith("GET")]
        assert len(gets) == 2  # refused at once: not retried


async def test_no_strong_etag_pins_by_if_range_on_last_modified() -> None:
    """A weak ETag cannot be sent back: ranged reads carry If-Range on
    Last-Modified, and a changed object (its whole new body, 200) is refused."""
    modified = ["Wed, 21 Oct 2015 07:28:00 GMT"]
    asked: list[str | None] = []

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        headers = {"ETag": 'W/"weak"', "Last-Modified": modified[-1]}
        asked.append(request.headers.get("If-Range"))
        if request.method == "HEAD":
            return web.Response(headers={**headers, "Content-Length": str(len(DATA))})
        match = _RANGE.match(request.headers.get("Range", ""))
        if match is None or request.headers.get("If-Range") != modified[-1]:
            return web.Response(body=DATA, headers=headers)
        first, last = int(match.group(1)), int(match.group(2))
        return web.Response(status=206, body=DATA[first:last + 1], headers={
            **headers, "Content-Range": f"bytes {first}-{last}/{len(DATA)}"})

    async with Server(answer) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
        bucket = _bucket(endpoint)
        info = await store.stat(bucket, "x.bin")
        assert await store.read(bucket, "x.bin", start=5, end=9, generation=info.generation) \
            == DATA[5:9]
        assert asked[-1] == modified[0]
        modified.append("Thu, 22 Oct 2015 07:28:00 GMT")
        with pytest.raises(NotFound, match="changed while it was read"):
            await store.read(bucket, "x.bin", start=5, end=9, generation=info.generation)


async def test_the_token_never_follows_a_redirect_to_another_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The named origin gets the bearer token (from the environment); the
    CDN it redirects to gets the requests without it. Where the origin led
    is remembered (reads go to the CDN at once) until the CDN's signed URL
    expires (403): the next read asks the origin again."""
    monkeypatch.setenv(TOKEN_ENV, "hf_secret_token")
    seen: dict[str, list[str | None]] = {"origin": [], "cdn": []}
    expired: set[str] = set()

    async def cdn(request: web.Request, served: Served) -> web.StreamResponse:
        seen["cdn"].append(request.headers.get("Authorization"))
        if request.query["signed"] in expired:
            return web.Response(status=403, text="Request has expired")
        return _ranged(request, DATA, '"v1"')

    async with Server(cdn) as (cdn_endpoint, _):
        async def origin(request: web.Request, served: Served) -> web.StreamResponse:
            seen["origin"].append(request.headers.get("Authorization"))
            signed = str(len(seen["origin"]))
            raise web.HTTPFound(f"{cdn_endpoint}/blobs/sha256-abc?signed={signed}")

        async with Server(origin) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
            bucket = _bucket(endpoint)
            info = await store.stat(bucket, "resolve/main/x.bin")
            assert info.size == len(DATA)
            for start in (3, 300, 3000):
                got = await store.read(bucket, "resolve/main/x.bin", start=start,
                                       end=start + 100, generation=info.generation)
                assert got == DATA[start:start + 100]
            assert len(seen["origin"]) == 1 and len(seen["cdn"]) == 4
            expired.add("1")
            got = await store.read(bucket, "resolve/main/x.bin", start=7, end=9,
                                   generation=info.generation)
            assert got == DATA[7:9]
    assert seen["origin"] == ["Bearer hf_secret_token"] * 2
    assert seen["cdn"] == [None] * 6  # the expired link once, then the new one
    assert "hf_secret_token" not in repr(store)


async def test_a_target_another_host_chose_on_the_named_origin_gets_no_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The named origin redirects to another host, which redirects back to
    a path of its choosing on the named origin: the chain left the origin,
    so that path gets no token, on the chain nor on the reads sent there
    at once later."""
    monkeypatch.setenv(TOKEN_ENV, "hf_secret_token")
    seen: list[tuple[str, str | None]] = []

    async with Server(lambda request, served: _other(request)) as (other, _):
        async def origin(request: web.Request, served: Served) -> web.StreamResponse:
            seen.append((request.path, request.headers.get("Authorization")))
            if request.path == "/start.bin":
                raise web.HTTPFound(f"{other}/hop?back={endpoint}")
            return _ranged(request, DATA, '"v1"')

        async with Server(origin) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
            info = await store.stat(_bucket(endpoint), "start.bin")
            for start in (3, 300):
                assert await store.read(_bucket(endpoint), "start.bin", start=start,
                                        end=start + 9, generation=info.generation) == \
                    DATA[start:start + 9]
    assert seen[0] == ("/start.bin", "Bearer hf_secret_token")
    assert {path for path, _ in seen[1:]} == {"/chosen-by-other"}
    assert [token for _, token in seen[1:]] == [None] * (len(seen) - 1)


async def _other(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(f"{request.query['back']}/chosen-by-other")


async def test_a_body_cut_short_is_read_again_under_the_pin() -> None:
    """The first answer closes after part of its announced bytes: the retry
    (of the rest, or all when none of it was handed over) carries the pin,
    and the bytes are exact."""
    size, half = 10_000, 4_000
    body = DATA[:size]
    server: RawServer

    def script(conn: int, index: int) -> bytes | tuple[bytes, str]:
        if conn == 0:
            return (f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nETag: \"v1\"\r\n\r\n"
                    .encode() + body[:half], "close")
        match = re.search(rb"Range: bytes=(\d+)-", server.requests[-1])
        first = int(match.group(1)) if match else 0
        return (f"HTTP/1.1 206 Partial Content\r\nContent-Length: {size - first}\r\n"
                f"ETag: \"v1\"\r\nContent-Range: bytes {first}-{size - 1}/{size}\r\n\r\n"
                .encode() + body[first:])

    server = RawServer(script)
    async with server as endpoint, HttpStore(CONFIG, scheme="http") as store:
        assert await store.read(_bucket(endpoint), "x.bin") == body
    assert len(server.requests) == 2
    assert b'If-Match: "v1"' in server.requests[1]


async def test_a_version_changing_after_a_cut_is_never_mixed() -> None:
    """An unpinned read cut short is held to the version its first answer
    stated: a retry answered by another version (the server ignoring
    If-Match) is PreconditionFailed, not the first bytes glued to the new."""
    size = 10_000

    def script(conn: int, index: int) -> bytes | tuple[bytes, str]:
        if conn == 0:
            return (f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nETag: \"v1\"\r\n\r\n"
                    .encode() + DATA[:4000], "close")
        return (f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nETag: \"v2\"\r\n\r\n"
                .encode() + DATA[::-1][:size])

    async with RawServer(script) as endpoint, HttpStore(CONFIG, scheme="http") as store:
        with pytest.raises(PreconditionFailed, match="changed while it was read"):
            await store.read(_bucket(endpoint), "x.bin")


async def test_a_cut_body_of_a_server_stating_no_version_is_read_again_whole() -> None:
    """No ETag, no Last-Modified: nothing pins the rest to the first bytes'
    version (a file replaced, same size), so the retry reads from the start:
    one version's bytes, never the first 4,000 of one glued to another's."""
    size = 10_000
    server: RawServer

    def script(conn: int, index: int) -> bytes | tuple[bytes, str]:
        if conn == 0:
            return (f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode()
                    + DATA[:4000], "close")
        return f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode() + DATA[::-1][:size]

    server = RawServer(script)
    async with server as endpoint, HttpStore(CONFIG, scheme="http") as store:
        assert await store.read(_bucket(endpoint), "x.bin") == DATA[::-1][:size]
    assert len(server.requests) == 2 and b"Range:" not in server.requests[1]


async def test_a_head_stating_zero_bytes_is_asked_again_of_a_get() -> None:
    """An empty object has no byte a read would check: a HEAD's 0 read
    as the size returned b"" for a file of 5,000 bytes, and sent no GET."""
    body = DATA[:5000]

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        if request.method == "HEAD":
            return web.Response(headers={"ETag": '"v1"', "Content-Length": "0"})
        return _ranged(request, body, '"v1"')

    async with Server(answer) as (endpoint, served), HttpStore(CONFIG, scheme="http") as store:
        info = await store.stat(_bucket(endpoint), "x.bin")
        assert info.size == len(body)
        assert await store.read(_bucket(endpoint), "x.bin", generation=info.generation) == body
    assert served.paths[:2] == ["HEAD /x.bin", "GET /x.bin"]


async def test_a_stat_goes_through_the_url_named_not_where_it_led_before() -> None:
    """A "latest" link answering 302, repointed between two reads: the
    second stat asked the old target, and its version (and the cache keyed
    on it) stayed the old file's for the life of the process."""
    target = ["/v1.bin"]

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        if request.path == "/latest.bin":
            raise web.HTTPFound(target[-1])
        return _ranged(request, request.path.encode(), f'"{request.path}"')

    async with Server(answer) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
        bucket = _bucket(endpoint)
        for version in ("/v1.bin", "/v2.bin"):
            target.append(version)
            info = await store.stat(bucket, "latest.bin")
            assert await store.read(bucket, "latest.bin", generation=info.generation) == \
                version.encode()


async def test_a_body_always_cut_short_is_a_transport_error() -> None:
    def script(conn: int, index: int) -> tuple[bytes, str]:
        return (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nETag: \"v1\"\r\n\r\n", "close")

    async with RawServer(script) as endpoint, HttpStore(CONFIG, scheme="http") as store:
        with pytest.raises(TransportError, match=r"truncated|cut short"):
            await store.read(_bucket(endpoint), "x.bin")


async def test_gzip_on_a_ranged_read_is_refused() -> None:
    """A server that gzips the range it sends: refused, never decoded and
    served as if it were the object's bytes there."""
    asked: list[str | None] = []

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        asked.append(request.headers.get("Accept-Encoding"))
        coded = gzip.compress(DATA[10:20])
        return web.Response(status=206, body=coded, headers={
            "Content-Encoding": "gzip", "ETag": '"v1"',
            "Content-Range": f"bytes 10-{10 + len(coded) - 1}/{len(DATA)}"})

    async with Server(answer) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
        with pytest.raises(ProtocolError, match="Content-Encoding 'gzip'"):
            await store.read(_bucket(endpoint), "x.bin", start=10, end=10 + 29)
    assert asked == ["identity"]


async def test_a_range_other_than_asked_is_refused() -> None:
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        return web.Response(status=206, body=DATA[:10], headers={
            "ETag": '"v1"', "Content-Range": f"bytes 0-9/{len(DATA)}"})

    async with Server(answer) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
        with pytest.raises(ProtocolError, match=r"asked for bytes \[100, 110\)"):
            await store.read(_bucket(endpoint), "x.bin", start=100, end=110)


async def test_listing_and_writes_are_refused_before_any_request() -> None:
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        return web.Response(status=404)

    async with Server(answer) as (endpoint, served), HttpStore(CONFIG, scheme="http") as store:
        bucket = _bucket(endpoint)
        with pytest.raises(InvalidRequest, match="brace pattern"):
            store.list(bucket, "train-")
        with pytest.raises(InvalidRequest, match="brace pattern"):
            store.list_objects(bucket)
        for call in (store.write(bucket, "x", b"data"), store.delete(bucket, "x"),
                     store.copy(bucket, "x", bucket, "y")):
            with pytest.raises(InvalidRequest, match="read-only"):
                await call
        with pytest.raises(InvalidRequest, match="concatenate"):
            await store.compose(bucket, "x", ["a"])
        with pytest.raises(InvalidRequest, match="read-only"):
            store.start_upload(bucket, "x", content_type="a/b", part_size=1)
        assert store.features.scheme == "http" and not store.features.compose
        with pytest.raises(NotFound):
            await store.stat(bucket, "missing")
    assert served.paths == ["HEAD /missing"]


def test_http_urls_parse_to_origin_and_path() -> None:
    url = parse_url("https://HuggingFace.co:443/datasets/o/n/resolve/main/a.tar?x=1")
    assert (url.scheme, url.bucket, url.name) == (
        "https", "huggingface.co", "datasets/o/n/resolve/main/a.tar?x=1")
    assert str(url) == "https://huggingface.co/datasets/o/n/resolve/main/a.tar?x=1"
    assert tuple(parse_url("http://127.0.0.1:8080/x")) == ("127.0.0.1:8080", "x")
    with pytest.raises(InvalidURL, match="credentials in a URL"):
        parse_url("https://user:pw@host/x")
    with pytest.raises(InvalidURL, match="fragment"):
        parse_url("https://host/x#frag")


async def test_an_error_echoing_the_token_does_not_carry_it() -> None:
    """A server that quotes the request's Authorization in its error page:
    the typed error names the URL and status, never the token."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        return web.Response(status=403, text=f"denied: {request.headers['Authorization']}")

    async with Server(answer) as (endpoint, _), \
            HttpStore(CONFIG, scheme="http", token="hf_secret_token") as store:
        with pytest.raises(PermissionDenied) as caught:
            await store.read(_bucket(endpoint), "x.bin")
    assert "hf_secret_token" not in str(caught.value)
    assert str(caught.value).startswith(f"read {endpoint}/x.bin failed: HTTP 403")


async def test_a_redirect_from_https_to_plain_http_is_refused(tmp_path: Path) -> None:
    """An https origin sending the read to http:// would hand the bytes to
    anyone on the way: refused (ProtocolError), the http server never asked."""
    served, _client_tls = self_signed(tmp_path)
    asked: list[bytes] = []

    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()

    async with serving(plain) as http_endpoint:
        async def origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(f"HTTP/1.1 302 Found\r\nLocation: {http_endpoint}/x.bin\r\n"
                         "Content-Length: 0\r\n\r\n".encode())
            await writer.drain()

        async with serving(origin, tls=served) as endpoint:
            config = ClientConfig(retry=CONFIG.retry, ca_file=tmp_path / "cert.pem")
            async with HttpStore(config, scheme="https", token="tok") as store:
                with pytest.raises(ProtocolError, match="from https to plain http"):
                    await store.stat(endpoint.removeprefix("https://"), "x.bin")
    assert asked == []
