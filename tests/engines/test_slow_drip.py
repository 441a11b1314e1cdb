"""Servers that are never silent for long, but move a byte now and then.

The read-stall timeout catches a silent socket; these servers send (or
read) a byte every 20-50 ms, far inside it, so without the pace rule
(aioflux._net.slow_drip: 16 KiB a window) a listing, a read or an upload would
hang for days. The window is lowered to 0.3 s here; every call must fail
as a TransportError that says it was too slow, after max_attempts
attempts, the few bytes moved counting as no progress. No server here
ever ends on its own, and every window but the one under test is an hour:
only the rule under test ends a call before the hang guard.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from aioflux import AsyncClient, ClientConfig, RetryPolicy, Timeouts, TransportError
from aioflux._core.records.types import PartInfo
from aioflux._net import slow_drip
from aioflux.s3 import S3Store
from aioflux.s3._multipart import Multipart
from tests.servers.raw_server import dripping, serving
from tests.servers.web_server import Served, Server

WINDOW = 0.3
NEVER = 3600.0  # a window that does not close during a test
RETRY = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)
# The old code waited forever: this turns that into a failure. Far beyond
# the few windows a call takes, however loaded the machine.
HANG = 30.0


@pytest.fixture(autouse=True)
def _short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slow_drip, "WINDOW", WINDOW)


@pytest.fixture
def _read_stall_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pace rule's fixed window closes never: a call that ends was cut
    by a window of the client's read_stall."""
    monkeypatch.setattr(slow_drip, "WINDOW", NEVER)


