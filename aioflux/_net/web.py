"""The wire half of the read-only web stores (``http(s)://``, ``hf://``):
one request and the redirects it is sent on, the version an answer
states, and the typed error of an answer (a 429's wait from
``Retry-After``, else from the ``RateLimit`` header's ``t=``, the Hub's).

Credentials: the bearer token goes only with a request to the origin the
caller named (scheme, host and port of the URL's bucket), never to
another one a redirect leads to (Hugging Face's ``resolve`` URLs redirect
to a CDN that must not see the token), and never back again past such a
hop: a chain that left the named origin carries no token any more.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import aiohttp
import yarl

from .._core.errors import (
    NotFound,
    PreconditionFailed,
    ProtocolError,
    StorageError,
    error_for_status,
)
from .._core.errors import describe as _describe
from .._core.settings.retry import parse_retry_after
from .failures import Op

__all__ = ["MAX_REDIRECTS", "REDIRECTS", "Locations", "Pin", "changed", "error_of",
           "generation_of", "gone", "pin_of", "protocol", "redirected", "same_origin", "send",
           "stale", "too_many_redirects", "url_of", "wait_of"]

# Hops one request follows (curl's and requests' default is 30, browsers
# 20; a CDN chain is one or two).
MAX_REDIRECTS = 10
REDIRECTS = (301, 302, 303, 307, 308)
# An error answer's text kept for the message, at most.
_ERROR_BODY = 4096
_STRONG_ETAG = re.compile(r'^"[\x21\x23-\x7e\x80-\xff]*"$')


def url_of(scheme: str, bucket: str, name: str) -> str:
    """The URL of ``name`` on the origin ``scheme://bucket``."""
    return f"{scheme}://{bucket}/{name}"


def _origin(url: yarl.URL) -> tuple[str, str, int | None]:
    return (url.scheme.lower(), (url.host or "").lower(), url.port)


def same_origin(url: str, other: yarl.URL) -> bool:
    """Whether ``other`` is on ``url``'s origin (scheme, host and port)."""
    return _origin(yarl.URL(url, encoded=True)) == _origin(other)


def stale(status: int) -> bool:
    """Whether an answer from where a URL's redirect led says the link has
    gone stale (see :class:`Locations`): the URL is to be asked again."""
    return status in _STALE


class Locations:
    """Where each URL's redirects last led, so that the next request of it
    goes there at once (a Hugging Face ``resolve`` URL costs a round trip
    to the hub before each read of the CDN otherwise). Bounded; an entry is
    dropped when its target answers as if the link had gone stale (401,
    403: a signed URL expired; 404, 410; 412: it serves another version
    now), and the request goes through the named URL again.

    Args:
        limit: most URLs remembered (the oldest go first).
    """

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        # Each URL's target, and whether the chain to it left the URL's
        # origin on the way (a target there is then another host's choice).
        self._where: dict[str, tuple[yarl.URL, bool]] = {}

    def get(self, url: str) -> yarl.URL | None:
        """Where ``url`` last led, or None."""
        known = self._where.get(url)
        return None if known is None else known[0]

    def left(self, url: str) -> bool:
        """Whether the chain to where ``url`` last led left its origin:
        the token goes to none of that target's requests."""
        known = self._where.get(url)
        return known is not None and known[1]

    def learn(self, url: str, final: yarl.URL, left: bool = False) -> None:
        """Remember that ``url`` led to ``final`` (nothing if it is ``url``),
        through a chain that ``left`` its origin or not."""
        where = self._where
        if str(final) == url:
            where.pop(url, None)
            return
        if url not in where and len(where) >= self._limit:
            del where[next(iter(where))]  # the oldest (dicts keep insertion order)
        where[url] = (final, left)

    def forget(self, url: str) -> None:
        """Drop what ``url`` led to."""
        self._where.pop(url, None)

    def adopt(self, other: Locations) -> None:
        """Remember where ``other``'s URLs led, those this knows of aside."""
        for url, (final, left) in list(other._where.items()):
            if url not in self._where:
                self.learn(url, final, left)


# What a remembered redirect target answers when the link went stale.
_STALE = (401, 403, 404, 410, 412)


