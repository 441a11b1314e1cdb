"""An endpoint with a path (an S3 API served under ``https://host/some/path``,
as Supabase's ``/storage/v1/s3`` or a reverse proxy's): the bucket is the
first segment after that path, so a region learnt for the bucket (a
wrong-region answer, or the bucket's own HEAD) is the one its requests are
signed for.
"""

from __future__ import annotations

import pytest

from aioflux import ClientConfig
from aioflux.s3 import S3Store
from aioflux.s3._endpoints import Endpoints
from tests.conftest import FAST_RETRY
from tests.servers.raw_server import RawServer

_ETAG = '"0123456789abcdef0123456789abcdef"'
_MOVED = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>PermanentRedirect</Code>"
          b"<Message>moved</Message><Bucket>bkt</Bucket></Error>")


def _head(status: str, **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Length: 7"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _signed_region(head: bytes) -> str:
    auth = next(line for line in head.decode().split("\r\n")
                if line.lower().startswith("authorization:"))
    return auth.split("Credential=", 1)[1].split("/")[2]


def _target(head: bytes) -> bytes:
    return head.split(b" ", 2)[1]


def _bucket_in(region: str, server: list[RawServer]) -> RawServer:
    """A server whose bucket ``bkt`` lives in ``region``: a request signed for
    another is answered 301 naming it, as S3 does."""

    def script(conn: int, index: int) -> bytes:
        head = server[0].requests[-1]
        if _signed_region(head) != region:
            return _head("301 Moved Permanently", x_amz_bucket_region=region)
        return _head("200 OK", ETag=_ETAG, x_amz_bucket_region=region,
                     Last_Modified="Sun, 22 Nov 2026 12:00:00 GMT")

    server.append(RawServer(script))
    return server[0]


@pytest.mark.parametrize("path", ["/storage/v1/s3", "/s3/", "/a"])
def test_the_bucket_of_a_url_is_the_segment_after_the_endpoints_path(path: str) -> None:
    endpoints = Endpoints("http://127.0.0.1:9000" + path, "auto", None)
    endpoints.regions["bkt"] = "eu-central-1"
    for name in ("", "k", "a/b c"):
        assert endpoints.region_of_url(endpoints.object_url("bkt", name) + "?x=1") == \
            "eu-central-1"
    # A bucket named like a segment of the path is still told apart.
    assert endpoints.region_of_url(endpoints.object_url("s3", "k")) == "us-east-1"


async def test_a_wrong_region_under_an_endpoints_path_is_corrected() -> None:
    holder: list[RawServer] = []
    server = _bucket_in("eu-central-1", holder)
    async with server as root:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=root + "/storage/v1/s3",
                           region="us-west-2") as store:
            assert await store.exists("bkt", "k")
            assert await store.exists("bkt", "other")
            assert store.endpoints.regions == {"bkt": "eu-central-1"}
    assert [_target(h) for h in server.requests] == \
        [b"/storage/v1/s3/bkt/k", b"/storage/v1/s3/bkt/k", b"/storage/v1/s3/bkt/other"]
    assert [_signed_region(h) for h in server.requests] == \
        ["us-west-2", "eu-central-1", "eu-central-1"]


async def test_a_region_found_under_an_endpoints_path_signs_the_buckets_requests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")  # no region configured: each bucket's is asked
    holder: list[RawServer] = []
    server = _bucket_in("ap-south-1", holder)
    async with server as root:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=root + "/s3") as store:
            assert store.region is None
            assert await store.exists("bkt", "k")
    assert [_target(h) for h in server.requests] == [b"/s3/bkt", b"/s3/bkt/k"]
    assert [_signed_region(h) for h in server.requests] == ["us-east-1", "ap-south-1"]
