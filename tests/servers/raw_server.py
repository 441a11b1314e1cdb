"""A scripted raw TCP server for hostile-HTTP tests: it sends exactly the
bytes a test gives it, which no real server library would."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

__all__ = ["Listener", "RawServer", "dripping", "serving", "stop_accepting"]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def stop_accepting(sockets: Iterable[socket.socket]) -> None:
    """Stop accepting on the listening ``sockets`` (left open), and let the
    connections already accepted become transports their server knows.

    Call before closing the server. Each connection the loop accepted
    queued a task that builds its transport, and that transport's
    ``connection_made``. Python 3.11's ``Server.close`` before that task ran
    made it fail (the server's assertion that it is open) with its socket
    left open: a ResourceWarning when collected, in whichever test ran
    then (a client's connection abandoned as ``rm`` stopped, under load).
    Callbacks run in the order queued: two turns of the loop run both.
    """
    loop = asyncio.get_running_loop()
    for sock in sockets:
        loop.remove_reader(sock.fileno())
    await asyncio.sleep(0)  # the transports are built...
    await asyncio.sleep(0)  # ...and their connection_made has run


class _Tracked(asyncio.StreamReaderProtocol):
    """``asyncio.start_server``'s protocol, keeping its connection's
    transport in ``live`` from accept until it is lost."""

    def __init__(self, handler: Handler, live: set[asyncio.BaseTransport]) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(asyncio.StreamReader(loop=loop), handler, loop=loop)
        self._live = live
        self._mine: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._mine = transport
        self._live.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._live.discard(self._mine)  # type: ignore[arg-type]
        super().connection_lost(exc)


class Listener:
    """``asyncio.start_server`` whose :meth:`close` also closes every
    connection it accepted, and at once.

    Python 3.11's ``Server.close`` leaves accepted connections open, and a
    handler's own ``writer.close()`` may never run (its task cancelled
    before its first step, at the test loop's end) or may not finish (a TLS
    close waits for the peer's goodbye). Such a socket outlived its loop
    and was closed by the garbage collector, a ResourceWarning in whichever
    test ran next. Aborted here, each is closed before the test ends.
    """

    def __init__(self, handler: Handler, *, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.server: asyncio.Server | None = None
        #: the accepted connections not yet lost
        self.live: set[asyncio.BaseTransport] = set()
        self._upstream: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        """Listen on 127.0.0.1, port 0; return the port."""
        self.server = await asyncio.get_running_loop().create_server(
            lambda: _Tracked(self.handler, self.live), "127.0.0.1", 0, ssl=self.tls)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def connect(self, host: str, port: int) -> tuple[asyncio.StreamReader,
                                                          asyncio.StreamWriter]:
        """A relay's connection onward, aborted by :meth:`close` as the
        accepted ones are."""
        reader, writer = await asyncio.open_connection(host, port)
        self._upstream.append(writer)
        return reader, writer

    async def close(self) -> None:
        """Stop listening and abort every connection still open."""
        assert self.server is not None
        await stop_accepting(self.server.sockets)
        self.server.close()
        for transport in [*self.live, *(w.transport for w in self._upstream)]:
            transport.abort()  # type: ignore[attr-defined]
        # An aborted socket is closed on the loop's next turn.
        await asyncio.sleep(0)
        await self.server.wait_closed()


@contextlib.asynccontextmanager
async def serving(handler: Handler, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """``handler`` (an ``asyncio.start_server`` callback) on 127.0.0.1, port 0;
    yields its ``http://`` (``https://`` with ``tls``) endpoint."""
    listener = Listener(handler, tls=tls)
    port = await listener.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        await listener.close()


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
        self._listener = Listener(self._serve)

    async def __aenter__(self) -> str:
        return f"http://127.0.0.1:{await self._listener.start()}"

    async def __aexit__(self, *exc: object) -> None:
        await self._listener.close()

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