async def send(session: aiohttp.ClientSession, op: Op, method: str, url: str,
               headers: Mapping[str, str], token: str | None,
               locations: Locations | None = None) -> aiohttp.ClientResponse:
    """Send ``method url``, following redirects; the token only to ``url``'s origin.

    Args:
        session: the loop's session (its connector verifies TLS).
        op: the operation, for errors.
        method: ``HEAD`` or ``GET``.
        url: the URL, already percent-encoded (sent as written).
        headers: request headers of every hop.
        token: a bearer token for ``url``'s origin, or None.
        locations: where redirects led before: a request goes there first
            (the token still only to ``url``'s origin), and through ``url``
            again if that answers as if stale.

    Returns:
        The final answer (not a redirect), unread: the caller releases it.

    Raises:
        ProtocolError: a redirect without ``Location``, to another scheme
            than http(s), from https to http, or past :data:`MAX_REDIRECTS`
            hops.
        aiohttp.ClientError: the connection failed (mapped by the transport).
    """
    named = yarl.URL(url, encoded=True)
    known = locations.get(url) if locations is not None else None
    if known is not None:
        assert locations is not None
        resp, _final, _left = await _follow(session, op, method, known, _origin(named),
                                            headers, token, locations.left(url))
        if not stale(resp.status):
            return resp
        resp.release()
        locations.forget(url)
    resp, final, left = await _follow(session, op, method, named, _origin(named), headers,
                                      token)
    if locations is not None and resp.status < 300:
        locations.learn(url, final, left)
    return resp


async def _follow(session: aiohttp.ClientSession, op: Op, method: str, target: yarl.URL,
                  named: tuple[str, str, int | None], headers: Mapping[str, str],
                  token: str | None, left: bool = False
                  ) -> tuple[aiohttp.ClientResponse, yarl.URL, bool]:
    """``send``'s hops from ``target``: the final answer, its URL, and
    whether the chain ``left`` the named origin (no token from there on;
    ``left`` at the start: ``target`` is where such a chain led before)."""
    for _hop in range(MAX_REDIRECTS + 1):
        hop_headers = dict(headers)
        left = left or _origin(target) != named
        if token is not None and not left:
            hop_headers["Authorization"] = f"Bearer {token}"
        resp = await session.request(method, target, headers=hop_headers,
                                     allow_redirects=False, auto_decompress=False)
        if resp.status not in REDIRECTS:
            return resp, target, left
        location = resp.headers.get("Location")
        resp.release()
        target = redirected(op, target, resp.status, location)
    raise too_many_redirects(op)


def redirected(op: Op, target: yarl.URL, status: int, location: str | None) -> yarl.URL:
    """Where a redirect (``status``, one of :data:`REDIRECTS`) from ``target``
    leads.

    Raises:
        ProtocolError: no ``Location``, one to another scheme than http(s),
            or from https to http.
    """
    if not location:
        raise protocol(op, f"HTTP {status} redirect without a Location", status)
    was = target.scheme
    target = target.join(yarl.URL(location, encoded=True))
    if target.scheme not in ("http", "https"):
        raise protocol(op, f"redirected to a {target.scheme}: URL", status)
    if was == "https" and target.scheme == "http":
        # The bytes would come unauthenticated and open to change on the way.
        raise protocol(op, "redirected from https to plain http: not followed", status)
    return target


def too_many_redirects(op: Op) -> ProtocolError:
    """The error of a chain past :data:`MAX_REDIRECTS` hops."""
    return protocol(op, f"more than {MAX_REDIRECTS} redirects", None)


async def error_of(resp: aiohttp.ClientResponse, op: Op) -> StorageError:
    """The typed error of an answer >= 300 (its body read, capped, and released)."""
    try:
        text = (await resp.content.read(_ERROR_BODY)).decode("utf-8", "replace")
    except (aiohttp.ClientError, OSError):
        text = ""
    resp.release()
    if resp.status in REDIRECTS or 300 <= resp.status < 400:
        return protocol(op, f"unexpected HTTP {resp.status}", resp.status)
    detail = text if "<html" not in text.lower() else ""
    if resp.status == 404 and not detail.strip():
        # A HEAD's 404 (stat) has no body, and a web page is dropped: say
        # what the status means, as the other stores' "No such object".
        detail = "No such object on the web server"
    error = error_for_status(resp.status, detail, operation=op.operation, bucket=op.bucket,
                             name=op.name, scheme=op.scheme)
    wait = wait_of(resp.headers)
    if wait is not None:
        # Read by the retry loop and the rate controller (``_net/throttle.py``).
        error.retry_after = wait  # type: ignore[attr-defined]
    return error


_RATELIMIT_RESET = re.compile(r"(?:^|;)\s*t\s*=\s*(\d+)")


def wait_of(headers: Mapping[str, str]) -> float | None:
    """Seconds an answer asks a client to wait: ``Retry-After``, else the
    reset (``t=``) of an exhausted (``r=0``) IETF ``RateLimit`` header, as
    the Hugging Face Hub sends (``"api";r=0;t=55``); None if neither."""
    wait = parse_retry_after(headers.get("Retry-After"))
    if wait is not None:
        return wait
    limit = headers.get("RateLimit", "")
    if re.search(r"(?:^|;)\s*r\s*=\s*0\s*(?:;|$)", limit) is None:
        return None
    reset = _RATELIMIT_RESET.search(limit)
    return None if reset is None else float(reset.group(1))


