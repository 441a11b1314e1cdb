"""A timeout's error says which of the client's timeouts ran out.

"stat gs://b/o failed: timed out" left a user to guess between a server
that never answered the connection (``Timeouts.connect``), one that went
silent (``Timeouts.read_stall``) and a request past ``Timeouts.total``.
"""

from __future__ import annotations

import asyncio
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest

from aioflux import AsyncClient, Client, ClientConfig, RetryPolicy, Timeouts, TransportError
from aioflux._core.auth import AnonymousAuth
from aioflux._net.failures import drain
from aioflux._net.transport import Op, Transport
from aioflux.testing import EmulatorProfile, running_emulator
from tests.raw_server import RawServer

ONE_ATTEMPT = RetryPolicy(max_attempts=1)
PATIENCE = 5.0
CALLS = ["read (lean)", "read (aiohttp)", "stat"]


async def _fail(call: str, endpoint: str, timeouts: Timeouts) -> str:
    config = ClientConfig(retry=ONE_ATTEMPT, timeouts=timeouts,
                          lean_reads=call != "read (aiohttp)")
    async with AsyncClient(config, endpoint=endpoint) as client:
        coro = client.stat("bkt", "o") if call == "stat" else client.read("bkt", "o")
        with pytest.raises(TransportError) as caught:
            await asyncio.wait_for(coro, PATIENCE)
    return str(caught.value)


@pytest.mark.parametrize("call", CALLS)
async def test_a_silent_server_is_the_read_stall(call: str) -> None:
    async with RawServer(lambda conn, index: (b"", "stall")) as base:
        message = await _fail(call, base, Timeouts(read_stall=0.3))
    assert "timed out" in message and "Timeouts.read_stall" in message, message
    assert "Timeouts.connect" not in message


@pytest.mark.parametrize("call", CALLS)
async def test_a_connection_never_set_up_is_the_connect_timeout(call: str) -> None:
    # A TLS endpoint whose server never answers the handshake.
    async with RawServer(lambda conn, index: None) as base:
        tls = base.replace("http://", "https://")
        message = await _fail(call, tls, Timeouts(connect=0.3, read_stall=30))
    assert "timed out" in message and "Timeouts.connect" in message, message
    assert "read_stall" not in message


async def test_a_request_past_its_total_says_so() -> None:
    async with RawServer(lambda conn, index: (b"", "stall")) as base:
        message = await _fail("read (lean)", base, Timeouts(read_stall=30, total=0.3))
    assert "Timeouts.total" in message, message


async def test_a_connect_timeout_shows_no_query_of_its_url() -> None:
    # aiohttp writes the whole URL into its connect timeout ("Connection
    # timeout to host https://...?..."), and a query may be a credential
    # (a SAS signature, a resumable upload's session id): neither the
    # message nor the exception chained to it (the traceback) may show it.
    secret = "5ecr3t-51gnature"
    async with RawServer(lambda conn, index: None) as base:
        tls = base.replace("http://", "https://")
        config = ClientConfig(retry=ONE_ATTEMPT, lean_reads=False,
                              timeouts=Timeouts(connect=0.3, read_stall=30))
        transport = Transport(config, AnonymousAuth(), endpoint=tls)
        try:
            with pytest.raises(TransportError) as caught:
                await asyncio.wait_for(transport.request(
                    Op("read", "c", "o", "az"), "GET", f"{tls}/c/o?sv=1&sig={secret}", drain),
                    PATIENCE)
        finally:
            await transport.aclose()
    shown = "".join(traceback.format_exception(caught.value))
    assert "Timeouts.connect" in str(caught.value)
    assert caught.value.__cause__ is not None  # still chained, only cut
    assert secret not in shown, shown


@pytest.mark.parametrize("call", CALLS)
def test_waiting_for_a_free_connection_is_not_the_connect_timeout(call: str) -> None:
    # With fewer connections than permits, a request waits for a pooled
    # connection as another waits for a permit. aiohttp's connect timeout
    # counted that wait too, so the second of two reads on one connection
    # failed "timed out connecting" while the first was still answered.
    # Each answer takes 3 connect timeouts; a connect timeout of 1 s stays far
    # above what connecting to 127.0.0.1 takes on a loaded machine.
    slow = EmulatorProfile(ttfb=3.0)
    config = ClientConfig(retry=ONE_ATTEMPT, max_concurrency=2, connection_limit=1,
                          timeouts=Timeouts(connect=1.0, read_stall=30),
                          lean_reads=call != "read (aiohttp)")
    with running_emulator(s3_port=None) as emu:
        emu.create_bucket("bkt")
        emu.store.put("bkt", "o", b"abc")
        emu.profile = slow
        with Client(config, endpoint=emu.endpoint) as client:
            def once(_: int) -> object:
                return client.stat("bkt", "o") if call == "stat" else client.read("bkt", "o")

            with ThreadPoolExecutor(2) as pool:
                done = list(pool.map(once, range(2)))
    assert len(done) == 2
