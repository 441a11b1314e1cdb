"""Shared per-emulator state used by both API handlers.

:class:`Runtime` owns the store, the knobs, the fault RNG, the QPS token
bucket and the counters, and implements the three places where knobs act:
admission (QPS cap, injected 429/503), request bodies (paced reads) and
response bodies (paced writes, mid-body stalls and resets).

Pacing has two caps: each body's own (``bandwidth``, one connection's
stream) and the host's (``host_bandwidth``, a NIC each direction of which
every body shares). A body's chunk leaves once both say it is due: its own
stream's time for its bytes, and the end of the turn it took on the host's
link (:class:`Link`). Each stream asks for its next turn only once its
last chunk is due, so the turns go round the streams sending at once.

The QPS cap is two token buckets, each holding ``qps_burst`` seconds of
tokens: one for object reads (GET and HEAD: downloads, metadata,
listings) and one for writes (everything else: uploads, compose, copy,
delete...), as GCS limits a bucket's reads and writes apart (about 5,000
and 1,000 a second at first) and S3 a prefix's GETs and PUTs (5,500 and
3,500). One bucket over both would refuse the writes of a reader at its
read cap, which no such service does.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import Mapping

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._profile import EmulatorProfile, Faults
from aioflux.testing._rope import Rope
from aioflux.testing._store import ObjectRecord, Store
from aioflux.testing._util import TRANSCODED_HEADERS, transcoded

__all__ = ["Link", "Runtime", "due_time", "parse_range"]

# Sleeps shorter than this are deferred and paid later in one go: timer
# granularity would otherwise make many small sleeps cost far more than
# the bytes they pace.
_MIN_SLEEP = 0.001
_MAX_CHUNK = 256 * 1024
_MIN_CHUNK = 16 * 1024
#: the object requests the cap counts as reads (GET and HEAD on either
#: face); every other object request is a write
READS = frozenset({
    "get_media", "get_metadata", "list",
    "xml_get", "xml_head", "xml_list", "xml_list_uploads", "xml_list_parts",
    "s3_get", "s3_head", "s3_list", "s3_list_uploads", "s3_list_parts",
})


class Link:
    """One direction of the host's NIC: turns of ``bytes / rate`` seconds,
    given in the order asked."""

    def __init__(self) -> None:
        self.free = -math.inf  # when the last turn given ends

    def turn(self, size: int, rate: float, earliest: float) -> float:
        """Take a turn for ``size`` bytes starting no sooner than
        ``earliest``; returns when it ends (the bytes' due time)."""
        self.free = max(self.free, earliest) + size / rate
        return self.free


def due_time(link: Link, size: int, after: float, bandwidth: float | None,
             host_bandwidth: float | None) -> float:
    """When ``size`` more bytes of a body whose last bytes were due at
    ``after`` are due, under its own cap and the host's."""
    due = after + size / bandwidth if bandwidth else after
    if host_bandwidth:
        due = max(due, link.turn(size, host_bandwidth, after))
    return due


class Runtime:
    """Store, knobs and counters shared by the JSON and XML handlers.

    Args:
        store: the object store.
        profile: initial latency / bandwidth / QPS profile.
        faults: initial fault probabilities.
    """

    def __init__(self, store: Store, profile: EmulatorProfile, faults: Faults) -> None:
        self.store = store
        self.base_url = ""  # http://host:port once serving, for absolute links
        self.stats: Counter[str] = Counter()
        self._profile = profile
        self._faults = faults
        self._rng = random.Random(faults.seed)
        self._tail_rng = random.Random(profile.tail_seed)
        # per kind (reads, writes): tokens, and when they were counted
        # (None: full at the next request)
        self._tokens = {"reads": 0.0, "writes": 0.0}
        self._token_time: dict[str, float | None] = {"reads": None, "writes": None}
        self._nic_out = Link()  # response bodies
        self._nic_in = Link()  # request bodies

    @property
    def profile(self) -> EmulatorProfile:
        """The current profile; assigning one takes effect on the next request."""
        return self._profile

    @profile.setter
    def profile(self, value: EmulatorProfile) -> None:
        self._profile = value
        self._token_time = {"reads": None, "writes": None}  # restart the buckets full
        self._tail_rng = random.Random(value.tail_seed)
        self._nic_out, self._nic_in = Link(), Link()

    @property
    def faults(self) -> Faults:
        """The current faults; assigning re-seeds the fault RNG."""
        return self._faults

    @faults.setter
    def faults(self, value: Faults) -> None:
        self._faults = value
        self._rng = random.Random(value.seed)

    def admit(self, op: str, *, object_request: bool = True) -> None:
        """Count a request and apply the QPS cap and injected 429/503.

        Object requests are also counted per kind (``stats["reads"]``,
        ``stats["writes"]``), as are those the cap refused
        (``throttled_reads``, ``throttled_writes``; ``throttled`` is both).

        Args:
            op: the operation name counted in ``stats``; :data:`READS`
                names the reads.
            object_request: bucket administration is exempt from faults.

        Raises:
            ApiError: 429 or 503.
        """
        self.stats[op] += 1
        self.stats["requests"] += 1
        if not object_request:
            return
        kind = "reads" if op in READS else "writes"
        self.stats[kind] += 1
        qps = self._profile.qps_limit
        if qps is not None and not self._take_token(kind, qps, self._profile.qps_burst):
            self.stats["throttled"] += 1
            self.stats[f"throttled_{kind}"] += 1
            raise err.rate_limited()
        f = self._faults
        if f.p_429 or f.p_503:
            draw = self._rng.random()
            if draw < f.p_429:
                self.stats["injected_429"] += 1
                raise err.rate_limited()
            if draw < f.p_429 + f.p_503:
                self.stats["injected_503"] += 1
                raise err.unavailable()

    def _take_token(self, kind: str, qps: float, seconds: float) -> bool:
        now = asyncio.get_running_loop().time()
        burst = max(1.0, qps * seconds)
        then = self._token_time[kind]
        tokens = burst if then is None else min(burst, self._tokens[kind] + (now - then) * qps)
        self._token_time[kind] = now
        taken = tokens >= 1.0
        self._tokens[kind] = tokens - 1.0 if taken else tokens
        return taken

    async def first_byte_delay(self) -> None:
        """Sleep the profile's time to first byte."""
        if self._profile.ttfb:
            await asyncio.sleep(self._profile.ttfb)

    async def read_body(self, request: web.BaseRequest) -> bytes:
        """Read the whole request body once, paced to the bandwidth cap."""
        return bytes(await self.read_pieces(request))

    async def read_pieces(self, request: web.BaseRequest) -> Rope:
        """Read the whole request body as the buffers it arrived in.

        Upload paths store these as they are: joining them copied every part
        once more into fresh memory (a 32 MiB part is also past the size
        glibc serves from its heap, so its pages were faulted in anew).
        """
        if request.headers.get("Expect", "").lower() == "100-continue" and request.writer:
            # The low-level server has no router to answer Expect for us
            # (curl sends it for large bodies, then waits a second).
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        bandwidth = self._profile.bandwidth
        host = self._profile.host_bandwidth
        loop = asyncio.get_running_loop()
        due = loop.time()
        chunks: list[bytes] = []
        # iter_chunks hands over the received buffers as they are; iter_any
        # would join them first.
        async for chunk, _ in request.content.iter_chunks():
            if not chunk:
                if request.content.at_eof():
                    break  # an empty body's reader repeats (b"", True) forever
                continue  # the end of one HTTP chunk of a chunked body
            chunks.append(chunk)
            if bandwidth or host:
                due = due_time(self._nic_in, len(chunk), due, bandwidth, host)
                delay = due - loop.time()
                if delay > _MIN_SLEEP:
                    await asyncio.sleep(delay)
        return Rope(chunks)

    def _draw(self, p: float) -> bool:
        return bool(p) and self._rng.random() < p

    async def send_transcoded(self, request: web.BaseRequest, rec: ObjectRecord,
                              headers: dict[str, str]) -> web.StreamResponse | None:
        """Send ``rec`` decompressed and whole, as GCS serves an object
        stored gzip-compressed to a reader that does not accept gzip
        (:func:`~aioflux.testing._util.transcoded`); else None, with the
        stored coding named in ``headers`` for the caller's own answer.

        Args:
            request: the request being answered.
            rec: the object.
            headers: the answer's headers so far (updated).

        Returns:
            The (already written) response, or None.
        """
        plain = transcoded(request.headers, rec)
        if plain is None:
            if rec.content_encoding is not None:
                headers["Content-Encoding"] = rec.content_encoding
            return None
        headers.update(TRANSCODED_HEADERS)
        return await self.send_body(request, plain, headers=headers,
                                    content_type=rec.content_type, chunked=True)

    async def send_body(
        self,
        request: web.BaseRequest,
        body: Rope,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        content_type: str = "application/octet-stream",
        chunked: bool = False,
    ) -> web.StreamResponse:
        """Send a media body, applying bandwidth pacing, stalls and resets.

        Args:
            request: the request being answered (HEAD gets headers only).
            body: the content to send (a whole object or a range of one).
            status: 200 or 206.
            headers: extra headers (hashes, generation, Content-Range...).
            content_type: the object's content type.
            chunked: send no ``Content-Length`` (chunked transfer coding), as
                GCS serves an object it decompresses on the way.

        Returns:
            The (already written) response.
        """
        hdrs = dict(headers or {})
        hdrs["Content-Type"] = content_type
        size = body.size
        if request.method == "HEAD":
            if chunked:
                head = web.StreamResponse(status=status, headers=hdrs)
                head.enable_chunked_encoding()
                await head.prepare(request)
                return head
            hdrs["Content-Length"] = str(size)
            return web.Response(status=status, headers=hdrs)
        tail = self._profile.tail_fraction
        if tail and self._tail_rng.random() < tail:
            # The heavy tail: held back before the first byte (a slow front
            # end or disk), what hedged reads are for.
            self.stats["tail_delays"] += 1
            await asyncio.sleep(self._tail_rng.uniform(*self._profile.tail_delay))
        f = self._faults
        reset = self._draw(f.p_reset) and size > 1
        stall = self._draw(f.p_stall) and size > 0
        bandwidth = self._profile.bandwidth
        host = self._profile.host_bandwidth
        paced = bool(bandwidth or host)
        pieces = body.pieces
        if not (reset or stall or paced or chunked) and len(pieces) <= 1 and (
                not pieces or isinstance(pieces[0], bytes)):
            return web.Response(status=status, headers=hdrs, body=bytes(body))
        if paced and not (reset or stall or chunked) and len(pieces) == 1 and (
                size <= _chunk_size(bandwidth, host)):
            # A body that _stream would send as one paced chunk: wait until
            # its last byte is due and send head and body in one write. The
            # client sees the same completion time; the emulator saves a
            # streamed response's extra writes and timer, ~a fifth of its CPU
            # per 100 KiB read (which it takes from the client under test).
            loop = asyncio.get_running_loop()
            now = loop.time()
            delay = due_time(self._nic_out, size, now, bandwidth, host) - now
            if delay > _MIN_SLEEP:
                await asyncio.sleep(delay)
            return web.Response(status=status, headers=hdrs, body=pieces[0])

        resp = web.StreamResponse(status=status, headers=hdrs)
        if chunked:
            resp.enable_chunked_encoding()
        else:
            resp.content_length = size
        await resp.prepare(request)
        try:
            await self._stream(request, resp, body, reset=reset, stall=stall,
                               bandwidth=bandwidth, host=host)
        except ConnectionResetError:
            # The client went away mid-body (cancelled read-ahead, a timeout,
            # a killed process): normal for a server, not worth a traceback.
            self.stats["client_disconnects"] += 1
        return resp

    async def _stream(self, request: web.BaseRequest, resp: web.StreamResponse,
                      body: Rope, *, reset: bool, stall: bool,
                      bandwidth: float | None, host: float | None) -> None:
        f = self._faults
        half = body.size // 2
        chunk = _MAX_CHUNK
        if bandwidth or host:
            chunk = _chunk_size(bandwidth, host)
        elif not (reset or stall):
            chunk = body.size  # no pacing: hand each piece (or range of one) over as is
        loop = asyncio.get_running_loop()
        due = loop.time()
        sent = 0
        for view in body.chunks(max(chunk, 1), split_at=half if reset or stall else None):
            end = sent + len(view)
            if bandwidth or host:
                # Pace before writing so the last byte leaves when it is due.
                due = due_time(self._nic_out, len(view), due, bandwidth, host)
                delay = due - loop.time()
                if delay > _MIN_SLEEP:
                    await asyncio.sleep(delay)
            await resp.write(view)
            sent = end
            if sent == half and reset:
                self.stats["resets"] += 1
                transport = request.transport
                if transport is not None:
                    transport.abort()
                return
            if sent == half and stall:
                stall = False
                self.stats["stalls"] += 1
                await asyncio.sleep(f.stall_seconds)
                due += f.stall_seconds
        await resp.write_eof()


def _chunk_size(bandwidth: float | None, host_bandwidth: float | None) -> int:
    # ~5 ms of data per write (at the tighter cap) keeps the pacing smooth
    # at low caps.
    rate = min(r for r in (bandwidth, host_bandwidth, math.inf) if r)
    return int(min(_MAX_CHUNK, max(_MIN_CHUNK, rate * 0.005)))


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """Parse a single-range ``Range`` header as GCS does.

    Args:
        header: the header value (``bytes=a-b``, ``bytes=a-`` or ``bytes=-n``).
        size: the object size.

    Returns:
        ``(start, end_exclusive)``, or ``None`` to serve the whole object
        (no header, a malformed or multi-range header, or a suffix range of
        an empty object).

    Raises:
        ApiError: 416 when the range starts at or past the end (on an empty
            object every ``bytes=a-b`` does, as GCS and S3 answer: a client
            reading an empty object with ``bytes=0-`` gets 416 there) or asks
            for 0 bytes (``bytes=-0``).
    """
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, sep, last = spec.strip().partition("-")
    if not sep:
        return None
    try:
        if not first:
            n = int(last)
            if n <= 0:
                raise err.range_not_satisfiable(size)
            # RFC 9110: a non-zero suffix is satisfiable even on an empty object.
            return (max(0, size - n), size) if size else None
        start = int(first)
        end = int(last) + 1 if last else max(size, start + 1)
    except ValueError:
        return None
    if start < 0 or end <= start:
        return None  # syntactically invalid: RFC 9110 says ignore the header
    if start >= size:
        raise err.range_not_satisfiable(size)
    return start, min(end, size)
