"""A client or store kept across several ``asyncio.run`` calls (a module-level
client in a script or notebook) opens one session per loop; each is closed
when its loop's run ends, not left to the garbage collector's "Unclosed
client session" warning with its sockets open."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
import weakref

from aioflux import AsyncClient, ClientConfig
from aioflux.s3 import S3Store
from aioflux.testing import Emulator
from tests.conftest import FAST_RETRY


def _session(transport: object) -> object:
    state = transport._state  # type: ignore[attr-defined]
    assert state is not None
    return state.session


def test_a_client_used_across_asyncio_runs_closes_each_loops_session(
        emulator: Emulator, bucket: str) -> None:
    client = AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=emulator.endpoint)
    sessions = []

    async def round_trip(data: bytes) -> bytes:
        await client.write(bucket, "k", data)
        sessions.append(_session(client.transport))
        return await client.read(bucket, "k")

    assert asyncio.run(round_trip(b"one")) == b"one"
    assert asyncio.run(round_trip(b"two")) == b"two"
    first, second = sessions
    assert first is not second
    assert first.closed and second.closed  # type: ignore[attr-defined]
    asyncio.run(client.aclose())


def test_an_s3_store_used_across_asyncio_runs_closes_each_loops_session(
        emulator: Emulator, bucket: str) -> None:
    store = S3Store(ClientConfig(retry=FAST_RETRY), endpoint=emulator.s3_endpoint,
                    region="us-east-1")
    sessions = []

    async def round_trip() -> None:
        await store.write(bucket, "s", b"data")
        sessions.append(_session(store.transport))

    asyncio.run(round_trip())
    asyncio.run(round_trip())
    assert all(session.closed for session in sessions)  # type: ignore[attr-defined]
    asyncio.run(store.aclose())


def test_aclose_from_another_loop_closes_the_session_on_its_own_loop(
        emulator: Emulator, bucket: str) -> None:
    # The session lives on a loop in another thread; closing the client from
    # this one must still close it (on its own loop, where it can be).
    client = AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=emulator.endpoint)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(client.write(bucket, "t", b"x"), loop).result(10)
        session = _session(client.transport)
        asyncio.run(client.aclose())

        async def closed() -> bool:
            for _ in range(200):
                if session.closed:  # type: ignore[attr-defined]
                    return True
                await asyncio.sleep(0.01)
            return False

        assert asyncio.run_coroutine_threadsafe(closed(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_a_client_used_from_two_live_loops_keeps_one_session_on_each(
        emulator: Emulator, bucket: str) -> None:
    # An asynchronous fsspec filesystem runs its coroutines on the caller's
    # loop and its sync files on aioflux's portal loop: each switch made a
    # new session (new connections), and the one it replaced was left open.
    from aioflux._core.concurrency.portal import get_portal

    client = AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=emulator.endpoint)
    portal = get_portal()

    async def on_portal() -> object:
        await client.read(bucket, "k")
        return _session(client.transport)

    async def alternate() -> list[object]:
        await client.write(bucket, "k", b"data")
        seen = []
        for _ in range(3):
            await client.read(bucket, "k")
            seen.append(_session(client.transport))
            seen.append(await asyncio.wrap_future(portal.submit(on_portal())))
        mine = seen[-2]
        assert not mine.closed  # type: ignore[attr-defined]
        await client.aclose()
        assert mine.closed  # type: ignore[attr-defined]
        return seen

    seen = asyncio.run(alternate())
    assert len({id(s) for s in seen[0::2]}) == 1  # the caller's loop: one session
    assert len({id(s) for s in seen[1::2]}) == 1  # the portal's: one session
    theirs = seen[1]
    portal.call(asyncio.sleep(0))  # the close handed to the portal's loop has run
    assert theirs.closed  # type: ignore[attr-defined]


def test_a_client_dropped_unclosed_has_its_session_closed_on_its_loop(
        emulator: Emulator, bucket: str) -> None:
    # Dropped, the client's loop state and the generator that closes it are
    # a reference cycle. The collector must not finalize the session before
    # the generator's close runs on the loop: aiohttp's "Unclosed client
    # session" (or "Unclosed connector") would fail whatever test is running
    # when the collector comes by.
    from aioflux._core.concurrency.portal import get_portal

    portal = get_portal()

    async def use() -> weakref.ref[object]:
        client = AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=emulator.endpoint)
        await client.write(bucket, "dropped", b"x")
        return weakref.ref(_session(client.transport))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = portal.call(use())
        assert session() is not None
        gc.collect()

        async def closed() -> bool:
            for _ in range(1000):  # by turns of the loop, not by time
                found = session()
                if found is None or found.closed:  # type: ignore[attr-defined]
                    return True
                await asyncio.sleep(0)
            return False

        assert portal.call(closed())
        gc.collect()
    unclosed = [str(w.message) for w in caught if "Unclosed" in str(w.message)]
    assert unclosed == []
