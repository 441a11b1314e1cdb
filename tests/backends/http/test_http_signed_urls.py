"""A signed URL's query is no part of any error of the http(s) store.

A presigned S3 or SAS URL carries its signature and credential in its
query, which the store's object name holds as written: every message once
quoted it whole (a 403, a 404, a connection failure, the refusals before
any request). Now each names the URL with the query's values cut, its
parameters' names kept.
"""

from __future__ import annotations

import socket
import traceback

import pytest
from aiohttp import web

from aioflux import ClientConfig, RetryPolicy
from aioflux._core.errors import (
    InvalidRequest,
    NotFound,
    PermissionDenied,
    StorageError,
    TransportError,
)
from aioflux.http import HttpStore
from tests.servers.web_server import Served, Server

SECRET = "SIGsecret0123456789abcdef"
NAME = (f"data/x.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA{SECRET}"
        f"&X-Amz-Signature={SECRET}&{SECRET}")
SHOWN = ("data/x.bin?X-Amz-Algorithm=<redacted>&X-Amz-Credential=<redacted>"
         "&X-Amz-Signature=<redacted>&<redacted>")
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0))


def _shown(exc: BaseException) -> str:
    """What a traceback of ``exc`` prints, its causes included."""
    return "".join(traceback.format_exception(exc)) + repr(exc)


def _check(exc: StorageError, bucket: str, operation: str) -> None:
    assert SECRET not in _shown(exc)
    assert str(exc).startswith(f"{operation} http://{bucket}/{SHOWN} failed"), str(exc)
    assert (exc.operation, exc.bucket, exc.name) == (operation, bucket, NAME)


@pytest.mark.parametrize(("status", "error"), [(403, PermissionDenied), (404, NotFound)])
async def test_a_refused_signed_url_is_named_without_its_query_values(
        status: int, error: type[StorageError]) -> None:
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        return web.Response(status=status)

    async with Server(answer) as (endpoint, served), HttpStore(CONFIG, scheme="http") as store:
        bucket = endpoint.removeprefix("http://")
        with pytest.raises(error) as info:
            await store.stat(bucket, NAME)
        _check(info.value, bucket, "stat")
        with pytest.raises(error) as info:
            await store.read(bucket, NAME)
        _check(info.value, bucket, "read")
    assert SECRET in served.paths[0]  # the URL itself went out as written


async def test_a_signed_url_that_cannot_be_reached_is_named_without_its_query_values() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        bucket = f"127.0.0.1:{sock.getsockname()[1]}"  # nothing listens there
    async with HttpStore(CONFIG, scheme="http") as store:
        with pytest.raises(TransportError) as info:
            await store.stat(bucket, NAME)
    _check(info.value, bucket, "stat")


async def test_the_refusals_before_any_request_name_no_query_value() -> None:
    bucket = "127.0.0.1:9"
    async with HttpStore(CONFIG, scheme="http") as store:
        with pytest.raises(InvalidRequest, match="read-only") as info:
            await store.write(bucket, NAME, b"x")
        assert SECRET not in _shown(info.value)
        assert str(info.value).startswith(f"write http://{bucket}/{SHOWN}: ")
        with pytest.raises(InvalidRequest, match="past the object's end") as info:
            await store.fetch(bucket, NAME, start=5, size=5)
        _check(info.value, bucket, "read")
