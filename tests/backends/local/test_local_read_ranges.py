"""``LocalStore.read_ranges``: several ranges of one file in one thread's turn
(what a DataLoader worker's samples of a shard's read unit take)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aioflux import InvalidRequest, NotFound
from aioflux._engines.shards._spans import RangesReader
from aioflux.local import LocalStore


def _file(tmp_path: Path) -> tuple[str, str, bytes]:
    data = bytes(range(256)) * 64
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.bin").write_bytes(data)
    bucket, _, rest = str(tmp_path / "d" / "f.bin").lstrip("/").partition("/")
    return bucket, rest, data


def test_ranges_come_back_whole_in_the_order_given(tmp_path: Path) -> None:
    bucket, name, data = _file(tmp_path)

    async def run() -> tuple[list[bytes], int, int]:
        store = LocalStore()
        info = await store.stat(bucket, name)
        got = await store.read_ranges(bucket, name, [(9000, 9100), (0, 10), (5, 5),
                                                     (16000, len(data))],
                                      generation=info.generation)
        return got, store.stats.bytes_received, store.stats.requests

    got, received, requests = asyncio.run(run())
    assert got == [data[9000:9100], data[:10], b"", data[16000:]]
    assert received == 100 + 10 + len(data) - 16000
    assert requests == 2  # the stat, and one read for the four ranges
    assert isinstance(LocalStore(), RangesReader)


def test_ranges_refuse_another_version_and_bytes_outside_the_file(tmp_path: Path) -> None:
    bucket, name, data = _file(tmp_path)

    async def run() -> None:
        store = LocalStore()
        info = await store.stat(bucket, name)
        assert info.generation is not None
        with pytest.raises(NotFound, match="generation"):
            await store.read_ranges(bucket, name, [(0, 1)], generation=info.generation + 1)
        with pytest.raises(InvalidRequest, match="outside the file"):
            await store.read_ranges(bucket, name, [(0, 1), (len(data) - 1, len(data) + 1)])
        with pytest.raises(NotFound):
            await store.read_ranges(bucket, name + ".gone", [(0, 1)])

    asyncio.run(run())