def protocol(op: Op, what: str, status: int | None) -> ProtocolError:
    """A ProtocolError naming ``op``: the answer is not what HTTP promised."""
    return ProtocolError(f"{_describe(op.operation, op.bucket, op.name, op.scheme)} failed: "
                         f"{what}", operation=op.operation, bucket=op.bucket, name=op.name,
                         status=status)


@dataclass(frozen=True, slots=True)
class Pin:
    """The version of an object an answer states: what every later read
    of it is held to.

    Attributes:
        etag: a strong ``ETag`` (sent as ``If-Match``), or None.
        modified: ``Last-Modified``, or None.
        weak: a weak ``ETag`` (compared, never sent: HTTP compares weak
            tags only for caching), or None.
    """

    etag: str | None
    modified: str | None
    weak: str | None = None

    @property
    def token(self) -> str:
        """One string for the version, empty when the server states none."""
        if self.etag is not None:
            return self.etag
        return f"{self.weak or ''}|{self.modified or ''}" if self.weak or self.modified else ""

    def request_headers(self, ranged: bool) -> dict[str, str]:
        """Headers holding a GET to this version.

        ``If-Match`` on a strong ETag (another version: 412). Without one,
        ``If-Range`` on ``Last-Modified`` for a ranged GET (another version:
        the whole new object, status 200, which the reader then refuses by
        its stated version, never serving it as the range).
        """
        if self.etag is not None:
            return {"If-Match": self.etag}
        if ranged and self.modified is not None:
            return {"If-Range": self.modified}
        return {}

    def differs(self, answer: Pin) -> bool:
        """Whether ``answer`` states another version than this one (a
        validator the answer omits is not held against it)."""
        return any(mine is not None and theirs is not None and mine != theirs
                   for mine, theirs in ((self.etag, answer.etag),
                                        (self.modified, answer.modified),
                                        (self.weak, answer.weak)))


def generation_of(pin: Pin) -> int:
    """The generation (``ObjectInfo.generation``) a version stands for: 63
    bits of a hash of its validators (0: the server states none)."""
    token = pin.token
    if not token:
        return 0
    digest = hashlib.blake2b(token.encode("utf-8", "surrogateescape"), digest_size=8)
    return (int.from_bytes(digest.digest(), "big") >> 1) or 1


def gone(op: Op, generation: int, status: int | None = 412) -> NotFound:
    """The error of a read pinned to ``generation`` when the object is
    another version now: that one is gone (as on GCS and S3)."""
    return NotFound(f"{_describe(op.operation, op.bucket, op.name, op.scheme)} failed: the "
                    f"object is no longer generation {generation}", operation=op.operation,
                    bucket=op.bucket, name=op.name, status=status)


@functools.lru_cache(maxsize=1024)
def _is_date(text: str) -> bool:
    """Whether ``text`` parses as an HTTP date. Remembered: every ranged
    read of a file states the same ``Last-Modified``, and parsing it each
    time was ~1.5% of an http_shards worker's CPU."""
    try:
        parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return False
    return True


def pin_of(headers: Mapping[str, str]) -> Pin:
    """The version ``headers`` state (``ETag``, ``Last-Modified``; looked up
    by lower-case names, as the lean client's headers are)."""
    etag = headers.get("etag")
    modified = headers.get("last-modified")
    if modified is not None and not _is_date(modified):
        modified = None  # unparseable: no validator a server would match
    if etag is not None and _STRONG_ETAG.match(etag):
        return Pin(etag, modified)
    return Pin(None, modified, etag)


def changed(op: Op, pinned: Pin, answer: Pin | None, status: int,
            generation: int | None) -> NotFound | PreconditionFailed:
    """The error of an answer from another version than the one read
    (``answer`` None: the server refused the pin, 412): the version the
    caller pinned (``generation``) is gone, as an overwritten generation is
    on GCS and S3 (NotFound); an unpinned read's first version changed
    under it (PreconditionFailed)."""
    said = "HTTP 412 to the pin" if answer is None else f"version {answer.token or '?'} answered"
    message = (f"{_describe(op.operation, op.bucket, op.name, op.scheme)} failed: the object "
               f"changed while it was read ({said}, {pinned.token} was read)")
    cls = PreconditionFailed if generation is None else NotFound
    return cls(message, operation=op.operation, bucket=op.bucket, name=op.name, status=412,
               reason="PreconditionFailed")
