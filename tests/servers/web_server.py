"""A scripted aiohttp server for hostile-HTTP tests: well-formed HTTP whose
content a test chooses (tests/servers/raw_server.py sends raw bytes instead)."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.servers.raw_server import stop_accepting

__all__ = ["Answer", "Served", "Server"]


@dataclass
class Served:
    """What the server was asked and sent."""

    paths: list[str] = field(default_factory=list)
    peers: list[Any] = field(default_factory=list)
    sent: int = 0


Answer = Callable[[web.Request, Served], Awaitable[web.StreamResponse]]


class Server:
    """``async with Server(answer) as (endpoint, served)``: every request,
    whatever its path, is answered by ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.served = Served()
        self._runner: web.AppRunner | None = None
        self._socket: socket.socket | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.served.paths.append(f"{request.method} {request.path_qs}")
        self.served.peers.append(request.transport.get_extra_info("peername")
                                 if request.transport else None)
        return await self.answer(request, self.served)

    async def __aenter__(self) -> tuple[str, Served]:
        # Room for a multipart upload's parts (aiohttp's default is 1 MiB).
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=1)
        await self._runner.setup()
        # A socket of our own, to stop accepting on before the close.
        self._socket = socket.create_server(("127.0.0.1", 0))
        await web.SockSite(self._runner, self._socket).start()
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}", self.served

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None and self._socket is not None
        await stop_accepting([self._socket])
        await self._runner.cleanup()
