"""A GCS resumable streaming upload cancelled part of the way: all or nothing.

The writer's upload goes through a JSON resumable session where the server
has no XML multipart upload or the write has a precondition (here:
``if_generation_match=0``). Its parts go one at a time, in order, each
waiting for its turn and then for one of the client's permits. The client
here has one permit, which a read the emulator holds back keeps for as long
as a test wants: what waits for a permit waits until the test lets it go,
not for some time to pass.

Each test runs its own emulator (its profile never leaks) and checks what
is left: sessions still open, permits, objects, and whether a final chunk
was ever sent.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable

import pytest

from aioflux import AsyncClient, ClientConfig, StorageError, WriterOptions
from aioflux._core.integrity.crc import Crc32c, crc32c
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux.gcs._upload import GcsUpload
from aioflux.testing import Emulator, EmulatorProfile
from tests.conftest import FAST_RETRY

BUCKET = "resumable"
PART = 256 * 1024  # the session's granularity (the writer's least part is 5 MiB)
# The held-back read keeps the permit this long at most; nothing waits it
# out (it is cancelled, and the emulator drops its handler at shutdown).
HELD = 60.0
# What the tests wait for is an event; this only bounds how long before
# it counts as never coming (a hang).
HANG = 30.0


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    async with Emulator() as emulator:
        emulator.create_bucket(BUCKET)
        emulator.store.put(BUCKET, "hog", b"h" * 1000)
        yield emulator


@pytest.fixture
async def client(emu: Emulator) -> AsyncIterator[AsyncClient]:
    config = ClientConfig(max_concurrency=1, retry=FAST_RETRY)
    async with AsyncClient(config, endpoint=emu.endpoint) as c:
        yield c


async def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def _turns(n: int = 10) -> None:
    """Let the loop run what is ready, ``n`` times over (no time passes)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def _hog(emu: Emulator, client: AsyncClient) -> asyncio.Task[bytes]:
    """A read holding the client's only permit until it is cancelled."""
    emu.profile = EmulatorProfile(tail_fraction=1.0, tail_delay=(HELD, HELD), tail_seed=1)
    before = emu.stats["get_media"]
    hog = asyncio.ensure_future(client.read(BUCKET, "hog"))
    await _until(lambda: emu.stats["get_media"] > before)
    emu.profile = EmulatorProfile()  # the next GETs answer at once
    return hog


async def _release(hog: asyncio.Task[bytes]) -> None:
    hog.cancel()
    await asyncio.gather(hog, return_exceptions=True)


def _waiting_for_a_permit(client: AsyncClient) -> int:
    return len(client.transport._current().semaphore._waiters or ())


def _permits(client: AsyncClient) -> int:
    return client.transport._current().semaphore._value


def _open_sessions(emu: Emulator) -> int:
    """Resumable sessions neither finished nor cancelled."""
    return sum(s.result is None for s in emu.store.sessions.values())


def _published(emu: Emulator) -> bool:
    return "obj" in emu.store.bucket(BUCKET).objects


def _crc(data: bytes) -> Crc32c:
    running = Crc32c()
    running.append(crc32c(data), len(data))
    return running


async def _opened(client: AsyncClient, emu: Emulator, data: bytes) -> GcsUpload:
    """An upload with its session open and its first part stored."""
    up = client.start_upload(BUCKET, "obj", part_size=PART, if_generation_match=0)
    await up.put(1, memoryview(data)[:PART])
    assert up.mode == "resumable" and _open_sessions(emu) == 1
    return up


async def test_an_abort_cancelled_twice_while_waiting_for_a_permit_cancels_the_session(
        emu: Emulator, client: AsyncClient) -> None:
    # The abort's DELETE waits for the permit; the abort is cancelled, and
    # cancelled again. The session's URL was dropped as the cancel began:
    # the abort returned at once and nothing could cancel the session any
    # more (GCS keeps such a session, and its bytes, for a week).
    up = await _opened(client, emu, os.urandom(2 * PART))
    hog = await _hog(emu, client)
    aborting = asyncio.ensure_future(up.abort())
    await _until(lambda: _waiting_for_a_permit(client) == 1)  # the DELETE
    aborting.cancel()
    await _turns()
    aborting.cancel()
    await _turns()
    assert not aborting.done()  # still waiting for its DELETE
    await _release(hog)
    with pytest.raises(asyncio.CancelledError):
        await aborting
    assert _open_sessions(emu) == 0 and emu.stats["resumable_cancel"] == 1
    assert _permits(client) == 1 and not _published(emu)
    await up.abort()  # safe to call again: nothing left to do
    assert emu.stats["resumable_cancel"] == 1


