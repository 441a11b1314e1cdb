"""The disk cache on a full, read-only or failing disk: a cache that cannot
be made, recorded, written or cleaned up degrades to reading around itself
(counted in ``stats.errors``), never failing a read or returning other bytes.
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


def _refuse_unlink_under(monkeypatch: pytest.MonkeyPatch, folder: Path, code: int) -> list[str]:
    """Make ``os.unlink`` fail with ``code`` for files in ``folder`` (as on
    a disk remounted read-only, or failing, mid-run); returns the refused paths."""
    refused: list[str] = []
    unlink = os.unlink

    def refusing(path: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.dirname(os.fspath(path)).startswith(str(folder)):
            refused.append(os.fspath(path))
            raise OSError(code, os.strerror(code), os.fspath(path))
        unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refusing)
    return refused


async def test_lock_files_that_cannot_be_removed_cost_no_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = Objects(tmp_path / "data", 4)
    listed = await objects.listed()
    root = tmp_path / "cache"
    cache = DiskCache(root, 10_000_000)
    assert await cache.get_many(listed[:1], objects.fetch) == objects.expected(listed[:1])
    refused = _refuse_unlink_under(monkeypatch, root / "locks", errno.EROFS)
    # Each miss's lock file stays: the fetched bytes are returned all the same.
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert len(refused) == 3 and objects.reads == 4
    # The locks were released: another opener takes them at once and hits.
    other = DiskCache(root, 10_000_000)
    assert await other.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (other.stats.hits, other.stats.waits, objects.reads) == (4, 0, 4)


async def test_a_corrupt_entry_that_cannot_be_removed_is_read_around(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = Objects(tmp_path / "data", 3)
    listed = await objects.listed()
    root = tmp_path / "cache"
    cache = DiskCache(root, 10_000_000)
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    key = cache.key(listed[0])
    assert key is not None
    entry = Path(cache.layout.entry(key[0]))
    torn = bytearray(entry.read_bytes())
    torn[-1] ^= 1  # one bit flipped in the object's bytes
    entry.write_bytes(torn)
    _refuse_unlink_under(monkeypatch, root / "entries", errno.EIO)
    for _ in range(2):  # never served, refetched each time it is asked for
        assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert objects.reads == 3 + 2
    assert (cache.stats.corrupt, cache.stats.hits) == (2, 4)
    assert cache.stats.errors >= 2
    assert entry.read_bytes() == torn  # still there, still refused


async def test_a_leftover_temporary_that_cannot_be_removed_costs_no_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = Objects(tmp_path / "data", 3)
    listed = await objects.listed()
    root = tmp_path / "cache"
    first = DiskCache(root, 10_000_000)
    assert await first.get_many(listed[:1], objects.fetch) == objects.expected(listed[:1])
    key = first.key(listed[1])
    assert key is not None
    leftover = root / "tmp" / f"{key[0]}.999999.0badc0de"  # a killed writer's
    leftover.write_bytes(b"half an entry")
    refused = _refuse_unlink_under(monkeypatch, root / "tmp", errno.EIO)
    second = DiskCache(root, 10_000_000)  # its first lookup sweeps temporaries
    assert await second.get_many(listed, objects.fetch) == objects.expected(listed)
    assert refused == [str(leftover)]
    assert (second.stats.hits, second.stats.stored, objects.reads) == (1, 2, 3)
    assert info(str(root)).temporaries == 1  # left, for `aioflux cache info` to show
