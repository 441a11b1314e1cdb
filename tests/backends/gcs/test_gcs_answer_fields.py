"""GCS answers whose fields are not what they claim, without sockets.

- An object resource's (a stat's, a listing item's) size, generation and
  crc32c must be what they name: a missing size read as an empty object, a
  negative one was taken as is, and a malformed one raised a bare
  ValueError, KeyError or TypeError naming nothing. Each is a ProtocolError
  naming the operation, bucket and object.
- A write whose answer is no readable object resource may still have
  published: a stat tells whether the name holds the bytes written (a
  missing size once deleted the good object; a malformed one raised a bare
  ValueError over a published object).
- The XML API's answers: a DTD is refused before its entities expand (a
  2 KiB answer made an 8 MB upload id); a completion kept alive with
  whitespace before its XML declaration still publishes; a part listing's
  malformed size and a completion's malformed generation or hash are no
  bare ValueError.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    ObjectInfo,
    ProtocolError,
    RetryPolicy,
)
from aioflux._core.integrity.crc import Crc32c, crc32c, encode_crc32c
from aioflux.testing import MockRequest, MockResponse, MockTransport

ENDPOINT = "https://storage.example"
B = "bkt"
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
DATA = b"hello world" * 100
CRC = encode_crc32c(crc32c(DATA))


def _client(handler: Any) -> tuple[AsyncClient, MockTransport]:
    transport = MockTransport(handler, config=CONFIG, endpoint=ENDPOINT)
    return AsyncClient(transport=transport, endpoint=ENDPOINT), transport


def _resource(name: str = "obj", /, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"name": name, "size": str(len(DATA)), "generation": "7",
                            "crc32c": CRC}
    for key, value in fields.items():
        if value is _DROP:
            del item[key]
        else:
            item[key] = value
    return item


_DROP = object()

BAD = {
    "no-size": {"size": _DROP},
    "negative-size": {"size": "-1100"},
    "malformed-size": {"size": "1.1e3"},
    "size-with-spaces": {"size": " 1100 "},
    "size-in-other-digits": {"size": "\u0661\u0661\u0660\u0660"},  # Arabic-Indic 1100
    "size-true": {"size": True},
    "size-null": {"size": None},
    "malformed-generation": {"generation": "v7"},
    "generation-past-int64": {"generation": "9" * 5000},
    "malformed-crc32c": {"crc32c": "not base64!"},
    "no-name": {"name": _DROP},
}


@pytest.mark.parametrize("fields", list(BAD.values()), ids=list(BAD))
async def test_a_stat_of_a_resource_that_is_no_object_is_a_protocol_error(
        fields: dict[str, Any]) -> None:
    client, transport = _client(lambda request: MockResponse.from_json(_resource(**fields)))
    async with client:
        with pytest.raises(ProtocolError, match=r"^stat gs://bkt/obj failed: the object "
                                                r"resource ") as caught:
            await client.stat(B, "obj")
    assert (caught.value.operation, caught.value.bucket, caught.value.name) == (
        "stat", B, "obj")
    assert len(transport.requests) == 1  # not retried: the server answers so again


@pytest.mark.parametrize("fields", list(BAD.values()), ids=list(BAD))
async def test_a_listed_item_that_is_no_object_is_a_protocol_error(
        fields: dict[str, Any]) -> None:
    page = {"items": [_resource("p/a"), _resource("p/b", **fields)]}
    client, _ = _client(lambda request: MockResponse.from_json(page))
    async with client:
        with pytest.raises(ProtocolError, match=r"^list gs://bkt/p/(b|) failed: the listing's "
                                                r"item ") as caught:
            [o async for o in client.list_objects(B, "p/")]
    assert caught.value.operation == "list" and caught.value.bucket == B


async def test_a_listing_still_takes_what_a_server_may_send() -> None:
    """A size and generation as JSON numbers, no crc32c, a full resource."""
    page = {"items": [_resource("a", size=5, generation=9, crc32c=_DROP),
                      _resource("b", metageneration="2", contentType="text/x", bucket=B)],
            "prefixes": ["d/"]}
    client, _ = _client(lambda request: MockResponse.from_json(page))
    async with client:
        [got] = [p async for p in client.list(B, delimiter="/")]
    assert [(o.name, o.size, o.generation, o.crc32c) for o in got.objects] == [
        ("a", 5, 9, None), ("b", len(DATA), 7, crc32c(DATA))]
    assert got.prefixes == ["d/"]


@pytest.mark.parametrize("page", [
    {"items": {"a": _resource("a")}},
    {"prefixes": "abc"},
    {"items": [], "prefixes": [], "nextPageToken": 5},
], ids=["items-not-a-list", "prefixes-a-string", "token-a-number"])
async def test_a_listing_page_of_the_wrong_shape_is_a_protocol_error(
        page: dict[str, Any]) -> None:
    client, transport = _client(lambda request: MockResponse.from_json(page))
    async with client:
        with pytest.raises(ProtocolError, match=r"^list gs://bkt failed: the listing(.s items)? "):
            [p async for p in client.list(B)]
    assert len(transport.requests) == 1


# -- writes whose answer cannot be read ---------------------------------------------------


def _write_server(answer: dict[str, Any], live: dict[str, Any] | None) -> Any:
    """A write answered with ``answer``; a stat finds ``live``."""
    def handle(request: MockRequest) -> MockResponse:
        if request.method == "GET":
            return MockResponse.from_json(live) if live else MockResponse(404)
        if request.method == "DELETE":
            return MockResponse(204)
        if request.params.get("uploadType") == "resumable":
            return MockResponse(200, {"Location": f"{ENDPOINT}/upload/session?id=S"})
        return MockResponse.from_json(answer)

    return handle


@pytest.mark.parametrize("resumable", [False, True], ids=["single", "resumable"])
@pytest.mark.parametrize("fields", [{"size": _DROP}, {"size": "1,100"}],
                         ids=["no-size", "malformed-size"])
async def test_a_write_whose_answer_is_unreadable_is_confirmed_by_a_stat(
        fields: dict[str, Any], resumable: bool) -> None:
    client, transport = _client(_write_server(_resource(**fields), _resource()))
    async with client:
        info = await client.write(B, "obj", DATA, resumable=resumable)
    assert (info.size, info.generation, info.crc32c) == (len(DATA), 7, crc32c(DATA))
    methods = [r.method for r in transport.requests]
    assert "DELETE" not in methods and methods[-1] == "GET"


@pytest.mark.parametrize("resumable", [False, True], ids=["single", "resumable"])
async def test_an_unreadable_write_answer_over_other_bytes_fails_and_deletes_nothing(
        resumable: bool) -> None:
    theirs = _resource(size="6", crc32c=encode_crc32c(crc32c(b"theirs")), generation="99")
    client, transport = _client(_write_server(_resource(size="-1"), theirs))
    async with client:
        with pytest.raises(ChecksumMismatch, match=r"gs://bkt/obj.*gives the size '-1'.*"
                                                   r"left alone"):
            await client.write(B, "obj", DATA, resumable=resumable)
    assert "DELETE" not in [r.method for r in transport.requests]


async def test_a_compose_whose_answer_is_unreadable_is_confirmed_by_a_stat() -> None:
    sources = [ObjectInfo(B, "s1", 100, 3, crc32c(DATA[:100])),
               ObjectInfo(B, "s2", len(DATA) - 100, 3, crc32c(DATA[100:]))]
    client, transport = _client(_write_server(_resource(size=_DROP), _resource()))
    async with client:
        info = await client.compose(B, "obj", sources)
    assert (info.size, info.crc32c) == (len(DATA), crc32c(DATA))
    assert "DELETE" not in [r.method for r in transport.requests]


# -- the XML API ----------------------------------------------------------------------------

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
# 1,000 x 100 x 80 = 8 MB of text from a 2 KiB document.
EXPANDING = ('<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "' + "x" * 1000 + '">'
             '<!ENTITY b "' + "&a;" * 100 + '"><!ENTITY c "' + "&b;" * 80 + '">]>'
             f"<InitiateMultipartUploadResult {NS}><UploadId>&c;</UploadId>"
             "</InitiateMultipartUploadResult>").encode()
PART = 5 << 20


def _xml_server(*, initiate: bytes = b"", complete: bytes = b"",
                complete_headers: dict[str, str] | None = None,
                part_headers: dict[str, str] | None = None) -> Any:
    def handle(request: MockRequest) -> MockResponse:
        if request.method == "POST" and "uploads" in request.params:
            return MockResponse(200, {"Content-Type": "application/xml"}, initiate or (
                f"<InitiateMultipartUploadResult {NS}><UploadId>U1</UploadId>"
                "</InitiateMultipartUploadResult>").encode())
        if request.method == "PUT":
            crc = encode_crc32c(crc32c(request.body))
            return MockResponse(200, {"ETag": '"e"', "x-goog-hash": f"crc32c={crc}",
                                      **(part_headers or {})})
        if request.method == "POST":
            return MockResponse(200, {"Content-Type": "application/xml",
                                      **(complete_headers or {})}, complete or (
                f"<CompleteMultipartUploadResult {NS}><Key>big</Key>"
                "</CompleteMultipartUploadResult>").encode())
        if request.method == "GET":
            return MockResponse.from_json(_resource("big", size=str(2 * PART), crc32c=(
                encode_crc32c(crc32c(bytes(2 * PART)))), generation="11"))
        return MockResponse(204)

    return handle


async def _stream(handler: Any) -> tuple[Any, MockTransport]:
    client, transport = _client(handler)
    expected = Crc32c()
    expected.update(bytes(2 * PART))
    async with client:
        upload = client.start_upload(B, "big")
        try:
            await upload.put(1, memoryview(bytes(PART)))
            info = await upload.finish(2, memoryview(bytes(PART)), expected)
        except BaseException:
            await upload.abort()
            raise
    return info, transport


async def test_an_xml_answer_with_a_dtd_is_refused_before_its_entities_expand() -> None:
    assert len(EXPANDING) < 2 << 10
    with pytest.raises(ProtocolError, match=r"^initiate multipart upload gs://bkt/big "
                                            r"failed: .*DTD") as caught:
        await _stream(_xml_server(initiate=EXPANDING))
    assert (caught.value.bucket, caught.value.name) == (B, "big")


async def test_an_xml_answer_without_a_dtd_still_parses() -> None:
    client, _ = _client(_xml_server(initiate=(
        f'<?xml version="1.0" encoding="UTF-8"?>\n<InitiateMultipartUploadResult {NS}>'
        "<UploadId>U&amp;1</UploadId></InitiateMultipartUploadResult>").encode()))
    async with client:
        assert await client.initiate_multipart(B, "big") == "U&1"


async def test_a_completion_kept_alive_with_whitespace_publishes() -> None:
    body = (b"  \n" * 50 + b'<?xml version="1.0" encoding="UTF-8"?>\n'
            + f"<CompleteMultipartUploadResult {NS}><Key>big</Key>"
              "</CompleteMultipartUploadResult>".encode())
    stored = encode_crc32c(crc32c(bytes(2 * PART)))
    info, transport = await _stream(_xml_server(complete=body, complete_headers={
        "x-goog-generation": "11", "x-goog-hash": f"crc32c={stored}"}))
    assert (info.size, info.generation, info.crc32c) == (2 * PART, 11, crc32c(bytes(2 * PART)))
    assert [r.method for r in transport.requests] == ["POST", "PUT", "PUT", "POST"]


@pytest.mark.parametrize("headers", [
    {"x-goog-generation": "eleven", "x-goog-hash": "crc32c=AAAAAA=="},
    {"x-goog-generation": "11", "x-goog-hash": "crc32c=@@"},
], ids=["malformed-generation", "malformed-hash"])
async def test_a_completion_with_malformed_headers_is_confirmed_by_a_stat(
        headers: dict[str, str]) -> None:
    info, transport = await _stream(_xml_server(complete_headers=headers))
    assert (info.size, info.generation) == (2 * PART, 11)
    methods = [r.method for r in transport.requests]
    assert methods[-1] == "GET" and "DELETE" not in methods


async def test_a_part_answer_with_a_malformed_hash_is_no_bare_value_error() -> None:
    stored = encode_crc32c(crc32c(bytes(2 * PART)))
    info, _ = await _stream(_xml_server(part_headers={"x-goog-hash": "crc32c=@@"},
                                        complete_headers={"x-goog-generation": "11",
                                                          "x-goog-hash": f"crc32c={stored}"}))
    assert info.size == 2 * PART


@pytest.mark.parametrize("size", ["", "-5", "5.0", "²"], ids=["none", "negative", "float",
                                                                 "superscript"])
async def test_a_part_listing_with_a_size_that_is_no_count_is_a_protocol_error(
        size: str) -> None:
    root = ET.Element("ListPartsResult")
    part = ET.SubElement(root, "Part")
    ET.SubElement(part, "PartNumber").text = "1"
    ET.SubElement(part, "ETag").text = '"e"'
    if size:
        ET.SubElement(part, "Size").text = size
    body = ET.tostring(root)
    client, _ = _client(lambda request: MockResponse(200, {}, body))
    async with client:
        with pytest.raises(ProtocolError, match=r"^list parts gs://bkt/big failed: .*part 1 "
                                                r"the size"):
            await client.list_parts(B, "big", "U1")

