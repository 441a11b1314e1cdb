"""SharedGroups: a row group made once is taken by the next reader, a damaged
entry is made again, and the directory holds at most ``keep`` of them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

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
