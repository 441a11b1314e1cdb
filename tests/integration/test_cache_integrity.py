"""The disk cache on a full disk: a cache that cannot be made, recorded or
written degrades to reading around itself (counted in ``stats.errors``),
never failing a read or returning other bytes.
"""

from __future__ import annotations

import builtins
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from aioflux import LocalStore, ObjectInfo
from aioflux._core.urls import parse_url
from aioflux._engines.cache import DiskCache, _files, info

Data = bytes | bytearray


class Objects:
    """Files read through a LocalStore, with a count of the reads."""

    def __init__(self, root: Path, count: int) -> None:
        root.mkdir()
        self.bodies = {f"o{i}": os.urandom(20_000 + i) for i in range(count)}
        for name, body in self.bodies.items():
            (root / name).write_bytes(body)
        self.bucket, self.prefix = parse_url(str(root) + "/")
        self.store = LocalStore()
        self.reads = 0

    async def listed(self) -> list[ObjectInfo]:
        return [o async for o in self.store.list_objects(self.bucket, self.prefix)]

    async def fetch(self, objects: list[ObjectInfo]) -> list[Data]:
        self.reads += len(objects)
        return [await self.store.read(o.bucket, o.name) for o in objects]

    def expected(self, objects: list[ObjectInfo]) -> list[bytes]:
        return [self.bodies[o.name.rpartition("/")[2]] for o in objects]


def _no_space(*args: object, **kwargs: object) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


async def test_a_new_cache_on_a_full_disk_reads_around_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = Objects(tmp_path / "data", 5)
    listed = await objects.listed()
    monkeypatch.setattr(os, "mkdir", _no_space)  # the cache directory cannot be made
    cache = DiskCache(tmp_path / "cache", 10_000_000)
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert objects.reads == 5
    assert (cache.stats.errors, cache.stats.stored, cache.stats.hits) == (5, 0, 0)
    monkeypatch.undo()
    assert not (tmp_path / "cache").exists()


async def test_a_new_limit_on_a_full_disk_still_serves_the_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = Objects(tmp_path / "data", 4)
    listed = await objects.listed()
    root = tmp_path / "cache"
    first = DiskCache(root, 10_000_000)
    assert await first.get_many(listed, objects.fetch) == objects.expected(listed)
    assert first.stats.stored == 4

    # The next run asks for another limit; recording it needs a new file.
    def no_space_for_the_marker(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).startswith(str(root / _files.MARKER) + "."):
            _no_space()
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(_files, "open", no_space_for_the_marker, raising=False)
    second = DiskCache(root, 20_000_000)
    assert await second.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (second.stats.hits, objects.reads) == (4, 4)  # no second read of any object
    monkeypatch.undo()
    assert sorted(os.listdir(root)) == sorted([_files.MARKER, "entries", "locks", "tmp",
                                               "usage"])  # no marker temporary left
    assert info(str(root)).limit == 10_000_000  # the old record stands


async def test_entries_that_cannot_be_written_cost_a_read_not_an_epoch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = Objects(tmp_path / "data", 6)
    listed = await objects.listed()
    root = tmp_path / "cache"
    write_all = _files._write_all

    def fills_up(fd: int, data: bytes | memoryview) -> None:
        write_all(fd, memoryview(data)[:len(data) // 2])
        _no_space()

    monkeypatch.setattr(_files, "_write_all", fills_up)
    cache = DiskCache(root, 10_000_000)
    for _ in range(2):
        assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert objects.reads == 12
    assert (cache.stats.errors, cache.stats.stored, cache.stats.hits) == (12, 0, 0)
    state = info(str(root))
    assert (state.entries, state.temporaries) == (0, 0)  # no torn entry, no temporary
    assert os.listdir(root / "locks") == []
