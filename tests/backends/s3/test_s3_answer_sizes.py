"""An object's size, as an S3 answer states it, must be a count of bytes.

A HEAD has no body to count: its ``Content-Length`` is the only size there
is. One without it was read as 0, so a stat called a 1,100-byte object
empty and a reader of it handed out no byte, with no error. A listing's
``<Size>`` places ranged reads and ends a reader of the listed object: a
missing one read as 0, a negative one was taken as is, and a malformed one
(as a part listing's) raised a bare ValueError naming nothing. Each is a
ProtocolError naming the operation, bucket and object.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from aiohttp import web

import aioflux
from aioflux import ClientConfig, ProtocolError, RetryPolicy, S3Store
from tests.servers.raw_server import RawServer
from tests.servers.web_server import Served, Server

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
DATA = b"hello world" * 100
_RANGE = re.compile(rb"\r\nrange: *bytes=(\d+)-(\d*)\r\n", re.IGNORECASE)


def _store(endpoint: str) -> S3Store:
    return S3Store(ClientConfig(retry=RetryPolicy(max_attempts=1)), endpoint=endpoint,
                   region="us-east-1", addressing="path", anonymous=True)


class NoLengthHead(RawServer):
    """Answers a HEAD without a Content-Length (chunked, as some proxies do),
    with an ETag that is no MD5 and no checksum; GETs with the bytes."""

    def __init__(self) -> None:
        super().__init__(self._answer)

    def _answer(self, conn: int, index: int) -> bytes:
        head = self.requests[-1]
        if head.startswith(b"HEAD"):
            return b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nTransfer-Encoding: chunked\r\n\r\n'
        match = _RANGE.search(head)
        first, last = 0, len(DATA) - 1
        if match is not None:
            first = int(match[1])
            last = min(int(match[2]), last) if match[2] else last
        body = DATA[first:last + 1]
        return (f'HTTP/1.1 206 Partial Content\r\nETag: "v1"\r\nContent-Length: {len(body)}\r\n'
                f"Content-Range: bytes {first}-{last}/{len(DATA)}\r\n\r\n").encode() + body


async def test_a_head_without_a_length_is_no_empty_object() -> None:
    async with NoLengthHead() as endpoint, _store(endpoint) as store:
        with pytest.raises(ProtocolError, match=r"^stat s3://bkt/obj failed: .*no "
                                                r"Content-Length") as caught:
            await store.stat("bkt", "obj")
        assert (caught.value.operation, caught.value.bucket, caught.value.name) == (
            "stat", "bkt", "obj")


async def test_a_reader_of_an_object_whose_head_has_no_length_does_not_read_nothing() -> None:
    # The reader sizes the object by its stat: it read 0 of the 1,100 bytes.
    def read(store: S3Store) -> bytes:
        with aioflux.open("s3://bkt/obj", client=store) as f:
            return f.read()

    async with NoLengthHead() as endpoint, _store(endpoint) as store:
        with pytest.raises(ProtocolError, match="no Content-Length"):
            await asyncio.to_thread(read, store)


def _listing(size: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult {NS}><Name>bkt</Name>'
            "<IsTruncated>false</IsTruncated><Contents><Key>pre/a</Key><Size>1</Size>"
            f'<ETag>"{"0" * 32}"</ETag></Contents><Contents><Key>pre/b</Key>{size}'
            f'<ETag>"{"1" * 32}"</ETag></Contents></ListBucketResult>').encode()


@pytest.mark.parametrize("size", ["<Size>abc</Size>", "<Size>-5</Size>", "<Size></Size>", "",
                                  "<Size>\u00b2</Size>"],
                         ids=["malformed", "negative", "empty", "missing", "superscript"])
async def test_a_listed_size_that_is_no_count_of_bytes_is_refused(size: str) -> None:
    async def answer(request: web.Request, served: Served) -> web.Response:
        return web.Response(body=_listing(size), content_type="application/xml")

    async with Server(answer) as (endpoint, _), _store(endpoint) as store:
        with pytest.raises(ProtocolError, match=r"^list s3://bkt/pre/b failed: .*not a count "
                                                r"of bytes") as caught:
            [o async for o in store.list_objects("bkt", "pre/")]
        assert (caught.value.operation, caught.value.bucket) == ("list", "bkt")


async def test_a_listing_of_good_sizes_still_lists() -> None:
    async def answer(request: web.Request, served: Served) -> web.Response:
        return web.Response(body=_listing("<Size>1100</Size>"), content_type="application/xml")

    async with Server(answer) as (endpoint, _), _store(endpoint) as store:
        listed = [(o.name, o.size) async for o in store.list_objects("bkt", "pre/")]
        assert listed == [("pre/a", 1), ("pre/b", 1100)]


@pytest.mark.parametrize("size", ["abc", ""])
async def test_a_part_listing_whose_size_is_no_count_of_bytes_is_refused(size: str) -> None:
    async def answer(request: web.Request, served: Served) -> web.Response:
        return web.Response(body=(
            f'<?xml version="1.0"?><ListPartsResult {NS}><IsTruncated>false</IsTruncated>'
            f'<Part><PartNumber>1</PartNumber><ETag>"e"</ETag><Size>{size}</Size></Part>'
            "</ListPartsResult>").encode(), content_type="application/xml")

    async with Server(answer) as (endpoint, _), _store(endpoint) as store:
        with pytest.raises(ProtocolError, match=r"^list parts s3://bkt/k failed: .*part 1"):
            await store.list_parts("bkt", "k", "U1")
