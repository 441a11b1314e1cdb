"""A configured region that is not the bucket's: S3 answers 301
PermanentRedirect naming the bucket's region (``x-amz-bucket-region``); the
store corrects the region for that bucket and retries once, as boto3 does.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from aioflux import ClientConfig
from aioflux._core.errors import StorageError
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux.s3 import S3Store
from aioflux.s3._endpoints import Endpoints
from tests.conftest import FAST_RETRY
from tests.servers.raw_server import RawServer

_MOVED = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>PermanentRedirect</Code>"
          b"<Message>The bucket you are attempting to access must be addressed using the "
          b"specified endpoint.</Message><Bucket>bkt</Bucket></Error>")


def _raw(status: str, body: bytes = b"", *, head: bool = False, **headers: str) -> bytes:
    """An answer; to a HEAD (``head``) without the body its length announces."""
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head else body)


def _signed_region(head: bytes) -> str:
    auth = next(line for line in head.decode().split("\r\n")
                if line.lower().startswith("authorization:"))
    return auth.split("Credential=", 1)[1].split("/")[2]


async def test_a_wrong_region_is_corrected_for_the_bucket_and_retried_once() -> None:
    moved = _raw("301 Moved Permanently", _MOVED, head=True,
                 x_amz_bucket_region="eu-central-1",
                 Content_Type="application/xml")
    found = _raw("200 OK", b"1234567", head=True, ETag='"0123456789abcdef0123456789abcdef"',
                 Last_Modified="Sun, 22 Nov 2026 12:00:00 GMT")
    answers = [moved, found, found]
    server = RawServer(lambda conn, i: answers.pop(0) if answers else None)
    async with server as endpoint:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint,
                           region="us-west-2") as store:
            assert await store.exists("bkt", "k")
            # The bucket's region is remembered: the next request is signed
            # for it at once.
            assert await store.exists("bkt", "other")
            assert store.endpoints.regions == {"bkt": "eu-central-1"}
            assert store.stats.retries == 0  # a correction, not a retry of a failure
    heads = server.requests
    assert [h.split(b" ", 2)[:2] for h in heads] == [[b"HEAD", b"/bkt/k"], [b"HEAD", b"/bkt/k"],
                                                     [b"HEAD", b"/bkt/other"]]
    assert [_signed_region(h) for h in heads] == ["us-west-2", "eu-central-1", "eu-central-1"]


async def test_a_second_wrong_region_answer_is_an_error() -> None:
    # Retried once only: a server that keeps redirecting is not followed around.
    answers = [_raw("301 Moved Permanently", _MOVED, head=True, x_amz_bucket_region=region)
               for region in ("eu-central-1", "ap-south-1")]
    server = RawServer(lambda conn, i: answers.pop(0) if answers else None)
    async with server as endpoint:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint,
                           region="us-west-2") as store:
            with pytest.raises(StorageError, match="s3://bkt/k") as caught:
                await store.stat("bkt", "k")
    assert caught.value.status == 301
    assert len(server.requests) == 2


@pytest.mark.parametrize("region", ["evil.example/x", "a b", "x" * 65])
async def test_a_region_that_is_no_region_name_is_not_followed(region: str) -> None:
    # A region becomes part of a host name: one with dots, slashes or spaces
    # is not taken, not even for the bucket's HEAD, so no request (and no
    # credential) can be steered to a host the server picked.
    answers = [_raw("301 Moved Permanently", _MOVED, head=True, x_amz_bucket_region=region),
               _raw("301 Moved Permanently", b"", head=True, x_amz_bucket_region=region)]
    server = RawServer(lambda conn, i: answers.pop(0) if answers else None)
    async with server as endpoint:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint,
                           region="us-west-2") as store:
            with pytest.raises(StorageError, match="s3://bkt/k") as caught:
                await store.stat("bkt", "k")
            assert store.endpoints.regions == {}
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint) as found:
            assert await found.endpoints.find_region("bkt", found.transport) == "us-east-1"
    assert caught.value.status == 301
    assert len(server.requests) == 2


def test_on_aws_the_request_moves_to_the_bucket_regional_host() -> None:
    endpoints = Endpoints(None, "auto", "us-west-2")
    url = endpoints.object_url("bkt", "a/b c") + "?uploads"
    assert url == "https://bkt.s3.us-west-2.amazonaws.com/a/b%20c?uploads"
    assert endpoints.relocate("bkt", url, "eu-central-1") == \
        "https://bkt.s3.eu-central-1.amazonaws.com/a/b%20c?uploads"
    assert endpoints.region_of_url("https://bkt.s3.eu-central-1.amazonaws.com/x") == \
        "eu-central-1"
    # Path-style (a dotted bucket): the host moves, the path stays.
    dotted = endpoints.object_url("my.bkt", "k")
    assert endpoints.relocate("my.bkt", dotted, "ap-south-1") == \
        "https://s3.ap-south-1.amazonaws.com/my.bkt/k"
    # Other buckets keep the configured region.
    assert endpoints.object_url("other", "k") == "https://other.s3.us-west-2.amazonaws.com/k"


async def test_a_lean_read_is_corrected_too() -> None:
    # Object bodies come over the lean GET path, not Transport.request.
    data = os.urandom(3000)
    answers = [_raw("301 Moved Permanently", _MOVED, x_amz_bucket_region="ap-south-1",
                    Content_Type="application/xml"),
               # The HEAD of the bucket that asks its region.
               _raw("301 Moved Permanently", _MOVED, head=True,
                    x_amz_bucket_region="ap-south-1"),
               _raw("200 OK", data, ETag='"' + hashlib.md5(data).hexdigest() + '"',
                    x_amz_checksum_crc32c=encode_crc32c(crc32c(data)),
                    x_amz_checksum_type="FULL_OBJECT")]
    server = RawServer(lambda conn, i: answers.pop(0) if answers else None)
    async with server as endpoint:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint,
                           region="us-west-2") as store:
            assert await store.read("bkt", "k") == data
            assert store.endpoints.regions == {"bkt": "ap-south-1"}
    heads = server.requests
    assert [h.split(b" ", 2)[:2] for h in heads] == [[b"GET", b"/bkt/k"], [b"HEAD", b"/bkt"],
                                                     [b"GET", b"/bkt/k"]]
    assert [_signed_region(h) for h in heads] == ["us-west-2", "us-west-2", "ap-south-1"]


async def test_a_copy_into_a_bucket_of_another_region_learns_the_destinations() -> None:
    # The CopyObject went under the source's name: the destination's region
    # was recorded for the source bucket and the copy sent again, signed for
    # the same wrong region.
    etag = '"0123456789abcdef0123456789abcdef"'
    head = _raw("200 OK", b"1234567", head=True, ETag=etag,
                Last_Modified="Sun, 22 Nov 2026 12:00:00 GMT")
    moved = _raw("301 Moved Permanently", _MOVED, x_amz_bucket_region="eu-central-1",
                 Content_Type="application/xml")
    copied = _raw("200 OK", f"<CopyObjectResult><ETag>{etag}</ETag></CopyObjectResult>".encode(),
                  Content_Type="application/xml")
    answers = [head, moved, copied, head]
    server = RawServer(lambda conn, i: answers.pop(0) if answers else None)
    async with server as endpoint:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint,
                           region="us-west-2") as store:
            info = await store.copy("src", "k", "dst", "k2")
            assert (info.bucket, info.name, info.size) == ("dst", "k2", 7)
            assert store.endpoints.regions == {"dst": "eu-central-1"}
    assert [_signed_region(h) for h in server.requests] == \
        ["us-west-2", "us-west-2", "eu-central-1", "eu-central-1"]
