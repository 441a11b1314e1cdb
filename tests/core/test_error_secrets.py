"""No error shows a credential that rode in a request's URL or a proxy's
settings.

aiohttp writes the whole URL, query included, into the text of some of its
exceptions ("Can not write request body for https://...?...&sig=...",
"Connection timeout to host https://..."), and a connection's key, a
proxy's password included, into others. A SAS signature, a resumable
upload's session id or a signed URL's signature is a credential: neither
the typed error's message nor the exceptions chained to it (what a
traceback or ``logging.exception`` prints) may carry it.
"""

from __future__ import annotations

import errno
import traceback
import warnings
from collections.abc import Callable
from typing import Any, cast

import aiohttp
import pytest
import yarl
from aiohttp.client_reqrep import ConnectionKey

from aioflux import ClientConfig, InvalidArgument, RetryPolicy, TransportError
from aioflux._core.auth import AnonymousAuth
from aioflux._net.failures import drain
from aioflux._net.transport import Op, Transport

SECRET = "5ecr3t-51gnature"
ENDPOINT = "https://acct.blob.core.windows.net"
URL = f"{ENDPOINT}/c/o?sv=2023-11-03&sp=r&sig={SECRET}&upload_id={SECRET}"
OP = Op("read", "c", "o", "az")


def _write_failed() -> BaseException:
    # aiohttp's ClientRequest.write_bytes, when the socket fails mid-body.
    exc = aiohttp.ClientOSError(errno.EPIPE, f"Can not write request body for {URL}")
    exc.__cause__ = BrokenPipeError(errno.EPIPE, "Broken pipe")
    return exc


def _connect_timed_out() -> BaseException:
    # aiohttp's ClientSession._request, when Timeouts.connect runs out.
    exc = aiohttp.ConnectionTimeoutError(f"Connection timeout to host {yarl.URL(URL)}")
    exc.__cause__ = TimeoutError()
    return exc


def _send_failed_through_a_proxy() -> BaseException:
    # aiohttp's ClientRequest.write_bytes, for a failure other than an
    # OSError: the connection's key, a proxy's BasicAuth among its fields.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # aiohttp 3.14's, for 4.0
        auth = aiohttp.BasicAuth("me", SECRET)
    key = ConnectionKey("s3.aws", 443, True, True, yarl.URL("http://proxy:3128"), auth, None)
    return aiohttp.ClientConnectionError(
        f"Failed to send bytes into the underlying connection Connection<{key}>: "
        f"{ValueError('odd')!r}")


class _Failing:
    """The part of a session the transport uses, each request failing with
    what ``fail`` builds (as aiohttp's would, before any answer)."""

    def __init__(self, fail: Callable[[], BaseException]) -> None:
        self._fail = fail
        self._trace_configs: list[aiohttp.TraceConfig] = []
        self.connector = None
        self.sent = 0

    def request(self, *_args: Any, **_kwargs: Any) -> _Failing:
        return self

    async def __aenter__(self) -> None:
        self.sent += 1
        raise self._fail()

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def close(self) -> None:
        return None


def _everything_shown(exc: BaseException) -> str:
    """What a traceback of ``exc`` prints (its causes and contexts too), and
    the reprs of each."""
    shown = "".join(traceback.format_exception(exc))
    seen: BaseException | None = exc
    while seen is not None:
        shown += repr(seen) + str(seen)
        seen = seen.__cause__ or seen.__context__
    return shown


@pytest.mark.parametrize("fail", [_write_failed, _connect_timed_out,
                                  _send_failed_through_a_proxy],
                         ids=["write", "connect-timeout", "proxy-key"])
async def test_no_credential_of_the_url_or_proxy_in_the_error(
        fail: Callable[[], BaseException]) -> None:
    session = _Failing(fail)
    config = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
    transport = Transport(config, AnonymousAuth(), endpoint=ENDPOINT,
                          session_factory=lambda _c: cast(aiohttp.ClientSession, session))
    try:
        with pytest.raises(TransportError) as info:
            await transport.request(OP, "PUT", URL, drain, data=b"x")
    finally:
        await transport.aclose()
    assert session.sent == 2  # still a retried connection failure
    assert info.value.name == "o" and "read az://c/o failed" in str(info.value)
    assert SECRET not in _everything_shown(info.value)
    # What was failing stays said, only the credential is cut out.
    assert ("acct.blob.core.windows.net" in _everything_shown(info.value)
            or "proxy:3128" in _everything_shown(info.value))



async def test_no_credential_of_the_url_when_the_client_closes_under_the_request() -> None:
    # The error is then the client's being closed, with the connection's
    # failure chained to it.
    session = _Closing(_write_failed)
    transport = Transport(ClientConfig(), AnonymousAuth(), endpoint=ENDPOINT,
                          session_factory=lambda _c: cast(aiohttp.ClientSession, session))
    session.transport = transport
    with pytest.raises(InvalidArgument, match="the client is closed") as info:
        await transport.request(OP, "PUT", URL, drain, data=b"x")
    assert isinstance(info.value.__cause__, aiohttp.ClientOSError)
    assert SECRET not in _everything_shown(info.value)


class _Closing(_Failing):
    """Closes its transport for good, then fails the request."""

    transport: Transport | None = None

    async def __aenter__(self) -> None:
        assert self.transport is not None
        await self.transport.aclose(owner="client")
        await super().__aenter__()
