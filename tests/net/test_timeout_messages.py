"""A timeout's error says which of the client's timeouts ran out.

"stat gs://b/o failed: timed out" left a user to guess between a server
that never answered the connection (``Timeouts.connect``), one that went
silent (``Timeouts.read_stall``) and a request past ``Timeouts.total``.
"""

from __future__ import annotations

import asyncio
import traceback

import pytest

from aioflux import AsyncClient, ClientConfig, RetryPolicy, Timeouts, TransportError
from aioflux._core.auth import AnonymousAuth
from aioflux._net.failures import drain
from aioflux._net.transport import Op, Transport
from aioflux.testing import running_emulator
from tests.servers.raw_server import Listener, RawServer

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


@pytest.mark.parametrize("call", CALLS)
async def test_a_request_past_its_total_says_so(call: str) -> None:
    # aiohttp's own total timeout (stat, and reads without the lean client)
    # is a bare TimeoutError: its message said only "timed out".
    async with RawServer(lambda conn, index: (b"", "stall")) as base:
        message = await _fail(call, base, Timeouts(read_stall=30, total=0.3))
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


class _HeldRelay:
    """Relays TCP to ``port`` on 127.0.0.1, every answer's bytes held until
    ``release`` is set; counts the connections it accepted."""

    def __init__(self, port: int) -> None:
        self._port = port
        self.asked = asyncio.Event()  # a request's first bytes arrived
        self.release = asyncio.Event()
        self.accepted = 0
        self._listener = Listener(self._relay)
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        return f"http://127.0.0.1:{await self._listener.start()}"

    async def __aexit__(self, *exc: object) -> None:
        await self._listener.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        up_reader, up_writer = await self._listener.connect("127.0.0.1", self._port)

        async def up() -> None:
            while data := await reader.read(1 << 16):
                self.asked.set()
                up_writer.write(data)
                await up_writer.drain()

        async def down() -> None:
            while data := await up_reader.read(1 << 16):
                await self.release.wait()
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.create_task(up()), asyncio.create_task(down())]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            writer.close()
            up_writer.close()


@pytest.mark.parametrize("call", CALLS)
async def test_waiting_for_a_free_connection_is_not_the_connect_timeout(call: str) -> None:
    # With fewer connections than permits, a request waits for a pooled
    # connection as another waits for a permit. aiohttp's connect timeout
    # counted that wait too, so the second of two requests on one
    # connection failed "timed out connecting" while the first was still
    # answered. Here the first one's answer is held until the second has
    # waited twice the connect timeout; only the one connection's set-up
    # is timed (1 s to 127.0.0.1 stays far above it on a loaded machine).
    connect = 1.0
    config = ClientConfig(retry=ONE_ATTEMPT, max_concurrency=2, connection_limit=1,
                          timeouts=Timeouts(connect=connect, read_stall=60),
                          lean_reads=call != "read (aiohttp)")
    with running_emulator(s3_port=None) as emu:
        emu.create_bucket("bkt")
        emu.store.put("bkt", "o", b"abc")
        held = _HeldRelay(emu.port)
        async with held as endpoint, AsyncClient(config, endpoint=endpoint) as client:
            async def once() -> object:
                if call == "stat":
                    return (await client.stat("bkt", "o")).size
                return await client.read("bkt", "o")

            first = asyncio.create_task(once())
            second: asyncio.Task[object] | None = None
            try:
                await asyncio.wait_for(held.asked.wait(), PATIENCE)
                second = asyncio.create_task(once())
                # Not synchronisation: the wait under test, past the timeout.
                await asyncio.sleep(2 * connect)
                assert not second.done(), second.exception()
                assert not first.done()
                held.release.set()
                done = await asyncio.wait_for(asyncio.gather(first, second), PATIENCE)
            finally:
                for task in (first, second):
                    if task is not None:
                        task.cancel()
    assert done == ([3, 3] if call == "stat" else [b"abc", b"abc"])
    assert held.accepted == 1  # the second waited for the first's connection