async def test_a_writer_cancelled_twice_with_a_part_waiting_for_a_permit_leaves_nothing(
        emu: Emulator, client: AsyncClient) -> None:
    # The writer's second part waits for the permit when the task writing
    # is cancelled: the writer aborts (the part is cancelled, the session's
    # DELETE waits for the permit in its turn) and is cancelled again.
    part = 5 * 1024 * 1024
    # A full part leaves when the byte after it comes.
    data = os.urandom(2 * part + 1)
    hog: asyncio.Task[bytes] | None = None

    async def save() -> None:
        nonlocal hog
        async with AsyncObjectWriter(client, BUCKET, "obj", if_generation_match=0,
                                     options=WriterOptions(part_size=part,
                                                           max_in_flight=2)) as writer:
            await writer.write(data[:part + 1])
            await _until(lambda: emu.stats["resumable_put"] == 1)  # part 1 stored
            hog = await _hog(emu, client)
            await writer.write(data[part + 1:])  # part 2, waiting for the permit
            await asyncio.Event().wait()

    saving = asyncio.ensure_future(save())
    await _until(lambda: hog is not None and _waiting_for_a_permit(client) == 1)
    assert _open_sessions(emu) == 1
    saving.cancel()  # part 2 is cancelled; the DELETE takes its place
    await _turns()
    await _until(lambda: _waiting_for_a_permit(client) == 1)
    saving.cancel()
    await _turns()
    assert hog is not None
    await _release(hog)
    with pytest.raises(asyncio.CancelledError):
        await saving
    assert _open_sessions(emu) == 0 and emu.stats["resumable_cancel"] == 1
    assert emu.stats["resumable_put"] == 1  # part 2 never went
    assert _permits(client) == 1 and not _published(emu)


async def test_a_part_cancelled_waiting_for_a_permit_makes_finish_publish_nothing(
        emu: Emulator, client: AsyncClient) -> None:
    # Part 2 is cancelled while it waits for the permit (its turn has
    # come). finish() used to send the final chunk anyway: a server that
    # does not check the crc32c sent with it (the emulator did not)
    # published parts 1 and 3 as the object, deleted only afterwards as a
    # ChecksumMismatch. No final chunk may go.
    data = os.urandom(3 * PART)
    up = await _opened(client, emu, data)
    hog = await _hog(emu, client)
    put = asyncio.ensure_future(up.put(2, memoryview(data)[PART:2 * PART]))
    await _until(lambda: _waiting_for_a_permit(client) == 1)
    put.cancel()
    with pytest.raises(asyncio.CancelledError):
        await put
    await _release(hog)
    sent = emu.stats["resumable_put"]
    with pytest.raises(StorageError, match="failed or was cancelled before it was sent; "
                                           "nothing is published"):
        await up.finish(3, memoryview(data)[2 * PART:], _crc(data))
    assert emu.stats["resumable_put"] == sent  # no final chunk went
    assert emu.stats["delete"] == 0 and not _published(emu)
    await up.abort()
    assert _open_sessions(emu) == 0 and _permits(client) == 1


async def test_a_part_cancelled_waiting_for_its_turn_lets_the_rest_go(
        emu: Emulator, client: AsyncClient) -> None:
    # Part 3 is cancelled while part 2 holds the turn (waiting for the
    # permit): the turn never passed part 3, so part 4 and finish() waited
    # for it forever.
    data = os.urandom(5 * PART)
    up = await _opened(client, emu, data)
    hog = await _hog(emu, client)
    second = asyncio.ensure_future(up.put(2, memoryview(data)[PART:2 * PART]))
    await _until(lambda: _waiting_for_a_permit(client) == 1)
    third = asyncio.ensure_future(up.put(3, memoryview(data)[2 * PART:3 * PART]))
    await _turns()
    third.cancel()
    with pytest.raises(asyncio.CancelledError):
        await third
    await _release(hog)
    await second  # sent: it had its turn before part 3 was lost
    assert emu.stats["resumable_put"] == 2
    # Part 4 is not sent after the gap, and needs no permit or server to say so.
    fourth = asyncio.ensure_future(up.put(4, memoryview(data)[3 * PART:4 * PART]))
    await _turns()
    assert fourth.done(), "part 4 waits for a turn that never comes"
    await fourth
    finishing = asyncio.ensure_future(up.finish(5, memoryview(data)[4 * PART:], _crc(data)))
    await _turns()
    assert finishing.done(), "finish() waits for a turn that never comes"
    with pytest.raises(StorageError, match="nothing is published"):
        await finishing
    assert emu.stats["resumable_put"] == 2 and not _published(emu)
    await up.abort()
    assert _open_sessions(emu) == 0 and _permits(client) == 1
