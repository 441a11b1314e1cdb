"""The disk cache on a full, read-only or failing disk: a cache that cannot
be made, recorded, written or cleaned up degrades to reading around itself
(counted in ``stats.errors``), never failing a read or returning other bytes.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import os
from pathlib import Path
from typing import Any

import pytest

from aioflux import LocalStore, ObjectInfo
from aioflux._core.records.urls import parse_url
from aioflux._engines.cache import DiskCache, Unclaimable, _files, info
from tests.servers._lock_faults import SPIN, descriptors, failing, stat_of

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


async def test_a_lock_file_that_stays_stale_is_read_around_not_spun_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A lock directory on NFS whose lock files' stat fails with ESTALE for
    # good: each lock opened and flocked fine, but was never shown to be
    # the file at its path, which try_lock took for a holder's unlink and
    # tried again, forever, on the event loop (every read of the process
    # stalled). A persistent failure is the cache unusable for the entry.
    objects = Objects(tmp_path / "data", 3)
    listed = await objects.listed()
    root = tmp_path / "cache"
    cache = DiskCache(root, 10_000_000)
    assert await cache.get_many(listed[:1], objects.fetch) == objects.expected(listed[:1])
    locks = str(root / "locks")
    stat = os.stat
    stale = 0

    def stale_under_locks(path: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal stale
        if isinstance(path, (str, os.PathLike)) and os.path.dirname(os.fspath(path)) == locks:
            stale += 1
            if stale > 10_000:  # a spin fails the test rather than hanging it
                raise AssertionError("try_lock spins on a lock file it can never check")
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE), os.fspath(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stale_under_locks)
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert objects.reads == 1 + 2  # the two misses fetched around the cache
    assert (cache.stats.hits, cache.stats.errors, cache.stats.stored) == (1, 2, 1)
    with pytest.raises(Unclaimable, match="Stale"):
        await cache.claim(listed[1])
    assert cache.stats.errors == 3
    assert 0 < stale <= 100  # a few checks per lock, not a spin
    monkeypatch.undo()
    # Nothing was left locked: the entries are filled once the disk recovers.
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (cache.stats.stored, objects.reads) == (3, 5)
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (cache.stats.hits, objects.reads) == (1 + 1 + 3, 5)


async def test_a_lock_whose_check_fails_is_released_not_left_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The lock taken, checking it is the file at its path failed (fstat of
    # the locked descriptor: ESTALE, EIO): try_lock raised with the
    # descriptor still open and locked. The read went around the cache, but
    # the entry stayed locked for the life of the process, and every later
    # lookup of it, here or in any process of the machine, waited for a
    # filler that would never come (wait_limit: 10 minutes by default).
    objects = Objects(tmp_path / "data", 3)
    listed = await objects.listed()
    root = tmp_path / "cache"
    cache = DiskCache(root, 10_000_000, wait_limit=2.0)
    locks = str(root / "locks")
    fstat = os.fstat

    def stale_lock_fds(fd: int) -> os.stat_result:
        if os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == locks:
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", stale_lock_fds)
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (objects.reads, cache.stats.errors, cache.stats.stored) == (3, 3, 0)
    monkeypatch.undo()
    other = DiskCache(root, 10_000_000, wait_limit=2.0)
    assert await other.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (other.stats.waits, other.stats.stored, objects.reads) == (0, 3, 6)


async def test_a_usage_lock_that_cannot_be_taken_leaks_no_descriptor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A limited write locks the usage file; its flock failing (ENOLCK: an
    # NFS lock daemon gone) left the usage file's descriptor open, one per
    # entry written: an epoch of misses ran the process out of descriptors,
    # and then every open failed, the dataset's own reads and sockets too.
    objects = Objects(tmp_path / "data", 20)
    listed = await objects.listed()
    root = tmp_path / "cache"
    cache = DiskCache(root, 10_000_000)
    usage = str(root / "usage")
    flock = fcntl.flock

    def no_locks_on_usage(fd: int, operation: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == usage and operation & fcntl.LOCK_EX:
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        flock(fd, operation)

    await cache.get_many(listed[:1], objects.fetch)  # opened: its first write recounts
    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(fcntl, "flock", no_locks_on_usage)
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (cache.stats.errors, cache.stats.stored, cache.stats.hits) == (19, 1, 1)
    assert len(os.listdir("/proc/self/fd")) <= before + 2  # not one per entry written
    monkeypatch.undo()
    assert info(str(root)).temporaries == 0


# -- the lock of an entry, on a failing lock directory --------------------------------






@pytest.mark.parametrize("code", [errno.ESTALE, errno.EIO, errno.EACCES],
                         ids=errno.errorcode.get)
def test_a_lock_file_whose_stat_fails_is_that_error_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    # Taken for a holder's unlink, a failing stat of the lock file was
    # tried again (open, flock, stat) at each of the lock's attempts before
    # its error came out: it says nothing of which file the path names.
    path = tmp_path / "lock"
    calls = stat_of(path, monkeypatch, failing(code, path))
    before = descriptors()
    with pytest.raises(OSError) as raised:
        _files.try_lock(str(path))
    assert raised.value.errno == code
    assert calls[0] == 1
    assert descriptors() == before
    monkeypatch.undo()
    fd = _files.try_lock(str(path))  # nothing was left locked
    assert fd is not None
    _files.unlock(fd, str(path))
    assert not path.exists()


def test_a_lock_file_removed_under_its_taker_is_taken_anew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A holder's unlink between the taker's open and its flock, three times
    # over: the path names no file when checked, and the next attempt locks
    # the file there now.
    path = tmp_path / "lock"
    stat = os.stat
    calls = stat_of(path, monkeypatch,
                     lambda n: failing(errno.ENOENT, path)(n) if n <= 3 else stat(path))
    before = descriptors()
    fd = _files.try_lock(str(path))
    assert fd is not None and calls[0] == 4
    assert os.fstat(fd).st_ino == stat(path).st_ino
    _files.unlock(fd, str(path))
    assert descriptors() == before


def test_a_lock_file_path_that_never_names_the_file_locked_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The path's stat works but names another file each time: the lock
    # gave up after its attempts with an ESTALE of its own making, though
    # no call had failed with it.
    path = tmp_path / "lock"
    other = os.stat(tmp_path)
    calls = stat_of(path, monkeypatch, lambda _: other)
    before = descriptors()
    with pytest.raises(OSError) as raised:
        _files.try_lock(str(path))
    assert raised.value.errno is None
    assert str(path) in str(raised.value)
    assert f"each of {_files._LOCK_ATTEMPTS} attempts" in str(raised.value)
    assert calls[0] == _files._LOCK_ATTEMPTS
    assert descriptors() == before


async def test_entries_whose_lock_path_never_names_the_file_locked_are_read_around(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = Objects(tmp_path / "data", 3)
    listed = await objects.listed()
    root = tmp_path / "cache"
    cache = DiskCache(root, 10_000_000)
    assert await cache.get_many(listed[:1], objects.fetch) == objects.expected(listed[:1])
    key = cache.key(listed[1])
    assert key is not None
    lock = Path(cache.layout.lock(key[0]))
    other = os.stat(root)
    stat_of(lock, monkeypatch, lambda _: other)
    assert await cache.get_many(listed[1:2], objects.fetch) == objects.expected(listed[1:2])
    assert (objects.reads, cache.stats.errors, cache.stats.stored) == (2, 1, 1)
    with pytest.raises(Unclaimable) as raised:
        await cache.claim(listed[1])
    assert "not the one at the path" in str(raised.value)
    assert cache.stats.errors == 2
    monkeypatch.undo()
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (cache.stats.stored, objects.reads) == (3, 4)


async def test_an_entry_that_exists_but_never_opens_is_read_around_not_spun_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An entry found filled by another process once its lock is held is
    # read again. One whose path stats but never opens (a stale name on
    # NFS) was read again without end, with no poll and no wait_limit.
    objects = Objects(tmp_path / "data", 2)
    listed = await objects.listed()
    root = tmp_path / "cache"
    cache = DiskCache(root, 10_000_000)
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    key = cache.key(listed[0])
    assert key is not None
    entry = cache.layout.entry(key[0])
    open_ = os.open
    opened = 0

    def never_opens(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        nonlocal opened
        if isinstance(path, (str, os.PathLike)) and os.fspath(path) == entry:
            opened += 1
            if opened > SPIN:
                raise AssertionError(f"{opened} opens of {entry}: a lookup spins on it")
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), entry)
        return open_(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", never_opens)
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert objects.reads == 2 + 1  # the one entry read around the cache
    assert (cache.stats.hits, cache.stats.errors, cache.stats.stored) == (1, 1, 2)
    assert 1 < opened <= 20
    monkeypatch.undo()
    assert await cache.get_many(listed, objects.fetch) == objects.expected(listed)
    assert (cache.stats.hits, objects.reads) == (3, 3)  # the entry was never dropped


def test_a_large_entry_is_read_into_the_bytes_handed_out(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Its pieces joined held twice its size at once: a hit of a 512 MiB
    # object peaked at 1 GiB, where the miss that stored it took 0.55.
    import tracemalloc

    from aioflux._core.integrity.crc import crc32c

    monkeypatch.setattr(_files, "_READ_PIECE", 1 << 20)  # 8 pieces of the entry's 8 MiB
    layout = _files.Layout(str(tmp_path))
    for folder in (os.path.dirname(layout.entry("ab" * 8)), layout.tmp):
        os.makedirs(folder, exist_ok=True)
    data = os.urandom(8 << 20)
    _files.write_entry(layout, "ab" * 8, b"key", data, crc32c(data), None)
    tracemalloc.start()
    try:
        kind, got = _files.read_entry(layout.entry("ab" * 8), b"key", crc32c(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (kind, got) == ("hit", data) and type(got) is bytes
    assert peak < 9 << 20, peak  # the entry once, not its pieces besides
