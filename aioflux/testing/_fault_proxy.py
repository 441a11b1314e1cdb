"""A TCP proxy that cuts connections at random points of the byte stream,
and shapes them as the emulator's network does.

Put it in front of any HTTP server (our emulator, fake-gcs-server) to test
what a client does when a connection dies mid-body: the server-side faults
of :class:`~aioflux.testing.Faults` happen where the server decides, the
proxy's cuts happen anywhere in the bytes, headers included, and work with
a server we cannot instrument. With a ``profile`` it also gives such a
server (Azurite, nginx, fake-gcs-server) the emulator's latency and caps.
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
import struct
import threading
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit

from aioflux.testing._profile import EmulatorProfile
from aioflux.testing._runtime import Link, due_time
from aioflux.testing._server import new_event_loop

__all__ = ["CHUNK", "FaultProxy", "ProxyStats"]

# The unit the cut probabilities refer to.
CHUNK = 64 * 1024


@dataclass
class ProxyStats:
    """Counters of a :class:`FaultProxy`, updated live by its loop thread.

    Attributes:
        connections: client connections accepted.
        response_cuts: connections cut while relaying server -> client
            (``p_cut_response``).
        answer_cuts: connections cut before an answer (``p_cut_answer``).
        request_cuts: connections cut while relaying client -> server.
        bytes_to_client: bytes relayed server -> client.
        bytes_to_server: bytes relayed client -> server.
    """

    connections: int = 0
    response_cuts: int = 0
    answer_cuts: int = 0
    request_cuts: int = 0
    bytes_to_client: int = 0
    bytes_to_server: int = 0

    @property
    def cuts(self) -> int:
        """Connections cut, of every kind."""
        return self.response_cuts + self.answer_cuts + self.request_cuts


class _Cut(Exception):
    """One direction decided to cut the connection, with a RST or a FIN."""

    def __init__(self, *, reset: bool) -> None:
        super().__init__("cut")
        self.reset = reset


class _Turn:
    """Whose turn it is on one connection: ``asked`` once the client sent
    bytes, until the server's answer starts."""

    asked = False


