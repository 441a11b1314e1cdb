"""aiohttp sessions as the transport uses them: request bodies sent from the
caller's buffer in paced slices, no redirects followed, no answer taken
that nobody asked for, heads (interim ones included) whole within a window.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import warnings
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler as AiohttpProtocol
from aiohttp.http import RawResponseMessage

from .._core.settings.config import ClientConfig
from . import slow_drip
from .failures import Redirected
from .heads import MalformedResponse
from .http import MAX_INTERIM_RESPONSES
from .slow_drip import SlowTransfer

__all__ = ["forbid_redirects", "new_session", "request_body"]


# Bodies go to the socket in slices of this size, each followed by a drain, so
# the event loop's transport never buffers a second copy of a whole part.
_BODY_SLICE = 1 << 20


class _SlicedPayload(aiohttp.BytesPayload):
    def __init__(self, data: bytes | bytearray | memoryview, window: float) -> None:
        super().__init__(data)
        self._window = window

    async def write(self, writer: Any) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        view = memoryview(self._value).cast("B")
        if content_length is not None:
            view = view[:content_length]
        for start in range(0, len(view), _BODY_SLICE):
            await _send_paced(writer, view[start:start + _BODY_SLICE], self._window, start)


async def _send_paced(writer: Any, piece: memoryview, window: float, sent: int) -> None:
    """Hand ``piece`` to the connection, then wait for it to leave, as long
    as the bytes queued in the transport shrink by the pace rule's
    :data:`~aioflux._net.slow_drip.MIN_PROGRESS` each ``window``: no read timeout
    runs while a body is sent, so a server that stops reading it, or reads a
    byte now and then, would otherwise hold the request for good. (The
    kernel's socket buffers take a few MB before that shows.)"""
    sending = asyncio.ensure_future(writer.write(piece))
    transport = getattr(writer, "transport", None)  # aiohttp's writer has one
    queued: int | None = None  # the first window is the kernel's to fill
    try:
        while not (await asyncio.wait({sending}, timeout=window))[0]:
            left = transport.get_write_buffer_size() if transport is not None else 0
            if queued is not None and queued - left < slow_drip.MIN_PROGRESS:
                least = slow_drip.MIN_PROGRESS >> 10
                raise SlowTransfer(f"the server took less than {least} KiB of "
                                   f"the request body in {window:g} s, after about "
                                   f"{sent + len(piece) - left} bytes")
            queued = left
        sending.result()
    finally:
        sending.cancel()


def request_body(data: bytes | bytearray | memoryview | None, *,
                 window: float | None = None) -> aiohttp.BytesPayload | None:
    """``data`` as an aiohttp body sent from the caller's buffer, in 1 MiB slices.

    Args:
        data: the body, or None.
        window: the pace rule's window for sending it: the client's
            ``read_stall`` (default :data:`aioflux._net.slow_drip.WINDOW`).

    Returns:
        The payload, or None.
    """
    if data is None:
        return None
    # aiohttp warns about bodies over 1 MiB given as bytes; a part is sent
    # from the caller's buffer on purpose, without an extra copy.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        if len(data) > _BODY_SLICE:
            return _SlicedPayload(data, slow_drip.WINDOW if window is None else window)
        return aiohttp.BytesPayload(data)


async def _refuse_redirect(_session: aiohttp.ClientSession, _ctx: SimpleNamespace,
                           params: aiohttp.TraceRequestRedirectParams) -> None:
    raise Redirected(params.response.status)


def forbid_redirects(session: aiohttp.ClientSession) -> None:
    """Make ``session`` refuse every redirect, also in a call of :meth:`Transport.run`
    that forgets ``allow_redirects=False``: the APIs never redirect, so a 3xx
    is someone else's answer and following it would trust their bytes."""
    trace = aiohttp.TraceConfig()
    trace.on_request_redirect.append(_refuse_redirect)
    trace.freeze()
    # ClientSession takes trace configs only at construction; a factory a
    # test injects may not have added ours.
    session._trace_configs.append(trace)


class _NoStrayResponses(AiohttpProtocol):
    """aiohttp's connection protocol, refusing answers nobody asked for and
    response heads that drip.

    aiohttp parses bytes that arrive on an idle keep-alive connection and
    hands them to the next request as its answer, so a server (or proxy)
    that speaks out of turn would have its stray response taken for an
    object's bytes. Here that request fails as a dropped connection instead,
    the connection closed before a byte of the request goes out (the retry
    loop sends it on a fresh one, so the server sees it once), as the lean
    client drops such a connection at once.

    A final head must also be whole within ``head_window`` seconds of the
    first byte of the answer, interim (1xx) heads before it included, of
    which at most :data:`~aioflux._net.http.MAX_INTERIM_RESPONSES` are
    taken: aiohttp's read timeout restarts on every byte, so a head sent a
    byte at a time, or 1xx heads without end, were never cut (see
    :mod:`aioflux._net.slow_drip`; bodies are paced where they are read).
    """

    def __init__(self, *args: Any, head_window: float = slow_drip.WINDOW, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_window = head_window
        self._head_started: float | None = None
        self._awaiting_head = False
        self._interim = 0

    def set_response_params(self, **params: Any) -> None:
        stray = bool(self._buffer or self._tail)
        super().set_response_params(**params)
        self._awaiting_head = True
        self._head_started = None
        self._interim = 0
        if stray:
            self._buffer.clear()
            self.set_exception(aiohttp.ServerDisconnectedError(
                "the server sent a response nobody asked for on an idle connection"))
            # Closed before the request is written: aiohttp writes a request
            # without a body at once, and the retry would send a DELETE or a
            # POST a second time (the server may well act on this copy).
            if self.transport is not None:
                self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if not (self._awaiting_head and data):
            super().data_received(data)
            return
        now = self._loop.time()
        if self._head_started is None:
            self._head_started = now
        elif now - self._head_started > self._head_window:
            self._awaiting_head = False
            self.set_exception(SlowTransfer(
                f"the response head was not whole {self._head_window:g} s after its first byte"))
            return
        interim = self._interim
        super().data_received(data)
        if self._awaiting_head and self._interim != interim:
            # aiohttp stops its read timeout at an interim head as at a final
            # one without a body: restarted, a server silent after a 103 is cut.
            self.start_timeout()

    def feed_data(self, data: tuple[RawResponseMessage, aiohttp.StreamReader],
                  size: int = 0) -> None:
        # aiohttp's parser hands over every head it parsed, interim ones too
        # (ClientResponse.start skips those); only a final one ends the wait.
        if self._interim > MAX_INTERIM_RESPONSES:
            return  # refused: nothing after it is taken as the answer
        code = data[0].code
        if not 100 <= code < 200 or code == 101:
            self._awaiting_head = False  # its body is paced where it is read
        else:
            self._interim += 1
            if self._interim > MAX_INTERIM_RESPONSES:
                self._awaiting_head = False
                self.set_exception(MalformedResponse(
                    f"more than {MAX_INTERIM_RESPONSES} interim (1xx) responses"))
                return
        super().feed_data(data, size)


def new_session(config: ClientConfig, tls: ssl.SSLContext | None, *,
                proxy: str | None = None) -> aiohttp.ClientSession:
    """The aiohttp session of one loop: aioflux's connector, timeouts and
    User-Agent, through ``proxy`` (:func:`aioflux._net.proxies.proxy_for`)
    if one is given."""
    t = config.timeouts
    connector = aiohttp.TCPConnector(
        limit=config.effective_connection_limit,
        limit_per_host=config.connection_limit_per_host,
        keepalive_timeout=t.idle,
        ttl_dns_cache=300,
        # Also what the calls of Transport.run on this session verify with.
        ssl=tls if tls is not None else True,
    )
    # The connector builds its protocols from this factory; aiohttp has no
    # public way to choose the protocol class.
    connector._factory = functools.partial(  # type: ignore[assignment]
        _NoStrayResponses, loop=asyncio.get_running_loop(), head_window=t.read_stall)
    session = aiohttp.ClientSession(
        connector=connector,
        # ``sock_connect``, not ``connect``: aiohttp's ``connect`` also counts
        # the wait for a free connection under ``connection_limit``, which
        # failed queued requests as "timed out connecting" while the pool's
        # connections were busy answering. The wait is bounded as a permit's
        # is (by the requests ahead of it); DNS by the system's resolver.
        timeout=aiohttp.ClientTimeout(total=t.total, sock_connect=t.connect,
                                      sock_read=t.read_stall),
        headers={"User-Agent": config.user_agent},
        # Object names may contain characters yarl would re-encode; we quote
        # them ourselves exactly once.
        requote_redirect_url=False,
        proxy=proxy,
    )
    # aiohttp silently sends an idempotent request (GET, PUT, DELETE) a
    # second time when its connection drops; our retry loop must see every
    # attempt, or a DELETE whose answer was lost reports the retry's 404 as
    # "no such object" and a PUT is repeated without a status query. aiohttp
    # has no public switch; its own test client turns it off the same way.
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False
    return session
