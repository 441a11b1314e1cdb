"""What is specific to the local-filesystem backend (``LocalStore``).

The operations every backend shares are in test_client_conformance.py; here
are the file-specific promises: atomic publication (temporary file, check,
fsync, rename), temporary files as open uploads, the crc32c kept in an
extended attribute, generations as modification times, listing and
directory semantics, error mapping, and the engines and ``aioflux.open`` on
files.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import multiprocessing
import os
import pickle
import shutil
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import aioflux
from aioflux import (
    ChecksumMismatch,
    ClientConfig,
    Conflict,
    InvalidArgument,
    InvalidURL,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    ReaderOptions,
    StorageError,
    WriterOptions,
)
from aioflux._core.integrity.crc import Crc32c, crc32c
from aioflux._core.records.urls import parse_url
from aioflux._engines.clean import clean_bucket
from aioflux._engines.reader import ObjectReader
from aioflux._engines.writer import ObjectWriter
from aioflux.local import LocalStore, _files, _listing, _writes
from aioflux.local._upload import LocalUpload

XATTR = "user.aioflux.crc32c"
KiB = 1024
MiB = 1024 * KiB


@dataclass
class Space:
    """A LocalStore and a directory of it: ``root`` is the path of object
    name ``prefix`` (``bucket`` is the first directory of the path)."""

    store: LocalStore
    bucket: str
    prefix: str
    root: Path

    def n(self, name: str) -> str:
        return self.prefix + name

    def path(self, name: str) -> Path:
        return self.root / name

    def url(self, name: str) -> str:
        return f"file://{self.root}/{name}"

    def files(self) -> list[str]:
        """Every file below ``root`` (temporary ones included), relative."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*")
                      if p.is_file())


def _space(tmp_path: Path, store: LocalStore | None = None) -> Space:
    # pytest owns tmp_path; a delete removes the directories it empties, so
    # the objects live one level down and tmp_path keeps a file of its own.
    (tmp_path / "keep").write_bytes(b"")
    root = tmp_path / "objects"
    bucket, prefix = parse_url(str(root) + "/")
    return Space(store or LocalStore(ClientConfig(max_concurrency=16)), bucket, prefix, root)


@pytest.fixture
async def space(tmp_path: Path) -> AsyncIterator[Space]:
    local = _space(tmp_path)
    async with local.store:
        yield local


@pytest.fixture
def sync_space(tmp_path: Path) -> Space:
    return _space(tmp_path)


def _xattr(path: Path) -> tuple[int, int, int]:
    size, mtime_ns, value = struct.unpack(">QQI", os.getxattr(path, XATTR))
    return size, mtime_ns, value


