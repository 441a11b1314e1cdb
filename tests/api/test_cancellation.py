"""Cancellation, timeouts and closing with work in flight, as a user meets them.

A client closed while requests are under way ends each of them promptly
with a typed error; a cancelled or interrupted call leaves the client
usable, its next answers exact.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from aioflux import (
    AsyncClient,
    Client,
    ClientConfig,
    InvalidArgument,
    RetryPolicy,
    Timeouts,
    TransportError,
    WriterOptions,
    alist_files,
)
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux._engines.compose import COMPOSED_PREFIX, fetch_composed, leftover_composites
from aioflux._engines.listing import list_objects_parallel
from aioflux._engines.writer import ObjectWriter
from aioflux.testing import Emulator, EmulatorProfile
from tests.servers.raw_server import RawServer

BODY = os.urandom(200_000)
HASH = f"crc32c={encode_crc32c(crc32c(BODY))}"
FAST = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.01)
MiB = 1 << 20


def _loop_errors() -> list[dict[str, object]]:
    """What the running loop's exception handler is given from now on
    ("Task exception was never retrieved" and the like)."""
    reported: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
    return reported


def _stalling_server() -> tuple[RawServer, ClientConfig]:
    """A server that never answers, and a config that gives up on it fast."""
    config = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.01),
                          timeouts=Timeouts(read_stall=0.2))
    return RawServer(lambda conn, i: (b"", "stall")), config


def _head_and_some_body() -> tuple[bytes, str]:
    # A head, a fifth of the body, then silence: the read is mid-body.
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\nx-goog-hash: {HASH}\r\n\r\n"
    return head.encode() + BODY[:40_000], "stall"


async def _until(check: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("lean", [True, False])
async def test_closing_the_client_ends_a_read_mid_body(lean: bool) -> None:
    # aiohttp's session.close() detaches a response whose body is still
    # arriving from its socket without telling the reader: the read waited
    # forever (its read timeout was dropped with the connection). A lean
    # read ran on until read_stall.
    server = RawServer(lambda conn, i: _head_and_some_body())
    config = ClientConfig(lean_reads=lean, retry=FAST, timeouts=Timeouts(read_stall=60))
    async with server as base:
        client = AsyncClient(config, endpoint=base)
        task = asyncio.create_task(client.read("bkt", "obj"))
        await _until(lambda: server.connections == 1)
        await asyncio.sleep(0.1)  # the head and the first bytes are in
        await client.aclose()
        with pytest.raises(InvalidArgument, match=r"read gs://bkt/obj: the client is closed"):
            await asyncio.wait_for(task, 5)
        assert server.connections == 1  # no attempt after the close


async def test_closing_the_client_ends_a_listing_page_mid_body() -> None:
    page = b'{"items": [' + b" " * 100_000
    head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(page) + 10}\r\n\r\n").encode()
    server = RawServer(lambda conn, i: (head + page, "stall"))
    async with server as base:
        client = AsyncClient(ClientConfig(retry=FAST), endpoint=base)

        async def listing() -> list[object]:
            return [info async for info in client.list_objects("bkt")]

        task = asyncio.create_task(listing())
        await _until(lambda: server.connections == 1)
        await asyncio.sleep(0.1)
        await client.aclose()
        with pytest.raises(InvalidArgument, match=r"gs://bkt.*the client is closed"):
            await asyncio.wait_for(task, 5)


@pytest.mark.parametrize("lean", [True, False])
async def test_calls_waiting_for_a_permit_when_the_client_closes_fail_typed(lean: bool) -> None:
    # One permit: the first read holds it (mid-body), the others wait for it.
    # They used to get aiohttp's bare RuntimeError("Session is closed"), or
    # (lean reads) open a connection of a closed client.
    server = RawServer(lambda conn, i: _head_and_some_body())
    config = ClientConfig(max_concurrency=1, lean_reads=lean, retry=FAST,
                          timeouts=Timeouts(read_stall=60))
    async with server as base:
        client = AsyncClient(config, endpoint=base)
        first = asyncio.create_task(client.read("bkt", "obj"))
        await _until(lambda: server.connections == 1)
        waiting = [asyncio.create_task(client.read("bkt", f"o{i}")) for i in range(2)]
        waiting.append(asyncio.create_task(client.stat("bkt", "o")))
        waiting.append(asyncio.create_task(client.write("bkt", "w", b"data")))
        await asyncio.sleep(0.1)
        await client.aclose()
        outcomes = await asyncio.wait_for(
            asyncio.gather(first, *waiting, return_exceptions=True), 5)
        for outcome in outcomes:
            assert isinstance(outcome, InvalidArgument), repr(outcome)
            assert "the client is closed" in str(outcome)
        assert server.connections == 1


async def test_closing_only_the_connections_lets_waiting_calls_reopen_them() -> None:
    # The portal at shutdown and datasets between uses close the connections
    # only: a call that was waiting for a permit then goes out on new ones.
    answers = iter([_head_and_some_body()])

    def script(conn: int, i: int) -> bytes | tuple[bytes, str]:
        head = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\n"
                f"x-goog-hash: {HASH}\r\n\r\n").encode()
        return next(answers, head + BODY)

    server = RawServer(script)
    config = ClientConfig(max_concurrency=1, lean_reads=False, retry=FAST,
                          timeouts=Timeouts(read_stall=60))
    async with server as base, AsyncClient(config, endpoint=base) as client:
        first = asyncio.create_task(client.read("bkt", "obj"))
        await _until(lambda: server.connections == 1)
        second = asyncio.create_task(client.read("bkt", "obj"))
        await asyncio.sleep(0.1)
        await client.transport.aclose()  # no owner: connections only
        assert await asyncio.wait_for(second, 5) == BODY
        assert await asyncio.wait_for(first, 5) == BODY  # retried on a new connection
        assert isinstance(client, AsyncClient) and not client.transport.closed



async def test_a_cancelled_listing_iteration_leaves_no_task_behind() -> None:
    # iter_objects waited for a page in a task of its own (queue.get()) that a
    # cancellation left pending forever: asyncio logged "Task was destroyed
    # but it is pending!" when it was collected.
    server = RawServer(lambda conn, i: (b"", "stall"))  # a page that never comes
    async with server as base, AsyncClient(ClientConfig(retry=FAST), endpoint=base) as client:

        async def consume() -> None:
            async for _ in alist_files("gs://bkt/p/", client=client):
                pass

        task = asyncio.create_task(consume())
        await _until(lambda: server.connections >= 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


@pytest.fixture
def slow(emulator: Emulator) -> Iterator[Emulator]:
    """The emulator at 20 MB/s per body (a 5 MiB part takes 0.26 s)."""
    emulator.profile = EmulatorProfile(bandwidth=20e6)
    yield emulator
    emulator.profile = EmulatorProfile()


async def test_closing_an_async_writer_after_a_write_timed_out_publishes_nothing(
        slow: Emulator, bucket: str) -> None:
    # The write took its first parts' bytes, then timed out waiting for a
    # part slot: close() used to publish the object without the rest, a
    # truncated object whose crc32c checked out.
    data = os.urandom(20 * MiB)
    async with AsyncClient(ClientConfig(retry=FAST), endpoint=slow.endpoint) as client:
        writer = AsyncObjectWriter(client, bucket, "obj",
                                   options=WriterOptions(part_size=5 * MiB, max_in_flight=1))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(writer.write(data), 0.3)
        with pytest.raises(InvalidArgument, match=r"interrupted after \d+ of its 20971520 "
                                                  r"bytes; the upload is aborted"):
            await writer.close()
        assert not await client.exists(bucket, "obj")
        assert [u for u in slow.store.uploads.values() if u.bucket == bucket] == []
        with pytest.raises(InvalidArgument):
            await writer.write(b"more")
        # The client is fine: the next write and read are exact.
        await client.write(bucket, "after", data[:1000])
        assert await client.read(bucket, "after") == data[:1000]


def test_closing_a_writer_after_ctrl_c_in_write_publishes_nothing(
        slow: Emulator, bucket: str) -> None:
    # As above, for the blocking writer (torch.save's): an exception a signal
    # handler raises while write() waits for a part slot.
    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Interrupted()

    data = os.urandom(20 * MiB)
    previous = signal.signal(signal.SIGUSR1, on_signal)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        with Client(ClientConfig(retry=FAST), endpoint=slow.endpoint) as client:
            writer = ObjectWriter(client.aio, bucket, "obj",
                                  options=WriterOptions(part_size=5 * MiB, max_in_flight=1))
            timer.start()
            with pytest.raises(_Interrupted):
                writer.write(data)
            timer.join()
            with pytest.raises(InvalidArgument, match=r"interrupted after \d+ of its 20971520"):
                writer.close()
            assert not client.exists(bucket, "obj")
            assert [u for u in slow.store.uploads.values() if u.bucket == bucket] == []
            client.write(bucket, "after", data[:1000])
            assert client.read(bucket, "after") == data[:1000]
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)


class _Interrupted(Exception):
    pass


async def test_a_region_lookup_whose_caller_was_cancelled_leaves_no_stray_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The first request to a bucket starts the lookup of its region, which
    # every concurrent request waits for. When that request was cancelled
    # and the lookup then failed, nobody retrieved its error (asyncio logged
    # "Task exception was never retrieved"), and the next request was
    # handed that old error instead of asking again.
    from aioflux.s3 import S3Store

    monkeypatch.delenv("AWS_DEFAULT_REGION")  # the bucket's region is looked up
    reported = _loop_errors()
    server, config = _stalling_server()
    async with server as base:
        store = S3Store(config, endpoint=base)
        task = asyncio.create_task(store.read("bucket", "key"))
        await _until(lambda: len(server.requests) == 1)
        finding = store.endpoints._finding["bucket"]  # the lookup it started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _until(lambda: len(server.requests) == 2)  # its retry
        # Until the lookup has failed (its retry's read stall), not a guess of
        # how long that takes: asyncio.wait's callback on the lookup comes
        # after the store's own (added first), so its failure is settled.
        done, _ = await asyncio.wait([finding], timeout=10)
        assert done and isinstance(finding.exception(), TransportError), finding
        with pytest.raises(TransportError, match="find region"):
            await store.read("bucket", "key")
        assert len(server.requests) == 4  # asked again, not handed the old error
        await store.aclose()
        del store
        gc.collect()
        await asyncio.sleep(0)
    assert reported == []


@pytest.mark.parametrize("scheme", ["gs", "s3"])
async def test_an_aborted_writer_whose_upload_failed_to_start_leaves_no_stray_error(
        scheme: str) -> None:
    # The writer aborts (its part cancelled) while the multipart upload is
    # still being created; that creation then fails. abort() waited for it
    # without retrieving its error: asyncio logged "Task exception was
    # never retrieved" when the upload was collected.
    from aioflux.s3 import S3Store

    reported = _loop_errors()
    server, config = _stalling_server()
    async with server as base:
        store = (AsyncClient(config, endpoint=base) if scheme == "gs"
                 else S3Store(config, endpoint=base, region="us-east-1"))
        async with store:
            writer = AsyncObjectWriter(store, "bkt", "obj",
                                       options=WriterOptions(part_size=5 * MiB, max_in_flight=2))
            # The first part (sent once a byte after it comes) starts the upload.
            await writer.write(bytes(5 * MiB + 1))
            await _until(lambda: len(server.requests) == 1)
            await writer.abort()
            assert len(server.requests) == 2  # the creation, retried, failed: nothing to abort
            del writer
            gc.collect()
            await asyncio.sleep(0)
    assert reported == []


async def test_a_composed_read_cancelled_while_deleting_its_composite_waits_for_it(
        client: AsyncClient, emulator: Emulator, bucket: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Leaving a download stream early cancels its composed batches. One
    # cancelled while deleting its composite gave up waiting for the delete
    # (shielded, it went on in the background): the composite was still
    # listed after the stream was closed (test_download's early-break test
    # failed now and then on that).
    for i in range(5):
        emulator.store.put(bucket, f"d/{i:05d}", os.urandom(300))
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    deleting = asyncio.Event()
    delete = client.delete

    async def slow_delete(bucket: str, name: str, **kwargs: Any) -> None:
        deleting.set()
        await asyncio.sleep(0.3)
        await delete(bucket, name, **kwargs)

    monkeypatch.setattr(client, "delete", slow_delete)
    task = asyncio.create_task(fetch_composed(client, objs))
    await asyncio.wait_for(deleting.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [o.name async for o in client.list_objects(bucket, COMPOSED_PREFIX)] == []
    assert leftover_composites() == []


async def test_an_async_writer_cancelled_while_its_parts_unwind_still_aborts() -> None:
    # abort() cancels the parts in flight and waits for them before it
    # aborts the upload: a second cancellation landing in that wait (a
    # timeout, asyncio.run's shutdown) skipped the abort, and the upload
    # stayed open (stored, and billed, until `aioflux clean`).
    from aioflux import WriterOptions
    from aioflux._engines.async_writer import AsyncObjectWriter
    from aioflux.testing import MemoryStore

    store = MemoryStore(buckets=["bkt"])
    writer = AsyncObjectWriter(store, "bkt", "obj",
                               options=WriterOptions(part_size=5 * 1024 * 1024))
    session = writer._session
    unwinding, release = asyncio.Event(), asyncio.Event()
    aborted: list[str] = []

    async def part_that_unwinds_slowly(*args: object) -> None:
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            unwinding.set()
            await release.wait()
            raise

    real_abort = session.abort

    async def counted_abort() -> None:
        aborted.append("abort")
        await real_abort()

    session.put = part_that_unwinds_slowly  # type: ignore[method-assign]
    session.abort = counted_abort  # type: ignore[method-assign]
    await writer.write(b"x" * (5 * 1024 * 1024 + 1))  # one part goes up
    aborting = asyncio.create_task(writer.abort())
    await unwinding.wait()
    aborting.cancel()  # while abort() waits for the part to unwind
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await aborting
    assert aborted == ["abort"]
