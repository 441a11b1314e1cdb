"""A fake Hugging Face Hub for tests: the endpoints the ``huggingface_hub``
client and HF ``datasets`` streaming use, on 127.0.0.1, and a CDN on a
second port that serves LFS files by SHA-256 (another origin: a client
must not send it the Hub's token, and the CDN records what it was sent).

The Hub's origin serves (``{type}s`` is ``models``, ``datasets`` or
``spaces``; a revision is a branch or a commit, percent-encoded in one
path segment: ``refs%2Fconvert%2Fparquet``):

- ``GET /api/{type}s/{org}/{name}[/revision/{rev}]``: the repo's info,
  ``sha`` the commit the revision names;
- ``GET /api/{type}s/{org}/{name}/tree/{rev}[/{path}]``: the entries of a
  folder (``recursive=true``: of every level), a page at a time, the next
  page named by a ``Link: <...>; rel="next"`` header, as the Hub pages;
- ``POST /api/{type}s/{org}/{name}/paths-info/{rev}``: the entries of the
  ``paths`` of a form or JSON body;
- ``HEAD|GET /[{type}s/]{org}/{name}/resolve/{rev}/{path}``: a file with
  ``X-Repo-Commit`` and ``ETag`` (ranges, ``If-Match``); an LFS file is a
  302 to the CDN with ``X-Linked-Etag`` and ``X-Linked-Size``;
- ``GET /api/whoami-v2``: who a token is (401 without a known one).

A private repo answers 401 (``X-Error-Code: RepoNotFound``) without a
valid token; a gated repo's files 401 (``GatedRepo``) without one, 403
to a token not granted access (``grant``). ``throttle(n)``
answers the next ``n`` requests 429 with ``Retry-After`` and the Hub's
``RateLimit`` headers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlencode

from aiohttp import web

from aioflux.testing._errors import ApiError
from aioflux.testing._hub_repos import Blob, Repo, Repos
from aioflux.testing._runtime import parse_range
from aioflux.testing._server import new_event_loop

__all__ = ["FakeHub", "HubRequest"]

_API_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}


@dataclass(frozen=True, slots=True)
class HubRequest:
    """One request either origin received.

    Attributes:
        origin: ``hub`` or ``cdn``.
        method: the HTTP method.
        path: the path and query string.
        headers: the request's headers.
    """

    origin: str
    method: str
    path: str
    headers: Mapping[str, str]


class _Refusal(Exception):
    def __init__(self, status: int, message: str, code: str = "") -> None:
        super().__init__(message)
        self.status, self.code = status, code

    def response(self) -> web.Response:
        headers = {"X-Error-Message": str(self)}
        if self.code:
            headers["X-Error-Code"] = self.code
        return web.json_response({"error": str(self)}, status=self.status, headers=headers)


class FakeHub:
    """``with FakeHub() as hub:`` a Hub on ``hub.endpoint`` (set it as
    ``HF_ENDPOINT``) and its CDN on ``hub.cdn_endpoint``, run on their own
    loop in a daemon thread; repos are made and pushed to from any thread.

    Args:
        lfs_threshold: files at least this large are LFS files (served by
            the CDN after a 302).
        tree_page_size: entries a page of the tree API holds.
        tokens: the tokens the Hub knows (a private or gated repo needs one).
    """

    def __init__(self, *, lfs_threshold: int = 1024, tree_page_size: int = 1000,
                 tokens: tuple[str, ...] = ("hf_fake_token",)) -> None:
        self.repos = Repos(lfs_threshold)
        self.tree_page_size = tree_page_size
        self.tokens = set(tokens)
        #: every request received, in order
        self.requests: list[HubRequest] = []
        self.endpoint = ""
        self.cdn_endpoint = ""
        self._throttled = {"hub": 0, "cdn": 0}
        self._retry_after = 1
        #: the CDN links signed before this are expired (a count of calls
        #: to ``expire_links``)
        self._links = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runners: list[web.AppRunner] = []

    # -- what a test sets up --------------------------------------------------------

    def create_repo(self, repo_id: str, *, repo_type: str = "dataset", private: bool = False,
                    gated: bool = False) -> None:
        """A new empty repo (its ``main`` one empty commit).

        Args:
            repo_id: ``org/name``.
            repo_type: ``dataset``, ``model`` or ``space``.
            private: only a token the Hub knows reads it (401 otherwise).
            gated: its files need a token granted access (see ``grant``).

        Raises:
            ValueError: ``repo_type`` is none of the three, or ``repo_id`` is
                not ``org/name``.
        """
        self.repos.create(repo_id, repo_type=repo_type, private=private, gated=gated)

    def grant(self, repo_id: str, tokens: tuple[str, ...], *,
              repo_type: str = "dataset") -> None:
        """Only ``tokens`` may read a gated repo's files (by default every
        token the Hub knows may: its terms accepted).

        Args:
            repo_id: ``org/name`` of a gated repo.
            tokens: the tokens granted access; any other known token gets 403.
            repo_type: ``dataset``, ``model`` or ``space``.

        Raises:
            KeyError: no such repo.
        """
        repo = self.repos.get(repo_type, repo_id)
        if repo is None:
            raise KeyError(f"{repo_type} {repo_id}")
        with self.repos.lock:
            repo.granted = set(tokens)

    def push(self, repo_id: str, files: Mapping[str, bytes | None], *,
             repo_type: str = "dataset", branch: str = "main") -> str:
        """Commit ``files`` on ``branch``.

        Args:
            repo_id: ``org/name`` of a repo made by ``create_repo``.
            files: path in the repo -> its bytes (None deletes the file).
            repo_type: ``dataset``, ``model`` or ``space``.
            branch: the branch the commit goes on (made from ``main`` if new).

        Returns:
            The new commit's sha.

        Raises:
            KeyError: no such repo.
        """
        return self.repos.push(repo_id, files, repo_type=repo_type, branch=branch)

    def commit(self, repo_id: str, revision: str = "main", *, repo_type: str = "dataset") -> str:
        """The commit ``revision`` names now.

        Args:
            repo_id: ``org/name``.
            revision: a branch or a commit.
            repo_type: ``dataset``, ``model`` or ``space``.

        Returns:
            The commit's sha.

        Raises:
            KeyError: no such repo or revision.
        """
        repo = self.repos.get(repo_type, repo_id)
        sha = None if repo is None else repo.commit_of(revision)
        if sha is None:
            raise KeyError(f"{repo_type} {repo_id}@{revision}")
        return sha

    def throttle(self, count: int, *, retry_after: int = 1, origin: str = "hub") -> None:
        """Answer the next ``count`` requests to ``origin`` 429.

        Args:
            count: how many requests are refused.
            retry_after: the seconds each refusal asks for (``Retry-After``
                and the ``t=`` of ``RateLimit``).
            origin: ``hub`` or ``cdn``.
        """
        with self.repos.lock:
            self._throttled[origin] = count
            self._retry_after = retry_after

    def expire_links(self) -> None:
        """Expire every CDN link handed out so far: the CDN answers them 403,
        as a signed URL past its time is."""
        with self.repos.lock:
            self._links += 1

    def sent(self, origin: str) -> list[HubRequest]:
        """The requests one origin received, in order.

        Args:
            origin: ``hub`` or ``cdn``.

        Returns:
            Its ``HubRequest`` records.
        """
        with self.repos.lock:
            return [r for r in self.requests if r.origin == origin]

    # -- running ----------------------------------------------------------------------

    def __enter__(self) -> FakeHub:
        loop = new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start())
            except BaseException as exc:  # handed to the calling thread below
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                for runner in self._runners:
                    loop.run_until_complete(runner.cleanup())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="aioflux-fake-hub", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> None:
        self.endpoint = await self._serve(self._hub)
        self.cdn_endpoint = await self._serve(self._cdn)

    async def _serve(self, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                     ) -> str:
        app = web.Application(client_max_size=16 << 20)
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    # -- the two origins ----------------------------------------------------------------

    def _received(self, origin: str, request: web.Request) -> web.Response | None:
        """Record ``request``; its 429 while throttled."""
        with self.repos.lock:
            self.requests.append(HubRequest(origin, request.method, request.raw_path,
                                            dict(request.headers)))
            if not self._throttled[origin]:
                return None
            self._throttled[origin] -= 1
            wait = self._retry_after
        return web.json_response(
            {"error": "You have been rate-limited; you can retry this action in a while."},
            status=429, headers={"Retry-After": str(wait),
                                 "RateLimit": f'"api";r=0;t={wait}',
                                 "RateLimit-Policy": '"fixed window";"api";q=1000;w=300'})

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        refused = self._received("cdn", request)
        if refused is not None:
            return refused
        if request.query.get("link") != str(self._links):
            return web.Response(status=403, text="AccessDenied: Request has expired")
        blob = self.repos.blob(request.path.strip("/"))
        if blob is None or request.method not in ("GET", "HEAD"):
            return web.Response(status=404, text="NoSuchKey")
        return _bytes(request, blob.data, f'"{blob.sha256}"', {})

    async def _hub(self, request: web.Request) -> web.StreamResponse:
        refused = self._received("hub", request)
        if refused is not None:
            return refused
        parts = [unquote(p) for p in request.raw_path.split("?", 1)[0].split("/")[1:]]
        try:
            self._check_token(request)
            if parts[:2] == ["api", "whoami-v2"]:
                return self._whoami(request)
            if parts[0] == "api" and len(parts) >= 4 and parts[1] in _API_TYPES:
                return await self._api(request, _API_TYPES[parts[1]], parts[2:])
            if "resolve" in parts:
                return self._resolve(request, parts)
            raise _Refusal(404, f"no route {request.raw_path}")
        except _Refusal as refusal:
            return refusal.response()

    def _check_token(self, request: web.Request) -> None:
        token = _token(request)
        if token is not None and token not in self.tokens:
            raise _Refusal(401, "Invalid credentials in Authorization header")

    def _whoami(self, request: web.Request) -> web.Response:
        if _token(request) is None:
            raise _Refusal(401, "Invalid credentials in Authorization header")
        return web.json_response({"type": "user", "id": "1", "name": "tester",
                                  "fullname": "Tester", "orgs": [],
                                  "auth": {"type": "access_token",
                                           "accessToken": {"displayName": "test",
                                                           "role": "read"}}})

    def _repo(self, request: web.Request, repo_type: str, repo_id: str,
              files: bool) -> Repo:
        """The repo, or the Hub's refusal to this request's token."""
        repo = self.repos.get(repo_type, repo_id)
        authorized = _token(request) is not None
        if repo is None or (repo.private and not authorized):
            raise _Refusal(401 if not authorized else 404, "Repository Not Found for url: "
                           f"{request.url}. Please make sure you specified the correct "
                           "`repo_id` and `repo_type`.", "RepoNotFound")
        granted = repo.granted
        if repo.gated and files and authorized and granted is not None \
                and _token(request) not in granted:
            raise _Refusal(403, f"Access to {repo_type} {repo_id} is restricted and you are "
                           "not in the authorized list. Visit the repo to ask for access.",
                           "GatedRepo")
        if repo.gated and files and not authorized:
            raise _Refusal(401, f"Access to {repo_type} {repo_id} is restricted. You must "
                           "have access to it and be authenticated to access it.", "GatedRepo")
        return repo

    @staticmethod
    def _sha(repo: Repo, revision: str) -> str:
        sha = repo.commit_of(revision)
        if sha is None:
            raise _Refusal(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return sha

    async def _api(self, request: web.Request, repo_type: str,
                   parts: list[str]) -> web.Response:
        repo_id, rest = "/".join(parts[:2]), parts[2:]
        if not rest:
            repo = self._repo(request, repo_type, repo_id, files=False)
            return web.json_response(repo.info(self._sha(repo, "main")))
        kind, args = rest[0], rest[1:]
        if kind == "revision" and args:
            repo = self._repo(request, repo_type, repo_id, files=False)
            return web.json_response(repo.info(self._sha(repo, "/".join(args))))
        if kind == "tree" and args:
            repo = self._repo(request, repo_type, repo_id, files=False)
            return self._tree(request, repo, args[0], "/".join(args[1:]))
        if kind == "paths-info" and len(args) == 1 and request.method == "POST":
            repo = self._repo(request, repo_type, repo_id, files=False)
            return await self._paths_info(request, repo, args[0])
        raise _Refusal(404, f"no route {request.raw_path}")

    def _tree(self, request: web.Request, repo: Repo, revision: str,
              folder: str) -> web.Response:
        sha = self._sha(repo, revision)
        folder = folder.strip("/")
        if folder and not repo.is_folder(sha, folder):
            raise _Refusal(404, f"Entry not found: {folder}", "EntryNotFound")
        recursive = request.query.get("recursive", "").lower() in ("1", "true")
        entries = repo.entries(sha, folder, recursive)
        start = int(request.query.get("cursor", "0") or 0)
        page = entries[start:start + self.tree_page_size]
        headers = {}
        if start + len(page) < len(entries):
            query = {**request.query, "cursor": str(start + len(page))}
            headers["Link"] = f'<{request.url.with_query(None)}?{urlencode(query)}>; rel="next"'
        return web.json_response(page, headers=headers)

    async def _paths_info(self, request: web.Request, repo: Repo,
                          revision: str) -> web.Response:
        sha = self._sha(repo, revision)
        if request.content_type == "application/json":
            paths = list((await request.json()).get("paths", []))
        else:
            paths = list((await request.post()).getall("paths", []))
        files = repo.commits[sha]
        found: list[dict[str, object]] = []
        for path in map(str, paths):
            path = path.strip("/")
            if path in files:
                found.append(files[path].entry(path))
            elif repo.is_folder(sha, path):
                found.append({"type": "directory", "path": path, "size": 0,
                              "oid": sha})
        return web.json_response(found)

    def _resolve(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        at = parts.index("resolve")
        head = parts[:at]
        repo_type = "model"
        if head and head[0] in _API_TYPES and len(head) == 3:
            repo_type, head = _API_TYPES[head[0]], head[1:]
        if len(head) != 2 or len(parts) < at + 3:
            raise _Refusal(404, f"no route {request.raw_path}")
        repo = self._repo(request, repo_type, "/".join(head), files=True)
        sha = self._sha(repo, parts[at + 1])
        path = "/".join(parts[at + 2:])
        blob: Blob | None = repo.commits[sha].get(path)
        if blob is None:
            raise _Refusal(404, f"Entry not found: {path}", "EntryNotFound")
        headers = {"X-Repo-Commit": sha}
        if not blob.lfs:
            return _bytes(request, blob.data, blob.etag, headers)
        query = urlencode({"expires": "9999", "link": str(self._links)})
        location = f"{self.cdn_endpoint}/{blob.sha256}?{query}"
        return web.Response(status=302, headers={
            **headers, "Location": location, "ETag": blob.etag, "X-Linked-Etag": blob.etag,
            "X-Linked-Size": str(len(blob.data)), "Content-Type": "text/plain"})


def _token(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    return auth[7:].strip() or None if auth.lower().startswith("bearer ") else None


def _bytes(request: web.Request, data: bytes, etag: str,
           headers: Mapping[str, str]) -> web.Response:
    """``data`` as a whole or ranged answer (``If-Match`` and ``If-Range``
    honoured)."""
    out = {**headers, "ETag": etag, "Accept-Ranges": "bytes",
           "Content-Type": "application/octet-stream"}
    if_match = request.headers.get("If-Match")
    if if_match is not None and if_match.strip() not in ("*", etag):
        return web.Response(status=412, headers=out)
    want = request.headers.get("Range")
    if_range = request.headers.get("If-Range")
    if if_range is not None and if_range.strip() != etag:
        want = None
    try:
        span = parse_range(want, len(data))
    except ApiError:
        return web.Response(status=416, headers={**out,
                                                 "Content-Range": f"bytes */{len(data)}"})
    status, body = 200, data
    if span is not None:
        start, end = span[0], min(span[1], len(data))
        status, body = 206, data[start:end]
        out["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
    if request.method == "HEAD":
        out["Content-Length"] = str(len(body))
        return web.Response(status=status, headers=out)
    return web.Response(status=status, body=body, headers=out)

