"""Checked, resumable object reads: the Integrity rules for media GETs.

Every response is checked against what was asked before its bytes are
used: the status (200 or 206, nothing else), ``Content-Range`` (starts
where asked, ends inside the asked range, reports the known object size),
``Content-Length`` (agrees with the range and with
``x-goog-stored-content-length``), the version that answered (the one the
caller pinned, and the same on every attempt: a server that ignores the
pin must not stitch two versions together) and, for a read that covers
the whole object, the crc32c (``x-goog-hash``, or the one the caller knows
from a listing or stat), computed over the assembled bytes; where the
server keeps no crc32c, the MD5 it promises (an S3 ETag, an Azure blob's
``Content-MD5``), if any. Where the service never transforms an object's
bytes (``Transport.stored_bytes``), a ``Content-Encoding`` is how they are
stored: they are read as they come, never decompressed.

A body cut short keeps what arrived: the next attempt asks for
``bytes=k-`` (or ``bytes=k-(end-1)``) and lands after it, in the caller's
buffer when there is one. Attempts that add bytes do not count against
``RetryPolicy.max_attempts`` (the deadline still applies), so a connection
cut every few MiB slows a large read down instead of failing it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    InvalidRequest,
    PreconditionFailed,
    ProtocolError,
    TransportError,
    describe,
)
from .._core.integrity.crc import crc32c, decode_crc32c, encode_crc32c
from .._core.integrity.md5 import md5_digest
from .._core.storage.protocol import Fetched
from .http import MediaResponse
from .slow_drip import MIN_PROGRESS
from .transport import Op, Transport

__all__ = ["Answers", "GCS_ANSWERS", "header_crc32c", "read_media"]

_CHECKSUM_OF = Callable[[Mapping[str, str]], "int | None"]
_MD5_OF = Callable[[Mapping[str, str]], "str | None"]
_PIN_OF = Callable[[Mapping[str, str]], "dict[str, str]"]

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)\s*")
_EMPTY_RANGE = re.compile(r"bytes\s+0--1/0\s*")
_TRANSFORMED = "x-guploader-response-body-transformations"


async def read_media(transport: Transport, op: Op, url: str, *, start: int = 0,
                     end: int | None = None, into: memoryview | None = None,
                     size: int | None = None, crc: int | None = None, verify: bool = True,
                     want_crc: bool = False, headers: Mapping[str, str] | None = None,
                     answers: Answers | None = None, version: int | None = None) -> Fetched:
    """GET ``[start, end)`` of an object, checked and resumed (see the module doc).

    Args:
        transport: sends the attempts and runs the retry loop.
        op: operation, bucket and object, for errors.
        url: the media URL (``...?alt=media``, a ``generation`` pins it).
        start: first byte.
        end: end (exclusive); ``None`` reads to the end of the object.
        into: receive the bytes here (``Fetched.data`` is then None).
        size: the object's size if known (listing, stat): a response that
            reports another size is a :class:`ProtocolError`.
        crc: the object's crc32c if known; else ``x-goog-hash`` is used.
        verify: check the crc32c of a read covering the whole object.
        want_crc: also return the crc32c of the bytes read (for callers
            that combine ranges into a whole object).
        headers: extra request headers of every attempt (S3's
            ``x-amz-checksum-mode``, an ``If-Match`` pinning a version).
        answers: how the backend's answers are read (default: GCS's).
        version: the version the request pins (``generation=``,
            ``If-Match``), if any: an answer from another is refused.

    Returns:
        The bytes or their count, and the crc32c if asked for.

    Raises:
        ProtocolError: a redirect, a range or length other than asked for,
            an unexpected status, a range starting below ``size`` (or the
            size an answer stated) refused as past the end (HTTP 416: the
            object is shorter than that size) (not retried).
        InvalidRequest: ``start`` at or past the end of the object (HTTP
            416), at or past ``size`` when it is given.
        PreconditionFailed: an answer came from another version than the
            one pinned, or than the first answer's (not retried).
        ChecksumMismatch: the assembled bytes failed their crc32c (or
            MD5) on every attempt.
        InvalidArgument: the body does not fit ``into``.
        StorageError: any other failure, after retries.
    """
    async with transport.admit_read(op):
        read = _Read(transport, op, url, start, end, into, size, crc, verify, want_crc,
                     dict(headers or {}), answers or GCS_ANSWERS, version)
        try:
            return await transport.retrying(read.attempt, progress=read.progress)
        except TransportError as exc:
            if read.mismatch is None:
                raise
            # Cut short while reading again after a crc32c mismatch: the
            # mismatch is the finding to report.
            read.mismatch.attempts = exc.attempts
            raise read.mismatch from exc


def _goog_generation(headers: Mapping[str, str]) -> int | None:
    value = headers.get("x-goog-generation", "")
    # str.isdigit alone takes "²" and other Unicode digits int() refuses.
    return int(value) if value.isascii() and value.isdigit() else None


@dataclass(frozen=True)
class Answers:
    """What a backend's media answers say, read from their (lower-cased) headers.

    Attributes:
        crc32c: the object's crc32c.
        md5: the object's MD5 (hex) where it keeps no crc32c; None when
            its answers promise none.
        version: the version that answered (as the store numbers it).
        pin: headers that make a resumed attempt read the version the
            first response came from (S3: ``If-Match`` its ETag).
        pin_query: the query parameter that does it instead, set to that
            version (GCS: ``generation``).
        md5_source: what ``md5`` is read from, for messages (S3: the
            ETag; Azure: ``Content-MD5``).
    """

    crc32c: _CHECKSUM_OF
    md5: _MD5_OF | None = None
    version: Callable[[Mapping[str, str]], int | None] = _goog_generation
    pin: _PIN_OF | None = None
    pin_query: str | None = None
    md5_source: str = "ETag"


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """``bytes a-b/t`` as ``(a, b, t)`` (``t`` None for ``*``), or None if malformed."""
    match = _CONTENT_RANGE.fullmatch(value or "")
    if match is None:
        return None
    total = match.group(3)
    return int(match.group(1)), int(match.group(2)), None if total == "*" else int(total)


def header_crc32c(headers: Mapping[str, str]) -> int | None:
    """The crc32c in ``x-goog-hash`` (one header or several joined), if any."""
    hashes = headers.get("x-goog-hash", "")
    at = hashes.find("crc32c=")
    if at < 0:
        return None
    try:
        return decode_crc32c(hashes[at + 7:].split(",", 1)[0].strip())
    except ValueError:
        return None  # malformed: treated as absent, the length checks still hold


class _Read:
    """The state of one checked read across its attempts."""

    def __init__(self, transport: Transport, op: Op, url: str, start: int, end: int | None,
                 into: memoryview | None, size: int | None, crc: int | None, verify: bool,
                 want_crc: bool, headers: dict[str, str], answers: Answers,
                 version: int | None) -> None:
        self.transport = transport
        self.op = op
        self.url = url
        self.start = start
        self.end = end
        self.caller_buffer = into
        self.total = size
        #: the answer header that first stated ``total`` (None: the caller
        #: gave it, from a listing or a stat); named only in an error
        self.total_source: str | None = None
        self.crc = crc
        self.verify = verify
        self.want_crc = want_crc
        #: next byte wanted (absolute offset); what ``progress`` reports
        self.pos = start
        self.reached = start
        self.mismatch: ChecksumMismatch | None = None
        self.own: bytearray | None = None
        self.body: bytes | bytearray | None = None
        self.headers = headers
        self.answers = answers
        #: the version every answer must come from, once known
        self.version = version
        self.md5: str | None = None
        #: the whole object, arrived with no crc32c but an MD5 to check
        self.md5_due: bytes | memoryview | None = None
        self.pinned: dict[str, str] | None = None
        #: the crc32c the lean client summed of the bytes ``[start, pos)``
        #: as they landed, when one response brought them all
        self.summed: int | None = None
        self.where = describe(op.operation, op.bucket, op.name, op.scheme)

    def progress(self) -> int:
        # The high-water mark, not the position: bytes read again after a
        # restart (a failed crc32c) are no progress, or a corrupt object
        # would be read forever.
        self.reached = max(self.reached, self.pos)
        return self.reached

    @property
    def stop(self) -> int | None:
        """Exclusive end of what must be read, once known."""
        if self.total is None:
            return self.end
        return self.total if self.end is None else min(self.end, self.total)

    async def attempt(self) -> Fetched:
        p = self.pos
        headers = {"Accept-Encoding": "identity", **self.headers}
        if p > self.start and self.pinned:
            headers.update(self.pinned)
        url = self.url
        if p > 0 or self.end is not None:
            last = "" if self.end is None else str(self.end - 1)
            headers["Range"] = f"bytes={p}-{last}"
        query = self.answers.pin_query
        if p > self.start and query and self.version is not None and f"{query}=" not in url:
            # A resumed read must continue the same version, not a newer one.
            url += f"&{query}={self.version}"
        # Without a caller's buffer each attempt gets a body of its own (kept
        # in ``own`` when partial): a server that answers a resume with the
        # whole object then costs no extra request.
        buffer = self.caller_buffer
        into = None if buffer is None else buffer[p - self.start:]
        stop = self.stop
        # Most bytes one response may bring: the rest of the range, or the
        # whole object when a read from byte 0 may be answered from scratch.
        limit = None if into is not None or stop is None else \
            stop - (0 if self.start == 0 else p)
        self.summed = None
        try:
            fetched = await self.transport.get_media_once(
                self.op, url, lambda resp: self._handle(resp, p), headers=headers, into=into,
                limit=limit, summed=self.verify or self.want_crc)
        except InvalidRequest as exc:
            if exc.status != 416:
                raise
            if self.total is not None and p < self.total:
                raise self._shorter(p, exc) from exc
            if p != 0 or self.total not in (None, 0):
                raise
            # Bytes from 0 are unsatisfiable only in an empty object (S3 and
            # fake-gcs-server answer its ranges 416, GCS's emulator 200):
            # what a read of it without a range returns.
            self.total = 0
            return self._finish(0, transformed=False)
        due, self.md5_due = self.md5_due, None
        if due is not None:
            await self._check_md5(due)
        return fetched

    # -- checks ----------------------------------------------------------------

    def _protocol(self, what: str, status: int) -> ProtocolError:
        return ProtocolError(f"{self.where} failed: {what}", operation=self.op.operation,
                             bucket=self.op.bucket, name=self.op.name, status=status)

    def _shorter(self, p: int, exc: InvalidRequest) -> ProtocolError:
        # Not the caller's mistake (InvalidRequest, "start past the end"):
        # bytes from ``p`` exist in the object as it was stated to be. It
        # shrank since (read unpinned, or in place, or the pin went
        # unheeded), or the size stated was never its own. A replaced object
        # under a pin is the server's 404 or 412 instead, before any range
        # is looked at, and stays that.
        stated = ("its known size" if self.total_source is None
                  else f"the size its {self.total_source} stated")
        return ProtocolError(f"{self.where} failed: a range from byte {p}, below "
                             f"{stated} ({self.total} bytes), is past its end "
                             f"(HTTP 416): the object is shorter than that (it shrank, or "
                             f"that size was wrong)",
                             operation=self.op.operation, bucket=self.op.bucket,
                             name=self.op.name, status=416, reason=exc.reason)

    def _learn_total(self, total: int | None, source: str, status: int) -> None:
        if total is None:
            return
        if self.total is not None and total != self.total:
            raise self._protocol(f"{source} says the object has {total} bytes, expected "
                                 f"{self.total}", status)
        if self.total is None:
            self.total_source = source
        self.total = total

    def _check_head(self, resp: MediaResponse, p: int) -> int:
        """Check status and range headers; return the body length they announce."""
        status, headers = resp.status, resp.headers
        transformed = _TRANSFORMED in headers
        if not transformed:
            stored = headers.get("x-goog-stored-content-length", "")
            if stored.isascii() and stored.isdigit():
                self._learn_total(int(stored), "x-goog-stored-content-length", status)
        if status == 206 and p == 0 and resp.expected in (0, None) \
                and _EMPTY_RANGE.fullmatch(headers.get("content-range") or ""):
            # Azurite answers the first byte of an empty blob with the range
            # ``bytes 0--1/0`` and no body: the whole object, as a 200 with
            # nothing in it would be.
            self._learn_total(0, "Content-Range", status)
            length = 0
        elif status == 206:
            value = headers.get("content-range")
            parsed = parse_content_range(value)
            if parsed is None:
                raise self._protocol(f"HTTP 206 without a valid Content-Range ({value!r})",
                                     status)
            first, last, total = parsed
            if first == p == total and last == first - 1 and resp.expected in (0, None):
                # Azurite answers a range starting at the end ``bytes n-n-1/n``
                # with no body where others answer 416: the same finding.
                raise InvalidRequest(f"{self.where} failed: start {p} is past the end of the "
                                     f"object ({total} bytes)", operation=self.op.operation,
                                     bucket=self.op.bucket, name=self.op.name, status=416,
                                     reason="InvalidRange")
            if first != p or last < first or (total is not None and last >= total):
                raise self._protocol(f"asked for bytes from {p}, the server sent "
                                     f"Content-Range {value}", status)
            if total is None and self.total is None and self.end is None:
                # "bytes a-b/*" to a read to the end: where the end is, is unknown.
                raise self._protocol(f"Content-Range {value} does not give the object's size "
                                     f"for a read to its end", status)
            self._learn_total(total, "Content-Range", status)
            if self.end is not None and last >= self.end:
                raise self._protocol(f"asked for bytes [{p}, {self.end}), the server sent "
                                     f"Content-Range {value}", status)
            length = last - first + 1
        elif status == 200:
            if transformed and (self.start != 0 or self.end is not None):
                # Decompressive transcoding: an object stored gzip-compressed
                # is served decompressed and whole, whatever range was asked.
                raise InvalidRequest(
                    f"{self.where} failed: the object is stored gzip-compressed "
                    "(Content-Encoding: gzip), which GCS serves decompressed and whole, "
                    "ignoring ranges: read it whole", operation=self.op.operation,
                    bucket=self.op.bucket, name=self.op.name, status=200,
                    reason="transcoded")
            if p != 0 and p == self.start and resp.expected == 0 and self.total in (None, 0):
                # A range of an empty object, which has no bytes to serve a
                # range of: answered whole (200, nothing) where a non-empty
                # one answers 416. Past the end either way, as files say.
                raise InvalidRequest(f"{self.where} failed: start {p} is past the end of the "
                                     "object (0 bytes)", operation=self.op.operation,
                                     bucket=self.op.bucket, name=self.op.name, status=416,
                                     reason="InvalidRange")
            if p != 0:
                raise self._protocol(f"asked for bytes from {p}, the server sent the whole "
                                     f"object (HTTP 200) instead of the range", status)
            length = resp.expected if resp.expected is not None else resp.received
            if not transformed:
                self._learn_total(length, "Content-Length", status)
            if self.end is not None and length > self.end:
                raise self._protocol(f"asked for bytes [0, {self.end}), the server sent the "
                                     f"whole object (HTTP 200) instead of the range", status)
        else:
            raise self._protocol(f"unexpected HTTP {status} to an object GET", status)
        if resp.expected is not None and resp.expected != length:
            raise self._protocol(f"Content-Length {resp.expected} disagrees with the "
                                 f"{length} bytes announced", status)
        answers = self.answers
        version = answers.version(headers)
        if version is not None:
            if self.version is None:
                self.version = version
            elif version != self.version:
                raise PreconditionFailed(
                    f"{self.where} failed: version {version} answered, not the {self.version} "
                    f"read (the object changed and the server ignored the pin)",
                    operation=self.op.operation, bucket=self.op.bucket, name=self.op.name,
                    status=412, reason="PreconditionFailed")
        if not transformed and self.crc is None:
            self.crc = answers.crc32c(headers)
            if self.crc is None and answers.md5 is not None and self.md5 is None:
                self.md5 = answers.md5(headers)
        if answers.pin is not None and self.pinned is None:
            self.pinned = answers.pin(headers)
        return length

    def _handle(self, resp: MediaResponse, p: int) -> Fetched:
        if resp.status == 200 and p != 0 and self.start == 0:
            # A resume answered with the whole object (the server ignores
            # Range): usable as a fresh start, unless it landed mid-buffer.
            self._restart()
            self.own = None
            if resp.body is None:
                raise TransportError(f"{self.where} failed: the server ignored Range on a "
                                     f"resumed read; reading again from byte 0",
                                     operation=self.op.operation, bucket=self.op.bucket,
                                     name=self.op.name)
            p = 0
        length = self._check_head(resp, p)
        transformed = _TRANSFORMED in resp.headers
        buffer = self.caller_buffer
        if buffer is not None and length > len(buffer) - (p - self.start):
            raise InvalidArgument(f"{self.where}: {p - self.start + length} bytes do not "
                                  f"fit a buffer of {len(buffer)}")
        if resp.body is None and buffer is None:
            raise self._protocol(f"the server sent more than the {length} bytes announced",
                                 resp.status)
        got = min(resp.received, length)
        if resp.body is not None:
            self._keep_body(resp.body, p, got, length)
        if resp.crc is not None and p == self.start and got == resp.received \
                and self.own is None and not transformed:
            # Every byte of the read so far, summed as it landed.
            self.summed = resp.crc
        if transformed and got < length:
            # Served decompressed: no range of it can be asked for again.
            self._restart()
        else:
            self.pos = p + got
        if got < length:
            what = (f"too slow: less than {MIN_PROGRESS >> 10} KiB of the body arrived in a "
                    f"window; cut after {got} of {length} bytes" if resp.slow else
                    f"response body truncated after {got} of {length} bytes")
            cut = TransportError(f"{self.where} failed: {what}", operation=self.op.operation,
                                 bucket=self.op.bucket, name=self.op.name)
            # A drip's few bytes are no progress (see aioflux._net.slow_drip).
            cut.slow = resp.slow  # type: ignore[attr-defined]
            raise cut
        stop = self.stop
        if stop is None or transformed:
            stop = self.pos  # the body ran to the object's end
        if self.pos < stop:
            # A short 206: keep it and ask for the rest.
            raise TransportError(f"{self.where} failed: the server sent bytes [{p}, "
                                 f"{self.pos}) of [{self.start}, {stop}); resuming",
                                 operation=self.op.operation, bucket=self.op.bucket,
                                 name=self.op.name)
        return self._finish(stop, transformed)

    def _keep_body(self, body: bytes | bytearray, p: int, got: int, length: int) -> None:
        stop = self.stop
        if p == self.start and got == len(body) and got == length and self.own is None \
                and (stop is None or p + got >= stop):
            self.body = body  # the common case: one complete response, no copy
            return
        if self.own is None:
            if stop is None:
                return  # size unknown: nothing to resume into
            # Grown by what arrives, never sized by what a server declares.
            self.own = bytearray()
        offset = p - self.start
        if offset > len(self.own):
            raise TransportError(f"{self.where} failed: a resumed body would leave a gap",
                                 operation=self.op.operation, bucket=self.op.bucket,
                                 name=self.op.name)
        del self.own[offset:]
        self.own += memoryview(body)[:got]

    def _restart(self) -> None:
        self.pos = self.start
        self.body = None

    def _finish(self, stop: int, transformed: bool) -> Fetched:
        count = stop - self.start
        data: bytes | None = None
        checked_bytes: bytes | memoryview
        if self.caller_buffer is not None:
            checked_bytes = self.caller_buffer[:count]
        else:
            # bytes, as documented. Converted before the check: the crc32c
            # extension takes only bytes, and one copy beats two.
            source = self.body if self.body is not None else self.own or b""
            data = source if isinstance(source, bytes) else bytes(memoryview(source)[:count])
            checked_bytes = data
        whole = self.start == 0 and self.total is not None and stop == self.total
        checked = self.verify and whole and not transformed and self.crc is not None
        # Checked once the connection is back (see attempt): an MD5 is slow.
        if self.verify and whole and not transformed and self.crc is None \
                and self.md5 is not None:
            self.md5_due = checked_bytes
        summed = self.summed if count == self.pos - self.start else None
        actual = (crc32c(checked_bytes) if summed is None else summed) \
            if checked or self.want_crc else None
        if checked and actual != self.crc:
            self._mismatch(f"crc32c {encode_crc32c(actual or 0)} of the {count} bytes "
                           f"received != {encode_crc32c(self.crc or 0)}")
        return Fetched(data, count, actual, self.total)

    async def _check_md5(self, data: bytes | memoryview) -> None:
        digest = (await md5_digest(data)).hex()
        if digest != self.md5:
            self._mismatch(f"MD5 {digest} of the {len(data)} bytes received != "
                           f"{self.md5}, its {self.answers.md5_source}")

    def _mismatch(self, what: str) -> NoReturn:
        self._restart()
        self.mismatch = ChecksumMismatch(f"{self.where} failed: {what}",
                                         operation=self.op.operation, bucket=self.op.bucket,
                                         name=self.op.name)
        raise self.mismatch


GCS_ANSWERS = Answers(crc32c=header_crc32c, pin_query="generation")
