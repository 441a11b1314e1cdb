"""The local backend in a hostile environment: racing writers in several
processes, files rewritten in place while read, named pipes and symbolic
link loops where files are expected, names as long as the filesystem
allows, new directories that must survive a power loss (a failing fsync
of a directory fails the write that needed it), and folders the listing of
open uploads cannot read.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aioflux import (
    ChecksumMismatch,
    ClientConfig,
    InvalidURL,
    NotFound,
    PreconditionFailed,
    StorageError,
)
from aioflux._core.records.urls import parse_url
from aioflux.local import LocalStore, _writes

KiB = 1024
MiB = 1024 * KiB


class Space:
    """A LocalStore over ``root`` (object ``n(x)`` is the file ``root/x``)."""

    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.root = root
        self.bucket, self.prefix = parse_url(str(root) + "/")
        self.store = LocalStore(ClientConfig(max_concurrency=16))

    def n(self, name: str) -> str:
        return self.prefix + name


@pytest.fixture
async def space(tmp_path: Path) -> AsyncIterator[Space]:
    local = Space(tmp_path / "objects")
    async with local.store:
        yield local


# -- generation preconditions across writers ----------------------------------------


def _slow_generation_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each generation check lingers, so two changes both check before either acts."""
    check = _writes._check_generation

    def slow_check(*args: object) -> None:
        check(*args)  # type: ignore[arg-type]
        time.sleep(0.2)

    monkeypatch.setattr(_writes, "_check_generation", slow_check)


async def test_two_writers_of_one_generation_cannot_both_win(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both check the generation before either renames (the check is slowed
    # down to make that certain): exactly one may publish.
    store, bucket, name = space.store, space.bucket, space.n("manifest.json")
    base = await store.write(bucket, name, b"v0")
    _slow_generation_checks(monkeypatch)
    results = await asyncio.gather(
        store.write(bucket, name, b"from a", if_generation_match=base.generation),
        store.write(bucket, name, b"from b", if_generation_match=base.generation),
        return_exceptions=True)
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], PreconditionFailed)
    assert (space.root / "manifest.json").read_bytes() == (b"from a" if results[0] is won[0]
                                                         else b"from b")
    assert sorted(os.listdir(space.root)) == ["manifest.json"]  # no temporary left


