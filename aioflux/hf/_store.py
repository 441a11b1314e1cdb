"""``HfStore``: the Hugging Face Hub's repos, read-only.

A bucket is a repo at a revision (``datasets/org/name@rev``: see
:mod:`aioflux._core.records.hub_paths`), a name the path of a file in it.

- **One commit a job.** A bucket's revision (``main`` when none is named)
  is resolved to its commit once, by the repo API, the first time the
  store needs it; every later request names that commit, so a push while a
  job reads mixes nothing. A store pickled to a DataLoader worker carries
  the commits it resolved, and a dataset hands its listing's commits to
  the stores that read it (``PinsRevisions``): one resolution a dataset;
  a revision that is a commit sha costs no request.
- **Listing** walks the tree API a folder at a time, its pages followed by
  their ``Link`` headers, in name order (``_tree.py``).
- **stat** is a HEAD of the file's ``resolve`` URL, redirects not followed:
  the size is ``X-Linked-Size`` (an LFS file) or ``Content-Length``, the
  generation stands for ``X-Linked-Etag`` or ``ETag`` (the content's id,
  as the tree API's ``oid``), and where the redirect leads is remembered.
- **Reads** are ranged GETs of the ``resolve`` URL at the commit, checked
  and pinned as an http(s) store's are (``_net/web_read.py``): redirects to
  the CDN followed, the token sent only to the Hub's origin, never to the
  CDN; where a file's redirect led is remembered (and handed to the stores
  of the same token in forked DataLoader workers), so its next reads go to
  the CDN at once. A read pinned to a generation checks it against the
  file's at the commit, as a listing or a HEAD by any store of the process
  learned it, else by a HEAD first (a manifest from another job may name a
  version the commit does not hold: NotFound, never its bytes).
- **Rate**: the requests run under the client's retries and one gate of
  the rate controller for all the repos of the token's account (of the
  address, without a token), as the Hub counts them; a 429 feeds it its wait
  (``Retry-After``, else the ``RateLimit`` header's ``t=``).
- **Access**: a 401 or 403 is a PermissionDenied saying to set
  ``HF_TOKEN``. With ``HF_HUB_OFFLINE`` set no request is sent: what
  ``huggingface_hub``'s cache holds is read (``_offline.py``: a revision by
  its ref, the files of the commit's snapshot), anything else is an
  InvalidRequest or NotFound saying so (what aioflux's disk cache holds is
  read before the store is asked).
- Writes, deletes, copies and composes are refused before any request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from typing import TypeVar
from urllib.parse import quote

import aiohttp
import yarl

from .._core.auth import AnonymousAuth
from .._core.checks.arguments import check_instance, check_str
from .._core.checks.pages import ListingCheck
from .._core.checks.stated_counts import count_of
from .._core.errors import (
    InvalidRequest,
    PermissionDenied,
    describe,
)
from .._core.metrics import RequestStats
from .._core.records.hub_paths import hub_repo
from .._core.records.types import ListPage, ObjectInfo
from .._core.records.urls import validate_bucket
from .._core.settings.config import ClientConfig
from .._core.storage.base import StoreBase
from .._core.storage.protocol import Fetched, StoreFeatures
from .._net.failures import Op, read_metadata
from .._net.loops import LoopState
from .._net.throttle import Gate
from .._net.web import REDIRECTS, Locations, error_of, gone, protocol, send
from .._net.web_read import Read, check_whole
from .._net.web_transport import WebTransport
from . import _settings
from ._offline import HubCache, cache_dir
from ._tree import TreeListing, etag_generation

__all__ = ["HfStore"]

T = TypeVar("T")

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
# The rate gate of requests without a token (the Hub counts them by address).
_ANONYMOUS = "hub anonymous"
# Generations remembered, at most.
_KNOWN = 65_536
# A file's generation at a commit, as any store of this process learned it
# ((endpoint, repo, commit, path) -> generation): a commit never changes, so
# the listing's store spares the reading stores a HEAD a file. Not the
# redirects' targets: signed for one token's access (see _locations_of).
_AT_COMMIT: dict[tuple[str, str, str, str], int] = {}
# Per (endpoint, token's account): the process, its stores' redirect
# targets, and those of the process it was forked from.
_LEARNED: dict[tuple[str, str], tuple[int, weakref.WeakSet[Locations],
                                      weakref.WeakSet[Locations]]] = {}


class HfStore(StoreBase):
    """The Hugging Face Hub's model, dataset and space repos as a read-only
    ``ObjectStore`` (``hf://`` URLs).

    Args:
        config: settings (retries, timeouts, ``max_concurrency``, the rate
            controller's ``request_rate``, as for every store).
        endpoint: the Hub's root URL; default ``$HF_ENDPOINT``, else
            ``https://huggingface.co``.
        token: a Hugging Face token, sent only to the Hub's origin; default
            ``$HF_TOKEN``, else ``huggingface_hub.get_token()`` where that
            package is installed; ``""`` sends none.

    Raises:
        InvalidArgument: a bad argument.
        InvalidURL: the endpoint (or ``$HF_ENDPOINT``) is not an http(s) root.
    """

    _kind = "the Hugging Face Hub"
    features = StoreFeatures(scheme="hf", start_offset=False, read_only=True)
    _read_only_why = "push to the Hub with huggingface_hub"

    def __init__(self, config: ClientConfig | None = None, *, endpoint: str | None = None,
                 token: str | None = None) -> None:
        check_instance("HfStore", "config", config, ClientConfig, optional=True)
        check_str("HfStore", "endpoint", endpoint, optional=True)
        check_str("HfStore", "token", token, optional=True)
        self.config = config or ClientConfig()
        self.endpoint = _settings.endpoint(endpoint)
        # token="": none, whatever the environment holds.
        self._token = (token or None) if token is not None else _settings.token()
        # Offline: huggingface_hub's cache is read, never the Hub.
        self._cache = HubCache(cache_dir()) if _settings.offline() else None
        self._commits: dict[str, str] = {}
        # Per loop (a lock is its loop's), per bucket: the resolution under way.
        self._resolving: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()
        self._locations = _locations_of(self.endpoint, _account(self._token))
        self._stats = RequestStats()
        self._transport: WebTransport | None = None

    def __repr__(self) -> str:
        return f"HfStore(endpoint={self.endpoint!r})"  # never the token

    def __getstate__(self) -> dict[str, object]:
        # By settings, and the commits resolved: a worker reads the same ones.
        return {"config": self.config, "endpoint": self.endpoint, "token": self._token,
                "commits": dict(self._commits)}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["config"], endpoint=state["endpoint"],  # type: ignore[misc,arg-type]
                      token=state["token"])
        self._commits.update(state["commits"])  # type: ignore[call-overload]

    @property
    def stats(self) -> RequestStats:
        """What this store's requests did (``stats.summary()``)."""
        return self._stats

    async def aclose(self) -> None:
        """Close this loop's connections."""
        if self._transport is not None:
            await self._transport.aclose()

    def _wire(self) -> WebTransport:
        transport = self._transport
        if transport is None:
            transport = _HubTransport(self.config, AnonymousAuth(), endpoint=self.endpoint)
            transport.account = _account(self._token)
            transport.stats = self._stats
            self._transport = transport
        return transport

    # -- the commit ----------------------------------------------------------------------

    def _pins(self) -> dict[tuple[str, str], str]:
        """The commits resolved here, by (endpoint, bucket) (``PinsRevisions``)."""
        return {(self.endpoint, bucket): sha for bucket, sha in self._commits.items()}

    def _adopt_pins(self, pins: Mapping[tuple[str, str], str]) -> None:
        """Read at the commits another store of this endpoint resolved
        (``PinsRevisions``): a commit never changes, so its reads are the
        same as if this store had resolved the revision then."""
        for (endpoint, bucket), sha in pins.items():
            if endpoint == self.endpoint and _COMMIT.match(sha):
                self._commits.setdefault(bucket, sha)

    async def commit(self, bucket: str) -> str:
        """The commit every request of ``bucket`` names: its revision
        resolved once (the first call asks the Hub, unless it is a sha).

        Args:
            bucket: ``datasets/org/name[@revision]``.

        Returns:
            The commit's sha.

        Raises:
            InvalidURL: not a Hub repo's bucket.
            NotFound: no such repo or revision.
            PermissionDenied: a gated or private repo without a token.
        """
        validate_bucket(bucket, scheme="hf")
        op = Op("resolve", bucket, "", "hf")
        return await self._guarded(op, self._commit(op))

    async def _commit(self, op: Op) -> str:
        bucket = op.bucket
        sha = self._commits.get(bucket)
        if sha is not None:
            return sha
        repo = hub_repo(bucket)
        revision = repo.revision or "main"
        if _COMMIT.match(revision):
            return self._commits.setdefault(bucket, revision)
        if self._cache is not None:
            return self._commits.setdefault(bucket, self._cache.commit(bucket, repo, revision))
        # One request, whatever number of reads start at once on this loop.
        locks = self._resolving.setdefault(asyncio.get_running_loop(), {})
        async with locks.setdefault(bucket, asyncio.Lock()):
            sha = self._commits.get(bucket)
            if sha is not None:
                return sha
            # expand=sha: the commit alone, not the list of every file in the repo.
            url = (f"{self.endpoint}/api/{repo.api_path}/revision/"
                   f"{quote(revision, safe='')}?expand=sha")
            info, _next = await self._json(Op("resolve", bucket, "", "hf"), url)
            sha = info.get("sha") if isinstance(info, dict) else None
            if not isinstance(sha, str) or not _COMMIT.match(sha):
                raise protocol(op, f"the repo info of revision {revision!r} names no commit "
                               "sha", 200)
            # The first resolution wins: every read of this store names one commit.
            return self._commits.setdefault(bucket, sha)

    def _resolve_url(self, bucket: str, commit: str, name: str) -> str:
        return (f"{self.endpoint}/{hub_repo(bucket).web_path}/resolve/{commit}/"
                f"{quote(name, safe='/')}")

    # -- requests ------------------------------------------------------------------------

    async def _guarded(self, op: Op, work: Awaitable[T]) -> T:
        """``work``'s result; a refusal (401, 403) said as what to set."""
        try:
            return await work
        except PermissionDenied as exc:
            raise self._denied(op, exc) from None

    def _denied(self, op: Op, exc: PermissionDenied) -> PermissionDenied:
        sent = ("the token sent was refused or has no access" if self._token is not None
                else "no token was sent; the Hub answers so for a repo that does not exist too")
        return PermissionDenied(f"{describe(op.operation, op.bucket, op.name, 'hf')} failed: "
                                f"the Hub refused it (HTTP {exc.status}, {sent}): "
                                f"{_settings.TOKEN_HINT}", operation=op.operation,
                                bucket=op.bucket, name=op.name, status=exc.status,
                                reason=exc.reason)

    async def _json(self, op: Op, url: str) -> tuple[object, str | None]:
        """GET a Hub API URL: its JSON and the next page's URL (``Link``).
        The token goes only to the Hub's origin: a next page named elsewhere
        is asked for without it."""
        token = self._token if self._on_hub(url) else None

        async def call(state: LoopState) -> tuple[object, str | None]:
            resp = await send(state.session, op, "GET", url, {"Accept": "application/json"},
                              token)
            try:
                if resp.status >= 300:
                    raise await error_of(resp, op)
                body = await read_metadata(resp, op)
                link = _NEXT.search(resp.headers.get("Link", ""))
            finally:
                resp.release()
            try:
                value = json.loads(body)
            except ValueError as exc:
                raise protocol(op, f"the Hub answered JSON that does not parse ({exc})",
                               resp.status) from None
            return value, None if link is None else str(yarl.URL(url).join(
                yarl.URL(link.group(1), encoded=True)))

        return await self._wire().run_on(op, "GET", url, call)

    # -- the wire calls ------------------------------------------------------------------

    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        """A HEAD of the file's ``resolve`` URL at the commit (see the module doc)."""
        op = Op("stat", bucket, name, "hf")
        return await self._guarded(op, self._head(op))

    async def _head(self, op: Op) -> ObjectInfo:
        commit = await self._commit(op)
        if self._cache is not None:
            info = self._cache.stat(op.bucket, hub_repo(op.bucket), commit, op.name)
            self._remember(commit, op.bucket, op.name, info.generation)
            return info
        url = self._resolve_url(op.bucket, commit, op.name)
        headers = {"Accept-Encoding": "identity"}

        async def call(state: LoopState) -> ObjectInfo:
            # Redirects within the Hub's origin are followed (a renamed
            # repo's); one to another origin (the CDN) is where the file's
            # reads go, its headers the file's metadata.
            target = yarl.URL(url, encoded=True)
            for _hop in range(8):
                resp = await state.session.request(
                    "HEAD", target, headers=self._authorized(headers, str(target)),
                    allow_redirects=False)
                try:
                    if resp.status >= 400:
                        raise await error_of(resp, op)
                    where = resp.headers.get("Location")
                    if resp.status in REDIRECTS and where:
                        following = target.join(yarl.URL(where, encoded=True))
                        if _origin(following) == _origin(target):
                            target = following
                            continue
                        self._locations.learn(url, following)
                    elif resp.status != 200:
                        raise protocol(op, f"unexpected HTTP {resp.status} to a HEAD",
                                       resp.status)
                    return self._info(op, commit, resp)
                finally:
                    resp.release()
            raise protocol(op, "too many redirects within the Hub", None)

        return await self._wire().run_on(op, "HEAD", url, call)

    def _on_hub(self, url: str) -> bool:
        """Whether ``url`` is on the Hub's origin (the token's only one)."""
        return _origin(yarl.URL(url, encoded=True)) == _origin(yarl.URL(self.endpoint))

    def _authorized(self, headers: dict[str, str], url: str) -> dict[str, str]:
        """``headers``, with the token only for the Hub's own origin."""
        if self._token is None or not self._on_hub(url):
            return headers
        return {**headers, "Authorization": f"Bearer {self._token}"}

    def _info(self, op: Op, commit: str, resp: aiohttp.ClientResponse) -> ObjectInfo:
        linked = resp.headers.get("X-Linked-Size")
        size = count_of(linked) if linked is not None else resp.content_length
        if resp.status != 200 and linked is None:
            size = None
        etag = resp.headers.get("X-Linked-Etag") or resp.headers.get("ETag") or ""
        if size is None:
            raise protocol(op, "the Hub's answer to a HEAD states no size (X-Linked-Size, "
                           "Content-Length)", resp.status)
        generation = etag_generation(etag)
        self._remember(commit, op.bucket, op.name, generation)
        return ObjectInfo(op.bucket, op.name, size, generation=generation, scheme="hf")

    def _key(self, commit: str, bucket: str, name: str) -> tuple[str, str, str, str]:
        return (self.endpoint, bucket.partition("@")[0], commit, name)

    def _remember(self, commit: str, bucket: str, name: str, generation: int) -> None:
        key = self._key(commit, bucket, name)
        if key not in _AT_COMMIT and len(_AT_COMMIT) >= _KNOWN:
            # The oldest (dicts keep insertion order); another thread may
            # have taken it first.
            _AT_COMMIT.pop(next(iter(_AT_COMMIT), key), None)
        _AT_COMMIT[key] = generation

    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None,
               page_size: int, fields: str | None) -> AsyncIterator[ListPage]:
        """The tree API walked in name order (``_tree.py``), cut into pages."""
        return self._listing(bucket, prefix, delimiter, start_offset, end_offset, page_size)

    async def _listing(self, bucket: str, prefix: str, delimiter: str | None,
                       start_offset: str | None, end_offset: str | None,
                       page_size: int) -> AsyncIterator[ListPage]:
        op = Op("list", bucket, prefix, "hf")
        commit = await self._guarded(op, self._commit(op))
        if self._cache is not None:
            for page in _cached_pages(self._cache, bucket, commit, prefix, delimiter,
                                      start_offset, end_offset, page_size):
                for info in page.objects:
                    self._remember(commit, bucket, info.name, info.generation)
                yield page
            return
        api = f"{self.endpoint}/api/{hub_repo(bucket).api_path}/tree/{commit}"

        def folder_url(folder: str) -> str:
            path = f"/{quote(folder, safe='/')}" if folder else ""
            return f"{api}{path}?recursive=false&expand=false"

        async def fetch(url: str) -> tuple[list[object], str | None]:
            records, following = await self._guarded(op, self._json(op, url))
            if not isinstance(records, list):
                raise protocol(op, "a tree page that is not a list", 200)
            return records, following

        check = ListingCheck("hf", bucket, prefix, start_offset, end_offset)
        walk = TreeListing(op, folder_url, fetch, prefix, delimiter, start_offset, end_offset)
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        held: ListPage | None = None  # a full page, handed out once another name comes
        async for entry, is_prefix in walk.names():
            if held is not None:
                yield check.page(ListPage(held.objects, held.prefixes, entry.key))
                held = None
            if is_prefix:
                prefixes.append(entry.path)
            else:
                self._remember(commit, bucket, entry.path, entry.generation)
                objects.append(ObjectInfo(bucket, entry.path, entry.size,
                                          generation=entry.generation, scheme="hf"))
            if len(objects) + len(prefixes) >= page_size:
                held, objects, prefixes = ListPage(objects, prefixes, None), [], []
        if held is not None:
            yield check.page(held)
        else:
            yield check.page(ListPage(objects, prefixes, None))

    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        """Ranged GETs of the ``resolve`` URL at the commit, checked and pinned."""
        self._check_object("read", bucket, name)
        op = Op("read", bucket, name, "hf")
        return await self._guarded(op, self._read(op, start, end, into, generation, size, crc,
                                                  want_crc))

    def _cached_read(self, op: Op, commit: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, crc: int | None,
                     want_crc: bool) -> Fetched:
        """A read of ``huggingface_hub``'s cache (offline): the snapshot's file
        at the commit, its version held to ``generation``."""
        assert self._cache is not None
        data, size, found = self._cache.read(op.bucket, hub_repo(op.bucket), commit, op.name,
                                             start, end)
        if generation is not None and found != generation:
            raise gone(op, generation, None)
        if start > size or (start == size and size):
            raise InvalidRequest(f"{describe('read', op.bucket, op.name, 'hf')} failed: start "
                                 f"{start} is at or past the object's end ({size} bytes)",
                                 operation="read", bucket=op.bucket, name=op.name, status=416)
        expected = (size if end is None else min(end, size)) - start
        if len(data) != expected:  # the file changed under the read
            raise gone(op, found, None)
        if into is not None:
            into[:len(data)] = data
            fetched = Fetched(None, len(data), None, size)
        else:
            fetched = Fetched(data, len(data), None, size)
        whole = start == 0 and len(data) == size
        return check_whole(op, fetched, data, crc if whole else None, want_crc)

    async def _read(self, op: Op, start: int, end: int | None, into: memoryview | None,
                    generation: int | None, size: int | None, crc: int | None,
                    want_crc: bool) -> Fetched:
        bucket, name = op.bucket, op.name
        if size is not None and start >= size and not start == size == 0:
            raise InvalidRequest(f"{describe('read', bucket, name, 'hf')} failed: start "
                                 f"{start} is at or past the object's end ({size} bytes)",
                                 operation="read", bucket=bucket, name=name, status=416)
        commit = await self._commit(op)
        if self._cache is not None:
            return self._cached_read(op, commit, start, end, into, generation, crc, want_crc)
        if generation is not None:
            known = _AT_COMMIT.get(self._key(commit, bucket, name))
            if known is None:
                known = (await self._head(Op("stat", bucket, name, "hf"))).generation
            if known != generation:
                raise gone(op, generation, None)
        transport = self._wire()
        read = Read(transport, op, self._resolve_url(bucket, commit, name), self._token, start,
                    end, into, None, None, size, self._locations)
        async with transport.admit_read(op):
            fetched = await read.run()
        whole = start == 0 and fetched.size is not None and fetched.count == fetched.size
        view = fetched.data if fetched.data is not None else (
            into[:fetched.count] if into is not None else b"")
        return check_whole(op, fetched, view, crc if whole else None, want_crc)


class _HubTransport(WebTransport):
    """A transport whose rate gate is the account's, whatever the repo: the
    Hub counts an account's (or an address's) requests over all its repos."""

    account = _ANONYMOUS

    def _gate(self, bucket: str, write: bool) -> Gate:
        gate = super()._gate(self.account, write)
        assert self._gates is not None
        return self._gates.setdefault((bucket, write), gate)


def _locations_of(endpoint: str, account: str) -> Locations:
    """A new store's redirect targets: none in the process that learned
    them (each store of a token checks its access again), those its stores
    learned in a process forked from it (a DataLoader worker: the same job
    and token; each file's first read there is then no 302 at the Hub)."""
    pid, key = os.getpid(), (endpoint, account)
    held = _LEARNED.get(key)
    if held is None or held[0] != pid:
        inherited = held[1] if held is not None else weakref.WeakSet()
        held = _LEARNED[key] = (pid, weakref.WeakSet(), inherited)
    mine = Locations()
    for parent in held[2]:
        mine.adopt(parent)
    held[1].add(mine)
    return mine


def _account(token: str | None) -> str:
    """The gate's name for a token's account (a digest: never the token)."""
    if token is None:
        return _ANONYMOUS
    return "hub account " + hashlib.sha256(token.encode()).hexdigest()[:16]


def _cached_pages(cache: HubCache, bucket: str, commit: str, prefix: str,
                  delimiter: str | None, start_offset: str | None, end_offset: str | None,
                  page_size: int) -> Iterator[ListPage]:
    """A listing of the commit's cached files, in name order, a page at a time."""
    objects: list[ObjectInfo] = []
    prefixes: list[str] = []
    last = None  # the last prefix handed out, whatever page it went in
    for info in cache.names(bucket, hub_repo(bucket), commit, prefix):
        name = info.name
        if (start_offset is not None and name < start_offset) or \
                (end_offset is not None and name >= end_offset):
            continue
        cut = name.find(delimiter, len(prefix)) if delimiter else -1
        if cut != -1:
            common = name[:cut + len(delimiter or "")]
            if common == last:
                continue
            prefixes.append(common)
            last = common
        else:
            objects.append(info)
        if len(objects) + len(prefixes) >= page_size:
            yield ListPage(objects, prefixes, name)
            objects, prefixes = [], []
    yield ListPage(objects, prefixes, None)


def _origin(url: yarl.URL) -> tuple[str, str, int | None]:
    return (url.scheme.lower(), (url.host or "").lower(), url.port)
