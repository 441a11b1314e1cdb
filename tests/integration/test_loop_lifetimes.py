"""A client or store kept across several ``asyncio.run`` calls (a module-level
client in a script or notebook) opens one session per loop; each is closed
when its loop's run ends, not left to the garbage collector's "Unclosed
client session" warning with its sockets open."""

from __future__ import annotations

import asyncio
import threading

from aioflux import AsyncClient, ClientConfig
from aioflux.s3 import S3Store
from aioflux.testing import Emulator

from ..conftest import FAST_RETRY


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
