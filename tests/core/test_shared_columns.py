"""An ObjectIndex's columns: their size per object, and the block a node's
processes share by descriptor, which nothing outlives (SIGKILL included)."""

from __future__ import annotations

import multiprocessing.context
import multiprocessing.popen_spawn_posix
import os
import pickle
import select
import signal
import subprocess
import sys
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import pytest

from aioflux._core.memory import shared_columns
from aioflux._core.memory.columns import rfc3339
from aioflux._core.memory.object_index import IndexBuilder, ObjectIndex
from aioflux._core.records.types import ObjectInfo

linux = pytest.mark.skipif(sys.platform != "linux", reason="reads Linux's /proc")


def files(count: int, *, crc: bool = False, start: int = 0) -> list[ObjectInfo]:
    """Records as the local store lists files (from the ``start``-th)."""
    out = []
    for i in range(start, start + count):
        generation = 1_764_000_000_123_456_789 + i * 7_919
        out.append(ObjectInfo("data", f"train/{i // 1000:04d}/{i:08d}.jpg", 100 + i % 5000,
                              generation, i if crc else None, updated=rfc3339(generation),
                              scheme="file"))
    return out


@pytest.mark.parametrize("crc", [False, True])
def test_a_file_listing_holds_its_names_and_16_bytes_an_object(crc: bool) -> None:
    # A list of records took ~350 bytes an object, the columns before these
    # ~100 (the updated text alone 27, int64s for sizes and name ends), then
    # each name's folder ("train/", every name's) as well.
    records = files(20_000, crc=crc)
    index = ObjectIndex(records)
    names = sum(len(o.name.encode()) - len("train/") for o in records)
    per_object = 16 + (4 if crc else 0)  # name end, size, generation (crc32c)
    assert names + per_object * len(records) <= index.nbytes() <= \
        names + per_object * len(records) + 64
    assert list(index) == records


def test_columns_widen_where_the_values_need_it() -> None:
    # Shared values, then values that differ from the second page on; a
    # size past 4 GiB, a crc32c that is the 32-bit None marker, None among
    # values, updated times that are not the generation's.
    builder = IndexBuilder()
    first = files(3)
    later = [o.replace(size=5 << 32, crc32c=0xFFFFFFFF, content_type="a/b") for o in files(2)]
    later += [o.replace(crc32c=None, updated="2026-11-22T10:00:00.123Z") for o in files(2)]
    for page in (first, later):
        builder.add(page)
    index = builder.finish()
    assert list(index) == first + later
    assert index.schemes() == ["file"]
    assert not builder.count  # left empty


def test_names_come_back_exactly_when_their_shared_folder_shrinks() -> None:
    # The first page shares "a/b/c/", the next only "a/", one name no
    # folder at all; names not UTF-8 (a file's escaped bytes), empty, with
    # no "/", non-ASCII folders, and pages out of order.
    pages = [["a/b/c/1", "a/b/c/2", "a/b/c/\udcff"],
             ["a/b/d", "a/é/x", "a/é/"],
             ["a/b/c/0"],
             ["", "zz", "a/b/c/9"]]
    builder = IndexBuilder()
    expected = []
    for page in pages:
        records = [ObjectInfo("b", name, i, i + 1) for i, name in enumerate(page)]
        builder.add(records)
        expected += records
    index = builder.finish()
    assert list(index) == expected
    assert list(index.names()) == [o.name for o in expected]
    again = pickle.loads(pickle.dumps(index))
    assert list(again.names()) == [o.name for o in expected]


def test_a_folder_s_names_are_kept_without_it() -> None:
    folder = "tmp/aioflux-perf-scale/objects-1000000/data/"
    records = [ObjectInfo("b", f"{folder}d{i // 1000:04d}/f{i:07d}.bin", 1, 10**18 + i)
               for i in range(3000)]
    index = ObjectIndex(records)
    # 18 bytes of each 62-byte name, a 32-bit end and a 64-bit generation.
    assert index.nbytes() <= (18 + 4 + 8) * len(records) + 64
    assert list(index) == records


def test_building_the_columns_holds_them_once_and_gives_every_page_back() -> None:
    # A listing's memory by counts: Python's heap (tracemalloc) and the
    # mappings the columns grow in (growing.mapped), a page of records at a
    # time. The columns used to grow in a bytearray and arrays: int64 name
    # ends and sizes, each growth a copy of the whole buffer (1.5 to 2 times
    # the columns at the peak), and the freed heap stayed with the thread.
    import gc
    import tracemalloc

    from aioflux._core.memory import growing

    count, page = 50_000, 1000
    gc.collect()
    now_before = growing.mapped()[0]
    tracemalloc.start()
    try:
        growing.reset_mapped()
        builder = IndexBuilder()
        pages_peak = 0
        for start in range(0, count, page):
            records = files(page, start=start)
            pages_peak = max(pages_peak, tracemalloc.get_traced_memory()[0])
            builder.add(records)
            del records
        index = builder.finish()
        traced = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    mapped_now, mapped_peak = growing.mapped()
    columns = index.nbytes()
    # 17 bytes of name past "train/", a 32-bit end, size and a generation.
    assert columns <= 33 * count + 64
    # While built: the columns once (mapped), and a page of records and
    # their fields in the heap (a few hundred KiB), never a copy of a column.
    assert mapped_peak <= columns + 64
    assert traced <= pages_peak + (1 << 20), (traced, pages_peak)
    # Built: every mapping given back (the builder starts over: one name end).
    assert mapped_now - now_before <= 8
    assert len(index) == count


