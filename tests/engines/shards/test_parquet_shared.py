"""SharedGroups: a row group made once is taken by the next reader, a damaged
entry is made again, and the directory holds at most ``keep`` of them."""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from aioflux._engines.shards._parquet_shared import SharedGroups


def test_made_once_damage_remade_and_bounded(tmp_path: Path) -> None:
    made: list[str] = []

    def maker(key: str) -> Callable[[], Awaitable[pa.Table]]:
        async def make() -> pa.Table:
            made.append(key)
            return pa.table({"k": [key] * 10, "n": list(range(10))})

        return make

    async def run() -> None:
        shared = SharedGroups(tmp_path, keep=3, max_bytes=1 << 20)
        other = SharedGroups(tmp_path, keep=3, max_bytes=1 << 20)  # another worker's
        first = await shared.get("a", maker("a"))
        again = await other.get("a", maker("a"))
        assert made == ["a"] and again.equals(first)
        entry = next(tmp_path.glob("*.arrow"))
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0xFF
        entry.write_bytes(bytes(data))
        assert (await other.get("a", maker("a"))).equals(first)
        assert made == ["a", "a"]  # the damaged entry was dropped and made again
        for key in "bcdef":
            await shared.get(key, maker(key))
        assert len(list(tmp_path.glob("*.arrow"))) == 3

    asyncio.run(run())


def test_a_reader_takes_its_lock_in_its_first_hand_off(tmp_path: Path,
                                                        monkeypatch: Any) -> None:
    """A reader's first look, its lock and its second look under the lock are
    one hand-off to a thread: the maker then hands off only the write, and a
    reader that finds the lock held only the load after waiting for it."""
    import aioflux._engines.shards._parquet_shared as shared_module

    calls: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(func: Callable[..., Any], /, *args: Any) -> Any:
        try:
            return await to_thread(func, *args)
        finally:
            calls.append(func.__name__)  # once it is done

    monkeypatch.setattr(shared_module.asyncio, "to_thread", counted)

    async def make() -> pa.Table:
        return pa.table({"n": list(range(10))})

    async def run() -> None:
        maker = SharedGroups(tmp_path, keep=4, max_bytes=1 << 20)
        await maker.get("a", make)
        assert calls == ["_look", "_store"]
        calls.clear()
        await SharedGroups(tmp_path, keep=4, max_bytes=1 << 20).get("a", make)
        assert calls == ["_look"]  # made: loaded in the first look
        calls.clear()
        # Another process holds b's lock while it makes b: this reader waits,
        # then loads what it wrote.
        reader = SharedGroups(tmp_path, keep=4, max_bytes=1 << 20)
        path = reader._path("b")
        holder = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(holder, fcntl.LOCK_EX)
        waiting = asyncio.ensure_future(reader.get("b", make))
        while calls != ["_look"]:  # looked, found b's lock held: now waiting
            await asyncio.sleep(0.001)
        maker._store(path, await make())
        os.close(holder)
        assert (await waiting).num_rows == 10
        assert calls == ["_look", "_load"]

    asyncio.run(run())