async def _drip_body(request: web.Request, served: Served) -> web.StreamResponse:
    """A 200 with a JSON or XML body one byte every 20 ms (never ending)."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    try:
        while True:
            await resp.write(b" ")
            served.sent += 1
            await asyncio.sleep(0.02)
    except (ConnectionError, asyncio.CancelledError):
        pass
    return resp


def _stores(endpoint: str, read_stall: float = 60) -> tuple[AsyncClient, S3Store]:
    config = ClientConfig(retry=RETRY, timeouts=Timeouts(read_stall=read_stall))
    return (AsyncClient(config, endpoint=endpoint, credentials="tok"),
            S3Store(config, endpoint=endpoint, region="us-east-1", addressing="path"))


@pytest.mark.parametrize("backend", ["gcs", "s3"])
async def test_a_dripping_metadata_answer_fails_as_too_slow(backend: str) -> None:
    async with Server(_drip_body) as (endpoint, served):
        gcs, s3 = _stores(endpoint)
        store = gcs if backend == "gcs" else s3
        async with gcs, s3:
            # A GCS stat reads a JSON answer, an S3 listing an XML page.
            call = (store.stat("bkt", "obj") if backend == "gcs"
                    else s3.list("bkt", "pre/").__anext__())
            # Cut by the 0.3 s window (read_stall is a minute), however late
            # a loaded machine checked it.
            slow = (r"too slow: only \d+ body bytes in [\d.]+ s "
                    r"\(a transfer must move 16 KiB each 0\.3 s\)")
            with pytest.raises(TransportError, match=slow):
                await asyncio.wait_for(call, HANG)
    assert len(served.paths) == 2  # max_attempts: the drip moved no progress


@pytest.mark.usefixtures("_read_stall_only")
async def test_a_dripping_media_read_gives_up_at_max_attempts() -> None:
    # The lean read path: each attempt is cut at the end of a window (the
    # read resumes after what arrived, but a drip's bytes are no progress).
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
    async with serving(dripping(head, 0.02)) as endpoint:
        # The media pool's window is the client's read_stall.
        gcs, s3 = _stores(endpoint, read_stall=WINDOW)
        async with gcs, s3:
            with pytest.raises(TransportError, match="too slow: less than 16 KiB") as info:
                await asyncio.wait_for(gcs.read("bkt", "obj"), HANG)
            assert "gave up after 2 attempts" in str(info.value)


@pytest.mark.usefixtures("_read_stall_only")
@pytest.mark.parametrize("length", [True, False], ids=["length", "chunked"])
async def test_a_dripping_read_through_aiohttp_gives_up_too(length: bool) -> None:
    # Chunked bodies (and lean_reads=False) go through aiohttp, not the lean pool.
    async def drip(request: web.Request, served: Served) -> web.StreamResponse:
        resp = web.StreamResponse()
        if length:
            resp.content_length = 100_000
        await resp.prepare(request)
        try:
            while True:
                await resp.write(b"x")
                await asyncio.sleep(0.02)
        except (ConnectionError, asyncio.CancelledError):
            pass
        return resp

    async with Server(drip) as (endpoint, served):
        config = ClientConfig(retry=RETRY, timeouts=Timeouts(read_stall=WINDOW),
                              lean_reads=False)
        async with AsyncClient(config, endpoint=endpoint, credentials="tok") as gcs:
            with pytest.raises(TransportError, match="too slow"):
                await asyncio.wait_for(gcs.read("bkt", "obj"), HANG)
    assert len(served.paths) == 2


@pytest.mark.usefixtures("_read_stall_only")
async def test_a_response_head_sent_a_byte_at_a_time_fails() -> None:
    # aiohttp's read timeout restarts on every byte: a head of 3,000 bytes
    # at one per 20 ms is never silent, and whole only after a minute,
    # past the hang guard; it must be whole one window after its first byte.
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"p" * 3000 + \
        b"\r\nContent-Length: 2\r\n\r\n"
    async with serving(dripping(head, 0.02, drip_head=True)) as endpoint:
        gcs, s3 = _stores(endpoint, read_stall=WINDOW)
        async with gcs, s3:
            with pytest.raises(TransportError,
                               match=r"too slow: the response head was not whole 0\.3 s after"):
                await asyncio.wait_for(gcs.stat("bkt", "obj"), HANG)


@pytest.mark.usefixtures("_read_stall_only")
async def test_a_server_reading_an_upload_a_byte_at_a_time_fails_it() -> None:
    # No read timeout runs while a request body is sent: 16 KiB of it must
    # leave each read_stall window. 32 MiB outlasts the loopback buffers.
    requests: list[bytes] = []

    async def sip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            requests.append(await reader.readuntil(b"\r\n\r\n"))
            while await reader.read(1024):
                await asyncio.sleep(0.05)
        except (ConnectionError, asyncio.CancelledError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async with serving(sip) as endpoint:
        _, s3 = _stores(endpoint, read_stall=WINDOW)
        async with s3:
            with pytest.raises(TransportError, match="too slow: the server took less than 16 KiB "
                                                     r"of the request body in 0\.3 s"):
                await asyncio.wait_for(s3.write("bkt", "obj", b"x" * (32 << 20)), HANG)
    assert len(requests) == 2


async def test_a_completion_kept_alive_with_whitespace_is_waited_for() -> None:
    # S3 answers CompleteMultipartUpload with 200 at once and keeps it alive
    # with whitespace while it assembles the parts: a legitimate drip, longer
    # here than several pace windows, that must not be cut.
    done = b'<CompleteMultipartUploadResult><ETag>"e-2"</ETag></CompleteMultipartUploadResult>'

    async def assembling(request: web.Request, served: Served) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/xml"})
        await resp.prepare(request)
        for _ in range(60):  # 1.2 s: four 0.3 s windows
            await resp.write(b" ")
            await asyncio.sleep(0.02)
        await resp.write(done)
        return resp

    async with Server(assembling) as (endpoint, served):
        _, s3 = _stores(endpoint)
        async with s3:
            multipart = Multipart(s3)
            etag, _ = await multipart.complete("bkt", "obj", "up", [PartInfo(1, '"p"', 5)], 0)
    assert etag == '"e-2"'
    assert len(served.paths) == 1


@pytest.mark.usefixtures("_read_stall_only")
@pytest.mark.parametrize("backend", ["gcs", "s3"])
async def test_a_server_that_never_reads_an_upload_fails_it_within_read_stall(
        backend: str) -> None:
    # The body's pace window is the client's read_stall, not a fixed window
    # (an hour here): once the kernel's buffers are full nothing leaves, and
    # the attempt is cut.
    async def deaf(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()

    async with serving(deaf) as endpoint:
        gcs, s3 = _stores(endpoint, read_stall=0.5)
        async with gcs, s3:
            with pytest.raises(TransportError,
                               match=r"less than 16 KiB of the request body in 0\.5 s"):
                if backend == "gcs":
                    await asyncio.wait_for(gcs.write("bkt", "obj", b"x" * (32 << 20),
                                                     resumable=False), HANG)
                else:
                    await asyncio.wait_for(s3.write("bkt", "obj", b"x" * (32 << 20)), HANG)