def spawning(fds: list[int]) -> Any:
    """What a spawning Popen offers ForkingPickler while it starts a child."""
    class Popen:
        DupFd = multiprocessing.popen_spawn_posix._DupFd

        def duplicate_for_child(self, fd: int) -> int:
            fds.append(fd)
            return fd
    return Popen()


@pytest.mark.parametrize("count", [1_000, 20_000])
def test_pickled_for_a_spawned_worker_an_index_does_not_grow_with_its_objects(
        monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(shared_columns, "SHARE_MIN", 0)
    index = ObjectIndex(files(count))
    assert index.shared
    fds: list[int] = []
    multiprocessing.context.set_spawning_popen(spawning(fds))
    try:
        sent = bytes(ForkingPickler.dumps(index))
    finally:
        multiprocessing.context.set_spawning_popen(None)
    assert len(sent) < 1024  # the descriptor, the length and the column specs
    assert fds == [index._block.fd]
    # Any other pickle (a DDP broadcast to another node) carries the bytes.
    plain = pickle.dumps(index)
    assert len(plain) > index.nbytes()
    again = pickle.loads(plain)
    assert list(again) == list(index) and again[count - 1] == index[count - 1]


# The creator of a shared index and a spawned process attached to it; both
# report the memory file (as its /proc link reads, and its inode) and wait.
_CREATOR = """
import multiprocessing as mp, os, sys
from aioflux._core.memory import shared_columns
from aioflux._core.memory.object_index import ObjectIndex
from aioflux._core.records.types import ObjectInfo

def held(index):
    fd = index._block.fd
    return os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd).st_ino

def attached(index, conn):
    conn.send((os.getpid(), *held(index), index[999].name))
    conn.recv()  # never comes: killed

if __name__ == "__main__":
    shared_columns.SHARE_MIN = 0
    if sys.argv[1] == "file":
        del os.memfd_create
        shared_columns.TEMP_DIR = sys.argv[2]
    index = ObjectIndex([ObjectInfo("b", f"n/{i:06d}", i, i + 1) for i in range(1000)])
    ours, theirs = mp.get_context("spawn").Pipe()
    child = mp.get_context("spawn").Process(target=attached, args=(index, theirs))
    child.start()
    pid, link, inode, name = ours.recv()
    print(*(pid, link, inode, name, *held(index)), sep="|", flush=True)
    sys.stdin.read()
"""


def holders(link: str, inode: int) -> list[str]:
    """Every descriptor and mapping, in the processes this test may read, of
    the memory file ``inode`` that reads as ``link`` (one that none holds
    is freed by the kernel)."""
    path = link.removesuffix(" (deleted)")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                held = f"/proc/{pid}/fd/{fd}"
                if os.readlink(held) == link and os.stat(held).st_ino == inode:
                    found.append(held)
            with open(f"/proc/{pid}/maps") as maps:
                found += [f"{pid}: {line}" for line in maps
                          if f" {inode} " in line and path in line]
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue  # gone meanwhile, or another user's
    return found


def exited(pid: int) -> None:
    """Wait for ``pid`` (not our child) to end, by its pidfd."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        assert select.select([fd], [], [], 60)[0], f"{pid} did not end"
    finally:
        os.close(fd)


@linux
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["memfd", "file"])
def test_a_shared_index_leaves_nothing_behind_when_every_user_is_killed(
        tmp_path: Path, kind: str) -> None:
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    script = tmp_path.parent / f"{tmp_path.name}-creator.py"  # spawn re-imports it
    script.write_text(_CREATOR)
    with subprocess.Popen([sys.executable, str(script), kind, str(tmp_path)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as creator:
        try:
            assert creator.stdout is not None
            pid, link, inode, name, creator_link, creator_inode = \
                creator.stdout.readline().rstrip("\n").split("|")
            worker = int(pid)
            # Both hold one file, by descriptor: it has no name anywhere.
            assert name == "n/000999" and inode == creator_inode and link == creator_link
            assert link.endswith(" (deleted)"), link
            assert link.startswith("/memfd:aioflux-index" if kind == "memfd" else str(tmp_path))
            assert list(tmp_path.iterdir()) == []
            assert len(holders(link, int(inode))) >= 4  # seen while they live: 2 fds, 2 maps
            os.kill(worker, signal.SIGKILL)
        finally:
            creator.kill()
            creator.wait()
    exited(worker)
    # Nothing named was left, and nothing holds the pages: the kernel freed them.
    assert list(tmp_path.iterdir()) == []
    # Nor a temporary file of the fallback's in /dev/shm. Only its names
    # count: tests running beside this one make aioflux's own there (a
    # Parquet dataset's row groups, the rate table).
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert not {f for f in after - before if f.startswith("tmp")}
    assert holders(link, int(inode)) == []
