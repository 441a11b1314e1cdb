"""A composed batch cancelled while its compose is in flight leaves nothing.

A cancelled request is not an unsent one: the server has the compose and
may apply it after the client stopped waiting. The call deleted at once, so
a compose the server applied after that delete left its composite in the
bucket for good (unregistered: the delete had succeeded, finding nothing).
Now the call waits for the compose's answer, then deletes.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from aioflux import AsyncClient, ObjectInfo
from aioflux._engines.compose import COMPOSED_PREFIX, fetch_composed, leftover_composites
from aioflux._engines.listing import list_objects_parallel
from aioflux.testing import Emulator

# Turns of the loop a cancelled call takes to reach its delete: no I/O in
# between, a few suffice; the pass of the fixed call does not depend on it.
_UNWIND_TURNS = 50


async def _loop_turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_compose_cancelled_in_flight_is_deleted_after_it_lands(
        client: AsyncClient, emulator: Emulator, bucket: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    data = {f"d/{i:05d}": os.urandom(300) for i in range(5)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    objs = await list_objects_parallel(client, bucket, "d/", sort=True)
    compose, delete = client.compose, client.delete
    composing, release, landed = asyncio.Event(), asyncio.Event(), asyncio.Event()
    deletes: list[str] = []

    async def server_side(*args: Any, **kwargs: Any) -> ObjectInfo:
        # The server holds the request and applies it when released,
        # whether or not the client still waits for the answer.
        await release.wait()
        try:
            return await compose(*args, **kwargs)
        finally:
            landed.set()

    applied: list[asyncio.Future[ObjectInfo]] = []

    async def slow_compose(*args: Any, **kwargs: Any) -> ObjectInfo:
        composing.set()
        applied.append(asyncio.ensure_future(server_side(*args, **kwargs)))
        return await asyncio.shield(applied[0])

    async def counted_delete(bucket: str, name: str, **kwargs: Any) -> None:
        deletes.append(name)
        await delete(bucket, name, **kwargs)
        deleted.set()

    deleted = asyncio.Event()
    monkeypatch.setattr(client, "compose", slow_compose)
    monkeypatch.setattr(client, "delete", counted_delete)
    task = asyncio.create_task(fetch_composed(client, objs))
    await composing.wait()
    task.cancel()
    await _loop_turns(_UNWIND_TURNS)
    if deletes:
        # Deleted before the compose answered (the defect): the server
        # applies the compose after that delete.
        await deleted.wait()
    release.set()
    await landed.wait()
    with pytest.raises(asyncio.CancelledError):
        await task
    await applied[0]
    assert [o.name async for o in client.list_objects(bucket, COMPOSED_PREFIX)] == []
    assert leftover_composites() == []
    assert len(deletes) == 1
