"""One checked read of an http(s) object: ``[start, end)`` by a ranged
GET, held to one version, resumed where a body was cut short.

What an answer must be before a byte of it is kept:

- the version it states (``ETag``, ``Last-Modified``) is the one pinned,
  or, on the first answer of an unpinned read, becomes it; the request
  carried ``If-Match`` (``If-Range`` without a strong ETag), so a server
  that honours them answers 412 (or the whole new object) instead;
- no ``Content-Encoding``: the request asked for the bytes as stored
  (``Accept-Encoding: identity``), and a coded body's offsets are not the
  object's, so a gzip answer to a range is refused, never decoded;
- 206: ``Content-Range`` starts at the byte asked for and ends where the
  range (clipped to the stated total) does, ``Content-Length`` agrees,
  the total is the size the caller knows;
- 200 (a server that ignores ranges, or ``If-Range`` of a changed object,
  which the version check has refused by then): the whole object, whose
  leading bytes are skipped and whose tail past ``end`` is not read;
- a body that ends before its announced length is a retryable
  ``TransportError``; the next attempt asks for the rest only, under the
  same pin.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import aiohttp
import yarl
from multidict import CIMultiDict

from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    InvalidRequest,
    TransportError,
    describe,
)
from .._core.integrity.crc import crc32c
from .._core.storage.protocol import Fetched
from .failures import Op, error_from_media
from .http import BodyTruncated, MediaPool, MediaResponse
from .loops import LoopState
from .web import (
    MAX_REDIRECTS,
    REDIRECTS,
    Locations,
    Pin,
    changed,
    error_of,
    generation_of,
    gone,
    pin_of,
    protocol,
    redirected,
    same_origin,
    send,
    stale,
    too_many_redirects,
    wait_of,
)
from .web_transport import WebTransport

__all__ = ["Read", "check_whole"]

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class Read:
    """A read's state across its attempts (see the module doc).

    Args:
        transport: sends each attempt under the client's permits and retries.
        op: operation, bucket and object.
        url: the object's URL.
        token: the bearer token for the URL's origin, or None.
        start: first byte.
        end: end (exclusive), or None for the object's end.
        into: destination buffer, or None to return bytes.
        pin: the version to hold the read to, or None (the first answer's).
        generation: the caller's pinned generation, if any: ``pin`` stands
            for it, or (``pin`` None) the first answer's version must hash to
            it (another version answered is NotFound: that one is gone).
        size: the object's size when the caller knows it.
        locations: where the URL's redirects led before (``web.Locations``).
    """

    def __init__(self, transport: WebTransport, op: Op, url: str, token: str | None, start: int,
                 end: int | None, into: memoryview | None, pin: Pin | None,
                 generation: int | None, size: int | None,
                 locations: Locations | None = None) -> None:
        self.transport = transport
        self.op = op
        self.url = url
        self.token = token
        self.start = start
        self.end = end
        self.into = into
        self.pin = pin
        self.generation = generation
        self.size = size
        self.locations = locations
        #: bytes kept so far (an attempt resumes after them)
        self.got = 0
        self.data = bytearray() if into is None else None

    @property
    def where(self) -> str:
        """``read https://host/name``, for messages."""
        op = self.op
        return describe(op.operation, op.bucket, op.name, op.scheme)

    async def run(self) -> Fetched:
        """The read, its attempts under the transport's permits and retries;
        each asks for what is still missing, under the pin."""

        async def call(state: LoopState) -> Fetched:
            if self.got and self.pin is not None and not self.pin.token:
                # The server states no version: the rest could be another
                # one's, same size and all. Read again from the start.
                self.got = 0
                if self.into is None:
                    self.data = bytearray()
            pos = self.start + self.got
            ranged = pos > 0 or self.end is not None
            headers = {"Accept-Encoding": "identity"}
            if ranged:
                headers["Range"] = f"bytes={pos}-{'' if self.end is None else self.end - 1}"
            if self.pin is not None:
                headers.update(self.pin.request_headers(ranged))
            if state.media is not None:
                done = await self._lean(state.media, headers, pos, ranged)
                if done is not None:
                    return done
            resp = await send(state.session, self.op, "GET", self.url, headers, self.token,
                              self.locations)
            try:
                return await self._answer(resp, pos)
            finally:
                resp.release()

        return await self.transport.run_on(self.op, "GET", self.url, call)

    async def _lean(self, media: MediaPool, headers: dict[str, str], pos: int, ranged: bool
                    ) -> Fetched | None:
        """An attempt over the lean client (about a third of aiohttp's CPU a
        request, the body landing in its final buffer, a whole object's in
        the bytes handed out): a 206 to a range, a 200 to a read of the
        whole object, or a 412 to the pin, is checked here as
        :meth:`_answer` checks it; a 429 or 5xx raised as aiohttp's would
        be; None for any other answer, which the attempt sends again
        through aiohttp (a server without ranges, other errors: their rules
        are :meth:`_answer`'s and :func:`~.web.send`'s)."""
        stop = self.end
        if self.size is not None:
            stop = self.size if stop is None else min(stop, self.size)
        dest = None if self.into is None else self.into[self.got:]
        resp, from_known = await self._lean_answer(
            media, headers, dest, None if stop is None else max(0, stop - pos))
        if resp is None:
            return None
        status = resp.status
        if from_known and stale(status):
            assert self.locations is not None
            self.locations.forget(self.url)  # aiohttp asks the URL again
            return None
        if status == 429 or status >= 500:
            # For the retries and the rate controller, as aiohttp's answer
            # would be: sent again at once, a throttled request is refused
            # twice.
            error = error_from_media(resp, self.op)
            wait = wait_of(CIMultiDict(resp.headers))
            if wait is not None:
                error.retry_after = wait  # type: ignore[attr-defined]
            raise error
        if status == 412 and self.pin is not None:
            raise changed(self.op, self.pin, None, status, self.generation)
        if status != (206 if ranged else 200):
            return None
        self._check_version(resp.headers, status)
        if ranged:
            end = self._check_range(resp.headers, status, resp.expected, pos)
        else:
            # The whole object: its Content-Length (which the lean client
            # reads every body by) is its size.
            assert resp.expected is not None
            self._learn(resp.expected, status)
            end = resp.expected
        self._check_fits(end)
        if resp.received < end - pos:
            # Cut short: what arrived is kept (in the caller's buffer
            # already, else added to ``data``), the rest asked for again.
            if self.into is None:
                assert self.data is not None
                self.data += memoryview(resp.body or b"")[:resp.received]
            self.got = pos + resp.received - self.start
            cut = TransportError(f"{self.where} failed: response body cut short at byte "
                                 f"{pos + resp.received} of [{self.start}, {end})",
                                 operation=self.op.operation, bucket=self.op.bucket,
                                 name=self.op.name)
            cut.slow = resp.slow  # type: ignore[attr-defined]
            raise cut
        self.transport.stats.lean_reads += 1
        body = resp.body
        if self.into is None:
            assert body is not None and self.data is not None
            if not self.got:
                self.got = end - self.start
                # The client's bytes object, as it arrived: no copy.
                return Fetched(body if isinstance(body, bytes) else bytes(body), self.got,
                               None, self.size)
            self.data += memoryview(body)[:end - pos]
        self.got = end - self.start
        return self._done()

    async def _lean_answer(self, media: MediaPool, headers: dict[str, str],
                           dest: memoryview | None, limit: int | None
                           ) -> tuple[MediaResponse | None, bool]:
        """The lean client's final answer, redirects followed as
        :func:`~.web.send` follows them (from where the URL's redirects last
        led, if known: a Hub file's CDN link; the token only to the URL's
        origin), and whether it came from that known place."""
        named = yarl.URL(self.url, encoded=True)
        known = None if self.locations is None else self.locations.get(self.url)
        target = named if known is None else known
        # The chain has left the URL's origin: no token from here on (nor to
        # a known target such a chain led to, though on the origin again).
        left = known is not None and self.locations is not None and \
            self.locations.left(self.url)
        for _hop in range(MAX_REDIRECTS + 1):
            hop = headers
            left = left or not same_origin(self.url, target)
            if self.token is not None and not left:
                hop = {**headers, "Authorization": f"Bearer {self.token}"}
            # coded: a coded body is handed over as it came, for the check
            # to refuse (not left to aiohttp, which would ask again to refuse it).
            try:
                resp = await media.get(str(target), hop, dest, limit=limit, coded=True)
            except BodyTruncated as exc:
                # Its head is checked as a whole answer's, and what arrived
                # is kept: the next attempt asks for the rest, under its version.
                if exc.response is None:
                    raise
                resp = exc.response
            if resp is None or resp.status not in REDIRECTS:
                break
            target = redirected(self.op, target, resp.status, resp.headers.get("location"))
        else:
            raise too_many_redirects(self.op)
        if resp is not None and resp.status < 300 and self.locations is not None:
            self.locations.learn(self.url, target, left)
        return resp, known is not None and target == known

    async def _answer(self, resp: aiohttp.ClientResponse, pos: int) -> Fetched:
        op, status = self.op, resp.status
        if status == 412 and self.pin is not None:
            resp.release()
            raise changed(op, self.pin, None, status, self.generation)
        if status == 416 and self.size is not None and pos < self.size:
            # Past the end, from a byte below the size the caller knows: the
            # object is shorter than it was, not the caller's range.
            resp.release()
            raise protocol(op, f"HTTP 416 to a range from byte {pos}: the object is shorter "
                           f"than the {self.size} bytes it was", status)
        if status >= 300:
            raise await error_of(resp, op)
        self._check_version(resp.headers, status)
        stop: int | None
        if status == 206:
            skip, stop = 0, self._check_range(resp.headers, status, resp.content_length, pos)
        elif status == 200:
            total = resp.content_length
            if total is not None:
                self._learn(total, status)
            if total is not None and pos > 0 and pos >= total:
                # A server without ranges answers a range past the end whole.
                raise InvalidRequest(f"{self.where} failed: start {pos} is at or past the "
                                     f"object's end ({total} bytes)", operation=op.operation,
                                     bucket=op.bucket, name=op.name, status=416)
            skip = pos
            stop = self.end if self.end is not None else total
            if total is not None and stop is not None:
                stop = min(stop, total)
        else:
            raise protocol(op, f"unexpected HTTP {status} to a GET", status)
        self._check_fits(stop)
        await self._body(resp, skip, pos, stop)
        return self._done()

    def _check_version(self, headers: Mapping[str, str], status: int) -> None:
        """The answer's version is the pinned one (or becomes it), and its
        body is not coded."""
        op = self.op
        answer = pin_of(headers)
        if self.pin is None:
            if self.generation is not None and generation_of(answer) != self.generation:
                raise gone(op, self.generation, status)
            self.pin = answer
        elif self.pin.differs(answer):
            raise changed(op, self.pin, answer, status, self.generation)
        coding = headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("", "identity"):
            raise protocol(op, f"Content-Encoding {coding!r} answered to a read of the bytes as "
                           "stored (Accept-Encoding: identity): a coded body's offsets are not "
                           "the object's", status)

    def _check_fits(self, stop: int | None) -> None:
        into = self.into
        if into is not None and stop is not None and stop - self.start > len(into):
            raise InvalidArgument(f"{self.where}: {stop - self.start} bytes do not fit the "
                                  f"buffer's {len(into)}")

    def _check_range(self, headers: Mapping[str, str], status: int,
                     content_length: int | None, pos: int) -> int:
        """The end (exclusive) of a 206's bytes, after checking its head
        (``headers`` looked up by lower-case names: the lean client's are)."""
        match = _CONTENT_RANGE.match(headers.get("content-range", "").strip())
        if match is None:
            raise protocol(self.op, "HTTP 206 without a byte Content-Range", status)
        first, last = int(match.group(1)), int(match.group(2))
        total = None if match.group(3) == "*" else int(match.group(3))
        if total is not None:
            self._learn(total, status)
        stop = self.end
        if total is not None:
            stop = total if stop is None else min(stop, total)
        if first != pos or last < first or (stop is not None and last != stop - 1):
            raise protocol(self.op, f"asked for bytes [{pos}, "
                           f"{'end' if stop is None else stop}), the server sent "
                           f"[{first}, {last + 1})", status)
        if content_length is not None and content_length != last - first + 1:
            raise protocol(self.op, f"Content-Length {content_length} disagrees with the "
                           f"{last - first + 1} bytes of Content-Range", status)
        return last + 1

    def _learn(self, total: int, status: int) -> None:
        if self.size is not None and total != self.size:
            raise protocol(self.op, f"the object is {total} bytes, not the {self.size} read "
                           "before", status)
        self.size = total

    async def _body(self, resp: aiohttp.ClientResponse, skip: int, pos: int,
                    stop: int | None) -> None:
        """Keep the body's bytes ``[pos, stop)`` (after ``skip`` leading ones)."""
        into, data = self.into, self.data
        at = pos  # the object offset of the next byte kept
        async for chunk in resp.content.iter_any():
            view = memoryview(chunk)
            if skip:
                cut = min(skip, len(view))
                view, skip = view[cut:], skip - cut
            if stop is not None:
                view = view[:max(0, stop - at)]
            if view:
                kept = at - self.start
                if into is not None:
                    if kept + len(view) > len(into):
                        raise InvalidArgument(f"{self.where}: the bytes do not fit the "
                                              f"buffer's {len(into)}")
                    into[kept:kept + len(view)] = view
                else:
                    assert data is not None
                    data += view
                at += len(view)
                self.got = at - self.start
            if stop is not None and at >= stop:
                return  # the rest of a whole answer is not read (the connection closes)
        if stop is not None and at < stop:
            raise TransportError(f"{self.where} failed: response body cut short at byte {at} "
                                 f"of [{self.start}, {stop})", operation=self.op.operation,
                                 bucket=self.op.bucket, name=self.op.name)

    def _done(self) -> Fetched:
        return Fetched(None if self.data is None else bytes(self.data), self.got, None,
                       self.size)


def check_whole(op: Op, fetched: Fetched, view: bytes | memoryview, crc: int | None,
                want_crc: bool) -> Fetched:
    """``fetched`` with its crc32c when asked for; a whole read checked
    against ``crc`` (a mismatch is ``ChecksumMismatch``)."""
    if crc is None and not want_crc:
        return fetched
    value = crc32c(view)
    if crc is not None and value != crc:
        raise ChecksumMismatch(f"{describe(op.operation, op.bucket, op.name, op.scheme)} "
                               f"failed: crc32c {value:08x} of the bytes read, {crc:08x} "
                               "expected", operation=op.operation, bucket=op.bucket,
                               name=op.name)
    return Fetched(fetched.data, fetched.count, value if want_crc else None, fetched.size)
