"""One keep-alive HTTP/1.1 connection of the lean client
(:mod:`aioflux._net.http`): a ``BufferedProtocol`` that parses each response
head with llhttp (:mod:`aioflux._net.heads`) and frames the body by its
``Content-Length``, so the body's bytes land in the caller's buffer as they
arrive. The pool that opens, reuses and closes these is
:class:`~aioflux._net.http.MediaPool`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .._core.integrity.crc import crc32c, crc32c_at
from .._core.memory.buffers import GrowingBytes, address
from .._core.memory.prefault import prefault
from .heads import MalformedResponse, content_length, parse_head
from .slow_drip import Pace, SlowTransfer, timed_out_early

__all__ = ["MAX_INTERIM_RESPONSES", "BodyTruncated", "MediaResponse"]

# GCS response heads are ~1-2 KiB; the first read also takes the start of
# the body, which is copied once into the body buffer.
_HEAD_BUFFER = 16 * 1024
_MAX_HEAD = 64 * 1024
# At most this much of a non-200/206 body is read (enough for any error
# message); the connection is dropped when the body is longer.
_MAX_ERROR_BODY = 64 * 1024
# A body received into a buffer of our own starts at most this big and
# doubles as bytes arrive (in place: GrowingBytes): a declared length alone
# never allocates memory.
_FIRST_BODY_BUFFER = 1 << 20
# A body's next pages are made present this far ahead of the bytes, in one
# call instead of a fault a page as the socket's bytes are copied in
# (_core/memory/prefault.py); the socket is given no more than those pages
# to receive into at a time: given the whole rest of the body, a receive
# of all the socket holds (a few MiB) lands past the populated MiB, a
# fault a page.
_POPULATE_AHEAD = 1 << 20
_POPULATE_FROM = 64 * 1024  # a shorter body: not worth a call
#: A 2xx body this long or longer is checksummed as its bytes land, when
#: asked (``summed``), each piece while the kernel's copy of it is still in
#: the core's cache. Checked once whole instead, its last bytes waited for
#: a pass over all of them on the event loop's thread (16 MiB: about 1 ms,
#: the other sockets unread meanwhile). Below this one pass costs less than
#: a call a piece.
SUMMED_FROM = 1 << 20
_OK = (200, 206)
#: Interim (1xx) responses accepted before the final one. A server answers
#: a GET with a 100 Continue or a 103 Early Hints or two; one sending them
#: without end would hold a read forever, each head being fresh bytes.
MAX_INTERIM_RESPONSES = 8

class BodyTruncated(ConnectionError):
    """The connection closed before the whole body arrived.

    ``response`` holds the head and the bytes that did arrive (in ``body``,
    or in the caller's buffer), so a read can resume after them.
    """

    def __init__(self, message: str, response: MediaResponse | None = None) -> None:
        super().__init__(message)
        self.response = response


class _Stale(ConnectionError):
    """A reused connection closed before answering (the server dropped it idle)."""


@dataclass(slots=True)
class MediaResponse:
    """One response: status, headers, and the body or how much of it landed.

    Args:
        status: HTTP status.
        headers: lower-case names; a repeated header's values joined by ``,``.
        body: the body, unless it was received into the caller's buffer
            (or did not fit it, see ``expected``).
        received: body bytes received.
        expected: ``Content-Length``, when the server sent one.
        slow: the body was cut for moving too little
            (:mod:`aioflux._net.slow_drip`), not for silence or a closed
            connection: the few bytes it moved are no progress to retry on.
        crc: the crc32c of the ``received`` body bytes, summed as they
            landed, where the exchange was asked to (``summed``) and the
            body was a whole 2xx one of :data:`SUMMED_FROM` bytes or more;
            else None.
    """

    status: int
    headers: Mapping[str, str]
    body: bytearray | bytes | None
    received: int
    expected: int | None
    slow: bool = False
    crc: int | None = None


@dataclass(slots=True)
class _Exchange:
    """The state of one request on a connection."""

    waiter: asyncio.Future[MediaResponse | None]
    into: memoryview | None
    limit: int | None
    stall: float
    last: float
    pace: Pace
    deadline: float  # Timeouts.total's end, on the loop's clock (inf: none)
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    dest: memoryview | None = None
    dest_at: int = 0  # dest's address (its pages populated ahead, its bytes summed)
    ahead: int = 0  # where dest's populated pages end (with dest_at)
    summing: bool = False  # the body's crc32c summed as its bytes land
    crc: int = 0
    # A body not received into the caller's buffer: the bytes object
    # handed out, received into in place (see _start_body).
    body: GrowingBytes | None = None
    expected: int = 0  # the declared Content-Length
    want: int = 0  # body bytes to receive (an error body's may be cut short)
    got: int = 0
    progress: int = 0
    interim: int = 0  # interim heads skipped
    interim_bytes: int = 0  # their bytes: no progress for the pace rule
    keep_alive: bool = True
    timer: asyncio.TimerHandle | None = None
    coded: bool = False  # a content coding is the stored bytes' (see MediaPool.get)


def _arrived(ex: _Exchange) -> bytes | None:
    """The body of a response cut short: what arrived (``ex.got`` bytes).
    Called once the transport's reads are over: the body is taken."""
    body, ex.body, ex.dest = ex.body, None, None
    return None if body is None else body.take(ex.got)


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive connection; one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_gone: Callable[[], None]) -> None:
        self._loop = loop
        self._on_gone: Callable[[], None] | None = on_gone
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self.idle_since = time.monotonic()
        self.used = False
        self._head = bytearray(_HEAD_BUFFER)
        self._head_len = 0
        self._exchange: _Exchange | None = None

    # -- asyncio protocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        ex = self._exchange
        if ex is not None and ex.dest is not None:
            if ex.got == len(ex.dest) and ex.body is not None:
                # Grown here, not in buffer_updated: the transport still
                # holds the view it received into until that returns.
                ex.dest = None
                ex.body.grow(min(ex.want, 2 * ex.got))
                ex.dest = ex.body.view()
                ex.dest_at = address(ex.dest) if ex.dest_at else 0
            if ex.dest_at:
                if ex.got >= ex.ahead:
                    ex.ahead = min(len(ex.dest), ex.got + _POPULATE_AHEAD)
                    prefault(ex.dest_at + ex.got, ex.ahead - ex.got, holding_gil=True)
                return ex.dest[ex.got:ex.ahead]
            return ex.dest[ex.got:]
        if self._head_len == len(self._head):
            if len(self._head) >= _MAX_HEAD:
                # buffer_updated fails the connection; these bytes are dropped.
                return memoryview(bytearray(1024))
            grown = bytearray(min(_MAX_HEAD, 2 * len(self._head)))
            grown[:self._head_len] = self._head[:self._head_len]
            self._head = grown
        return memoryview(self._head)[self._head_len:]

    def buffer_updated(self, nbytes: int) -> None:
        ex = self._exchange
        if ex is None:
            # Bytes nobody asked for: the stream is out of step, drop it.
            self._fail(MalformedResponse("unsolicited bytes from the server"))
            return
        ex.progress += nbytes
        ex.last = self._loop.time()
        if ex.dest is not None:
            if ex.summing:
                ex.crc = crc32c_at(ex.dest_at + ex.got, nbytes, ex.crc)
            ex.got += nbytes
        else:
            old = self._head_len
            self._head_len += nbytes
            if not self._scan_head(ex, max(0, old - 3)):
                return
        if ex.got >= ex.want:
            self._finish(ex)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone()
        ex = self._exchange
        if ex is None or ex.waiter.done():
            return
        if ex.dest is not None:
            error: Exception = BodyTruncated(
                f"connection closed after {ex.got} of {ex.expected} body bytes",
                MediaResponse(ex.status, ex.headers, _arrived(ex), ex.got, ex.expected))
        elif ex.progress == 0 and self.used:
            error = _Stale("reused connection closed before answering")
        else:
            error = ConnectionResetError("connection closed before the response head")
        self._fail(error)

    # -- exchange --------------------------------------------------------------

    async def exchange(self, request: bytes, into: memoryview | None, limit: int | None,
                       stall: float, deadline: float = math.inf, coded: bool = False,
                       summed: bool = False) -> MediaResponse | None:
        """Send one request and wait for its response (see MediaPool.get);
        ``deadline`` (loop time) ends it as a timeout, a body with what arrived."""
        transport = self.transport
        if transport is None or self.closed:
            raise _Stale("connection closed while idle")
        now = self._loop.time()
        ex = _Exchange(self._loop.create_future(), into, limit, stall, now, Pace(stall, now),
                       deadline, coded=coded, summing=summed)
        self._exchange = ex
        self._head_len = 0
        ex.timer = self._loop.call_later(max(0.0, min(stall, deadline - now)),
                                         self._check_stall, ex)
        transport.write(request)
        try:
            response = await ex.waiter
            if ex.body is not None and response is not None and response.body is None:
                # Taken here, not in buffer_updated: the transport lets go of
                # the view it received into only after that returns.
                response.body = ex.body.take(ex.got)
        finally:
            ex.timer.cancel()
            self._exchange = None
            self.used = True
            self.idle_since = time.monotonic()
            ex.dest = None
            if ex.body is not None:
                ex.body.close()  # not handed over: failed or cancelled
                ex.body = None
        return response

    def _check_stall(self, ex: _Exchange) -> None:
        if ex.waiter.done():
            return
        now = self._loop.time()
        silent = now - ex.last
        error: TimeoutError | None = None
        if silent >= ex.stall:
            error = TimeoutError(f"Timeouts.read_stall: no response bytes for {ex.stall:g} s")
        elif now >= ex.deadline:
            error = TimeoutError("the request ran past Timeouts.total")
        else:
            try:
                # A byte every few seconds is never silent for long.
                ex.pace.check(ex.progress - ex.interim_bytes, now, "response bytes")
            except SlowTransfer as exc:
                error = exc
        if error is None:
            # Re-armed for the silence left, so it fires read_stall after the
            # last byte (plus the loop's timer slack), not up to twice that;
            # or when the pace window closes or the deadline comes, if sooner.
            due = min(ex.stall - silent, ex.pace.due(now), ex.deadline - now)
            ex.timer = self._loop.call_later(due, self._check_stall, ex)
        elif ex.dest is not None:
            # Mid-body: hand over what arrived, so the read resumes.
            self._fail(BodyTruncated(
                f"{error} after {ex.got} of {ex.expected} body bytes",
                MediaResponse(ex.status, ex.headers, _arrived(ex), ex.got, ex.expected,
                              isinstance(error, SlowTransfer) or timed_out_early(ex.got))))
        else:
            self._fail(error)

    def _scan_head(self, ex: _Exchange, start: int) -> bool:
        """Look for a complete head from ``start``; True when a body is under way."""
        while True:
            end = self._head.find(b"\r\n\r\n", start, self._head_len)
            if end < 0:
                if self._head_len >= _MAX_HEAD:
                    self._fail(MalformedResponse(f"response head over {_MAX_HEAD} bytes"))
                return False
            try:
                parsed = parse_head(bytes(self._head[:end + 4]))
            except MalformedResponse as exc:
                self._fail(exc)
                return False
            if parsed is None:
                return self._give_up(ex)
            status, headers, keep_alive = parsed
            if status >= 200:
                length = content_length(headers)
                ex.status, ex.headers, ex.keep_alive = status, headers, keep_alive
                return self._start_body(ex, end + 4, length)
            if status == 101:
                self._fail(MalformedResponse("101 Switching Protocols to a GET"))
                return False
            ex.interim += 1
            if ex.interim > MAX_INTERIM_RESPONSES:
                self._fail(MalformedResponse(
                    f"more than {MAX_INTERIM_RESPONSES} interim (1xx) responses"))
                return False
            ex.interim_bytes += end + 4
            # An interim response (100 Continue, 103 Early Hints): the final
            # one follows; keep what came after it (the slices have one length).
            rest = self._head_len - end - 4
            self._head[:rest] = self._head[end + 4:self._head_len]
            self._head_len = rest
            start = 0

    def _start_body(self, ex: _Exchange, start: int, length: int | None) -> bool:
        """Set up the body from the head buffer's ``start``; False when done."""
        headers = ex.headers
        # llhttp refused Transfer-Encoding beside a Content-Length.
        if (length is None or "transfer-encoding" in headers
                or (not ex.coded
                    and headers.get("content-encoding", "identity").lower() != "identity")):
            return self._give_up(ex)
        if ex.status in (204, 304):
            length = 0  # never a body, whatever the header says (RFC 9110)
        ex.expected = ex.want = length
        in_hand = self._head_len - start
        if ex.status in _OK:
            if ((ex.limit is not None and length > ex.limit)
                    or (ex.into is not None and length > len(ex.into))):
                # More than asked for, or than fits: report the head and the
                # size without reading (or allocating for) the body; the
                # caller judges it (e.g. a 200 to a ranged GET).
                self.reusable = False
                self._resolve(ex, MediaResponse(ex.status, headers, None, 0, length))
                return False
            if ex.into is not None:
                ex.dest = ex.into[:length]
        else:
            ex.want = min(length, _MAX_ERROR_BODY)
            if ex.want < length:
                self.reusable = False  # the rest of the body is never read
        if in_hand > ex.want and ex.want == length:
            # More than one response's worth already here: the server's
            # Content-Length is short and the stream is out of step.
            self._fail(MalformedResponse(
                f"{in_hand - length} bytes beyond the declared Content-Length {length}"))
            return False
        if ex.dest is None:
            # Received straight into the bytes object the caller gets, never
            # copied: a bytearray cost every small read a second allocation
            # and a copy (cat of 100 KiB files: about 5% of the client's
            # CPU), a large one three passes over its bytes (copies as it
            # doubled, a zero fill, bytes() at the end). Not zero-filled: it
            # is handed over only once all of it arrived (a body cut short,
            # up to what came: _arrived).
            ex.body = GrowingBytes(max(1, min(ex.want, max(_FIRST_BODY_BUFFER, in_hand))))
            ex.dest = ex.body.view()
        # Where its pages are populated ahead and its bytes summed: not for a
        # body too short for either.
        ex.dest_at = address(ex.dest) if ex.want >= _POPULATE_FROM else 0
        got = min(in_hand, ex.want)
        ex.dest[:got] = self._head[start:start + got]
        ex.got = got
        ex.summing = ex.summing and ex.status in _OK and ex.want >= SUMMED_FROM \
            and ex.dest_at != 0
        if ex.summing:
            ex.crc = crc32c(ex.dest[:got])
        return True

    def _finish(self, ex: _Exchange) -> None:
        if not ex.keep_alive:
            self.reusable = False
        # A body of ours is taken by exchange() once the transport let go.
        self._resolve(ex, MediaResponse(ex.status, ex.headers, None, ex.got, ex.expected,
                                        crc=ex.crc if ex.summing else None))

    def _give_up(self, ex: _Exchange) -> bool:
        self.reusable = False
        self._resolve(ex, None)
        return False

    def _resolve(self, ex: _Exchange, result: MediaResponse | None) -> None:
        ex.dest = None
        self._exchange = None  # anything the server sends from here on is unsolicited
        if not ex.waiter.done():
            ex.waiter.set_result(result)

    def _fail(self, error: Exception) -> None:
        self.reusable = False
        ex = self._exchange
        if ex is not None and not ex.waiter.done():
            ex.waiter.set_exception(error)
        self.abort()

    def _gone(self) -> None:
        self.closed = True
        self.reusable = False
        on_gone, self._on_gone = self._on_gone, None
        if on_gone is not None:
            on_gone()

    def close(self) -> None:
        """Close the connection politely (its exchange is complete)."""
        self._gone()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once (its state is unknown or unwanted)."""
        self._gone()
        if self.transport is not None:
            self.transport.abort()