class FaultProxy:
    """Relays TCP connections to ``upstream`` and cuts some of them.

    Each direction cuts a connection with probability ``p_cut_response``
    (server -> client) or ``p_cut_request`` (client -> server) per
    :data:`CHUNK` (64 KiB) it relays. The cut point is drawn in bytes, so it
    falls anywhere (headers, mid-body, between responses of a keep-alive
    connection) and does not depend on how the kernel splits reads. The
    bytes before it are delivered, then both sockets are closed, half the
    time with a FIN (the peer sees a short body) and half the time with a
    RST (the peer sees a reset).

    ``p_cut_answer`` cuts, with that probability, just before the first byte
    the server sends after the client sent something: the server got the
    whole request and acted on it, the client never learns the outcome.
    Small answers (an upload's JSON, a delete's 204) are almost never hit
    by a per-64 KiB rate; this is the knob that tests idempotent retries of
    writes. Answers to pipelined requests count as one.

    ``profile`` shapes what it relays as the emulator's network: ``ttfb``
    before the first byte of each answer, ``bandwidth`` per connection and
    ``host_bandwidth`` over all of them, each way (its other fields are
    the server's business and ignored).

    A change of a knob takes effect on the next read of every connection,
    so the probabilities may be changed at any time from any thread (e.g. 0
    while seeding data).

    Use it as a context manager: it runs on its own event loop in a daemon
    thread (sync tests and DataLoader workers can use :attr:`endpoint`)::

        with FaultProxy(fake_gcs.endpoint, p_cut_response=0.02, seed=7) as proxy:
            client = Client(endpoint=proxy.endpoint)
            ...
            assert proxy.stats.response_cuts > 0

    Args:
        upstream: the server, ``http://HOST:PORT``.
        p_cut_response: probability of a cut per 64 KiB relayed server -> client.
        p_cut_request: probability of a cut per 64 KiB relayed client -> server.
        p_cut_answer: probability of a cut before the first byte of an answer.
        profile: latency and caps to add (``None``: relay as fast as it can).
        seed: seeds the cut decisions; each connection draws from its own
            generator seeded by ``(seed, connection number)``, so a run is
            reproducible up to the order in which connections are accepted.
        host: interface to bind (keep the loopback default).
        port: port to bind; ``0`` picks a free one.

    Raises:
        ValueError: a probability outside [0, 1] or an upstream without a port.
    """

    def __init__(self, upstream: str, *, p_cut_response: float = 0.0,
                 p_cut_request: float = 0.0, p_cut_answer: float = 0.0,
                 profile: EmulatorProfile | None = None, seed: int = 0,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"FaultProxy upstream needs http://HOST:PORT, got {upstream!r}")
        self._upstream = (parts.hostname, parts.port)
        self.p_cut_response = p_cut_response
        self.p_cut_request = p_cut_request
        self.p_cut_answer = p_cut_answer
        self.profile = profile
        self._links = {True: Link(), False: Link()}  # the host's, to the server and back
        self._seed = seed
        self._host = host
        self._port = port
        self.stats = ProxyStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._relays: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def p_cut_response(self) -> float:
        """Cut probability per 64 KiB server -> client (assignable)."""
        return self._p_response

    @p_cut_response.setter
    def p_cut_response(self, value: float) -> None:
        self._p_response = _check_probability("p_cut_response", value)

    @property
    def p_cut_request(self) -> float:
        """Cut probability per 64 KiB client -> server (assignable)."""
        return self._p_request

    @p_cut_request.setter
    def p_cut_request(self, value: float) -> None:
        self._p_request = _check_probability("p_cut_request", value)

    @property
    def p_cut_answer(self) -> float:
        """Cut probability before the first byte of each answer (assignable)."""
        return self._p_answer

    @p_cut_answer.setter
    def p_cut_answer(self, value: float) -> None:
        self._p_answer = _check_probability("p_cut_answer", value)

    @property
    def endpoint(self) -> str:
        """``http://HOST:PORT`` of the proxy.

        Raises:
            RuntimeError: the proxy is not running.
        """
        if self._server is None:
            raise RuntimeError("FaultProxy is not running")
        return f"http://{self._host}:{self._port}"

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("FaultProxy already running")
        loop = new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._relay, self._host, self._port))
            except BaseException as exc:  # handed to the calling thread below
                failure.append(exc)
                started.set()
                loop.close()
                return
            self._port = self._server.sockets[0].getsockname()[1]
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        thread = threading.Thread(target=run, name="aioflux-fault-proxy", daemon=True)
        thread.start()
        started.wait()
        if failure:
            thread.join()
            raise failure[0]
        self._loop, self._thread = loop, thread
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._loop = self._thread = self._server = None

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        # Aborting the sockets ends every pump (EOF or error) and so every
        # relay; cancelling the relays instead would make asyncio log each
        # cancelled connection handler.
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.gather(*self._relays, return_exceptions=True)
        await self._server.wait_closed()

    # -- relaying ----------------------------------------------------------

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        self._writers.add(client_w)
        self.stats.connections += 1
        number = self.stats.connections
        server_w: asyncio.StreamWriter | None = None
        try:
            try:
                server_r, server_w = await asyncio.open_connection(*self._upstream)
            except OSError:
                _close(client_w, reset=True)
                return
            self._writers.add(server_w)
            turn = _Turn()
            seed = f"{self._seed}:{number}"
            pumps = [
                asyncio.ensure_future(self._pump(client_r, server_w, f"{seed}:up", turn,
                                                 request=True)),
                asyncio.ensure_future(self._pump(server_r, client_w, f"{seed}:down", turn,
                                                 request=False)),
            ]
            try:
                # Both directions reach EOF, or one is cut or fails: then both go.
                done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for t in pumps:
                    t.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
            cuts = [e for t in done if not t.cancelled() and isinstance(e := t.exception(), _Cut)]
            reset = bool(cuts) and cuts[0].reset
            _close(client_w, reset=reset)
            _close(server_w, reset=reset)
        finally:
            self._relays.discard(task)
            self._writers.discard(client_w)
            if server_w is not None:
                self._writers.discard(server_w)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    seed: str, turn: _Turn, *, request: bool) -> None:
        # One generator per direction, and cut points drawn in bytes rather
        # than per read: the same seed and byte stream give the same cuts,
        # however the kernel splits the reads.
        rng = random.Random(seed)
        p = -1.0
        budget = math.inf  # bytes to relay before the next cut
        due: float | None = None  # when the last bytes relayed were due (None: a new message)
        while data := await reader.read(CHUNK):
            profile = self.profile
            if request:
                if not turn.asked:
                    due = None
                turn.asked = True
            elif turn.asked:
                turn.asked = False
                due = None
                if self._p_answer and rng.random() < self._p_answer:
                    self.stats.answer_cuts += 1
                    raise _Cut(reset=rng.random() < 0.5)
                if profile is not None and profile.ttfb:
                    await asyncio.sleep(profile.ttfb)
            now = self._p_request if request else self._p_response
            if now != p:
                p, budget = now, _bytes_to_cut(rng, now)
            cut = budget < len(data)
            if cut:
                data = data[:int(budget)]
            else:
                budget -= len(data)
            if data:
                if profile is not None and (profile.bandwidth or profile.host_bandwidth):
                    due = await self._pace(profile, len(data), due, request)
                writer.write(data)
                await writer.drain()
                if request:
                    self.stats.bytes_to_server += len(data)
                else:
                    self.stats.bytes_to_client += len(data)
            if cut:
                if request:
                    self.stats.request_cuts += 1
                else:
                    self.stats.response_cuts += 1
                raise _Cut(reset=rng.random() < 0.5)
        if writer.can_write_eof():
            writer.write_eof()


    async def _pace(self, profile: EmulatorProfile, size: int, due: float | None,
                    request: bool) -> float:
        """Wait until ``size`` more bytes are due; returns when they were."""
        now = asyncio.get_running_loop().time()
        due = due_time(self._links[request], size, now if due is None else due,
                       profile.bandwidth, profile.host_bandwidth)
        if due - now > 0.001:
            await asyncio.sleep(due - now)
        return due


def _bytes_to_cut(rng: random.Random, p: float) -> float:
    """Bytes until the next cut for a cut probability ``p`` per CHUNK bytes.

    Exponential in bytes, so every 64 KiB stretch is cut with probability
    ``p`` wherever it starts; ``p == 1`` cuts uniformly within the first
    CHUNK (a cut mid-body rather than before the first byte).
    """
    if p <= 0.0:
        return math.inf
    if p >= 1.0:
        return rng.uniform(0, CHUNK)
    return rng.expovariate(-math.log1p(-p) / CHUNK)


def _close(writer: asyncio.StreamWriter, *, reset: bool) -> None:
    sock = writer.get_extra_info("socket")
    if reset and sock is not None:
        try:
            # Linger 0: closing sends RST instead of FIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed by the peer: nothing left to reset
        writer.transport.abort()
    else:
        writer.close()


def _check_probability(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"FaultProxy.{name} must be in [0, 1], got {value}")
    return float(value)

