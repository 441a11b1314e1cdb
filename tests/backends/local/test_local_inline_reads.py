"""Small reads of files whose bytes are in memory, done in the calling thread
(``local/_inline.py``): no hand-off to a thread, the same checks."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aioflux import ChecksumMismatch, InvalidURL, NotFound
from aioflux._core.metrics import Attempt
from aioflux.local import LocalStore, _files, _inline
from aioflux.local._inline import Placement, WouldWait, filesystems

MOUNTINFO = """\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
25 22 0:23 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw,size=24684084k
30 22 0:45 / /mnt/data rw,relatime shared:9 - nfs4 server:/export rw,vers=4.2
"""


def _where(path: Path) -> tuple[str, str]:
    bucket, _, name = str(path).lstrip("/").partition("/")
    return bucket, name


def _store(tmp_path: Path, fstype: str) -> LocalStore:
    """A store that takes ``tmp_path``'s filesystem for ``fstype``, and counts
    its reads handed to a thread in ``store.handed``."""
    store = LocalStore()
    store._placement = Placement({os.stat(tmp_path).st_dev: fstype})
    handed: list[str] = []
    run = store._run

    async def counted(op: str, bucket: str, name: str, work: Callable[[], Any],
                      received: Callable[[Any], int] | None = None) -> Any:
        handed.append(name)
        return await run(op, bucket, name, work, received)

    store._run = counted  # type: ignore[method-assign]
    store.handed = handed  # type: ignore[attr-defined]
    return store


def _small(store: LocalStore, bucket: str, name: str) -> bytes | None:
    """One file read as a map dataset's batch reads its files."""
    (data,) = store._read_small_many(bucket, [name])
    return data


def test_mountinfo_gives_each_device_its_filesystem() -> None:
    kinds = filesystems(MOUNTINFO + "garbage line\n")
    assert kinds == {os.makedev(259, 2): "ext4", os.makedev(0, 23): "tmpfs",
                     os.makedev(0, 45): "nfs4"}
    folders = Placement(kinds)
    assert Placement({}).of("/nowhere/at/all/f")[0] == "thread"
    assert folders.of("/nowhere/at/all/f") == ("thread", -1)


def test_small_reads_on_a_memory_filesystem_take_no_thread(tmp_path: Path) -> None:
    data = os.urandom(5000)
    (tmp_path / "f.bin").write_bytes(data)
    bucket, name = _where(tmp_path / "f.bin")
    store = _store(tmp_path, "tmpfs")

    async def run() -> None:
        assert await store.read(bucket, name) == data
        assert await store.read(bucket, name, start=10, end=20) == data[10:20]
        got = await store.fetch(bucket, name, size=len(data), want_crc=True)
        assert got.data == data and got.crc is not None
        assert await store.read_ranges(bucket, name, [(0, 3), (4000, 5000)]) == \
            [data[:3], data[4000:]]
        with pytest.raises(ChecksumMismatch, match="expected 4999"):
            await store.fetch(bucket, name, size=4999)
        with pytest.raises(NotFound, match=name):
            await store.read(bucket, name + ".gone")

    asyncio.run(run())
    assert _small(store, bucket, name) == data
    assert store.handed == []  # type: ignore[attr-defined]
    assert store._threads is None  # no thread was ever started
    assert store.stats.requests == 7 and store.stats.failures == 2
    assert store.stats.bytes_received == 3 * len(data) + 10 + 3 + 1000