async def test_a_conditional_delete_and_a_write_of_its_generation(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    store, bucket, name = space.store, space.bucket, space.n("lease")
    base = await store.write(bucket, name, b"held")
    _slow_generation_checks(monkeypatch)
    results = await asyncio.gather(
        store.delete(bucket, name, if_generation_match=base.generation),
        store.write(bucket, name, b"renewed", if_generation_match=base.generation),
        return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert len(failed) == 1 and isinstance(failed[0], PreconditionFailed), results
    if results[0] is None:  # the delete won: the write saw no file
        assert not (space.root / "lease").exists()
    else:
        assert (space.root / "lease").read_bytes() == b"renewed"


COUNTER = textwrap.dedent("""
    import asyncio, sys
    from aioflux import NotFound, PreconditionFailed
    from aioflux.local import LocalStore

    bucket, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])

    async def main():
        store, won = LocalStore(), 0
        for _ in range(rounds):
            try:
                info = await store.stat(bucket, name)
                value = int(await store.read(bucket, name, generation=info.generation))
                await store.write(bucket, name, str(value + 1).encode(),
                                  if_generation_match=info.generation)
                won += 1
            except (PreconditionFailed, NotFound):
                pass
        print(won)

    asyncio.run(main())
""")


def test_compare_and_swap_across_processes_loses_no_update(tmp_path: Path) -> None:
    # Processes increment one counter by read + conditional write: every
    # write that succeeded must be in the final value.
    space = Space(tmp_path / "objects")
    (space.root / "counter").write_bytes(b"0")
    procs = [subprocess.Popen([sys.executable, "-c", COUNTER, space.bucket, space.n("counter"),
                               "150"], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    won = sum(int(p.communicate(timeout=100)[0]) for p in procs)
    assert all(p.returncode == 0 for p in procs)
    assert won > 0
    assert int((space.root / "counter").read_bytes()) == won


def test_a_lock_held_by_a_forked_child_is_released(tmp_path: Path) -> None:
    # A child forked while a write holds its lock keeps a copy of the
    # descriptor: the lock must still be released when the write is done.
    space = Space(tmp_path / "objects")
    (space.root / "f").write_bytes(b"0")
    path = str(space.root / "f")
    hold, release = os.pipe()
    with _writes._changing(path, "write", space.bucket, space.n("f")):
        pid = os.fork()
        if pid == 0:  # the child holds the inherited descriptor until told to go
            os.close(release)
            os.read(hold, 1)
            os._exit(0)
    os.close(hold)
    try:
        taken = threading.Event()

        def take() -> None:
            with _writes._changing(path, "write", space.bucket, space.n("f")):
                taken.set()

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        # Only while the child lives: a lock it still held would be taken
        # only once it is gone (30 s: a guard against a hang, not a pace).
        assert taken.wait(30), "the lock is held as long as the forked child lives"
    finally:
        os.close(release)  # the child's read ends: it exits
        os.waitpid(pid, 0)


# -- reads of files that change or are not files -------------------------------------


def _rewritten_after_the_first_block(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrite ``path`` in place (same size) once the read of it is under way."""
    preadv = os.preadv
    calls = 0

    def rewrite(fd: int, buffers: list[Any], offset: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            with open(path, "r+b") as f:
                f.write(b"B" * path.stat().st_size)
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", rewrite)


async def test_a_file_rewritten_in_place_while_read_is_an_error(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file written by another tool (no crc32c recorded), rewritten in
    # place (same size, np.save / shell redirection) during the read.
    path = space.root / "shard.bin"
    path.write_bytes(b"A" * (20 * MiB))
    _rewritten_after_the_first_block(path, monkeypatch)
    with pytest.raises(ChecksumMismatch, match="modified while it was read") as info:
        await space.store.read(space.bucket, space.n("shard.bin"))
    assert (info.value.operation, info.value.name) == ("read", space.n("shard.bin"))
    monkeypatch.undo()
    assert await space.store.read(space.bucket, space.n("shard.bin")) == b"B" * (20 * MiB)


async def test_a_file_rewritten_in_place_while_copied_is_an_error(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    path = space.root / "src"
    path.write_bytes(b"A" * (20 * MiB))
    _rewritten_after_the_first_block(path, monkeypatch)
    with pytest.raises(ChecksumMismatch, match="modified while it was read"):
        await space.store.copy(space.bucket, space.n("src"), space.bucket, space.n("dst"))
    assert sorted(os.listdir(space.root)) == ["src"]  # nothing published, no temporary


async def test_a_named_pipe_is_not_a_file_and_does_not_hang(space: Space) -> None:
    os.mkfifo(space.root / "pipe")
    store, bucket, name = space.store, space.bucket, space.n("pipe")
    with pytest.raises(NotFound, match="not a file"):
        await asyncio.wait_for(store.read(bucket, name), 10)
    with pytest.raises(NotFound, match="not a file"):
        await asyncio.wait_for(store.copy(bucket, name, bucket, space.n("copy")), 10)
    assert not await store.exists(bucket, name)


async def test_a_write_over_a_named_pipe_does_not_hang(space: Space) -> None:
    os.mkfifo(space.root / "pipe")
    info = await asyncio.wait_for(space.store.write(space.bucket, space.n("pipe"), b"x"), 10)
    assert info.size == 1
    assert (space.root / "pipe").read_bytes() == b"x"


# -- listings ---------------------------------------------------------------------


async def test_a_symbolic_link_loop_does_not_fail_the_listing(space: Space) -> None:
    await space.store.write(space.bucket, space.n("d/a"), b"a")
    os.symlink(space.root / "d" / "self", space.root / "d" / "self")
    os.symlink(space.root / "d" / "ping", space.root / "d" / "pong")
    os.symlink(space.root / "d" / "pong", space.root / "d" / "ping")
    names = [o.name async for o in space.store.list_objects(space.bucket, space.n(""))]
    assert names == [space.n("d/a")]
    pages = [p async for p in space.store.list(space.bucket, space.n(""), delimiter="/")]
    assert pages[0].prefixes == [space.n("d/")]
    # What the listing skips is no object to the other calls either, as a
    # dangling link is not (they raised a StorageError: exists() too).
    for name in ("d/self", "d/ping", "d/self/x"):
        assert not await space.store.exists(space.bucket, space.n(name))
        with pytest.raises(NotFound):
            await space.store.read(space.bucket, space.n(name))
        with pytest.raises(NotFound):
            await space.store.copy(space.bucket, space.n(name), space.bucket, space.n("c"))
        await space.store.delete(space.bucket, space.n(name), missing_ok=True)
    assert not (space.root / "c").exists()


async def test_files_no_method_could_name_are_listed_and_refused_by_name(
        space: Space) -> None:
    # A path that is not UTF-8 (os.fsdecode gives lone surrogates), holds a
    # line break or passes GCS's 1024 bytes cannot be an object (GCS and S3
    # cannot hold such a name): it is listed, so a dataset or cp -r over the
    # folder fails naming it instead of dropping it in silence, and every
    # call that would read it refuses it as a bad name.
    await space.store.write(space.bucket, space.n("ok/é"), b"kept")
    (space.root / "ok" / "line\nbreak").write_bytes(b"x")
    (space.root / os.fsdecode(b"latin-\xe9")).write_bytes(b"x")
    deep = space.root / "deep" / ("d" * 250) / ("d" * 250) / ("d" * 250) / ("d" * 250)
    deep.mkdir(parents=True)
    (deep / "far").write_bytes(b"x")
    listed = [o.name async for o in space.store.list_objects(space.bucket, space.n(""))]
    odd = sorted(n for n in listed if n != space.n("ok/é"))
    assert len(listed) == 4 and len(odd) == 3
    for name in odd:
        with pytest.raises(InvalidURL):
            await space.store.read(space.bucket, name)
    assert await space.store.read(space.bucket, space.n("ok/é")) == b"kept"


async def test_a_file_replaced_between_pages_by_no_file_is_not_listed(space: Space) -> None:
    # The names come from one walk, each page is stat-ed when it is asked
    # for: a file that has become a directory or a named pipe meanwhile is
    # no object (stat and read refuse it), not one of 4096 or 0 bytes.
    for name in ("a", "b", "c"):
        await space.store.write(space.bucket, space.n(name), b"x")
    pages = space.store.list(space.bucket, space.n(""), page_size=1)
    first = await anext(pages)
    (space.root / "b").unlink()
    (space.root / "b" / "inner").mkdir(parents=True)
    (space.root / "c").unlink()
    os.mkfifo(space.root / "c")
    rest = [o.name async for page in pages for o in page.objects]
    assert [o.name for o in first.objects] + rest == [space.n("a")]


_ONE_COPY = """
    import re, resource, sys
    from aioflux._core.records.urls import parse_url
    from aioflux._core.concurrency.portal import get_portal
    from aioflux.local import LocalStore

    folder, size = sys.argv[1], int(sys.argv[2])
    store = LocalStore()

    def sparse(name, size):
        with open(f"{folder}/{name}", "wb") as f:
            f.truncate(size)  # zeros that take no disk
        return parse_url(f"{folder}/{name}")

    # The same read of a smaller file first: threads, arenas and imports
    # take their address space before the cap.
    get_portal().call(store.read(*sparse("small", 16 << 20)))
    big = sparse("big", size)
    with open("/proc/self/status") as status:
        mapped = int(re.search(r"VmSize:\\s+(\\d+) kB", status.read())[1]) << 10
    resource.setrlimit(resource.RLIMIT_AS, (mapped + size + (128 << 20), resource.RLIM_INFINITY))
    try:
        data = get_portal().call(store.read(*big))
        print("read", len(data), data.count(0))
    except BaseException as exc:
        print(type(exc).__name__, exc)
"""


def test_a_whole_read_takes_the_file_in_memory_once(tmp_path: Path) -> None:
    # The bytes read are the bytes handed out: a read of a file that fits in
    # memory once succeeds. It was read into a bytearray and copied into
    # bytes, so it took its size twice and the copy ended in a bare
    # MemoryError, not even the typed error of a read that does not fit.
    size = 256 * MiB
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_ONE_COPY), str(tmp_path),
                          str(size)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MALLOC_ARENA_MAX": "2"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["read", str(size), str(size)], out.stdout + out.stderr


# -- names ----------------------------------------------------------------------------


async def test_a_name_as_long_as_the_filesystem_allows_can_be_written(space: Space) -> None:
    # 250 bytes is a legal file name; its temporary (mark + id) would not be.
    for base in ("x" * 250, "é" * 127):
        name = space.n(f"long/{base}")
        await space.store.write(space.bucket, name, b"payload")
        assert await space.store.read(space.bucket, name) == b"payload"
    assert sorted(os.listdir(space.root / "long")) == sorted(["x" * 250, "é" * 127])


async def test_the_temporary_of_a_long_name_is_listed_and_aborted(space: Space) -> None:
    name = space.n("y" * 250)
    upload = space.store.start_upload(space.bucket, name)
    await upload.put(1, memoryview(b"part"))
    [pending] = await space.store.list_multipart_uploads(space.bucket, space.n(""))
    await space.store.abort_multipart(space.bucket, pending.name, pending.upload_id)
    assert os.listdir(space.root) == []
    await upload.abort()


# -- durability -----------------------------------------------------------------------


async def test_new_directories_are_fsynced_into_their_parents(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # A checkpoint goes into a new step directory: its entry in the run
    # directory must be durable before the write returns, or a power loss
    # can drop the whole step after retention deleted the previous one.
    synced: list[str] = []
    fsync_directory = _writes._fsync_directory
    lock = threading.Lock()

    def spy(directory: str) -> None:
        with lock:
            synced.append(directory)
        fsync_directory(directory)

    monkeypatch.setattr(_writes, "_fsync_directory", spy)
    await space.store.write(space.bucket, space.n("run1/step-1/state.pt"), b"weights")
    root = str(space.root)
    assert root in synced  # holds run1
    assert f"{root}/run1" in synced  # holds step-1
    assert f"{root}/run1/step-1" in synced  # holds state.pt
    assert synced.index(root) < synced.index(f"{root}/run1/step-1")


def _failing_directory_syncs(monkeypatch: pytest.MonkeyPatch, code: int) -> list[str]:
    """Make every fsync of a directory fail with ``code``; the returned list
    names the directories."""
    fsync = os.fsync
    failed: list[str] = []

    def patched(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            failed.append(os.readlink(f"/proc/self/fd/{fd}"))
            raise OSError(code, os.strerror(code))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", patched)
    return failed


async def test_a_failing_fsync_of_its_directory_fails_the_write_and_says_it_is_in_place(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # A published file's name lives in its directory. That fsync failing
    # (EIO, ENOSPC) was ignored as a filesystem that syncs no directories,
    # and the write returned, though a power loss could take the file back.
    name = space.n("run/ckpt")
    await space.store.write(space.bucket, name, b"old")
    failed = _failing_directory_syncs(monkeypatch, errno.EIO)
    with pytest.raises(StorageError) as raised:
        await space.store.write(space.bucket, name, b"new")
    assert (type(raised.value), raised.value.reason) == (StorageError, "EIO")
    assert "the file is in place, but may not survive a power loss" in str(raised.value)
    assert failed == [str(space.root / "run")]
    monkeypatch.undo()
    assert (space.root / "run" / "ckpt").read_bytes() == b"new"
    assert os.listdir(space.root / "run") == ["ckpt"]


async def test_a_failing_fsync_of_a_new_directory_fails_the_write_before_it_writes(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # The new directory's name in its parent did not reach the disk: a file
    # published below it could be lost with it.
    failed = _failing_directory_syncs(monkeypatch, errno.EIO)
    with pytest.raises(StorageError) as raised:
        await space.store.write(space.bucket, space.n("run/ckpt"), b"new")
    assert raised.value.reason == "EIO"
    assert failed == [str(space.root)]
    monkeypatch.undo()
    assert os.listdir(space.root / "run") == []  # nothing written, no temporary


@pytest.mark.parametrize("code", [errno.EINVAL, errno.EBADF, errno.EOPNOTSUPP],
                         ids=errno.errorcode.get)
async def test_a_filesystem_that_syncs_no_directories_still_takes_writes(
        space: Space, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    failed = _failing_directory_syncs(monkeypatch, code)
    await space.store.write(space.bucket, space.n("run/ckpt"), b"new")
    assert failed == [str(space.root), str(space.root / "run")]
    assert (space.root / "run" / "ckpt").read_bytes() == b"new"


async def test_a_folder_that_cannot_be_read_fails_the_listing_of_open_uploads(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # The walk skipped every folder it could not read (EIO, EACCES): the
    # temporaries there were left out, and ``aioflux clean`` found nothing
    # left to remove.
    upload = space.store.start_upload(space.bucket, space.n("sub/obj"))
    await upload.put(1, memoryview(b"part"))
    scandir = os.scandir
    refused: list[str] = []

    def failing(path: Any = ".") -> Any:
        if os.fspath(path) == str(space.root / "sub"):
            refused.append(os.fspath(path))
            raise OSError(errno.EIO, os.strerror(errno.EIO), os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", failing)
    with pytest.raises(StorageError) as raised:
        await space.store.list_multipart_uploads(space.bucket, space.n(""))
    assert (raised.value.reason, refused) == ("EIO", [str(space.root / "sub")])
    monkeypatch.undo()
    [pending] = await space.store.list_multipart_uploads(space.bucket, space.n(""))
    assert pending.name == space.n("sub/obj")
    await upload.abort()
    # A folder gone from under the walk is no failure: nothing is there.
    assert await space.store.list_multipart_uploads(space.bucket, space.n("gone/")) == []
