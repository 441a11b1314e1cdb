"""A scripted raw TCP server for hostile-HTTP tests: it sends exactly the
bytes a test gives it, which no real server library would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

__all__ = ["RawServer", "dripping", "serving"]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """``handler`` (an ``asyncio.start_server`` callback) on 127.0.0.1, port 0;
    yields its ``http://`` endpoint."""
    listener = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    finally:
        listener.close()
        await listener.wait_closed()


def dripping(head: bytes, pause: float, *, drip_head: bool = False) -> Handler:
    """A server that answers every request with ``head``, then one body byte
    every ``pause`` seconds, never silent for long and never done
    (``drip_head``: the head itself goes a byte at a time, then the drip)."""
    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            for at in range(len(head)) if drip_head else ():
                writer.write(head[at:at + 1])
                await asyncio.sleep(pause)
            if not drip_head:
                writer.write(head)
            while True:
                await asyncio.sleep(pause)
                writer.write(b"x")
        except (ConnectionError, asyncio.CancelledError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    return drip


class RawServer:
    """An asyncio TCP server that answers each request as a script says.

    ``script(conn, index)`` gets the connection number and the request's
    number on it, and returns the bytes to send, or None to close at once;
    ``(data, "stall")`` sends data and goes silent, ``(data, "close")``
    sends it and closes the connection.
    """

    def __init__(self, script: Callable[[int, int], bytes | tuple[bytes, str] | None]) -> None:
        self.script = script
        self.connections = 0
        self.closed = 0
        #: every request head received, in order (to check Range, auth, ...)
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn, self.connections = self.connections, self.connections + 1
        index = 0
        try:
            while True:
                try:
                    self.requests.append(await reader.readuntil(b"\r\n\r\n"))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                answer = self.script(conn, index)
                index += 1
                if answer is None:
                    return
                data, then = answer if isinstance(answer, tuple) else (answer, "")
                writer.write(data)
                await writer.drain()
                if then == "stall":
                    await reader.read()  # silent until the client gives up
                if then:
                    return
        finally:
            self.closed += 1
            writer.close()
