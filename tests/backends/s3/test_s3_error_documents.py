"""An S3 ``<Error>`` document inside a 200 (CompleteMultipartUpload and
CopyObject report failures so once the work has started) is the same typed
error as that code answered with its own status: AccessDenied is
PermissionDenied wherever it comes from, and the retryable codes are retried.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from aioflux import ClientConfig, RetryPolicy, S3Store
from aioflux._core.errors import (
    InvalidRequest,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    RateLimited,
    ServerError,
    StorageError,
)
from aioflux._core.integrity.crc import Crc32c, crc32c, encode_crc32c
from aioflux._net.transport import Op
from aioflux.s3._xml import parse
from aioflux.testing import MockRequest, MockResponse, MockTransport

OP = Op("complete multipart upload", "bkt", "dir/big", "s3")
MIB = 1 << 20
RETRY_ONCE = RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.01)


def _error_doc(code: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n\n  <Error><Code>{code}</Code>'
            f"<Message>scripted {code}</Message><RequestId>r</RequestId></Error>").encode()


@pytest.mark.parametrize(("code", "cls", "status"), [
    ("AccessDenied", PermissionDenied, 403),
    ("AllAccessDisabled", PermissionDenied, 403),
    ("InvalidAccessKeyId", PermissionDenied, 400),
    ("NoSuchKey", NotFound, 400),
    ("NoSuchBucket", NotFound, 400),
    ("NoSuchUpload", NotFound, 400),
    ("PreconditionFailed", PreconditionFailed, 400),
    ("SlowDown", RateLimited, 500),
    ("InternalError", ServerError, 500),
    ("ServiceUnavailable", ServerError, 503),
    ("InvalidPart", InvalidRequest, 400),
    ("SomethingNew", InvalidRequest, 400),
])
def test_the_code_of_an_error_document_decides_its_class(
        code: str, cls: type[StorageError], status: int) -> None:
    with pytest.raises(StorageError) as caught:
        parse(_error_doc(code), OP)
    assert type(caught.value) is cls
    assert (caught.value.reason, caught.value.status) == (code, status)
    assert (caught.value.operation, caught.value.bucket, caught.value.name) == \
        ("complete multipart upload", "bkt", "dir/big")
    assert str(caught.value).startswith("complete multipart upload s3://bkt/dir/big failed")
    assert f"scripted {code}" in str(caught.value)


def _store(handler: object, retry: RetryPolicy = RETRY_ONCE) -> tuple[S3Store, MockTransport]:
    endpoint = "https://s3.example.test"
    transport = MockTransport(handler,  # type: ignore[arg-type]
                              config=ClientConfig(retry=retry), endpoint=endpoint)
    return S3Store(transport=transport, endpoint=endpoint, region="us-east-1"), transport


@pytest.mark.parametrize(("code", "cls", "attempts"), [
    ("AccessDenied", PermissionDenied, 1),
    ("NoSuchKey", NotFound, 1),
    ("ServiceUnavailable", ServerError, 2),  # retried, as a 503 answer is
])
async def test_a_copy_answered_200_with_an_error_is_typed_by_its_code(
        code: str, cls: type[StorageError], attempts: int) -> None:
    def handler(request: MockRequest) -> MockResponse:
        return MockResponse(200, {"Content-Type": "application/xml"}, _error_doc(code))

    store, transport = _store(handler)
    with pytest.raises(cls, match=rf"copy s3://bkt/src.*{code}") as caught:
        await store.copy("bkt", "src", "bkt", "dst")
    assert type(caught.value) is cls
    # The source's HEAD first (it pins the version copied), then the copies.
    assert [r.method for r in transport.requests] == ["HEAD"] + ["PUT"] * attempts


async def test_a_complete_answered_200_access_denied_is_permission_denied() -> None:
    parts: dict[str, bytes] = {}

    def handler(request: MockRequest) -> MockResponse:
        if "uploads" in request.params:
            return MockResponse(200, {}, b"<InitiateMultipartUploadResult><UploadId>u"
                                         b"</UploadId></InitiateMultipartUploadResult>")
        if request.method == "PUT":
            parts[request.params["partNumber"]] = request.body
            return MockResponse(200, {
                "ETag": f'"{hashlib.md5(request.body).hexdigest()}"',
                "x-amz-checksum-crc32c": encode_crc32c(crc32c(request.body))})
        if request.method == "POST":
            return MockResponse(200, {"Content-Type": "application/xml"},
                                _error_doc("AccessDenied"))
        if request.method == "DELETE":
            return MockResponse(204)
        raise AssertionError(request)

    store, transport = _store(handler)
    upload = store.start_upload("bkt", "big", part_size=5 * MIB)
    first, tail = os.urandom(5 * MIB), os.urandom(100)
    await upload.put(1, memoryview(first))
    running = Crc32c()
    running.update(first + tail)
    with pytest.raises(PermissionDenied, match=r"s3://bkt/big.*AccessDenied") as caught:
        await upload.finish(2, memoryview(tail), running)
    assert caught.value.status == 403
    completes = [r for r in transport.requests if r.method == "POST" and "uploadId" in r.params]
    assert len(completes) == 1  # not retried: denied is denied
