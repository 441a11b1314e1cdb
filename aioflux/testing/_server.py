"""The emulator server: routing, lifecycle and a thread-hosted sync runner.

Routing is done by hand on the raw (still percent-encoded) path with a
low-level :class:`aiohttp.web.Server`: it skips the router and middleware
machinery, and keeps ``%2F`` inside a JSON API object segment intact until
the handler decodes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from urllib.parse import unquote

from aiohttp import web

from aioflux._core.checks.arguments import check_instance
from aioflux.testing._billing import check_user_project
from aioflux.testing._errors import ApiError
from aioflux.testing._json_api import handle_json
from aioflux.testing._profile import NO_FAULTS, NO_PROFILE, EmulatorProfile, Faults
from aioflux.testing._runtime import Runtime
from aioflux.testing._s3_api import S3Face
from aioflux.testing._store import Store
from aioflux.testing._xml_api import handle_xml

__all__ = ["Emulator", "new_event_loop", "running_emulator"]

_log = logging.getLogger("aioflux.testing")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """Return a uvloop loop if uvloop is importable, else a default asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class Emulator:
    """An in-process GCS emulator (JSON + XML APIs) on ``host:port``, and its
    path-style S3 face on a second port (:attr:`s3_endpoint`) over the same
    store, profile and faults (see :mod:`aioflux.testing._s3_api`).

    ``profile`` and ``faults`` may be reassigned at any time, also from
    another thread; the next request uses the new values. ``stats`` counts
    requests per operation (``list``, ``get_media``, ``get_metadata``,
    ``upload``, ``resumable_start``, ``resumable_put``, ``compose``,
    ``rewrite``, ``copy``, ``delete``, ``patch``, ``xml_get``, ``xml_put``,
    ``xml_list``, ``xml_initiate``, ``xml_put_part``, ``xml_complete``,
    ``xml_abort``...), ``requests`` in total, object ``reads`` and
    ``writes``, and faults: ``injected_429``, ``injected_503``,
    ``throttled`` (QPS cap; of which ``throttled_reads`` and
    ``throttled_writes``), ``resets``, ``stalls``, ``tail_delays`` (the
    profile's heavy tail). S3 requests count as ``s3_get``, ``s3_head``,
    ``s3_put``, ``s3_list``, ``s3_put_part``...

    Args:
        profile: latency / bandwidth / QPS profile (default: none).
        faults: fault probabilities (default: none).
        host: interface to bind; keep the loopback default.
        port: TCP port; ``0`` picks a free one.
        store: an existing store to serve, e.g. another (stopped)
            emulator's ``emu.store`` (default: a new empty one).
        xml_multipart: serve XML multipart uploads; ``False`` refuses them as
            fake-gcs-server does, so writers take their resumable fallback.
        s3_port: TCP port of the S3 face (``0`` picks a free one; ``None``
            serves no S3 face).
        s3_region: the region the S3 face reports for every bucket.

    Raises:
        InvalidArgument: ``store`` is not a ``Store`` (the emulator's), or
            ``s3_region`` not a ``str``.
    """

    def __init__(
        self,
        profile: EmulatorProfile | None = None,
        faults: Faults | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        store: Store | None = None,
        xml_multipart: bool = True,
        s3_port: int | None = 0,
        s3_region: str = "us-east-1",
    ) -> None:
        # Refused here: a MemoryStore (the other store aioflux.testing
        # offers) failed only at the first request, inside the server.
        check_instance("Emulator", "store", store, Store, optional=True)
        check_instance("Emulator", "s3_region", s3_region, str)
        self._rt = Runtime(store or Store(), profile or NO_PROFILE, faults or NO_FAULTS)
        self._xml_multipart = xml_multipart
        self._host = host
        self._port = port
        self._runner: web.ServerRunner | None = None
        self._s3 = S3Face(self._rt, region=s3_region) if s3_port is not None else None
        self._s3_port = s3_port
        self._s3_runner: web.ServerRunner | None = None

    # -- knobs and state ---------------------------------------------------

    @property
    def profile(self) -> EmulatorProfile:
        """The current :class:`EmulatorProfile` (assignable)."""
        return self._rt.profile

    @profile.setter
    def profile(self, value: EmulatorProfile) -> None:
        self._rt.profile = value

    @property
    def faults(self) -> Faults:
        """The current :class:`Faults` (assignable; re-seeds the fault RNG)."""
        return self._rt.faults

    @faults.setter
    def faults(self, value: Faults) -> None:
        self._rt.faults = value

    @property
    def stats(self) -> Counter[str]:
        """Request and fault counters (a live ``Counter``; missing keys read 0)."""
        return self._rt.stats

    @property
    def store(self) -> Store:
        """The in-memory store (buckets, objects, uploads)."""
        return self._rt.store

    @property
    def port(self) -> int:
        """The bound port (the requested one until :meth:`start`)."""
        return self._port

    @property
    def endpoint(self) -> str:
        """``http://HOST:PORT``, the value for ``STORAGE_EMULATOR_HOST``.

        Raises:
            RuntimeError: the emulator is not started.
        """
        if self._runner is None:
            raise RuntimeError("Emulator is not started")
        return f"http://{self._host}:{self._port}"

    @property
    def s3_endpoint(self) -> str:
        """``http://HOST:PORT2``: the S3 face (path style), for ``endpoint_url=``.

        Raises:
            RuntimeError: the emulator is not started or serves no S3 face.
        """
        if self._s3_runner is None:
            raise RuntimeError("Emulator is not started or was built with s3_port=None")
        return f"http://{self._host}:{self._s3_port}"

    def create_bucket(self, name: str, *, requester_pays: bool = False) -> str:
        """Create a bucket directly in the store (no HTTP).

        Args:
            name: 3-63 characters, as on GCS.
            requester_pays: make it a requester-pays bucket: a request that
                names no project to bill is refused as GCS and S3 refuse it
                (JSON API: 400 ``required``, "Bucket is a requester pays
                bucket but no user project provided."; XML API: 400
                ``UserProjectMissing``, both unless ``userProject=`` or
                ``x-goog-user-project`` names one; S3 face: 403
                ``AccessDenied`` without ``x-amz-request-payer:
                requester``). Nothing is billed.

        Returns:
            ``name``.

        Raises:
            ApiError: the bucket exists or the name is invalid.
        """
        self._rt.store.create_bucket(name, requester_pays=requester_pays)
        return name

    # -- lifecycle -------------------------------------------------------

    async def start(self) -> None:
        """Bind and start serving.

        Raises:
            RuntimeError: already started.
            OSError: the port cannot be bound.
        """
        if self._runner is not None:
            raise RuntimeError("Emulator already started")
        runner, self._port = await self._listen(self._handle, self._port)
        if self._s3 is not None and self._s3_port is not None:
            try:
                self._s3_runner, self._s3_port = await self._listen(self._s3.handle,
                                                                    self._s3_port)
            except BaseException:
                await runner.cleanup()
                raise
        self._runner = runner
        self._rt.base_url = self.endpoint

    async def _listen(self, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
                      port: int) -> tuple[web.ServerRunner, int]:
        # A request body arrives as sent: an XML or S3 PUT with
        # "Content-Encoding: gzip" stores the compressed bytes (the coding is
        # the object's metadata), as GCS and S3 do; aiohttp would inflate it.
        server = web.Server(handler, access_log=None, auto_decompress=False)
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self._host, port, backlog=1024, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        return runner, int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop serving and close connections (idempotent)."""
        runners = (self._runner, self._s3_runner)
        self._runner = self._s3_runner = None
        for runner in runners:
            if runner is not None:
                await runner.cleanup()

    async def __aenter__(self) -> Emulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- routing ---------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        segs = request.rel_url.raw_path.split("/")[1:]
        head = segs[0]
        rt = self._rt
        json_api = True
        try:
            if head == STATS_PATH and request.method == "GET":
                # Not a GCS route ("_" cannot start a bucket name): lets a demo or
                # benchmark read the counters of an emulator in another process.
                return web.json_response(dict(rt.stats))
            if head == "storage" and segs[1:2] == ["v1"]:
                return _as_asked(rt, request, await handle_json(rt, request, _trim(segs[2:])))
            if head == "upload" and segs[1:3] == ["storage", "v1"]:
                return _as_asked(rt, request, await handle_json(rt, request, _trim(segs[3:])))
            if head == "download" and segs[1:3] == ["storage", "v1"]:
                return await handle_json(rt, request, _trim(segs[3:]), media=True)
            json_api = False
            if not head:
                raise ApiError(400, "invalid", "Bucket name required", xml_code="InvalidBucketName")
            if not self._xml_multipart and request.method == "POST" and "uploads" in request.query:
                raise ApiError(400, "invalid", "XML multipart uploads are not supported",
                               xml_code="InvalidArgument")
            bucket = unquote(head)
            check_user_project(rt.store, request, bucket)
            return await handle_xml(rt, request, bucket, unquote("/".join(segs[1:])))
        except ApiError as exc:
            resp = (_as_asked(rt, request, exc.json_response()) if json_api
                    else exc.xml_response(head=request.method == "HEAD"))
            if request.can_read_body and not request.content.at_eof():
                # Refused before its body was read (a fault, the QPS cap, a bad
                # name): a client that sent "Expect: 100-continue" never sends
                # it and keeps the connection, so the server would take the
                # next request's bytes for the body. Closing keeps both in step.
                resp.force_close()
            return resp
        except ConnectionError:
            # The client went away mid-request (a cancelled upload, Ctrl-C):
            # routine for a storage server, so counted and logged at debug
            # level instead of aiohttp's traceback per connection. There is
            # nobody to answer; the response below is never sent.
            rt.stats["client_disconnects"] += 1
            _log.debug("client %s dropped the connection during %s %s", request.remote,
                       request.method, request.rel_url.path)
            return web.Response(status=499)


STATS_PATH = "_aioflux_stats"


def _as_asked(rt: Runtime, request: web.BaseRequest,
              response: web.StreamResponse) -> web.StreamResponse:
    """Indent a JSON API document unless the request asked ``prettyPrint=false``.

    GCS defaults to ``prettyPrint=true`` (one field per line, indented): ~40%
    more bytes per listing page than a compact one. Handlers build compact
    documents; this indents them as GCS would and counts it in
    ``stats["pretty_printed"]``, so tests can see which clients ask for
    compact ones. Object bytes (``alt=media``, ``/download``) are never touched.
    """
    query = request.query
    if (query.get("prettyPrint", "true").lower() == "false"
            or query.get("alt", "json") != "json"
            or not isinstance(response, web.Response)
            or response.content_type != "application/json"
            or not isinstance(response.body, bytes) or not response.body):
        return response
    response.body = json.dumps(json.loads(response.body), indent=2).encode()
    rt.stats["pretty_printed"] += 1
    return response


def _trim(segs: list[str]) -> list[str]:
    # A trailing slash never carries meaning in the JSON API: object names
    # ending in '/' arrive encoded as %2F inside their segment.
    while segs and not segs[-1]:
        segs = segs[:-1]
    return segs


def _cancel_left(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and wait for the tasks still running on ``loop``, as
    ``asyncio.run`` does before it closes its loop.

    Stopping the server cancels the handlers of the connections it still
    has; one whose client went away (a cancelled read, a hedged read's
    loser) is no longer its connection's and keeps going: a stall or a
    tail delay sleeping on. Closed over, such a task was destroyed pending,
    an asyncio error logged at the end of the test session.
    """
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