def test_a_read_that_would_wait_goes_to_a_thread(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(3000)
    (tmp_path / "f.bin").write_bytes(data)
    bucket, name = _where(tmp_path / "f.bin")
    store = _store(tmp_path, "ext4")

    def not_cached(fd: int, view: memoryview, at: int) -> int:
        raise WouldWait

    monkeypatch.setattr(_files, "pread_nowait", not_cached)
    assert _small(store, bucket, name) is None
    assert asyncio.run(store.read(bucket, name)) == data
    assert asyncio.run(store.read_ranges(bucket, name, [(1, 2)])) == [data[1:2]]
    assert store.handed == [name, name]  # type: ignore[attr-defined]
    assert store.waits == 3
    monkeypatch.undo()
    monkeypatch.setattr(_files, "INLINE_MAX", 100)  # a long read: a thread's too
    store = _store(tmp_path, "tmpfs")
    assert asyncio.run(store.read(bucket, name, end=100)) == data[:100]
    assert asyncio.run(store.read(bucket, name)) == data
    assert store.handed == [name]  # type: ignore[attr-defined]
    nfs = _store(tmp_path, "nfs4")
    assert _small(nfs, bucket, name) is None and nfs.waits == 0


def test_a_file_changed_in_place_fails_as_in_a_thread(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.bin"
    bucket, name = _where(path)
    asyncio.run(LocalStore().write(bucket, name, b"a" * 4096))  # its crc32c recorded
    st = os.stat(path)
    with open(path, "r+b") as fh:  # rewritten in place, its time put back
        fh.write(b"b")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    store = _store(tmp_path, "tmpfs")
    with pytest.raises(ChecksumMismatch, match="recorded") as caught:
        _small(store, bucket, name)
    assert caught.value.name == name and caught.value.bucket == bucket
    pread = os.pread

    def growing(fd: int, count: int, at: int) -> bytes:
        got = pread(fd, count, at)
        with open(path, "ab") as fh:  # appended to while it is read
            fh.write(b"c")
        return got

    monkeypatch.setattr(os, "pread", growing)
    with pytest.raises(ChecksumMismatch, match="modified while it was read"):
        _small(store, bucket, name)
    assert store.handed == []  # type: ignore[attr-defined]
    assert store.stats.failures == 2


def test_nowait_reads_of_cached_bytes_take_no_thread(tmp_path: Path) -> None:
    data = os.urandom(20000)
    (tmp_path / "f.bin").write_bytes(data)
    bucket, name = _where(tmp_path / "f.bin")
    store = _store(tmp_path, "ext4")
    try:
        with open(tmp_path / "f.bin", "rb") as fh:
            _inline.pread_nowait(fh.fileno(), memoryview(bytearray(1)), 0)
    except WouldWait:
        # tmp_path's filesystem has no RWF_NOWAIT: every read goes to a thread
        assert _small(store, bucket, name) is None and store.waits == 1
        return
    assert _small(store, bucket, name) == data  # just written: in the page cache
    assert store.waits == 0 and store.handed == []  # type: ignore[attr-defined]


def test_map_dataset_reads_a_batch_in_the_calling_thread(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux.torch import ObjectMapDataset

    datas = [os.urandom(100 + i) for i in range(6)]
    for i, data in enumerate(datas):
        (tmp_path / f"{i}.bin").write_bytes(data)
    dataset = ObjectMapDataset.from_prefix(f"file://{tmp_path}/")
    store = _store(tmp_path, "tmpfs")
    dataset._source.downloader.client = store
    assert dataset.__getitems__([4, 0, 2]) == [datas[4], datas[0], datas[2]]
    assert dataset[5] == datas[5]
    assert store.handed == []  # type: ignore[attr-defined]
    assert dataset.download_stats.direct == 4
    monkeypatch.setattr(_files, "INLINE_MAX", 103)  # 4.bin and 5.bin are longer
    assert dataset.__getitems__([5, 1, 4]) == [datas[5], datas[1], datas[4]]
    assert sorted(store.handed) == sorted(dataset.objects[i].name  # type: ignore[attr-defined]
                                          for i in (4, 5))
    assert dataset.download_stats.direct == 7


def test_a_file_still_as_listed_is_checked_against_its_listed_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A map dataset hands each file's (size, generation, crc32c) as listed:
    # a file still of that size and time is checked against the listed
    # record, its attributes not read again; one changed since, against its own.
    path = tmp_path / "f.bin"
    bucket, name = _where(path)
    first = os.urandom(300)
    asyncio.run(LocalStore().write(bucket, name, first))  # its crc32c recorded
    info = asyncio.run(LocalStore().stat(bucket, name))
    assert info.crc32c is not None
    listed = (info.size, info.generation, info.crc32c)
    store = _store(tmp_path, "tmpfs")
    lists: list[object] = []
    listxattr = os.listxattr

    def counted(target: Any) -> list[str]:
        lists.append(target)
        return listxattr(target)

    monkeypatch.setattr(os, "listxattr", counted)
    assert store._read_small_many(bucket, [name], [listed]) == [first]
    assert lists == []
    assert store._read_small_many(bucket, [name]) == [first]  # no listing: its record read
    assert len(lists) == 1
    # A listing whose crc32c this version's bytes do not have: refused, as a record is.
    with pytest.raises(ChecksumMismatch, match="recorded") as caught:
        store._read_small_many(bucket, [name], [(info.size, info.generation, info.crc32c ^ 1)])
    assert caught.value.name == name
    # Listed as having no record (its listing found none): no record is looked for.
    assert store._read_small_many(bucket, [name], [(info.size, info.generation, None)]) == \
        [first]
    assert len(lists) == 1
    # Rewritten since (another size and time): the listing says nothing of it.
    second = os.urandom(301)
    asyncio.run(LocalStore().write(bucket, name, second))
    assert store._read_small_many(bucket, [name], [listed]) == [second]
    assert len(lists) == 2
    assert store.handed == []  # type: ignore[attr-defined]


def _listed(path: Path) -> tuple[int, int, int | None]:
    info = asyncio.run(LocalStore().stat(*_where(path)))
    return info.size, info.generation, info.crc32c


def _counted_fstats(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors ``os.fstat`` is called on from now on."""
    fstats: list[int] = []
    fstat = os.fstat

    def counted(fd: int) -> os.stat_result:
        fstats.append(fd)
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", counted)
    return fstats


def test_a_file_still_as_listed_is_read_with_one_fstat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its listed size read, then one fstat: still that size and time, no
    # write reached it since its listing, so the bytes are that version's.
    path = tmp_path / "f.bin"
    bucket, name = _where(path)
    data = os.urandom(4000)
    path.write_bytes(data)
    listed = _listed(path)
    store = _store(tmp_path, "tmpfs")
    fstats = _counted_fstats(monkeypatch)
    assert store._read_small_many(bucket, [name, name], [listed, listed]) == [data, data]
    assert len(fstats) == 2
    assert store._read_small_many(bucket, [name]) == [data]  # unlisted: before and after
    assert len(fstats) == 4
    assert store.handed == []  # type: ignore[attr-defined]


def test_a_file_not_as_listed_is_read_afresh_never_half_old(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.bin"
    bucket, name = _where(path)
    old, new = os.urandom(4000), os.urandom(4000)
    path.write_bytes(old)
    listed = _listed(path)
    store = _store(tmp_path, "tmpfs")
    # Rewritten since, its size kept: its time says so.
    path.write_bytes(new)
    os.utime(path, ns=(listed[1] + 10**9, listed[1] + 10**9))
    assert store._read_small_many(bucket, [name], [listed]) == [new]
    # Written while it is read: the first read's bytes are not handed out.
    listed = _listed(path)
    pread = os.pread
    writes: list[int] = []

    def written(fd: int, count: int, at: int) -> bytes:
        got = pread(fd, count, at)
        if not writes:
            writes.append(fd)
            with open(path, "r+b") as fh:
                fh.write(old)
            os.utime(path, ns=(listed[1] + 2 * 10**9, listed[1] + 2 * 10**9))
        return got

    monkeypatch.setattr(os, "pread", written)
    assert store._read_small_many(bucket, [name], [listed]) == [old]
    monkeypatch.undo()
    # A symlink is not read as listed (its target may be elsewhere): read
    # afresh, its target's filesystem checked.
    link = tmp_path / "link.bin"
    link.symlink_to(path)
    fstats = _counted_fstats(monkeypatch)
    assert store._read_small_many(bucket, [_where(link)[1]], [_listed(path)]) == [old]
    assert len(fstats) == 2  # opened afresh: its stat before the read and after
    monkeypatch.undo()
    # A folder where a file was listed: said so by name.
    path.unlink()
    path.mkdir()
    with pytest.raises(NotFound, match="not a file") as caught:
        store._read_small_many(bucket, [name], [listed])
    assert caught.value.name == name
    assert store.handed == []  # type: ignore[attr-defined]


def test_a_batch_is_read_in_order_each_file_checked_and_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    datas = [os.urandom(200 + i) for i in range(4)]
    for i, data in enumerate(datas):
        (tmp_path / f"{i}.bin").write_bytes(data)
    bucket, _ = _where(tmp_path / "0.bin")
    names = [_where(tmp_path / f"{i}.bin")[1] for i in range(4)]
    store = _store(tmp_path, "tmpfs")
    seen: list[Attempt] = []
    # A file over the longest read done here (3.bin) is left to a download.
    monkeypatch.setattr(_files, "INLINE_MAX", 202)
    assert store._read_small_many(bucket, names) == [*datas[:3], None]
    stats = store.stats
    assert (stats.requests, stats.failures, store.waits) == (3, 0, 1)
    assert stats.bytes_received == sum(map(len, datas[:3]))
    assert stats.latency["read"].count == 3
    # With an observer, each file is one attempt it sees.
    store.stats.observers.append(_Seen(seen))
    store._read_small_many(bucket, names[:2])
    assert [(a.operation, a.error, a.response_bytes) for a in seen] == \
        [("read", "", 200), ("read", "", 201)]
    assert stats.latency["read"].count == 5
    # A file gone fails the batch with its own name; those before it are counted.
    (tmp_path / "1.bin").unlink()
    with pytest.raises(NotFound, match=names[1]) as caught:
        store._read_small_many(bucket, names)
    assert caught.value.name == names[1]
    assert (stats.requests, stats.failures) == (7, 1)
    assert sorted(a.error for a in seen[2:]) == ["", "NotFound"]
    with pytest.raises(InvalidURL, match="plain relative path"):
        store._read_small_many(bucket, [names[0], "a/../b"])
    assert store.handed == []  # type: ignore[attr-defined]


class _Seen:
    """An observer keeping the attempts it is shown."""

    def __init__(self, seen: list[Attempt]) -> None:
        self.seen = seen

    def attempt(self, attempt: Attempt) -> None:
        self.seen.append(attempt)

    def retry(self, cause: str) -> None:
        del cause
