"""``HttpStore``: objects on a web server, read-only, for public datasets
(Hugging Face ``resolve`` URLs, LAION and DataComp mirrors, institutional
servers, a bucket's public HTTPS URLs).

``https://host:8443/data/train-00001.tar`` is bucket ``host:8443`` (the
origin's host and port, the default port dropped) and name
``data/train-00001.tar`` (the path after the origin, with its query, as
written: already percent-encoded); one store serves one scheme, so
``http://`` and ``https://`` URLs each have theirs.

- ``stat`` is a HEAD: the size is ``Content-Length``, the version
  (``ObjectInfo.generation``) a hash of the strong ``ETag``, else of the
  weak one and ``Last-Modified``; the store remembers what each
  generation stands for (bounded), so a read pinned to it sends it back.
  A generation it does not know (another process's: a DataLoader
  worker's store is its own) costs no HEAD: the read's first answer must
  state a version that hashes to it, else NotFound, before a byte is kept.
- Reads are ranged GETs checked as ``_net/web_read.py`` says, pinned to the
  version first seen (``If-Match``, or ``If-Range`` without a strong
  ETag): an object replaced while it is read is ``PreconditionFailed``,
  never bytes of two versions, as far as the server's validators tell
  versions apart (nginx's ETag is the size and the modification time in
  whole seconds: a same-size file replaced within that second passes as
  the same version). A server that ignores ranges is served by
  slicing its whole answer. Ranged GETs go over the lean HTTP/1.1 client
  (``ClientConfig.lean_reads``) where they can, to the named URL; any
  answer but a 206 (or a 412 to the pin) is sent again through aiohttp.
- Redirects are followed (at most ``_net.web.MAX_REDIRECTS``; never from
  https to http); the bearer token (``token=``, else
  ``$AIOFLUX_HTTP_TOKEN``) goes only to the origin the URL names, never to
  the host a redirect leads to. Where a URL led is remembered, and its
  next reads go there at once until it answers as if stale; a stat goes
  through the URL named (a link repointed since leads elsewhere now).
- A web server has no listing and takes no writes: ``list`` and every
  write, delete, copy and compose raise ``InvalidRequest`` before any
  request; shards are named by brace patterns or lists of URLs.

The user-facing operations and their argument checks are
:class:`~aioflux._core.storage.base.StoreBase`'s; this module holds the
wire calls (``_stat``, ``_fetch``) and the refusals.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from email.utils import parsedate_to_datetime

import aiohttp

from .._core.auth import AnonymousAuth
from .._core.checks.arguments import check_instance, check_str
from .._core.errors import InvalidArgument, InvalidRequest, describe
from .._core.metrics import RequestStats
from .._core.records.types import ListPage, ObjectInfo
from .._core.records.urls import WEB_SCHEMES
from .._core.settings.config import ClientConfig
from .._core.storage.base import StoreBase
from .._core.storage.protocol import Fetched, StoreFeatures, arguments_state, from_arguments
from .._net.failures import Op
from .._net.web import Locations, Pin, error_of, generation_of, pin_of, protocol, send, url_of
from .._net.web_read import Read, check_whole
from .._net.web_transport import WebTransport

__all__ = ["TOKEN_ENV", "HttpStore"]

#: The environment variable a bearer token is taken from when none is given.
TOKEN_ENV = "AIOFLUX_HTTP_TOKEN"
# Versions remembered (generation -> validators), at most; past it the
# oldest go first and a read pinned to one forgotten is held by its first
# answer's version.
_PINS = 65_536
_NO_LISTING = ("a web server has no listing: name the shards with a brace pattern "
               "({scheme}://host/train-{{00000..00099}}.tar) or a list of URLs")


def _total(content_range: str) -> int | None:
    """The total of ``bytes a-b/total`` or ``bytes */total`` (None: unstated)."""
    total = content_range.rpartition("/")[2].strip()
    return int(total) if content_range.startswith("bytes ") and total.isdigit() else None


class HttpStore(StoreBase):
    """A web server's files as a read-only ``ObjectStore``.

    Args:
        config: settings (``ca_file`` / ``ssl_context`` trust a private CA;
            retries, timeouts and ``max_concurrency`` as for every store).
        scheme: ``https`` or ``http``.
        token: a bearer token sent (``Authorization: Bearer``) to the
            origin each URL names, never across a redirect to another;
            None: ``$AIOFLUX_HTTP_TOKEN`` if set, else none.

    Raises:
        InvalidArgument: a bad argument.
    """

    _kind = "a web server"
    _read_only_why = "a web server takes no writes"
    __getstate__ = arguments_state
    __setstate__ = from_arguments

    def __init__(self, config: ClientConfig | None = None, *, scheme: str = "https",
                 token: str | None = None) -> None:
        check_instance("HttpStore", "config", config, ClientConfig, optional=True)
        check_str("HttpStore", "token", token, optional=True)
        if scheme not in WEB_SCHEMES:
            raise InvalidArgument(f"HttpStore serves http or https, not {scheme!r}")
        self.config = config or ClientConfig()
        self.scheme = scheme
        # One class for both schemes: the features (whose scheme names the
        # URLs in messages) are this instance's.
        self.features = StoreFeatures(scheme=scheme, start_offset=False, read_only=True)
        self._token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
        self._arguments = {"config": self.config, "scheme": scheme, "token": self._token}
        self._transports: dict[str, WebTransport] = {}
        self._pins: dict[int, Pin] = {}
        self._locations = Locations()
        self._stats = RequestStats()

    def __repr__(self) -> str:
        return f"HttpStore(scheme={self.scheme!r})"  # never the token

    @property
    def stats(self) -> RequestStats:
        """What this store's requests did (``stats.summary()``)."""
        return self._stats

    async def aclose(self) -> None:
        """Close this loop's connections to every origin."""
        for transport in list(self._transports.values()):
            await transport.aclose()

    def _transport(self, bucket: str) -> WebTransport:
        """The connections to ``bucket``'s origin (one per origin: its
        proxy, rate gates and pool are the origin's)."""
        transport = self._transports.get(bucket)
        if transport is None:
            transport = WebTransport(self.config, AnonymousAuth(),
                                     endpoint=url_of(self.scheme, bucket, ""))
            transport.stats = self._stats
            transport = self._transports.setdefault(bucket, transport)
        return transport

    def _op(self, operation: str, bucket: str, name: str) -> Op:
        return Op(operation, bucket, name, self.scheme)

    # -- versions ---------------------------------------------------------------

    def _remember(self, pin: Pin) -> int:
        """The generation of ``pin`` (0: the server states no version)."""
        generation = generation_of(pin)
        if not generation:
            return 0
        pins = self._pins
        if generation not in pins and len(pins) >= _PINS:
            del pins[next(iter(pins))]  # the oldest (dicts keep insertion order)
        pins[generation] = pin
        return generation

    # -- the wire calls -------------------------------------------------------------

    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        """A HEAD: the size is ``Content-Length``, the generation stands for
        the ``ETag`` (else ``Last-Modified``). A server that refuses HEAD
        (405, 501) or states no length there is asked for the first byte
        instead (``Range: bytes=0-0``), whose ``Content-Range`` states the
        size; none there either is a ProtocolError."""
        op = self._op("stat", bucket, name)
        url = url_of(self.scheme, bucket, name)

        async def call(session: aiohttp.ClientSession, _auth: dict[str, str]) -> ObjectInfo:
            # Through the URL named, not where its redirects last led: a
            # 302 of a "latest" link repointed since leads elsewhere now,
            # and the version stated here is the one the reads are held to.
            self._locations.forget(url)
            resp = await send(session, op, "HEAD", url, {"Accept-Encoding": "identity"},
                              self._token, self._locations)
            try:
                if resp.status not in (405, 501):
                    if resp.status >= 300:
                        raise await error_of(resp, op)
                    if resp.status != 200:
                        raise protocol(op, f"unexpected HTTP {resp.status} to a HEAD",
                                       resp.status)
                    # A stated 0 is asked again of a GET: no read would ever
                    # test it (an empty object has no byte to read).
                    if resp.content_length:
                        return self._info(bucket, name, resp.content_length, resp.headers)
            finally:
                resp.release()
            return await self._first_byte(session, op, url)

        return await self._transport(bucket).run(op, "HEAD", url, call)

    async def _first_byte(self, session: aiohttp.ClientSession, op: Op,
                          url: str) -> ObjectInfo:
        """Stat by a GET of byte 0: its ``Content-Range`` total (206, or an
        empty object's 416 ``bytes */0``) or a whole answer's length (200,
        whose body is not read: the connection closes)."""
        resp = await send(session, op, "GET", url,
                          {"Accept-Encoding": "identity", "Range": "bytes=0-0"}, self._token)
        try:
            total = _total(resp.headers.get("Content-Range", ""))
            if resp.status == 416 and total == 0:
                return self._info(op.bucket, op.name, 0, resp.headers)
            if resp.status >= 300:
                raise await error_of(resp, op)
            size = total if resp.status == 206 else resp.content_length
            if resp.status not in (200, 206) or size is None:
                raise protocol(op, f"neither the HEAD nor a GET of byte 0 (HTTP {resp.status}) "
                               "states the size", resp.status)
            return self._info(op.bucket, op.name, size, resp.headers)
        finally:
            resp.release()

    def _info(self, bucket: str, name: str, size: int,
              headers: Mapping[str, str]) -> ObjectInfo:
        pin = pin_of(headers)
        updated = None
        if pin.modified is not None:
            updated = parsedate_to_datetime(pin.modified).isoformat()
        return ObjectInfo(bucket, name, size, generation=self._remember(pin),
                          content_type=headers.get("Content-Type"), updated=updated,
                          scheme=self.scheme)

    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None,
               page_size: int, fields: str | None) -> AsyncIterator[ListPage]:
        """Refused at once: a web server has no listing."""
        raise self._unsupported("list", bucket, prefix, _NO_LISTING.format(scheme=self.scheme))

    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        """Ranged GETs, checked and pinned (``_net/web_read.py``)."""
        self._check_object("read", bucket, name)
        op = self._op("read", bucket, name)
        if size is not None and start >= size and not start == size == 0:
            raise InvalidRequest(f"{describe('read', bucket, name, self.scheme)} failed: start "
                                 f"{start} is at or past the object's end ({size} bytes)",
                                 operation="read", bucket=bucket, name=name, status=416)
        # A generation this store has not seen (another process's, a worker's
        # after fork or pickling) is held by its first answer, whose version
        # must hash to it before a byte is kept: no HEAD to learn it first.
        pin = None if generation is None else self._pins.get(generation)
        transport = self._transport(bucket)
        read = Read(transport, op, url_of(self.scheme, bucket, name), self._token, start, end,
                    into, pin, generation, size, self._locations)
        async with transport.admit_read(op):
            fetched = await read.run()
        if pin is None and generation and read.pin is not None:
            self._remember(read.pin)
        whole = start == 0 and fetched.size is not None and fetched.count == fetched.size
        view = fetched.data if fetched.data is not None else (
            into[:fetched.count] if into is not None else b"")
        return check_whole(op, fetched, view, crc if whole else None, want_crc)