@contextmanager
def running_emulator(
    profile: EmulatorProfile | None = None,
    faults: Faults | None = None,
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    store: Store | None = None,
    xml_multipart: bool = True,
    s3_port: int | None = 0,
    s3_region: str = "us-east-1",
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = new_event_loop,
) -> Iterator[Emulator]:
    """Run an :class:`Emulator` on its own event loop in a daemon thread.

    For sync tests, benchmarks and demos. The store and knobs may be used
    from the calling thread.

    Args:
        profile: latency / bandwidth / QPS profile.
        faults: fault probabilities.
        port: TCP port (``0`` = ephemeral).
        host: interface to bind.
        store: the buckets and objects to serve, as :class:`Emulator`
            takes them: an earlier emulator's ``emu.store`` (a restart on
            another port or with other settings keeps its objects), or one
            filled before the start. Default: a new empty one. Serve it
            from one running emulator at a time: its operations are atomic
            on the loop of the emulator that runs them only.
        xml_multipart: see :class:`Emulator`.
        s3_port: port of the S3 face (``0`` = ephemeral, ``None`` = none);
            see :attr:`Emulator.s3_endpoint`.
        s3_region: the region the S3 face reports for a bucket created
            without one (``HeadBucket``'s ``x-amz-bucket-region``,
            ``GetBucketLocation``), as ``--s3-region`` of
            ``python -m aioflux.testing``.
        loop_factory: builds the thread's loop (uvloop when available).

    Yields:
        The started emulator.

    Raises:
        OSError: the port cannot be bound.
        InvalidArgument: ``store`` is not the emulator's ``Store`` (a
            ``MemoryStore`` is a client-side store, served by no emulator).
    """
    emu = Emulator(profile, faults, host=host, port=port, store=store,
                   xml_multipart=xml_multipart, s3_port=s3_port, s3_region=s3_region)
    loop = loop_factory()
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(emu.start())
        except BaseException as exc:  # handed to the calling thread below
            failure.append(exc)
            started.set()
            loop.close()
            return
        started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(emu.stop())
            _cancel_left(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=run, name=f"aioflux-emulator-{port}", daemon=True)
    thread.start()
    started.wait()
    if failure:
        thread.join()
        raise failure[0]
    try:
        yield emu
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
