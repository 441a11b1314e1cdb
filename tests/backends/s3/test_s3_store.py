"""What only S3 has: SigV4 and the AWS credential chain, regions, addressing,
S3's error codes and retries, its checksums and version tokens, multipart
rules, batch delete, and listings without an end offset.

The common store behaviour runs on moto in test_client_conformance.py;
here moto (``moto_s3``, started by tests/conftest.py) checks signatures
and credentials, and :class:`aioflux.testing.MockTransport` scripts the
answers a real S3 gives that moto does not (throttling, corrupt stores,
virtual hosts, which need DNS).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pickle
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from aioflux import (
    ChecksumMismatch,
    ClientConfig,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    RateLimited,
    RetryPolicy,
    S3Store,
    ServerError,
)
from aioflux._api.stores import new_store, store_for_url
from aioflux._core.auth import AuthRequest
from aioflux._core.integrity.crc import Crc32c, crc32c, encode_crc32c
from aioflux._net.transport import HttpResponse, Op
from aioflux.s3._auth import SigV4
from aioflux.s3._xml import etag_of, generation_of
from aioflux.testing import Emulator, MockRequest, MockResponse, MockTransport
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket

MIB = 1024 * 1024


@pytest.fixture
async def s3(moto_s3: MotoS3) -> AsyncIterator[tuple[S3Store, str]]:
    async with S3Store(ClientConfig(max_concurrency=16, retry=FAST_RETRY),
                       endpoint=moto_s3.endpoint) as store:
        bucket = unique_bucket("s3")
        await store.create_bucket(bucket)
        yield store, bucket


def _mock_store(handler: Callable[[MockRequest], MockResponse], *,
                endpoint: str = "https://s3.example.test", retry: RetryPolicy = FAST_RETRY,
                region: str = "us-east-1", request_rate: Any = "adaptive",
                **kwargs: Any) -> tuple[S3Store, MockTransport]:
    transport = MockTransport(handler, config=ClientConfig(retry=retry, request_rate=request_rate),
                              endpoint=endpoint, auth=SigV4(lambda _url: region))
    return S3Store(transport=transport, endpoint=endpoint, region=region, **kwargs), transport


def _error(status: int, code: str, headers: dict[str, str] | None = None) -> MockResponse:
    body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>scripted {code}</Message><RequestId>r</RequestId></Error>").encode()
    return MockResponse(status, {"Content-Type": "application/xml", **(headers or {})}, body)


def _md5_etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


# -- signing and credentials (moto checks signatures once auth is on) ----------------


@pytest.fixture
def moto_auth(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """An IAM user allowed everything, then moto checking every signature
    (until the test ends). Returns its access key id and secret."""
    import boto3
    from moto import settings

    iam = boto3.client("iam", endpoint_url=moto_s3.endpoint, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    user = unique_bucket("user")
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=(
        '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", '
        '"Resource": "*"}]}'))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    return key["AccessKeyId"], key["SecretAccessKey"]


async def test_sigv4_accepted_and_a_wrong_secret_refused(
        moto_s3: MotoS3, moto_auth: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    key_id, secret = moto_auth
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    bucket = unique_bucket("signed")
    data = os.urandom(10_000)
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint) as store:
        await store.create_bucket(bucket)
        # A key with characters SigV4 encodes, a query, a body, a range.
        await store.write(bucket, "dir/a b+c=d~é.bin", data, metadata={"k": "v"})
        assert await store.read(bucket, "dir/a b+c=d~é.bin", start=5, end=500) == data[5:500]
        assert [o.name async for o in store.list_objects(bucket, "dir/a ")] == [
            "dir/a b+c=d~é.bin"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret[:-1] + ("x" if secret[-1] != "x" else "y"))
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint) as wrong:
        with pytest.raises(PermissionDenied) as info:
            await wrong.read(bucket, "dir/a b+c=d~é.bin")
    assert info.value.reason == "SignatureDoesNotMatch"
    assert info.value.attempts == 1  # not retried
    assert "s3://" + bucket in str(info.value)
    assert secret[:8] not in str(info.value) and "Signature=" not in str(info.value)


async def test_credentials_from_a_shared_credentials_file_profile(
        moto_s3: MotoS3, moto_auth: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    key_id, secret = moto_auth
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = AKIAWRONG\naws_secret_access_key = no\n"
                     f"[train]\naws_access_key_id = {key_id}\n"
                     f"aws_secret_access_key = {secret}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    bucket = unique_bucket("profile")
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint,
                       profile="train") as store:
        await store.create_bucket(bucket)
        await store.write(bucket, "x", b"from the profile")
        assert await store.read(bucket, "x") == b"from the profile"
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint) as default:
        with pytest.raises(PermissionDenied):  # the default profile's key is unknown
            await default.read(bucket, "x")


async def test_credentials_from_web_identity(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    # The chain's AssumeRoleWithWebIdentity (EKS, GitHub OIDC), against
    # moto's STS: temporary credentials with a session token, fetched on
    # first use (in a thread: it is an HTTP call).
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    token = tmp_path / "token"
    token.write_text("header.payload.signature")
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/trainer")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_s3.endpoint)
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint) as store:
        assert isinstance(store.transport.auth, SigV4)
        headers = await store.transport.auth.headers(
            AuthRequest("GET", store.object_url("bkt", "k")))
        assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=ASIA")
        assert headers["X-Amz-Security-Token"]
        bucket = unique_bucket("webid")
        await store.create_bucket(bucket)
        await store.write(bucket, "k", b"assumed")
        assert await store.read(bucket, "k") == b"assumed"


async def test_no_credentials_anywhere_sends_unsigned_requests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    store = S3Store(endpoint="http://127.0.0.1:9")
    assert type(store.transport.auth).__name__ == "AnonymousAuth"
    signed = S3Store(endpoint="http://127.0.0.1:9", anonymous=False)
    assert type(signed.transport.auth).__name__ == "AnonymousAuth"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert isinstance(S3Store(endpoint="http://127.0.0.1:9").transport.auth, SigV4)
    assert type(S3Store(endpoint="http://127.0.0.1:9",
                        anonymous=True).transport.auth).__name__ == "AnonymousAuth"


async def test_signature_carries_the_region_and_credentials_of_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENVIRONMENT")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token")
    store = S3Store(endpoint="http://127.0.0.1:9")
    assert store.region == "eu-west-3"
    auth = store.transport.auth
    headers = await auth.headers(AuthRequest("PUT", store.object_url("bkt", "k"),
                                             payload=b"body"))
    assert headers["Authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKIDENVIRONMENT/")
    assert "/eu-west-3/s3/aws4_request" in headers["Authorization"]
    assert headers["X-Amz-Security-Token"] == "session-token"
    # Plain HTTP: the body is signed; over TLS it need not be.
    assert headers["X-Amz-Content-SHA256"] == hashlib.sha256(b"body").hexdigest()
    tls = await auth.headers(AuthRequest("PUT", "https://bkt.s3.eu-west-3.amazonaws.com/k",
                                         payload=b"body"))
    assert tls["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert S3Store(endpoint="http://127.0.0.1:9").region == "ap-south-1"


@pytest.mark.parametrize("sign_payload", [False, True])
async def test_sign_payload_setting(moto_s3: MotoS3, sign_payload: bool) -> None:
    # False: never hash bodies (even over plain http); True: also over TLS.
    store = S3Store(endpoint=moto_s3.endpoint, sign_payload=sign_payload)
    auth = store.transport.auth
    for url in (store.object_url("bkt", "k"), "https://bkt.s3.eu-west-3.amazonaws.com/k"):
        headers = await auth.headers(AuthRequest("PUT", url, payload=b"body"))
        assert headers["X-Amz-Content-SHA256"] == (
            hashlib.sha256(b"body").hexdigest() if sign_payload else "UNSIGNED-PAYLOAD")
    # moto checks the signature either way; the setting survives a pickle
    # (DataLoader workers rebuild the store from its settings).
    bucket = unique_bucket("sign")
    async with pickle.loads(pickle.dumps(store)) as copy:
        await copy.create_bucket(bucket)
        await copy.write(bucket, "k", b"body" * 1000)
        assert await copy.read(bucket, "k") == b"body" * 1000
        headers = await copy.transport.auth.headers(
            AuthRequest("PUT", copy.object_url(bucket, "k"), payload=b"x"))
        assert (headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD") is not sign_payload
    with pytest.raises(InvalidArgument, match="sign_payload"):
        S3Store(endpoint=moto_s3.endpoint, sign_payload="no")  # type: ignore[arg-type]


async def test_region_discovered_from_the_bucket(moto_s3: MotoS3,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = unique_bucket("eu")
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint,
                       region="eu-west-1") as maker:
        await maker.create_bucket(bucket)
        await maker.write(bucket, "x", b"in ireland")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint) as store:
        assert store.region is None
        assert await store.read(bucket, "x") == b"in ireland"
        assert await store.read(bucket, "x") == b"in ireland"
        assert store.endpoints.regions[bucket] == "eu-west-1"
        # One HEAD of the bucket, then the reads: found once, cached.
        assert store.stats.requests == 3
        headers = await store.transport.auth.headers(
            AuthRequest("GET", store.object_url(bucket, "x")))
        assert "/eu-west-1/s3/aws4_request" in headers["Authorization"]


# -- addressing ----------------------------------------------------------------------


async def test_virtual_hosted_and_path_style_urls() -> None:
    def handler(request: MockRequest) -> MockResponse:
        return MockResponse(200, {"ETag": _md5_etag(b"abc"), "Content-Length": "3"}, b"abc")

    aws, transport = _mock_store(handler, endpoint="https://s3.amazonaws.com",
                                 region="eu-west-1")
    assert await aws.read("my-bucket", "a/b c") == b"abc"
    assert await aws.read("my.dotted.bucket", "k") == b"abc"
    assert [r.url for r in transport.requests] == [
        "https://my-bucket.s3.eu-west-1.amazonaws.com/a/b%20c",
        "https://s3.eu-west-1.amazonaws.com/my.dotted.bucket/k"]

    minio, transport = _mock_store(handler, endpoint="https://minio.example.test:9000",
                                   addressing="virtual")
    assert await minio.read("bkt", "k") == b"abc"
    path, path_transport = _mock_store(handler, endpoint="https://minio.example.test:9000")
    assert await path.read("bkt", "k") == b"abc"
    assert transport.requests[0].url == "https://bkt.minio.example.test:9000/k"
    assert path_transport.requests[0].url == "https://minio.example.test:9000/bkt/k"
    with pytest.raises(InvalidArgument, match="addressing"):
        S3Store(endpoint="https://x.test", addressing="dns")  # type: ignore[arg-type]


def test_credentials_go_only_to_the_services_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    aws = S3Store(region="us-west-2")
    assert aws.endpoint == "https://s3.amazonaws.com"
    assert aws.object_url("bkt", "k") == "https://bkt.s3.us-west-2.amazonaws.com/k"
    china = S3Store(region="cn-north-1")
    assert china.object_url("bkt", "k") == "https://bkt.s3.cn-north-1.amazonaws.com.cn/k"
    assert china.transport.same_origin(china.object_url("bkt", "k"))
    same = aws.transport.same_origin
    assert same("https://bkt.s3.us-west-2.amazonaws.com/k")
    assert same("https://s3.us-west-2.amazonaws.com/bkt/k")
    assert not same("http://bkt.s3.us-west-2.amazonaws.com/k")  # not TLS
    assert not same("https://bkt.s3.us-west-2.amazonaws.com.evil.test/k")
    assert not same("https://evil.test/s3.amazonaws.com")
    minio = S3Store(endpoint="https://minio.test:9000", addressing="virtual")
    assert minio.transport.same_origin("https://bkt.minio.test:9000/k")
    assert not minio.transport.same_origin("https://bkt.minio.test:9001/k")
    assert not minio.transport.same_origin("https://minio.test.evil:9000/k")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://generic.test:1")
    assert S3Store().endpoint == "http://generic.test:1"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3only.test:2/")
    assert S3Store().endpoint == "http://s3only.test:2"
    assert S3Store(endpoint="http://arg.test:3").endpoint == "http://arg.test:3"


# -- errors and retries ----------------------------------------------------------------


async def test_slowdown_and_request_timeout_are_retried() -> None:
    script = [_error(503, "SlowDown"), _error(400, "RequestTimeout"),
              _error(500, "InternalError")]

    def handler(request: MockRequest) -> MockResponse:
        if script:
            return script.pop(0)
        return MockResponse(200, {"ETag": _md5_etag(b"ok")}, b"ok")

    store, transport = _mock_store(handler)
    assert await store.read("bkt", "k") == b"ok"
    assert len(transport.requests) == 4
    assert store.stats.retries == 3


@pytest.mark.parametrize(("status", "code", "cls"), [
    (404, "NoSuchKey", NotFound), (404, "NoSuchBucket", NotFound),
    (403, "AccessDenied", PermissionDenied), (403, "InvalidAccessKeyId", PermissionDenied),
    (400, "ExpiredToken", PermissionDenied), (412, "PreconditionFailed", PreconditionFailed),
    (416, "InvalidRange", InvalidRequest), (400, "Throttling", RateLimited),
    (503, "SlowDown", RateLimited), (500, "InternalError", ServerError),
])
async def test_error_codes_become_typed_errors(status: int, code: str,
                                               cls: type[Exception]) -> None:
    # The rate controller off: a throttle then counts against max_attempts
    # (on, it is retried until throttle_deadline: tests/core/rate/test_throttle.py).
    store, transport = _mock_store(lambda _r: _error(status, code, {"Retry-After": "7"}),
                                   retry=RetryPolicy(max_attempts=2, initial_delay=0.001,
                                                     max_delay=0.01), request_rate="off")
    with pytest.raises(cls) as info:
        await store.stat("bkt", "dir/key")
    err: Any = info.value
    assert (err.bucket, err.name, err.reason, err.status) == ("bkt", "dir/key", code, status)
    assert "stat s3://bkt/dir/key" in str(err)
    assert "AWS4" not in str(err) and "Credential" not in str(err)
    retried = cls in (RateLimited, ServerError)
    assert len(transport.requests) == (2 if retried else 1)
    if retried:
        assert err.retry_after == 7.0


# -- checksums ---------------------------------------------------------------------------


async def test_crc32c_mismatch_detected_on_read(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    data = b"the bytes stored"

    async def drain(resp: HttpResponse) -> None:
        await resp.read()

    # moto stores the checksum a client sends without checking it: a store
    # whose bytes rotted, as far as a reader can tell.
    await store.transport.request(
        Op("write", bucket, "rotten", "s3"), "PUT", store.object_url(bucket, "rotten"), drain,
        headers={"x-amz-checksum-crc32c": encode_crc32c(crc32c(b"other bytes")),
                 "x-amz-sdk-checksum-algorithm": "CRC32C"}, data=data)
    with pytest.raises(ChecksumMismatch) as info:
        await store.read(bucket, "rotten")
    assert "read s3://" in str(info.value) and info.value.attempts > 1
    # A range is not checked against the whole object's crc32c.
    assert await store.read(bucket, "rotten", start=4, end=9) == data[4:9]
    assert (await store.stat(bucket, "rotten")).crc32c == crc32c(b"other bytes")


async def test_crc32c_mismatch_detected_on_upload() -> None:
    deleted: list[str] = []

    def handler(request: MockRequest) -> MockResponse:
        if request.method == "PUT":
            return MockResponse(200, {"ETag": _md5_etag(request.body),
                                      "x-amz-checksum-crc32c": encode_crc32c(123)})
        if request.method == "DELETE":
            deleted.append(request.headers.get("If-Match", ""))
            return MockResponse(204)
        raise AssertionError(request)

    store, _ = _mock_store(handler)
    with pytest.raises(ChecksumMismatch, match="stored crc32c") as info:
        await store.write("bkt", "k", b"payload")
    assert "the object was deleted" in str(info.value)
    assert deleted == [_md5_etag(b"payload")]  # exactly the version written


async def test_etag_checked_when_the_server_reports_no_crc32c() -> None:
    def handler(request: MockRequest) -> MockResponse:
        if request.method == "PUT":
            return MockResponse(200, {"ETag": _md5_etag(b"something else")})
        return MockResponse(204)

    store, _ = _mock_store(handler)
    with pytest.raises(ChecksumMismatch, match="not the MD5"):
        await store.write("bkt", "k", b"payload")

    def honest(request: MockRequest) -> MockResponse:
        assert request.headers["x-amz-checksum-crc32c"] == encode_crc32c(crc32c(request.body))
        return MockResponse(200, {"ETag": _md5_etag(request.body)})

    store, _ = _mock_store(honest)
    info = await store.write("bkt", "k", b"payload")
    assert info.crc32c == crc32c(b"payload")
    assert info.generation == generation_of(_md5_etag(b"payload"))

    def kms(request: MockRequest) -> MockResponse:
        # With SSE-KMS the ETag is 32 hex digits that are not the MD5.
        return MockResponse(200, {"ETag": _md5_etag(b"not the content"),
                                  "x-amz-server-side-encryption": "aws:kms"})

    store, transport = _mock_store(kms)
    assert (await store.write("bkt", "k", b"payload")).size == 7
    assert [r.method for r in transport.requests] == ["PUT"]  # nothing deleted


async def test_a_corrupted_part_is_refused() -> None:
    def handler(request: MockRequest) -> MockResponse:
        if "uploads" in request.params:
            return MockResponse(200, {}, b"<InitiateMultipartUploadResult><UploadId>u1"
                                         b"</UploadId></InitiateMultipartUploadResult>")
        if request.method == "PUT":
            return MockResponse(200, {"ETag": '"e"', "x-amz-checksum-crc32c": "AAAAAA=="})
        if request.method == "DELETE":
            return MockResponse(204)
        raise AssertionError(request)

    store, transport = _mock_store(handler)
    upload = store.start_upload("bkt", "big", part_size=5 * MIB)
    with pytest.raises(ChecksumMismatch, match="upload part 1"):
        await upload.put(1, memoryview(b"x" * (5 * MIB)))
    await upload.abort()
    assert transport.requests[-1].method == "DELETE"
    assert transport.requests[-1].params["uploadId"] == "u1"


async def test_multipart_keeps_the_full_object_crc32c(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), os.urandom(1000)]
    upload = store.start_upload(bucket, "mp", part_size=5 * MIB)
    await upload.put(2, memoryview(parts[1]))
    await upload.put(1, memoryview(parts[0]))
    [open_upload] = await store.list_multipart_uploads(bucket)
    assert [p.number for p in await store.list_parts(bucket, "mp", open_upload.upload_id)] \
        == [1, 2]
    whole = b"".join(parts)
    running = Crc32c()
    running.update(whole)
    info = await upload.finish(3, memoryview(parts[2]), running)
    assert (info.size, info.crc32c) == (len(whole), crc32c(whole))
    stat = await store.stat(bucket, "mp")
    assert stat.crc32c == crc32c(whole)  # FULL_OBJECT: the content's, not of parts
    assert etag_of(stat.generation) is not None and etag_of(stat.generation).endswith('-3"')
    assert await store.read(bucket, "mp") == whole
    assert await store.list_multipart_uploads(bucket) == []
    with pytest.raises(InvalidArgument, match="5242880"):
        store.start_upload(bucket, "small", part_size=MIB)
    with pytest.raises(InvalidArgument, match="5368709120"):
        store.start_upload(bucket, "huge", part_size=6 * 1024**3)
    assert stat.updated is not None and stat.updated.endswith("Z")


# -- version tokens and conditional writes ------------------------------------------------


def test_generation_is_the_etag_reversibly() -> None:
    single, multi = '"9e107d9d372bb6826bd81d3542a419d6"', '"9e107d9d372bb6826bd81d3542a419d6-17"'
    for etag in (single, multi):
        generation = generation_of(etag)
        assert generation > 2**64 and etag_of(generation) == etag
    assert generation_of(single) != generation_of(multi)
    hashed = generation_of('"opaque-etag"')
    assert 0 < hashed < 2**63 and etag_of(hashed) is None
    assert generation_of("") == 0


async def test_pinned_read_of_an_opaque_etag_maps_back_through_the_store() -> None:
    def handler(request: MockRequest) -> MockResponse:
        if request.method == "HEAD":
            return MockResponse(200, {"ETag": '"opaque"'})
        if request.headers.get("If-Match") not in (None, '"opaque"'):
            return _error(412, "PreconditionFailed")
        return MockResponse(200, {"ETag": '"opaque"'}, b"hi")

    store, transport = _mock_store(handler)
    info = await store.stat("bkt", "k")
    assert await store.read("bkt", "k", generation=info.generation) == b"hi"
    assert transport.requests[-1].headers["If-Match"] == '"opaque"'
    with pytest.raises(NotFound, match="no longer generation"):
        await store.read("bkt", "k", generation=info.generation + 1)


async def test_create_only_write_is_if_none_match(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    first = await store.write(bucket, "manifest", b"one", if_generation_match=0)
    with pytest.raises(PreconditionFailed) as info:
        await store.write(bucket, "manifest", b"two", if_generation_match=0)
    assert info.value.reason == "PreconditionFailed"
    assert await store.read(bucket, "manifest") == b"one"
    with pytest.raises(PreconditionFailed):  # If-Match on a missing object
        await store.write(bucket, "absent", b"x", if_generation_match=first.generation)
    assert not await store.exists(bucket, "absent")
    with pytest.raises(InvalidArgument, match="resumable"):
        await store.write(bucket, "r", b"x", resumable=True)


# -- delete, copy, listing ------------------------------------------------------------------


async def test_batch_delete(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    names = [f"many/{i:04d}" for i in range(1005)]
    # Objects on both sides of the 1,000-key cut (S3 deletes an absent key
    # as it deletes a present one): 1,005 writes to moto were ~12 s of a
    # suite worker's CPU for what ten prove.
    present = [names[i] for i in (0, 1, 500, 998, 999, 1000, 1001, 1003, 1004)]
    await asyncio.gather(*(store.write(bucket, n, n.encode()) for n in present))
    await store.write(bucket, "keep", b"k")
    before = store.stats.requests
    await store.delete_many(bucket, [*names, "many/never-existed"])
    assert store.stats.requests - before == 2  # 1000 keys per request
    assert [o.name async for o in store.list_objects(bucket)] == ["keep"]


async def test_copy_across_buckets(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    other = unique_bucket("dst")
    await store.create_bucket(other)
    data = os.urandom(3000)
    await store.write(bucket, "src", data)
    info = await store.copy(bucket, "src", other, "dir/dst")
    assert (info.bucket, info.name, info.size, info.crc32c) == (other, "dir/dst", 3000,
                                                                crc32c(data))
    assert info.scheme == "s3" and info.url == f"s3://{other}/dir/dst"
    assert await store.read(other, "dir/dst") == data


async def test_listing_offsets_and_delimiter(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    # "p/010!" sorts between start-after's "p/010" and start_offset "p/0100".
    names = [f"p/{i:04d}" for i in range(40)] + ["p/010!", "p/sub/a", "p/sub/b", "q"]
    for name in names:
        await store.write(bucket, name, b"x")
    got = [o.name async for o in store.list_objects(bucket, "p/", start_offset="p/0010",
                                                     end_offset="p/0015")]
    assert got == [f"p/{i:04d}" for i in range(10, 15)]
    assert "p/010!" not in [o.name async for o in store.list_objects(
        bucket, start_offset="p/0100")]
    before = store.stats.requests
    pages = [p async for p in store.list(bucket, "p/", page_size=10, end_offset="p/0015")]
    # Stopped at its end: two pages fetched of five, no token handed on.
    assert store.stats.requests - before == 2
    assert [o.name for p in pages for o in p.objects] == [f"p/{i:04d}" for i in range(15)]
    assert pages[-1].next_page_token is None
    grouped = [p async for p in store.list(bucket, "p/", delimiter="/",
                                           start_offset="p/0039")]
    assert [o.name for p in grouped for o in p.objects] == ["p/0039", "p/010!"]
    assert sorted({x for p in grouped for x in p.prefixes}) == ["p/sub/"]
    listed = [o async for o in store.list_objects(bucket, "p/sub/")]
    assert [(o.scheme, o.size, o.crc32c) for o in listed] == [("s3", 1, None)] * 2


async def test_a_start_offset_ending_in_a_letter_skips_the_keys_below(
        emulator: Emulator) -> None:
    # start-after is exclusive; what is sent must sit just below the
    # inclusive start_offset. "obj-005j" (a parallel lister's split point
    # can end in any character its names hold) minus its last character,
    # "obj-005", made S3 page through all of obj-0050..obj-0059 first.
    bucket = unique_bucket("after")
    emulator.create_bucket(bucket)
    for i in range(1000):
        emulator.store.put(bucket, f"obj-{i:04d}", b"x")
    emulator.store.put(bucket, "obj-005jam", b"x")
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=emulator.s3_endpoint) as store:
        before = store.stats.requests
        pages = [p async for p in store.list(bucket, start_offset="obj-005j", page_size=5)]
        assert [o.name for p in pages for o in p.objects][:2] == ["obj-005jam", "obj-0060"]
        assert store.stats.requests - before == len(pages)
        assert len(pages) == (1 + 940 + 4) // 5
        # Every key at or above a start offset, for keys ending anywhere.
        for start in ("obj-0999", "obj-00\x00", "obj-0\ue000"):
            got = [o.name async for o in store.list_objects(bucket, start_offset=start)]
            assert got == sorted(n for n in [f"obj-{i:04d}" for i in range(1000)]
                                 + ["obj-005jam"] if n >= start)


async def test_compose_is_refused(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    assert store.features.compose == 0 and not store.features.end_offset
    await store.write(bucket, "a", b"a")
    with pytest.raises(InvalidRequest, match="compose s3://"):
        await store.compose(bucket, "ab", ["a", "a"])
    assert not await store.exists(bucket, "ab")


# -- wiring and the optional extra --------------------------------------------------------


async def test_a_store_pickles_by_its_settings(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    await store.write(bucket, "p", b"pickled")
    copy = pickle.loads(pickle.dumps(store))
    assert (copy.endpoint, copy.region, copy.addressing) == (store.endpoint, store.region,
                                                             store.addressing)
    async with copy:
        assert await copy.read(bucket, "p") == b"pickled"


async def test_s3_urls_pick_the_s3_store(moto_s3: MotoS3) -> None:
    store = new_store("s3", endpoint=moto_s3.endpoint, region="eu-central-1")
    assert isinstance(store, S3Store) and store.region == "eu-central-1"
    picked, url = store_for_url("s3://bkt/a/b.bin", store)
    assert picked is store and (url.bucket, url.name) == ("bkt", "a/b.bin")
    with pytest.raises(InvalidArgument, match="credentials"):
        new_store("s3", credentials="token")


def _without(module: str, code: str) -> str:
    """What ``code`` prints in a fresh interpreter where ``module`` cannot be imported."""
    prelude = (f"import sys; sys.modules[{module!r}] = None\n"
               "import os; os.environ.update(AWS_ACCESS_KEY_ID='k', AWS_SECRET_ACCESS_KEY='s')\n"
               "import aioflux\n")
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, check=True).stdout


def test_without_botocore_s3_fails_naming_the_extra() -> None:
    out = _without("botocore", (
        "from aioflux._api.stores import default_store\n"
        "default_store('gs'); default_store('file')\n"
        "try:\n"
        "    aioflux.S3Store()\n"
        "except aioflux.InvalidArgument as exc:\n"
        "    print(exc)\n"
        "public = aioflux.S3Store(anonymous=True, endpoint='http://127.0.0.1:9')\n"
        "print('anonymous', type(public.transport.auth).__name__)\n"))
    assert 'pip install "aioflux-storage[s3]"' in out
    # Public buckets need no signing, so no botocore either.
    assert "anonymous AnonymousAuth" in out


@pytest.mark.parametrize("missing", ["awscrt", "lxml"])
def test_without_the_signer_or_the_parser_s3_fails_naming_the_extra(missing: str) -> None:
    out = _without(missing, ("try:\n"
                             "    aioflux.S3Store(region='us-east-1')\n"
                             "except aioflux.InvalidArgument as exc:\n"
                             "    print(exc)\n"))
    assert missing in out and 'pip install "aioflux-storage[s3]"' in out


# -- reads resumed, credentials refreshed, listings of odd keys, streams ---------------


async def test_a_resumed_read_is_pinned_to_the_first_responses_etag() -> None:
    data = os.urandom(1000)
    etag = _md5_etag(data)
    attempts: list[MockRequest] = []

    def handler(request: MockRequest) -> MockResponse:
        attempts.append(request)
        if len(attempts) == 1:  # cut after 300 bytes
            return MockResponse(200, {"ETag": etag, "Content-Length": "1000"}, data[:300])
        if request.headers.get("If-Match") != etag:
            return MockResponse(200, {"ETag": '"other"'}, b"x" * 1000)
        assert request.headers["Range"] == "bytes=300-"
        return MockResponse(206, {"ETag": etag, "Content-Range": "bytes 300-999/1000"},
                            data[300:])

    store, _ = _mock_store(handler)
    assert await store.read("bkt", "k") == data
    assert [r.headers.get("If-Match") for r in attempts] == [None, etag]
    assert all(r.headers["x-amz-checksum-mode"] == "ENABLED" for r in attempts)

    def replaced(request: MockRequest) -> MockResponse:
        if "Range" not in request.headers:
            return MockResponse(200, {"ETag": etag, "Content-Length": "1000"}, data[:300])
        return _error(412, "PreconditionFailed")

    store, _ = _mock_store(replaced)
    with pytest.raises(NotFound, match="replaced while it was read"):
        await store.read("bkt", "k")


class _Expiring:
    """botocore credentials that need a refresh on every use, as
    RefreshableCredentials do near their expiry."""

    def __init__(self) -> None:
        self.refreshes = 0

    def refresh_needed(self) -> bool:
        return True

    def get_frozen_credentials(self) -> Any:
        from botocore.credentials import ReadOnlyCredentials
        self.refreshes += 1
        return ReadOnlyCredentials(f"AKIDROUND{self.refreshes}", "secret", None)


async def test_expiring_credentials_are_refreshed_per_request() -> None:
    creds = _Expiring()
    auth = SigV4(lambda _url: "us-east-1", credentials=creds)
    first = await auth.headers(AuthRequest("GET", "https://s3.amazonaws.com/bkt/k"))
    second = await auth.headers(AuthRequest("GET", "https://s3.amazonaws.com/bkt/k"))
    assert "Credential=AKIDROUND1/" in first["Authorization"]
    assert "Credential=AKIDROUND2/" in second["Authorization"]
    assert "secret" not in repr(auth)


async def test_keys_with_odd_characters_list_and_read(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    names = ["odd/a b", "odd/a+b", "odd/100%", "odd/ä&<>\"'", "odd/tab\tkey", "odd/x=y?z#"]
    for name in names:
        await store.write(bucket, name, name.encode())
    listed = [o.name async for o in store.list_objects(bucket, "odd/")]
    assert listed == sorted(names)
    for name in names:
        assert await store.read(bucket, name) == name.encode()
    grouped = [p async for p in store.list(bucket, "", delimiter="/")]
    assert [x for p in grouped for x in p.prefixes] == ["odd/"]


async def test_stream_downloads_every_object(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    blobs = {f"ds/{i:03d}": os.urandom(1000 + i) for i in range(30)}
    await asyncio.gather(*(store.write(bucket, k, v) for k, v in blobs.items()))
    got = {item.name: item.data async for item in store.stream(f"s3://{bucket}/ds/",
                                                                concurrency=8)}
    assert got == blobs


async def test_concurrent_first_requests_wait_for_one_region_lookup() -> None:
    async def handler(request: MockRequest) -> MockResponse:
        if request.method == "HEAD":
            await asyncio.sleep(0.05)
            return MockResponse(301, {"x-amz-bucket-region": "eu-north-1"})
        return MockResponse(200, {"ETag": _md5_etag(b"data")}, b"data")

    transport = MockTransport(handler, config=ClientConfig(retry=FAST_RETRY),
                              endpoint="https://s3.example.test")
    store = S3Store(transport=transport, endpoint="https://s3.example.test")
    transport.auth = SigV4(store.endpoints.region_of_url)
    assert store.region is None
    assert await asyncio.gather(*(store.read("bkt", f"k{i}") for i in range(5))) == [b"data"] * 5
    assert [r.method for r in transport.requests].count("HEAD") == 1
    gets = [r for r in transport.requests if r.method == "GET"]
    assert len(gets) == 5
    assert all("/eu-north-1/s3/aws4_request" in r.headers["Authorization"] for r in gets)


# -- the lean read path, on the wire --------------------------------------------------------


def _raw(status: str, body: bytes, **headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
    head += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def test_lean_reads_retry_slowdown_and_check_the_s3_crc32c() -> None:
    from tests.servers.raw_server import RawServer

    data = os.urandom(4096)
    slow = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
            b"<Message>Please reduce your request rate.</Message></Error>")
    answers = [_raw("503 Slow Down", slow, Retry_After="0", Content_Type="application/xml"),
               _raw("200 OK", data, ETag=_md5_etag(data),
                    x_amz_checksum_crc32c=encode_crc32c(crc32c(data)),
                    x_amz_checksum_type="FULL_OBJECT")]
    server = RawServer(lambda conn, i: answers.pop(0) if answers else None)
    async with server as endpoint:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint) as store:
            assert await store.read("bkt", "k") == data
            assert store.stats.retries == 1 and store.stats.lean_reads == 2
    heads = [h.decode() for h in server.requests]
    assert all(h.startswith("GET /bkt/k HTTP/1.1") for h in heads)
    assert all("authorization: aws4-hmac-sha256" in h.lower() for h in heads)
    assert all("x-amz-checksum-mode: enabled" in h.lower() for h in heads)

    rotten = [_raw("200 OK", data, ETag=_md5_etag(data),
                   x_amz_checksum_crc32c=encode_crc32c(crc32c(data) ^ 1))] * 3
    server = RawServer(lambda conn, i: rotten.pop(0) if rotten else None)
    async with server as endpoint:
        async with S3Store(ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0.001,
                                                          max_delay=0.01)),
                           endpoint=endpoint) as store:
            with pytest.raises(ChecksumMismatch, match="read s3://bkt/k"):
                await store.read("bkt", "k")
    # A composite checksum (of part checksums) is not the content's: not checked.
    composite = [_raw("200 OK", data, ETag='"' + "a" * 32 + '-2"',
                      x_amz_checksum_crc32c="AAAAAA==-2", x_amz_checksum_type="COMPOSITE")]
    server = RawServer(lambda conn, i: composite.pop(0) if composite else None)
    async with server as endpoint:
        async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=endpoint) as store:
            assert await store.read("bkt", "k") == data


# -- answers lost on the way back ---------------------------------------------------------


async def test_lost_answers_to_a_create_only_put_and_a_completion() -> None:
    import aiohttp

    data = b"manifest bytes"
    stored: dict[str, bytes] = {}
    lost = {"put": True, "complete": True}

    def head(key: str) -> MockResponse:
        if key not in stored:
            return MockResponse(404)
        body = stored[key]
        return MockResponse(200, {"ETag": _md5_etag(body), "Content-Length": str(len(body)),
                                  "x-amz-checksum-crc32c": encode_crc32c(crc32c(body))})

    async def handler(request: MockRequest) -> MockResponse:
        key = request.url.rsplit("/", 1)[1]
        if request.method == "HEAD":
            return head(key)
        if request.method == "PUT" and "uploadId" not in request.params:
            if request.headers.get("If-None-Match") == "*" and key in stored:
                return _error(412, "PreconditionFailed")
            stored[key] = request.body
            if lost["put"]:
                lost["put"] = False
                raise aiohttp.ServerDisconnectedError()  # stored, answer lost
            return MockResponse(200, {"ETag": _md5_etag(request.body)})
        if "uploads" in request.params:
            return MockResponse(200, {}, b"<InitiateMultipartUploadResult><UploadId>u"
                                         b"</UploadId></InitiateMultipartUploadResult>")
        if request.method == "PUT":
            stored[f"part{request.params['partNumber']}"] = request.body
            return MockResponse(200, {"ETag": f'"p{request.params["partNumber"]}"'})
        if request.method == "POST" and "uploadId" in request.params:
            if request.headers.get("If-None-Match") == "*" and key in stored:
                return _error(412, "PreconditionFailed")
            if "u" not in stored:
                return _error(404, "NoSuchUpload")
            stored[key] = stored["part1"] + stored["part2"]
            del stored["u"]
            if lost["complete"]:
                lost["complete"] = False
                raise aiohttp.ServerDisconnectedError()
            raise AssertionError("completed twice")
        raise AssertionError(request)

    store, _ = _mock_store(handler)
    info = await store.write("bkt", "manifest", data, if_generation_match=0)
    assert (info.size, info.crc32c) == (len(data), crc32c(data))
    assert stored["manifest"] == data

    stored["u"] = b""  # the upload is open until completed
    upload = store.start_upload("bkt", "big", part_size=5 * MIB)
    first, tail = os.urandom(5 * MIB), os.urandom(100)
    await upload.put(1, memoryview(first))
    running = Crc32c()
    running.update(first + tail)
    info = await upload.finish(2, memoryview(tail), running)
    assert (info.size, info.crc32c) == (len(first) + len(tail), crc32c(first + tail))
    assert stored["big"] == first + tail

    # Create-only: the retried completion fails its own If-None-Match.
    stored["u"] = b""
    lost["complete"] = True
    upload = store.start_upload("bkt", "new", part_size=5 * MIB, if_generation_match=0)
    await upload.put(1, memoryview(first))
    info = await upload.finish(2, memoryview(tail), running)
    assert (info.size, info.crc32c) == (len(first) + len(tail), crc32c(first + tail))
    assert stored["new"] == first + tail
    stored["u"] = b""
    upload = store.start_upload("bkt", "new", part_size=5 * MIB, if_generation_match=0)
    await upload.put(1, memoryview(first))
    with pytest.raises(PreconditionFailed):  # on the first attempt: another's object
        await upload.finish(2, memoryview(tail), running)


async def test_an_error_inside_a_200_copy_answer_is_an_error() -> None:
    def handler(request: MockRequest) -> MockResponse:
        return MockResponse(200, {"Content-Type": "application/xml"},
                            b"<Error><Code>InternalError</Code><Message>We encountered an "
                            b"internal error.</Message></Error>")

    store, transport = _mock_store(handler, retry=RetryPolicy(max_attempts=2,
                                                              initial_delay=0.001,
                                                              max_delay=0.01))
    with pytest.raises(ServerError, match=r"copy s3://bkt/src.*InternalError"):
        await store.copy("bkt", "src", "bkt", "dst")
    # The copy, after the source's HEAD, retried as AWS says for InternalError.
    assert [r.method for r in transport.requests] == ["HEAD", "PUT", "PUT"]


@pytest.mark.parametrize("lean", [True, False])
async def test_an_object_put_gzip_coded_reads_as_its_stored_bytes(moto_s3: MotoS3,
                                                                   lean: bool) -> None:
    # S3 never decodes a body; aiohttp did (the lean client handed it the
    # coded answer): a false ChecksumMismatch against the ETag's MD5.
    import gzip

    import boto3

    stored = gzip.compress(b"hello world " * 1000)
    config = ClientConfig(max_concurrency=16, retry=FAST_RETRY, lean_reads=lean)
    async with S3Store(config, endpoint=moto_s3.endpoint) as store:
        bucket = unique_bucket("s3gz")
        await store.create_bucket(bucket)
        boto3.client("s3", endpoint_url=moto_s3.endpoint, region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing").put_object(
            Bucket=bucket, Key="g", Body=stored, ContentEncoding="gzip")
        info = await store.stat(bucket, "g")
        assert info.size == len(stored)
        assert await store.read(bucket, "g") == stored
        assert await store.read(bucket, "g", start=5, end=50) == stored[5:50]
        assert (await store.fetch(bucket, "g", size=info.size)).data == stored


async def test_deleting_a_replaced_version_missing_ok_is_quiet(
        s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    old = await store.write(bucket, "o", b"one")
    await store.write(bucket, "o", b"two, longer")
    await store.delete(bucket, "o", generation=old.generation, missing_ok=True)  # as on GCS
    assert await store.read(bucket, "o") == b"two, longer"
    with pytest.raises(NotFound):
        await store.delete(bucket, "o", generation=old.generation)


# -- lost answers on a store that keeps no crc32c (older MinIO, Ceph, R2) -----


@pytest.mark.parametrize("theirs", [False, True])
async def test_a_create_only_put_whose_answer_was_lost_is_ours_by_its_md5(
        theirs: bool) -> None:
    # The retry finds the object (412): with no crc32c to compare, it was
    # taken for another writer's and the write failed, though it held our bytes.
    import aiohttp

    stored: dict[str, bytes] = {}
    lost = [True]

    def handler(req: MockRequest) -> MockResponse:
        key = req.url.rsplit("/", 1)[1]
        if req.method == "HEAD":
            if key not in stored:
                return MockResponse(404)
            body = stored[key]
            return MockResponse(200, {"ETag": _md5_etag(body), "Content-Length": str(len(body))})
        if req.headers.get("If-None-Match") == "*" and key in stored:
            return _error(412, "PreconditionFailed")
        stored[key] = b"another writer's" if theirs else bytes(req.body)
        if lost.pop() if lost else False:
            raise aiohttp.ServerDisconnectedError()
        return MockResponse(200, {"ETag": _md5_etag(stored[key])})

    store, _ = _mock_store(handler)
    if theirs:
        with pytest.raises(PreconditionFailed):
            await store.write("bkt", "manifest", b"manifest bytes", if_generation_match=0)
    else:
        info = await store.write("bkt", "manifest", b"manifest bytes", if_generation_match=0)
        assert info.size == 14 and stored["manifest"] == b"manifest bytes"


@pytest.mark.parametrize("theirs", [False, True])
async def test_a_completion_whose_answer_was_lost_is_ours_by_the_parts_etag(
        theirs: bool) -> None:
    import aiohttp

    from aioflux._core.integrity.crc import Crc32c as Running

    stored: dict[str, bytes] = {}
    parts: dict[int, bytes] = {}

    def md5(b: bytes) -> str:
        return hashlib.md5(b).hexdigest()

    def handler(req: MockRequest) -> MockResponse:
        key = req.url.rsplit("/", 1)[1]
        if req.method == "HEAD":
            if key not in stored:
                return MockResponse(404)
            digests = b"".join(bytes.fromhex(md5(p)) for p in parts.values())
            etag = f'"{md5(digests)}-{len(parts) + (1 if theirs else 0)}"'
            return MockResponse(200, {"ETag": etag, "Content-Length": str(len(stored[key]))})
        if "uploads" in req.params:
            return MockResponse(200, {}, b"<InitiateMultipartUploadResult><UploadId>u"
                                         b"</UploadId></InitiateMultipartUploadResult>")
        if req.method == "PUT" and "uploadId" in req.params:
            parts[int(req.params["partNumber"])] = bytes(req.body)
            return MockResponse(200, {"ETag": f'"{md5(req.body)}"'})
        if req.method == "POST" and "uploadId" in req.params:
            if key in stored:
                return _error(404, "NoSuchUpload")
            stored[key] = b"".join(parts[n] for n in sorted(parts))
            raise aiohttp.ServerDisconnectedError()  # published, answer lost
        if req.method == "DELETE":
            return MockResponse(204)
        raise AssertionError((req.method, req.url))

    store, _ = _mock_store(handler)
    up = store.start_upload("bkt", "big", part_size=5 * MIB)
    first, tail = os.urandom(5 * MIB), os.urandom(100)
    await up.put(1, memoryview(first))
    running = Running()
    running.update(first + tail)
    if theirs:
        with pytest.raises(NotFound):
            await up.finish(2, memoryview(tail), running)
    else:
        info = await up.finish(2, memoryview(tail), running)
        assert info.size == len(first + tail) and stored["big"] == first + tail


# ``delete_many`` given one key as a str deletes nothing: a str is a
# sequence of its characters, and ``delete_many(bucket, "abc")`` would delete
# the keys ``a``, ``b`` and ``c`` (other objects) and leave ``abc``.


async def test_one_key_as_a_str_is_refused_and_deletes_nothing(moto_s3: MotoS3) -> None:
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint) as store:
        bucket = unique_bucket("s3")
        await store.create_bucket(bucket)
        for name in ("a", "b", "c", "abc"):
            await store.write(bucket, name, b"x")
        with pytest.raises(InvalidArgument, match=r"delete_many s3://.*sequence of keys"):
            await store.delete_many(bucket, "abc")
        assert [o.name async for o in store.list_objects(bucket)] == ["a", "abc", "b", "c"]
        await store.delete_many(bucket, ["abc"])
        assert [o.name async for o in store.list_objects(bucket)] == ["a", "b", "c"]