def _rewrite_in_place(path: Path, data: bytes, *, keep_mtime: bool) -> None:
    """What another program does: overwrite the file's bytes in place."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.write(data)
    if keep_mtime:
        # As when the rewrite lands in the same tick of the file clock.
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))


# -- atomic writes ----------------------------------------------------------------


async def test_write_is_a_rename_of_a_checked_temporary(space: Space,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []
    replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append((src, dst))
        assert Path(src).read_bytes() == b"payload"  # complete before it is visible
        assert not Path(dst).exists()
        replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    info = await space.store.write(space.bucket, space.n("d/obj"), b"payload")
    [(src, dst)] = seen
    assert dst == str(space.path("d/obj"))
    assert Path(src).parent == space.path("d")  # same directory: rename is atomic
    assert Path(src).name.startswith(".obj" + _files.TEMP_MARK)
    assert space.path("d/obj").read_bytes() == b"payload"
    assert space.files() == ["d/obj"]
    assert info.crc32c == crc32c(b"payload")


@pytest.mark.parametrize("failing", ["fsync", "replace", "pwrite"])
async def test_failed_write_publishes_nothing(space: Space, monkeypatch: pytest.MonkeyPatch,
                                              failing: str) -> None:
    store, bucket, name = space.store, space.bucket, space.n("ckpt")
    await store.write(bucket, name, b"old contents")

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, failing, broken)
    with pytest.raises(StorageError, match="Input/output error") as info:
        await store.write(bucket, name, os.urandom(10_000))
    assert (info.value.operation, info.value.name) == ("write", name)
    assert info.value.reason == "EIO"
    monkeypatch.undo()
    assert await store.read(bucket, name) == b"old contents"
    assert space.files() == ["ckpt"]  # no temporary file left behind
    assert await store.list_multipart_uploads(bucket, space.prefix) == []


async def test_write_into_a_new_directory_that_fails_leaves_no_object(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(StorageError, match="No space left"):
        await space.store.write(space.bucket, space.n("new/dir/obj"), b"x" * 100)
    monkeypatch.undo()
    assert not await space.store.exists(space.bucket, space.n("new/dir/obj"))
    assert [o async for o in space.store.list_objects(space.bucket, space.prefix)] == []
    assert space.files() == []


async def test_readback_mismatch_publishes_nothing(space: Space,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The bytes that reached the file are read back before the rename: a
    # short or torn write is caught there, not by the next reader.
    pwrite = os.pwrite

    def torn(fd: int, data: memoryview, offset: int) -> int:
        return pwrite(fd, bytes(data[:len(data) // 2]) + b"\0" * (len(data) - len(data) // 2),
                      offset)

    monkeypatch.setattr(os, "pwrite", torn)
    with pytest.raises(ChecksumMismatch, match="nothing was published"):
        await space.store.write(space.bucket, space.n("torn"), os.urandom(4096))
    monkeypatch.undo()
    assert not space.path("torn").exists()
    assert space.files() == []


async def test_aborted_streaming_upload_leaves_nothing(space: Space) -> None:
    store, bucket, name = space.store, space.bucket, space.n("up/big")
    upload = store.start_upload(bucket, name, part_size=64 * KiB)
    await upload.put(2, memoryview(os.urandom(64 * KiB)))
    await upload.put(1, memoryview(os.urandom(64 * KiB)))
    [temp] = space.files()
    assert temp.startswith("up/.big" + _files.TEMP_MARK)
    assert [o async for o in store.list_objects(bucket, space.prefix)] == []
    await upload.abort()
    assert space.files() == []
    with pytest.raises(InvalidArgument, match="finished or aborted"):
        await upload.put(3, memoryview(b"late"))
    assert space.files() == []  # a late part does not bring the file back


async def test_an_abort_removes_its_temporary_off_the_event_loop(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # Unlinking a large temporary frees its extents (1 GiB on ext4: 0.2 s)
    # and an NFS remove is a round trip: on the loop, every transfer waited.
    # An abort cancelled (twice) still removes it before it returns.
    unlink = _writes.unlink_quietly
    removed_on: list[str] = []
    started, release = threading.Event(), threading.Event()

    def blocking_unlink(path: str) -> None:
        removed_on.append(threading.current_thread().name)
        started.set()
        release.wait(30)  # a guard against a hang: the test sets it
        unlink(path)

    monkeypatch.setattr(_writes, "unlink_quietly", blocking_unlink)
    for cancels in (0, 2):
        started.clear()
        release.clear()
        upload = space.store.start_upload(space.bucket, space.n("big"), part_size=KiB)
        await upload.put(1, memoryview(b"x" * KiB))
        aborting = asyncio.ensure_future(upload.abort())
        while not started.is_set():  # the loop turns while the removal blocks
            await asyncio.sleep(0.001)
        for _ in range(cancels):
            aborting.cancel()
            await asyncio.sleep(0)
        assert not aborting.done()  # it waits for the removal
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await aborting
        assert space.files() == []
    assert [name.startswith("aioflux-local") for name in removed_on] == [True, True]


async def test_abort_while_the_temporary_is_being_created(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer cancels its parts, then aborts: a first part cancelled
    # while its thread creates the temporary file must not leave that file.
    open_temp = _writes.open_temp
    created = threading.Event()

    def slow_open_temp(bucket: str, name: str) -> tuple[str, int]:
        made = open_temp(bucket, name)
        created.set()
        time.sleep(0.3)
        return made

    monkeypatch.setattr(_writes, "open_temp", slow_open_temp)
    upload = space.store.start_upload(space.bucket, space.n("slow"), part_size=KiB)
    part = asyncio.ensure_future(upload.put(1, memoryview(b"x" * KiB)))
    await asyncio.to_thread(created.wait, 10)
    part.cancel()
    with pytest.raises(asyncio.CancelledError):
        await part
    await upload.abort()
    assert space.files() == []


async def test_failed_creation_of_a_cancelled_part_is_not_logged(
        space: Space, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    started = threading.Event()

    def failing_open_temp(bucket: str, name: str) -> tuple[str, int]:
        started.set()
        time.sleep(0.2)
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(_writes, "open_temp", failing_open_temp)
    upload = space.store.start_upload(space.bucket, space.n("denied"), part_size=KiB)
    part = asyncio.ensure_future(upload.put(1, memoryview(b"x" * KiB)))
    await asyncio.to_thread(started.wait, 10)
    part.cancel()
    with pytest.raises(asyncio.CancelledError):
        await part
    await upload.abort()
    del upload, part
    gc.collect()
    await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text


async def test_finish_with_a_missing_part_publishes_nothing(space: Space) -> None:
    store, bucket, name = space.store, space.bucket, space.n("holes")
    data = os.urandom(3 * 64 * KiB + 5)
    upload = store.start_upload(bucket, name, part_size=64 * KiB)
    await upload.put(1, memoryview(data)[:64 * KiB])
    await upload.put(3, memoryview(data)[2 * 64 * KiB:3 * 64 * KiB])  # part 2 never came
    expected = Crc32c()
    expected.update(data)
    with pytest.raises(ChecksumMismatch, match="nothing was published"):
        await upload.finish(4, memoryview(data)[3 * 64 * KiB:], expected)
    assert space.files() == []
    await upload.abort()  # after a failed finish: harmless


def test_exception_in_open_body_publishes_nothing(sync_space: Space) -> None:
    sync_space.root.mkdir()
    (sync_space.root / "model.pt").write_bytes(b"previous")
    with pytest.raises(ZeroDivisionError):
        with aioflux.open(sync_space.url("model.pt"), "wb",
                          writer=WriterOptions(part_size=256 * KiB)) as f:
            f.write(os.urandom(MiB + 3))
            1 / 0  # noqa: B018
    assert (sync_space.root / "model.pt").read_bytes() == b"previous"
    assert sync_space.files() == ["model.pt"]


# -- temporary files as open uploads ---------------------------------------------


async def test_temporaries_are_skipped_listed_and_aborted(space: Space) -> None:
    store, bucket = space.store, space.bucket
    await store.write(bucket, space.n("a/done"), b"done")
    first = store.start_upload(bucket, space.n("a/left"), part_size=KiB)
    await first.put(1, memoryview(b"x" * KiB))
    second = store.start_upload(bucket, space.n("b/only"), part_size=KiB)
    await second.put(1, memoryview(b"y" * KiB))
    # Listings see finished files only; a directory holding only a
    # temporary file is no prefix.
    assert [o.name async for o in store.list_objects(bucket, space.prefix)] == [
        space.n("a/done")]
    pages = [p async for p in store.list(bucket, space.prefix, delimiter="/")]
    assert pages[0].prefixes == [space.n("a/")]
    assert not await store.exists(bucket, space.n("a/left"))
    uploads = await store.list_multipart_uploads(bucket, space.prefix)
    assert [u.name for u in uploads] == [space.n("a/left"), space.n("b/only")]
    assert all(u.upload_id.startswith(".") and _files.TEMP_MARK in u.upload_id
               for u in uploads)
    assert [u.name for u in await store.list_multipart_uploads(bucket, space.n("b/"))] == [
        space.n("b/only")]
    with pytest.raises(InvalidArgument, match="not one of its temporary files"):
        await store.abort_multipart(bucket, space.n("a/left"), uploads[1].upload_id)
    with pytest.raises(InvalidArgument, match="not one of its temporary files"):
        await store.abort_multipart(bucket, space.n("a/left"), "../../keep")
    with pytest.raises(InvalidURL):
        await store.abort_multipart(bucket, space.n("../keep"), ".keep" + _files.TEMP_MARK)
    await store.abort_multipart(bucket, uploads[0].name, uploads[0].upload_id)
    assert space.files() == ["a/done", f"b/{uploads[1].upload_id}"]
    report = await clean_bucket(store, bucket, space.prefix, older_than=0)
    assert [u.name for u in report.uploads] == [space.n("b/only")]
    assert report.errors == []
    assert space.files() == ["a/done"]


async def test_killed_writer_leaves_only_a_temporary(space: Space) -> None:
    # A writer process killed mid-save: its temporary file stays, the
    # previous object stays whole, and the leftover is an open upload.
    space.root.mkdir()
    (space.root / "ckpt").write_bytes(b"previous")
    script = (
        "import os, signal, sys, time\n"
        "from aioflux._engines.writer import ObjectWriter\n"
        "from aioflux import LocalStore, WriterOptions\n"
        "w = ObjectWriter(LocalStore(), sys.argv[1], sys.argv[2],\n"
        "                options=WriterOptions(part_size=65536))\n"
        "w.write(os.urandom(300000))\n"
        "folder = os.path.dirname('/' + sys.argv[1] + '/' + sys.argv[2])\n"
        "while not any(os.stat(folder + '/' + f).st_size >= 4 * 65536\n"
        "              for f in os.listdir(folder) if '.aioflux-tmp-' in f):\n"
        "    time.sleep(0.01)  # the four full parts have landed\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, space.bucket, space.n("ckpt"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == -9, err.decode()
    assert (space.root / "ckpt").read_bytes() == b"previous"
    temps = [f for f in space.files() if _files.TEMP_MARK in f]
    assert len(temps) == 1 and (space.root / temps[0]).stat().st_size >= 4 * 65536
    assert [o.name async for o in space.store.list_objects(space.bucket, space.prefix)] == [
        space.n("ckpt")]
    [upload] = await space.store.list_multipart_uploads(space.bucket, space.prefix)
    assert (upload.name, upload.upload_id) == (space.n("ckpt"), temps[0])


# -- crc32c in an extended attribute -------------------------------------------------


async def test_crc32c_is_recorded_with_size_and_mtime(space: Space) -> None:
    data = os.urandom(12_345)
    info = await space.store.write(space.bucket, space.n("x"), data)
    st = space.path("x").stat()
    assert _xattr(space.path("x")) == (len(data), st.st_mtime_ns, crc32c(data))
    assert info.generation == st.st_mtime_ns
    listed = [o async for o in space.store.list_objects(space.bucket, space.prefix)]
    assert [(o.crc32c, o.generation) for o in listed] == [(crc32c(data), st.st_mtime_ns)]


async def test_same_size_rewrite_in_the_same_tick_is_detected(space: Space) -> None:
    store, bucket, name = space.store, space.bucket, space.n("model")
    data = os.urandom(50_000)
    await store.write(bucket, name, data)
    other = bytearray(data)
    other[25_000] ^= 0xFF
    _rewrite_in_place(space.path("model"), bytes(other), keep_mtime=True)
    # Size and mtime still match the record: the bytes are checked against it.
    assert (await store.stat(bucket, name)).crc32c == crc32c(data)
    with pytest.raises(ChecksumMismatch, match="recorded") as info:
        await store.read(bucket, name)
    assert (info.value.operation, info.value.name) == ("read", name)
    with pytest.raises(ChecksumMismatch):
        await store.copy(bucket, name, bucket, space.n("copy"))
    assert not space.path("copy").exists()
    with pytest.raises(ChecksumMismatch):
        with aioflux.open(space.url("model"), "rb", reader=ReaderOptions(block_size=8 * KiB)) as f:
            f.read()
    # A range is not checked (the record is of the whole file), and a store
    # told not to verify reads what is there.
    assert await store.read(bucket, name, start=25_000, end=25_001) == bytes(other[25_000:25_001])
    unchecked = LocalStore(ClientConfig(verify_crc32c=False))
    assert await unchecked.read(bucket, name) == bytes(other)


async def test_rewrite_with_a_new_mtime_is_read_with_the_length_check_only(
        space: Space) -> None:
    store, bucket, name = space.store, space.bucket, space.n("model")
    data = os.urandom(50_000)
    old = await store.write(bucket, name, data)
    other = os.urandom(50_000)
    _rewrite_in_place(space.path("model"), other, keep_mtime=False)
    # The record no longer describes the file: not ours, no crc32c to check.
    info = await store.stat(bucket, name)
    assert (info.size, info.crc32c) == (50_000, None)
    assert info.generation != old.generation
    assert await store.read(bucket, name) == other
    got = await store.fetch(bucket, name, want_crc=True)
    assert got.crc == crc32c(other)
    # The length is still checked: a listing's size that no longer holds fails.
    with open(space.path("model"), "r+b") as f:
        f.truncate(40_000)
    with pytest.raises(ChecksumMismatch, match="expected 50000"):
        await store.fetch(bucket, name, size=info.size)


async def test_corrupted_file_with_matching_record_is_a_mismatch(space: Space) -> None:
    # Bit rot: the bytes change, size and mtime do not.
    data = os.urandom(1000)
    await space.store.write(space.bucket, space.n("rot"), data)
    path = space.path("rot")
    st = path.stat()
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, bytes([data[0] ^ 1]), 0)
    os.close(fd)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ChecksumMismatch):
        await space.store.read(space.bucket, space.n("rot"))
    listed = [o async for o in space.store.list_objects(space.bucket, space.prefix)]
    with pytest.raises(ChecksumMismatch):  # the engines pass the listing's crc
        await space.store.fetch(space.bucket, listed[0].name, size=listed[0].size,
                                crc=listed[0].crc32c)


async def test_file_written_by_something_else_has_no_crc(space: Space) -> None:
    space.root.mkdir()
    (space.root / "foreign").write_bytes(b"from elsewhere")
    info = await space.store.stat(space.bucket, space.n("foreign"))
    assert (info.size, info.crc32c) == (14, None)
    assert await space.store.read(space.bucket, space.n("foreign")) == b"from elsewhere"
    copied = await space.store.copy(space.bucket, space.n("foreign"), space.bucket,
                                    space.n("copied"))
    assert copied.crc32c == crc32c(b"from elsewhere")  # recorded from now on
    assert _xattr(space.path("copied"))[2] == crc32c(b"from elsewhere")


# -- generations ---------------------------------------------------------------------


async def test_only_one_of_concurrent_create_only_writers_wins(space: Space) -> None:
    store, bucket, name = space.store, space.bucket, space.n("lock")
    payloads = [bytes([i]) * (1000 + i) for i in range(8)]
    results = await asyncio.gather(
        *(store.write(bucket, name, p, if_generation_match=0) for p in payloads),
        return_exceptions=True)
    winners = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, PreconditionFailed) for r in losers), losers
    assert await store.read(bucket, name) == payloads[winners[0]]
    assert space.files() == ["lock"]  # the losers' temporaries are gone


def test_create_only_across_processes(sync_space: Space) -> None:
    # Two processes race for the same name; exactly one publishes.
    sync_space.root.mkdir()
    script = (
        "import asyncio, sys\n"
        "from aioflux import PreconditionFailed\n"
        "from aioflux import LocalStore, WriterOptions\n"
        "async def main():\n"
        "    try:\n"
        "        await LocalStore().write(sys.argv[1], sys.argv[2], sys.argv[3].encode(),\n"
        "                                 if_generation_match=0)\n"
        "    except PreconditionFailed:\n"
        "        sys.exit(3)\n"
        "asyncio.run(main())\n"
    )
    for _ in range(3):
        name = f"race-{uuid.uuid4().hex[:6]}"
        procs = [subprocess.Popen([sys.executable, "-c", script, sync_space.bucket,
                                   sync_space.n(name), f"writer-{i}"]) for i in range(2)]
        codes = sorted(p.wait(timeout=60) for p in procs)
        assert codes == [0, 3]
        assert (sync_space.root / name).read_bytes() in (b"writer-0", b"writer-1")


async def test_generation_moves_even_within_one_clock_tick(space: Space) -> None:
    # Make the current file look newer than the clock: the next write must
    # still get a later generation, or a precondition could not tell them apart.
    store, bucket, name = space.store, space.bucket, space.n("gen")
    first = await store.write(bucket, name, b"one")
    future = first.generation + 10 * 10**9
    os.utime(space.path("gen"), ns=(future, future))
    second = await store.write(bucket, name, b"two", if_generation_match=future)
    assert second.generation > future
    assert (await store.stat(bucket, name)).generation == second.generation
    assert _xattr(space.path("gen"))[1] == second.generation  # the record follows
    assert (await store.stat(bucket, name)).crc32c == crc32c(b"two")


async def test_preconditions_on_generation(space: Space) -> None:
    store, bucket, name = space.store, space.bucket, space.n("g")
    with pytest.raises(PreconditionFailed):  # absent: generation 0
        await store.write(bucket, name, b"x", if_generation_match=123)
    assert space.files() == []
    info = await store.write(bucket, name, b"x")
    with pytest.raises(PreconditionFailed):
        await store.delete(bucket, name, if_generation_match=0)
    with pytest.raises(NotFound, match="gone"):
        await store.read(bucket, name, generation=info.generation - 1)
    assert await store.read(bucket, name, generation=info.generation) == b"x"


# -- listing and directories -----------------------------------------------------------


async def test_listing_sorts_names_not_the_directory_walk(space: Space) -> None:
    store, bucket, n = space.store, space.bucket, space.n
    # Byte order puts "a-b" (0x2d) before "a/b" (0x2f) before "a0" (0x30); a
    # walk meets the directory "a" as one entry.
    names = ["a0", "a/b/c", "a-b", "a/b", "a.x", "a/b-c", "a/b0", "A", "a~"]
    with pytest.raises(Conflict):  # "a/b" is a directory once "a/b/c" exists
        for name in names:
            await store.write(bucket, n(name), name.encode())
    names.remove("a/b")
    for name in names:
        if not space.path(name).exists():
            await store.write(bucket, n(name), name.encode())
    listed = [o.name async for o in store.list_objects(bucket, space.prefix)]
    assert listed == sorted(n(name) for name in names)
    assert listed == [n(x) for x in ["A", "a-b", "a.x", "a/b-c", "a/b/c", "a/b0", "a0", "a~"]]


async def test_delimiters_and_pagination(space: Space) -> None:
    store, bucket, n = space.store, space.bucket, space.n
    for name in ["x/1", "x/2", "x/y/3", "x/y/z/4", "x-5", "w", "x/y-6"]:
        await store.write(bucket, n(name), b".")
    (space.root / "x" / "empty" / "deeper").mkdir(parents=True)
    pages = [p async for p in store.list(bucket, n("x"), delimiter="/")]
    assert [o.name for p in pages for o in p.objects] == [n("x-5")]
    assert pages[0].prefixes == [n("x/")]
    pages = [p async for p in store.list(bucket, n("x/"), delimiter="/")]
    assert [o.name for p in pages for o in p.objects] == [n("x/1"), n("x/2"), n("x/y-6")]
    assert pages[0].prefixes == [n("x/y/")]  # "x/empty/" holds no object
    # A delimiter other than "/" groups within names, like on GCS.
    pages = [p async for p in store.list(bucket, n(""), delimiter="-")]
    assert pages[0].prefixes == [n("x-"), n("x/y-")]
    # Pages of 2, each with a token but the last; prefixes once.
    pages = [p async for p in store.list(bucket, n("x/"), page_size=2)]
    assert [[o.name for o in p.objects] for p in pages] == [
        [n("x/1"), n("x/2")], [n("x/y-6"), n("x/y/3")], [n("x/y/z/4")]]
    assert [p.next_page_token is None for p in pages] == [False, False, True]
    ranged = [o.name async for o in store.list_objects(bucket, n("x/"), start_offset=n("x/2"),
                                                        end_offset=n("x/y/z"))]
    assert ranged == [n("x/2"), n("x/y-6"), n("x/y/3")]
    pages = [p async for p in store.list(bucket, n("x/"), delimiter="/",
                                         start_offset=n("x/y/z/"))]
    assert pages[0].prefixes == [n("x/y/")]  # only x/y/z/4 is in range
    assert [o.name for p in pages for o in p.objects] == []


def test_list_files_walks_the_tree_once(sync_space: Space,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # A listing walks the prefix's whole tree wherever it starts, so the
    # parallel listers' split ranges, each listed again from its cursor,
    # walked it hundreds of times (100k files: 145 s, one walk 0.9 s).
    root = sync_space.root
    names = [f"d{d}/f{f:03d}" for d in range(4) for f in range(600)]
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")
    walks: list[str] = []
    walk = _listing.walk

    def counted(*args: object) -> object:
        walks.append(str(args[1]))
        return walk(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_listing, "walk", counted)
    listed = list(aioflux.list_files(f"{root}/", client=sync_space.store))
    assert sorted(listed) == [sync_space.url(name) for name in names]
    assert walks == [sync_space.prefix]


async def test_a_file_deleted_between_pages_is_not_listed(space: Space) -> None:
    store, bucket, n = space.store, space.bucket, space.n
    for name in ["1", "2", "3", "4"]:
        await store.write(bucket, n(name), name.encode())
    pages = store.list(bucket, space.prefix, page_size=2)
    first = await anext(pages)
    assert [o.name for o in first.objects] == [n("1"), n("2")]
    await store.delete(bucket, n("3"))  # after the walk, before its page
    rest = [o.name async for p in pages for o in p.objects]
    assert rest == [n("4")]  # stat-ed with its page: gone means not listed


async def test_symlinks_to_files_are_listed_links_to_directories_not_followed(
        space: Space) -> None:
    await space.store.write(space.bucket, space.n("real/f"), b"f")
    (space.root / "link-f").symlink_to(space.root / "real" / "f")
    (space.root / "link-dir").symlink_to(space.root / "real")
    (space.root / "real" / "loop").symlink_to(space.root)
    listed = [o.name async for o in space.store.list_objects(space.bucket, space.prefix)]
    assert listed == [space.n("link-f"), space.n("real/f")]


async def test_delete_of_a_symlink_removes_the_link_never_its_target(space: Space) -> None:
    await space.store.write(space.bucket, space.n("real/f"), b"f")
    await space.store.write(space.bucket, space.n("real/sub/g"), b"g")
    (space.root / "link-dir").symlink_to(space.root / "real")
    (space.root / "link-f").symlink_to(space.root / "real" / "f")
    await space.store.delete(space.bucket, space.n("link-dir"))
    await space.store.delete(space.bucket, space.n("link-f"))
    assert not (space.root / "link-dir").is_symlink()
    assert not (space.root / "link-f").is_symlink()
    assert space.files() == ["real/f", "real/sub/g"]
    assert await space.store.read(space.bucket, space.n("real/sub/g")) == b"g"


async def test_missing_bucket_directory(tmp_path: Path) -> None:
    store = LocalStore()
    bucket = f"no-such-dir-{uuid.uuid4().hex}"
    with pytest.raises(NotFound, match=bucket):
        [o async for o in store.list_objects(bucket)]
    assert await store.list_multipart_uploads(bucket) == []
    with pytest.raises(NotFound, match=f"no directory /{bucket}"):
        await store.write(bucket, "run/ckpt", b"x")
    upload = store.start_upload(bucket, "run/streamed", part_size=KiB)
    with pytest.raises(NotFound):
        await upload.put(1, memoryview(b"x" * KiB))
    await upload.abort()
    assert not os.path.exists(f"/{bucket}")  # no new directory at the root


async def test_a_missing_directory_is_not_found_on_every_path(space: Space) -> None:
    # NotFound is an OSError too: a handler mapping OSErrors kept its kind
    # and said the message once, whatever op it was caught under.
    from aioflux.local._file_writer import FileWriter
    from aioflux.local._reader import FileReader

    bucket = f"no-such-dir-{uuid.uuid4().hex}"
    await space.store.write(space.bucket, space.n("src"), b"x")
    with pytest.raises(NotFound) as copied:
        await space.store.copy(space.bucket, space.n("src"), bucket, "dst")
    assert str(copied.value) == f"copy file:///{bucket}/dst failed: no directory /{bucket}"
    failed = copied.value
    assert (failed.operation, failed.bucket, failed.name) == ("copy", bucket, "dst")
    with pytest.raises(NotFound) as written:
        FileWriter(bucket, "dst")
    assert str(written.value) == f"write file:///{bucket}/dst failed: no directory /{bucket}"
    (space.root / "adir").mkdir()
    with pytest.raises(NotFound) as read:
        FileReader(space.bucket, space.n("adir"))
    assert str(read.value).count("failed") == 1


@pytest.fixture
def top_level_bucket() -> Iterator[str]:
    # The bucket directory must be one the test may watch empty out: a
    # directory of its own at the root of the filesystem.
    bucket = f"aioflux-conf-{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(f"/{bucket}")
    except OSError as exc:
        pytest.skip(f"cannot create a directory at / ({exc.strerror})")
    yield bucket
    shutil.rmtree(f"/{bucket}", ignore_errors=True)


async def test_delete_removes_emptied_directories_only(top_level_bucket: str) -> None:
    store, bucket = LocalStore(), top_level_bucket
    await store.write(bucket, "a/b/c/one", b"1")
    await store.write(bucket, "a/two", b"2")
    await store.delete(bucket, "a/b/c/one")
    # "a/b/c" and "a/b" emptied and went; "a" still holds "two".
    assert sorted(os.listdir(f"/{bucket}")) == ["a"]
    assert os.listdir(f"/{bucket}/a") == ["two"]
    await store.delete(bucket, "a/two")
    assert os.listdir(f"/{bucket}") == []  # the bucket directory itself stays
    assert os.path.isdir(f"/{bucket}")
    await store.write(bucket, "top", b"t")
    await store.delete(bucket, "top")
    assert os.path.isdir(f"/{bucket}")
    # A directory that holds something else than objects is not removed.
    await store.write(bucket, "d/obj", b"x")
    os.mkdir(f"/{bucket}/d/sub")
    await store.delete(bucket, "d/obj")
    assert os.listdir(f"/{bucket}/d") == ["sub"]


async def test_directories_are_not_objects(space: Space) -> None:
    store, bucket, n = space.store, space.bucket, space.n
    await store.write(bucket, n("dir/f"), b"f")
    for call in (store.stat(bucket, n("dir")), store.read(bucket, n("dir")),
                 store.delete(bucket, n("dir")),
                 store.copy(bucket, n("dir"), bucket, n("c"))):
        with pytest.raises(NotFound):
            await call
    with pytest.raises(NotFound):  # through a file: no such object either
        await store.read(bucket, n("dir/f/g"))
    await store.delete(bucket, n("dir"), missing_ok=True)
    assert space.files() == ["dir/f"]


async def test_a_file_and_a_directory_cannot_share_a_path(space: Space) -> None:
    store, bucket, n = space.store, space.bucket, space.n
    await store.write(bucket, n("a"), b"file")
    with pytest.raises(Conflict, match="cannot share a path") as info:
        await store.write(bucket, n("a/b"), b"under a file")
    assert (info.value.operation, info.value.name) == ("write", n("a/b"))
    await store.write(bucket, n("d/e"), b"e")
    with pytest.raises(Conflict):
        await store.write(bucket, n("d"), b"over a directory")
    with pytest.raises(Conflict):
        await store.copy(bucket, n("a"), bucket, n("d"))
    # Create-only too: no object is there (stat says NotFound), so it is not
    # PreconditionFailed ("the file exists", as if another writer had won).
    assert not await store.exists(bucket, n("d"))
    with pytest.raises(Conflict, match="cannot share a path"):
        await store.write(bucket, n("d"), b"over a directory", if_generation_match=0)
    upload = store.start_upload(bucket, n("d"), if_generation_match=0)
    expected = Crc32c()
    expected.update(b"streamed")
    with pytest.raises(Conflict, match="cannot share a path"):
        await upload.finish(1, memoryview(b"streamed"), expected)
    assert space.files() == ["a", "d/e"]


async def test_written_files_take_their_mode_from_the_umask(space: Space) -> None:
    # As open() makes files: under a shared directory's umask 002 they are
    # group-writable like the directories the write makes (a fixed 0o644
    # also kept the group's aioflux writers from locking them for their
    # preconditions: the lock wants the file open for writing).
    store, bucket, n = space.store, space.bucket, space.n
    old = os.umask(0o002)
    try:
        await store.write(bucket, n("run/written"), b"x")
        await store.copy(bucket, n("run/written"), bucket, n("run/copied"))
        upload = store.start_upload(bucket, n("run/streamed"))
        expected = Crc32c()
        expected.update(b"x")
        await upload.finish(1, memoryview(b"x"), expected)
        (space.root / "run" / "by-open").write_bytes(b"x")
    finally:
        os.umask(old)

    def mode(name: str) -> int:
        return space.path(name).stat().st_mode & 0o777

    assert mode("run/by-open") == 0o664
    assert [mode(f"run/{name}") for name in ("written", "copied", "streamed")] == [0o664] * 3
    assert mode("run") == 0o775


async def test_a_file_written_over_keeps_its_mode(space: Space) -> None:
    # As open(path, "wb") keeps it: a checkpoint made private stays private
    # through the next save, whatever the umask.
    from aioflux.local._file_writer import FileWriter

    store, bucket, n = space.store, space.bucket, space.n
    for name in ("written", "copied", "saved"):
        await store.write(bucket, n(name), b"old")
        space.path(name).chmod(0o600)
    await store.write(bucket, n("written"), b"new")
    await store.copy(bucket, n("written"), bucket, n("copied"))
    writer = FileWriter(bucket, n("saved"))
    writer.write(b"new")
    writer.close()
    for name in ("written", "copied", "saved"):
        assert space.path(name).stat().st_mode & 0o777 == 0o600, name
        assert await store.read(bucket, n(name)) == b"new"


async def test_a_copy_names_the_side_that_failed(space: Space) -> None:
    # The conflict is the destination's: the source "a" is a plain file.
    # A source whose path runs through a file is a missing source, as a
    # read of it is, not a conflict.
    store, bucket, n = space.store, space.bucket, space.n
    await store.write(bucket, n("a"), b"file")
    await store.write(bucket, n("d/e"), b"e")
    for dest in ("d", "a/b"):
        with pytest.raises(Conflict, match="cannot share a path") as conflict:
            await store.copy(bucket, n("a"), bucket, n(dest))
        assert (conflict.value.operation, conflict.value.name) == ("copy", n(dest))
        assert space.url(dest) in str(conflict.value)
    with pytest.raises(NotFound) as missing:
        await store.copy(bucket, n("a/x"), bucket, n("copied"))
    assert (missing.value.operation, missing.value.name) == ("copy", n("a/x"))
    assert space.files() == ["a", "d/e"]


async def test_write_survives_a_delete_removing_its_new_directory(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # A delete of the last file of a directory removes the directory; a
    # write that has just made it must make it again, not fail.
    from aioflux.local import _writes

    make = _writes._make_directories
    raced: list[str] = []
    target = str(space.path("fresh/dir"))

    def make_then_lose_it(path: str) -> None:
        make(path)
        if path == target and len(raced) < 2:
            raced.append(path)
            os.rmdir(path)  # the concurrent delete's cleanup

    monkeypatch.setattr(_writes, "_make_directories", make_then_lose_it)
    info = await space.store.write(space.bucket, space.n("fresh/dir/obj"), b"landed")
    assert raced == [str(space.path("fresh/dir"))] * 2
    monkeypatch.undo()
    assert info.size == 6
    assert space.path("fresh/dir/obj").read_bytes() == b"landed"


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "ro"
    directory.mkdir()
    (directory / "existing").write_bytes(b"kept")
    directory.chmod(0o555)
    immutable = False
    if os.geteuid() == 0:
        # Root ignores permission bits: an immutable directory refuses it too.
        done = subprocess.run(["chattr", "+i", str(directory)], capture_output=True)
        if done.returncode:
            directory.chmod(0o755)
            pytest.skip(f"root ignores modes and chattr +i failed: {done.stderr.decode()}")
        immutable = True
    yield directory
    if immutable:
        subprocess.run(["chattr", "-i", str(directory)], check=True)
    directory.chmod(0o755)


async def test_read_only_directory_is_permission_denied(read_only_dir: Path) -> None:
    store = LocalStore()
    bucket, prefix = parse_url(str(read_only_dir) + "/")
    with pytest.raises(PermissionDenied) as info:
        await store.write(bucket, prefix + "new", b"x")
    assert (info.value.operation, info.value.name) == ("write", prefix + "new")
    assert str(read_only_dir / "new") in str(info.value)
    with pytest.raises(PermissionDenied):
        await store.delete(bucket, prefix + "existing")
    upload = store.start_upload(bucket, prefix + "streamed", part_size=KiB)
    with pytest.raises(PermissionDenied):
        await upload.put(1, memoryview(b"x" * KiB))
    await upload.abort()
    # A copy into it fails on its destination, not on the readable source.
    source = parse_url(str(read_only_dir.parent / "source"))
    await store.write(*source, b"x")
    with pytest.raises(PermissionDenied) as copying:
        await store.copy(*source, bucket, prefix + "copied")
    assert (copying.value.operation, copying.value.name) == ("copy", prefix + "copied")
    assert str(read_only_dir / "copied") in str(copying.value)
    assert await store.read(bucket, prefix + "existing") == b"kept"
    assert sorted(os.listdir(read_only_dir)) == ["existing"]


# -- reads -------------------------------------------------------------------------------


async def test_ranges_and_into(space: Space) -> None:
    store, bucket, name = space.store, space.bucket, space.n("r")
    data = os.urandom(100_000)
    await store.write(bucket, name, data)
    assert await store.read(bucket, name, start=99_999) == data[-1:]
    assert await store.read(bucket, name, start=10, end=10**9) == data[10:]
    words = memoryview(bytearray(4 * 1000)).cast("I")  # a typed buffer: bytes are bytes
    assert await store.read(bucket, name, start=4, end=4004, into=words) == 4000
    assert words.tobytes() == data[4:4004]
    big = bytearray(200_000)
    assert await store.read(bucket, name, into=big) == 100_000
    assert big[:100_000] == data and big[100_000:] == bytes(100_000)
    with pytest.raises(InvalidArgument, match="do not fit"):
        await store.read(bucket, name, start=0, end=101, into=bytearray(100))
    with pytest.raises(InvalidArgument):
        await store.read(bucket, name, into=bytes(100_000))  # type: ignore[call-overload]


async def test_generation_pinned_read_of_a_replaced_file(space: Space) -> None:
    store, bucket, name = space.store, space.bucket, space.n("v")
    first = await store.write(bucket, name, b"version one")
    await store.write(bucket, name, b"version two")
    with pytest.raises(NotFound, match=f"generation {first.generation} is gone"):
        await store.fetch(bucket, name, generation=first.generation)


# -- engines and aioflux.open --------------------------------------------------------------


class _ReorderingStore(LocalStore):
    """A LocalStore whose streaming-upload parts complete late-first: part
    ``n`` waits ``(10 - n) ms``, so with several in flight they land out of
    order."""

    def __init__(self) -> None:
        super().__init__(ClientConfig(max_concurrency=16))
        self.landed: list[int] = []

    def start_upload(self, bucket: str, name: str, *,
                     content_type: str = "application/octet-stream",
                     part_size: int = 8 * MiB,
                     metadata: dict[str, str] | None = None) -> LocalUpload:
        upload = super().start_upload(bucket, name, content_type=content_type,
                                      part_size=part_size, metadata=metadata)
        put = upload.put

        async def late_put(number: int, data: memoryview, checksum: int | None = None) -> None:
            await asyncio.sleep(max(0, 10 - number) / 1000)
            await put(number, data, checksum)
            self.landed.append(number)

        upload.put = late_put  # type: ignore[method-assign]
        return upload


def test_object_writer_parts_out_of_order_and_reader(sync_space: Space) -> None:
    store = _ReorderingStore()
    bucket, name = sync_space.bucket, sync_space.n("engine/model.bin")
    data = os.urandom(5 * MiB + 12_345)
    with ObjectWriter(store, bucket, name, options=WriterOptions(part_size=256 * KiB,
                                                                 max_in_flight=6)) as w:
        for i in range(0, len(data), 300_007):  # writes straddle part boundaries
            w.write(data[i:i + 300_007])
    assert store.landed != sorted(store.landed)  # they did land out of order
    assert sorted(store.landed) == list(range(1, 21))
    assert w.stats.mode == "file" and w.stats.info is not None
    assert (w.stats.info.size, w.stats.info.crc32c) == (len(data), crc32c(data))
    assert sync_space.path("engine/model.bin").read_bytes() == data
    assert sync_space.files() == ["engine/model.bin"]
    with ObjectReader(store, bucket, name, options=ReaderOptions(block_size=100_000,
                                                                 read_ahead=4)) as r:
        assert r.read() == data
        r.seek(1_234_567)
        buf = bytearray(70_000)
        assert r.readinto(buf) == 70_000
        assert bytes(buf) == data[1_234_567:1_304_567]
        r.seek(-10, os.SEEK_END)
        assert r.read() == data[-10:]


@pytest.mark.parametrize("form", ["url", "path"])
def test_aioflux_open_round_trip(sync_space: Space, form: str) -> None:
    data = os.urandom(9 * MiB + 7)
    where = sync_space.url("open/ckpt.pt") if form == "url" else str(
        sync_space.path("open/ckpt.pt"))
    with aioflux.open(where, "wb", writer=WriterOptions(part_size=MiB, max_in_flight=4)) as f:
        for i in range(0, len(data), 777_777):
            f.write(data[i:i + 777_777])
    assert f.stats.mode == "file"  # type: ignore[attr-defined]
    assert f.stats.parts == 9  # type: ignore[attr-defined]
    assert sync_space.path("open/ckpt.pt").read_bytes() == data
    assert _xattr(sync_space.path("open/ckpt.pt"))[2] == crc32c(data)
    with aioflux.open(where, "rb", reader=ReaderOptions(block_size=MiB, read_ahead=3)) as r:
        assert r.read() == data
    with pytest.raises(NotFound):
        aioflux.open(sync_space.url("open/missing"), "rb")


def test_small_and_empty_writes_through_open(sync_space: Space) -> None:
    with aioflux.open(sync_space.url("small"), "wb") as f:
        f.write(b"hello")
    with aioflux.open(sync_space.url("empty"), "wb"):
        pass
    assert sync_space.path("small").read_bytes() == b"hello"
    assert sync_space.path("empty").read_bytes() == b""
    with aioflux.open(sync_space.url("empty"), "rb") as r:
        assert r.read() == b""
    assert sync_space.files() == ["empty", "small"]


def test_store_pickles_by_settings(sync_space: Space) -> None:
    store = LocalStore(ClientConfig(max_concurrency=3, verify_crc32c=False))

    async def use(s: LocalStore) -> bytes:
        await s.write(sync_space.bucket, sync_space.n("p"), b"pickled")
        return await s.read(sync_space.bucket, sync_space.n("p"))

    assert asyncio.run(use(store)) == b"pickled"  # now it holds a loop's limiter
    clone = pickle.loads(pickle.dumps(store))
    assert clone.config == store.config
    assert asyncio.run(use(clone)) == b"pickled"


def test_limiters_go_with_their_loops() -> None:
    store = LocalStore()

    async def touch() -> None:
        await store.exists("tmp", "aioflux-no-such-file")

    for _ in range(3):
        asyncio.run(touch())
    # A pool thread may still hold its last work item (and through its
    # callbacks the loop) for a moment after the loop ended, under load.
    deadline = time.monotonic() + 5
    gc.collect()
    while store._limits and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
    assert len(store._limits) == 0


def test_a_file_takes_more_parts_than_a_multipart_upload(sync_space: Space) -> None:
    # GCS caps a streaming upload at 10,000 parts; a file has no such limit.
    data = os.urandom(10_050 * 16 + 5)
    with ObjectWriter(LocalStore(), sync_space.bucket, sync_space.n("many"),
                      options=WriterOptions(part_size=16, max_in_flight=64)) as w:
        w.write(data)
    assert w.stats.parts == 10_050
    assert sync_space.path("many").read_bytes() == data


def test_open_with_a_store_of_ones_own(sync_space: Space) -> None:
    store = LocalStore(ClientConfig(verify_crc32c=False))
    with aioflux.open(sync_space.url("own"), "wb", client=store) as f:
        f.write(b"abc" * 1000)
    _rewrite_in_place(sync_space.path("own"), b"xyz", keep_mtime=True)
    # This store does not verify; the default one does.
    with aioflux.open(sync_space.url("own"), "rb", client=store) as r:
        assert r.read() == b"xyz" + b"abc" * 999
    with pytest.raises(ChecksumMismatch):
        with aioflux.open(sync_space.url("own"), "rb") as r:
            r.read()
    with pytest.raises(InvalidArgument, match="client must be"):
        aioflux.open(sync_space.url("own"), "rb", client="not a store")  # type: ignore[arg-type]


async def test_calls_overlap_up_to_max_concurrency(space: Space,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # On NFS every call waits on the server: 16 reads must be in flight at
    # once, not as many as the loop's default executor has threads (6 on 2
    # cores). Each read waits until all 16 have started.
    for i in range(16):
        await space.store.write(space.bucket, space.n(f"f{i}"), bytes([i]))
    together = threading.Barrier(16, timeout=20)
    read_file = _files.read_file

    def waiting_read(*args: object) -> object:
        together.wait()
        return read_file(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_files, "read_file", waiting_read)
    # As on NFS: no read is done in the loop's thread (see local/_inline.py).
    monkeypatch.setattr(space.store._placement, "of", lambda path: ("thread", -1))
    got = await asyncio.gather(*(space.store.read(space.bucket, space.n(f"f{i}"))
                                 for i in range(16)))
    assert got == [bytes([i]) for i in range(16)]
    assert len({t.name for t in threading.enumerate() if t.name.startswith("aioflux-local")}) >= 16


def test_forked_child_gets_threads_of_its_own(sync_space: Space) -> None:
    store = LocalStore()
    asyncio.run(store.write(sync_space.bucket, sync_space.n("forked"), b"parent"))
    time.sleep(0.2)  # the parent's worker thread is idle, ready for more work
    # A forked child inherits the very store object (nothing is pickled),
    # with the parent's executor but none of its threads.
    child = multiprocessing.get_context("fork").Process(
        target=_read_in_child, args=(store, sync_space.bucket, sync_space.n("forked")))
    child.start()
    child.join(60)
    assert child.exitcode == 0


def _read_in_child(store: LocalStore, bucket: str, name: str) -> None:
    data = asyncio.run(asyncio.wait_for(store.read(bucket, name), 20))
    os._exit(0 if data == b"parent" else 1)


async def test_names_of_temporary_files_are_reserved(space: Space) -> None:
    store, bucket, n = space.store, space.bucket, space.n
    reserved = n("d/.x" + _files.TEMP_MARK + "abc")
    await store.write(bucket, n("src"), b"s")
    for call in (lambda: store.write(bucket, reserved, b"x"),
                 lambda: store.copy(bucket, n("src"), bucket, reserved)):
        with pytest.raises(InvalidArgument, match="reserved"):
            await call()
    with pytest.raises(InvalidArgument, match="reserved"):
        store.start_upload(bucket, reserved)
    with pytest.raises(InvalidURL):  # no way out of the bucket directory
        store.start_upload(bucket, n("../escape"))
    assert space.files() == ["src"]


async def test_stream_reads_every_file_under_a_prefix(space: Space) -> None:
    store, bucket, n = space.store, space.bucket, space.n
    blobs = {n(f"s/{i:03d}"): os.urandom(100 + i) for i in range(120)}
    for name, data in blobs.items():
        await store.write(bucket, name, data)
    await store.write(bucket, n("t/other"), b"not under s/")
    ordered = [(item.name, bytes(item.data))
               async for item in store.stream(bucket, n("s/"), ordered=True, concurrency=8)]
    assert ordered == sorted(blobs.items())
    unordered = {item.name: bytes(item.data) async for item in store.stream(bucket, n("s/"))}
    assert unordered == blobs


async def test_a_delete_removes_only_directories_aioflux_made(space: Space) -> None:
    # `rm /home/u/only-file` must not take /home/u with it: a directory the
    # user made stays, even empty; the ones a write made go with their last file.
    store, bucket, n = space.store, space.bucket, space.n
    space.path("mine/sub").mkdir(parents=True)
    await store.write(bucket, n("mine/sub/made/deeper/x"), b"x")
    await store.write(bucket, n("mine/y"), b"y")
    await store.delete(bucket, n("mine/sub/made/deeper/x"))
    assert not space.path("mine/sub/made").exists()  # aioflux made these two
    assert space.path("mine/sub").is_dir()  # the user's, left even though empty
    await store.delete(bucket, n("mine/y"))
    assert space.path("mine").is_dir()


async def test_stats_count_the_filesystem_calls(space: Space) -> None:
    # client.stats works the same on files: latency per operation, failures
    # by class, bytes read.
    store, bucket, n = space.store, space.bucket, space.n
    await store.write(bucket, n("s"), b"x" * 1000)
    assert await store.read(bucket, n("s")) == b"x" * 1000
    with pytest.raises(NotFound):
        await store.read(bucket, n("missing"))
    stats = store.stats
    assert stats.latency["write"].count == 1 and stats.latency["read"].count == 2
    assert stats.bytes_received == 1000 and stats.failures == 1
    assert stats.requests >= 3


async def test_a_file_of_the_epoch_has_a_version_to_pin(space: Space) -> None:
    # A file modified at the epoch (touch -d @0) had generation 0, "no
    # version" to every caller: its reads went unpinned (a rewrite during a
    # read mixed old and new bytes) and if_generation_match=0 meant "must
    # not exist".
    await space.store.write(space.bucket, space.n("old"), b"first")
    os.utime(space.root / "old", ns=(0, 0))
    info = await space.store.stat(space.bucket, space.n("old"))
    assert info.generation and info.generation > 0
    assert [o.generation async for o in space.store.list_objects(
        space.bucket, space.n("old"))] == [info.generation]
    assert await space.store.read(space.bucket, space.n("old"),
                                  generation=info.generation) == b"first"
    replaced = await space.store.write(space.bucket, space.n("old"), b"second",
                                       if_generation_match=info.generation)
    assert replaced.generation != info.generation
    with pytest.raises(NotFound):
        await space.store.read(space.bucket, space.n("old"), generation=info.generation)
