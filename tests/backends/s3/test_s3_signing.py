"""The CRT signer gives botocore's SigV4 signature, request for request.

botocore's ``S3SigV4Auth`` is the reference (it is what boto3 sends); aioflux
signs with awscrt for its CPU cost. Same clock, same credentials: the
``Authorization`` header must be byte-identical for every shape of request
the S3 store sends (moto checks real signatures in test_s3_store.py).
"""

from __future__ import annotations

import datetime
import hashlib
from typing import Any
from unittest import mock

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from aioflux._core.auth import AuthRequest
from aioflux.s3 import _auth
from aioflux.s3._auth import EMPTY_SHA256, UNSIGNED_PAYLOAD, SigV4

NOW = datetime.datetime(2026, 11, 22, 15, 4, 5, tzinfo=datetime.timezone.utc)
BODY = b"x" * 1000

CASES = [
    # (method, url, headers, body)
    ("GET", "http://127.0.0.1:9000/bkt/obj/000001.bin",
     {"Range": "bytes=0-1023", "x-amz-checksum-mode": "ENABLED"}, None),
    ("GET", "https://bkt.s3.us-west-2.amazonaws.com/a%20b%2Bc%3Dd~%C3%A9.bin",
     {"If-Match": '"abc"'}, None),
    ("GET", "http://127.0.0.1:9000/bkt?list-type=2&prefix=a%2Fb&start-after=x%20y"
            "&max-keys=1000&continuation-token=1%2F%2B%3D", {}, None),
    ("PUT", "http://127.0.0.1:9000/bkt/k?partNumber=3&uploadId=u%2By%3D",
     {"Content-Type": "application/octet-stream", "x-amz-checksum-crc32c": "AAAAAA=="}, BODY),
    ("PUT", "https://s3.amazonaws.com/bkt/dir/model.pt",
     {"If-None-Match": "*", "X-Amz-Meta-Step": "  10   20 "}, BODY),
    ("POST", "https://bkt.s3.amazonaws.com/?delete", {"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="},
     BODY),
    ("POST", "https://bkt.s3.amazonaws.com/k?uploads", {}, None),
    ("HEAD", "http://[::1]:9000/bkt", {}, None),
    ("DELETE", "https://minio.internal:443/bkt/k", {}, None),
    ("PUT", "http://minio.internal:80/bkt/copy",
     {"x-amz-copy-source": "/bkt/a%20b", "x-amz-copy-source-range": "bytes=0-9"}, None),
]


def _botocore(method: str, url: str, headers: dict[str, str], payload: str,
              token: str | None) -> str:
    class Fixed(S3SigV4Auth):  # type: ignore[misc]
        def payload(self, request: Any) -> str:
            return payload

    request = AWSRequest(method=method, url=url, headers=dict(headers))
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    with mock.patch("botocore.auth.get_current_datetime", return_value=NOW.replace(tzinfo=None)):
        Fixed(creds.get_frozen_credentials(), "s3", "eu-west-1").add_auth(request)
    return str(request.headers["Authorization"])


@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzEBYaDHRva2Vu"])
@pytest.mark.parametrize(("method", "url", "headers", "body"), CASES)
async def test_crt_signature_is_botocores(method: str, url: str, headers: dict[str, str],
                                          body: bytes | None, token: str | None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_auth, "_second", lambda: int(NOW.timestamp()))
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    signer = SigV4(lambda _url: "eu-west-1", credentials=creds)
    got = await signer.headers(AuthRequest(method, url, {}, headers, body))
    if body is None:
        payload = EMPTY_SHA256
    elif url.startswith("https:"):
        payload = UNSIGNED_PAYLOAD
    else:
        payload = hashlib.sha256(body).hexdigest()
    assert got["X-Amz-Content-SHA256"] == payload
    assert got["X-Amz-Date"] == "20261122T150405Z"
    assert got["Authorization"] == _botocore(method, url, headers, payload, token)
    assert got.get("X-Amz-Security-Token") == token


async def test_a_refresh_that_changes_the_credentials_changes_the_signer() -> None:
    class Rotating:
        def __init__(self) -> None:
            self.key = "AKIDONE"

        def refresh_needed(self) -> bool:
            return False

        def get_frozen_credentials(self) -> Any:
            return Credentials(self.key, "secret").get_frozen_credentials()

    creds = Rotating()
    signer = SigV4(lambda _url: "us-east-1", credentials=creds)
    request = AuthRequest("GET", "https://s3.amazonaws.com/bkt/k")
    assert "Credential=AKIDONE/" in (await signer.headers(request))["Authorization"]
    creds.key = "AKIDTWO"
    assert "Credential=AKIDTWO/" in (await signer.headers(request))["Authorization"]


async def test_static_credentials_are_read_once_and_the_date_follows_the_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Counting:
        reads = 0

        def get_frozen_credentials(self) -> Any:
            Counting.reads += 1
            return Credentials("AKIDSTATIC", "secret").get_frozen_credentials()

    now = [int(NOW.timestamp())]
    monkeypatch.setattr(_auth, "_second", lambda: now[0])
    signer = SigV4(lambda _url: "us-east-1", credentials=Counting())
    request = AuthRequest("GET", "https://s3.amazonaws.com/bkt/k")
    first = await signer.headers(request)
    again = await signer.headers(request)
    now[0] += 1
    later = await signer.headers(request)
    assert Counting.reads == 1
    assert first == again and first["X-Amz-Date"] == "20261122T150405Z"
    assert later["X-Amz-Date"] == "20261122T150406Z"
    assert later["Authorization"] != first["Authorization"]
