"""The tests' own scripted servers leave no socket behind them.

A connection the server accepted and never closed (Python 3.11's
``Server.close`` leaves them open; a handler cancelled before its first
step never reaches its ``writer.close()``) outlived its test's loop and
was closed by the garbage collector during some later test, which then
failed on the ResourceWarning.
"""

from __future__ import annotations

import asyncio

from tests.servers.raw_server import Listener

PATIENCE = 30.0  # a bound on a hang, never reached when the server is right


async def test_closing_a_listener_closes_what_it_accepted() -> None:
    forever = asyncio.Event()
    started = asyncio.Event()

    async def sits(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        started.set()
        await forever.wait()  # never closes its connection itself

    listener = Listener(sits)
    port = await listener.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await asyncio.wait_for(started.wait(), PATIENCE)
        assert len(listener.live) == 1
        await listener.close()
        assert await asyncio.wait_for(reader.read(), PATIENCE) == b""  # closed, not left open
        assert not listener.live
    finally:
        writer.close()
        await writer.wait_closed()
