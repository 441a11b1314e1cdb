"""A server's error body that echoes a credential does not put it in the
error.

The server's message goes into the error's text (up to 300 characters), and
some echo the request: a proxy's error page its URL and headers, a store
its "string to sign". A SAS signature, a signed URL's query, a token or an
``Authorization`` value found there is cut out; the rest stays.
"""

from __future__ import annotations

import pytest

from aioflux import AsyncClient, ClientConfig, PermissionDenied, RetryPolicy
from aioflux._core.secrets import scrub
from tests.servers.raw_server import RawServer

SECRET = "5ecr3t-51gnature"
ECHOES = {
    "text": (b"text/plain", f"Forbidden: GET https://acct.blob.core.windows.net/c/o?sv=1&sig="
                            f"{SECRET} Authorization: Bearer ya29.{SECRET}".encode()),
    "json": (b"application/json", b'{"error": {"code": 403, "message": "Denied for '
                                  b'Authorization: AWS4-HMAC-SHA256 Credential=AKIA/' +
             SECRET.encode() + b'", "errors": [{"reason": "forbidden"}]}}'),
    "xml": (b"application/xml", b"<Error><Code>AccessDenied</Code><Message>sig=" +
            SECRET.encode() + b" was refused</Message></Error>"),
}


def _answer(kind: str) -> bytes:
    content_type, body = ECHOES[kind]
    return (b"HTTP/1.1 403 Forbidden\r\nContent-Type: " + content_type +
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize("kind", sorted(ECHOES))
@pytest.mark.parametrize("call", ["read (lean)", "read (aiohttp)", "stat"])
async def test_an_echoed_credential_is_cut_from_the_error(kind: str, call: str) -> None:
    config = ClientConfig(retry=RetryPolicy(max_attempts=1), lean_reads=call != "read (aiohttp)")
    async with RawServer(lambda conn, index: _answer(kind)) as base, \
            AsyncClient(config, endpoint=base) as client:
        with pytest.raises(PermissionDenied) as caught:
            await (client.stat("bkt", "o") if call == "stat" else client.read("bkt", "o"))
    message = str(caught.value)
    assert SECRET not in message, message
    assert "<redacted>" in message and "HTTP 403" in message, message


def test_scrubbing_keeps_the_rest_and_is_idempotent() -> None:
    text = (f"GET https://user:pw@host/c/o?sig={SECRET} from 10.0.0.1; password='{SECRET}'; "
            f"Proxy-Authorization: Basic {SECRET}\r\nnext line; Bearer {SECRET}; sig%3D{SECRET}")
    once = scrub(text)
    assert SECRET not in once and "pw@" not in once
    assert "https://host/c/o?" in once and "from 10.0.0.1" in once and "next line" in once
    assert scrub(once) == once
    plain = "The specified blob does not exist. RequestId:1 Time:2026-11-25T10:00:00Z"
    assert scrub(plain) is plain
