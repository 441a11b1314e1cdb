"""The local store's lock of a file it changes, on a failing filesystem.

Every write, copy and delete of an existing file takes its ``flock`` and
then checks that the file it locked is still the one at the path
(``held_at``). A path whose stat fails for good (ESTALE on NFS, EIO), or
that never names the file opened, must fail the change with a typed error
after a bounded number of attempts, not spin a worker thread; and however
the check fails, the locked descriptor must be released, or every later
change of that object waits for it. An open or flock of the file failing
(EIO, ESTALE) fails the change too: it goes ahead unlocked only where
there is no file to lock or the filesystem has no locks (ENOLCK, ENOSYS,
EOPNOTSUPP, EINVAL), and a file it may not write is locked read-only.
Failures are injected into ``os`` and ``fcntl`` and bounded by counts.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from aioflux import ClientConfig, PermissionDenied, StorageError
from aioflux._core.concurrency.locks import held_at
from aioflux._core.errors import describe
from aioflux._core.integrity.crc import Crc32c
from aioflux._core.records.urls import parse_url
from aioflux.local import LocalStore, _writes
from tests.servers._lock_faults import SPIN, descriptors, failing, stat_of

OLD, NEW = b"old bytes", b"new bytes, longer"


class Space:
    """A LocalStore over ``root``, with a file ``target`` and a ``source``."""

    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.root = root
        self.bucket, self.prefix = parse_url(str(root) + "/")
        self.store = LocalStore(ClientConfig(max_concurrency=4))
        self.target = root / "target"

    def n(self, name: str) -> str:
        return self.prefix + name

    def files(self) -> list[str]:
        """Every file of ``root``, temporaries included."""
        return sorted(os.listdir(self.root))

    def change(self, op: str) -> Callable[[], Coroutine[Any, Any, object]]:
        """``op`` of ``target``: its new content is NEW (gone, for a delete)."""
        store, bucket, name = self.store, self.bucket, self.n("target")

        async def write() -> object:
            return await store.write(bucket, name, NEW)

        async def upload() -> object:
            upload = store.start_upload(bucket, name, part_size=4)
            await upload.put(1, memoryview(NEW)[:4])
            check = Crc32c()
            check.update(NEW)
            return await upload.finish(2, memoryview(NEW)[4:], check)

        async def copy() -> object:
            return await store.copy(bucket, self.n("source"), bucket, name)

        async def delete() -> object:
            await store.delete(bucket, name)
            return None

        return {"write": write, "upload": upload, "copy": copy, "delete": delete}[op]


@pytest.fixture
async def space(tmp_path: Path) -> AsyncIterator[Space]:
    local = Space(tmp_path / "objects")
    async with local.store:
        # Written through the store: its worker threads exist before the
        # descriptors are counted.
        await local.store.write(local.bucket, local.n("target"), OLD)
        await local.store.write(local.bucket, local.n("source"), NEW)
        yield local


OPS = ["write", "upload", "copy", "delete"]
# The operation a change's error names (a streaming upload's is its write).
NAMED = {"write": "write", "upload": "write", "copy": "copy", "delete": "delete"}


# The calls the tests patch, as they are: the checks of a test use these.
_OPEN, _FLOCK = os.open, fcntl.flock



def _assert_unlocked(path: Path) -> None:
    """Raise BlockingIOError if a descriptor of this process still holds
    ``path``'s lock (flock locks of two opens of a file exclude each other,
    within one process too), without waiting for it."""
    fd = _OPEN(path, os.O_RDWR)
    try:
        _FLOCK(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def _opened(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _open_of(path: Path, monkeypatch: pytest.MonkeyPatch,
             failing: Callable[[int], int | None]) -> list[int]:
    """Make every ``os.open`` of ``path`` fail with ``failing(flags)``'s
    errno (None: open it); the returned list holds the access mode
    (``O_RDWR``, ``O_RDONLY``...) of each."""
    modes: list[int] = []

    def patched(p: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if isinstance(p, (str, os.PathLike)) and os.fspath(p) == str(path):
            modes.append(flags & os.O_ACCMODE)
            if len(modes) > SPIN:
                raise AssertionError(f"{len(modes)} opens of {path}: a lock spins on it")
            code = failing(flags)
            if code is not None:
                raise OSError(code, os.strerror(code), str(path))
        return _OPEN(p, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", patched)
    return modes


def _flock_of(path: Path, monkeypatch: pytest.MonkeyPatch,
              failing: Callable[[int], int | None]) -> list[int]:
    """Make every exclusive ``flock`` of a descriptor of ``path`` fail with
    ``failing(its access mode)``'s errno (None: take it); the returned list
    holds the access mode of each descriptor it was asked of."""
    modes: list[int] = []

    def patched(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX and _opened(fd) == str(path):
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
            modes.append(mode)
            code = failing(mode)
            if code is not None:
                raise OSError(code, os.strerror(code))
        _FLOCK(fd, operation)

    monkeypatch.setattr(fcntl, "flock", patched)
    return modes




async def _fails_typed(space: Space, op: str, reason: str,
                       kind: type[StorageError] = StorageError) -> StorageError:
    """Run ``op``, which must fail as a ``kind`` naming it, ``target`` and
    ``reason``, leaving the directory as it was and no descriptor (plain
    StorageError: the store's error of a failing disk)."""
    before = descriptors()
    with pytest.raises(StorageError) as raised:
        await space.change(op)()
    failure = raised.value
    assert type(failure) is kind
    named = NAMED[op]
    assert (failure.operation, failure.bucket, failure.name, failure.reason) == (
        named, space.bucket, space.n("target"), reason)
    assert str(failure).startswith(describe(named, space.bucket, space.n("target"), "file"))
    assert descriptors() == before
    # Nothing published, nothing half-written left beside it.
    assert space.files() == ["source", "target"]
    assert space.target.read_bytes() == OLD
    return failure


async def _recovers(space: Space, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """Once the disk recovers, ``op`` succeeds: nothing was left locked."""
    _assert_unlocked(space.target)  # before a change that would wait on it
    monkeypatch.undo()
    await space.change(op)()
    if op == "delete":
        assert space.files() == ["source"]
    else:
        assert space.files() == ["source", "target"]
        assert space.target.read_bytes() == NEW


@pytest.mark.parametrize("op", OPS)
async def test_a_file_whose_stat_fails_for_good_fails_the_change(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    # An NFS mount whose path stat fails with ESTALE for good: each lock was
    # opened and taken but never shown to be the file at the path, which
    # the lock took for a file replaced while it waited, and tried again,
    # forever, in a worker thread (an EIO did the same). It now fails the
    # change, naming it, at once.
    calls = stat_of(space.target, monkeypatch, failing(errno.ESTALE, space.target))
    await _fails_typed(space, op, "ESTALE")
    assert 0 < calls[0] <= 100
    await _recovers(space, monkeypatch, op)


@pytest.mark.parametrize(("code", "kind"), [(errno.EIO, StorageError),
                                           (errno.EACCES, PermissionDenied)])
async def test_any_failing_stat_but_a_missing_file_is_an_error(
        space: Space, monkeypatch: pytest.MonkeyPatch, code: int,
        kind: type[StorageError]) -> None:
    # Mapped as the store maps every failed filesystem call.
    calls = stat_of(space.target, monkeypatch, failing(code, space.target))
    await _fails_typed(space, "write", errno.errorcode[code], kind)
    assert 0 < calls[0] <= 100
    await _recovers(space, monkeypatch, "write")


@pytest.mark.parametrize("op", OPS)
async def test_a_path_that_never_names_the_file_locked_fails_after_bounded_attempts(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    # The path's stat works but always names another file than the one
    # opened and locked (as a file replaced while the lock was awaited, but
    # every time): the lock tried again without end.
    other = os.stat(space.root / "source")
    calls = stat_of(space.target, monkeypatch, lambda _: other)
    failure = await _fails_typed(space, op, "")
    assert "attempts" in str(failure)
    assert 0 < calls[0] <= 100
    await _recovers(space, monkeypatch, op)


@pytest.mark.parametrize("op", OPS)
async def test_a_locked_file_whose_fstat_fails_is_released(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    # The lock taken, checking it is the file at the path failed (fstat of
    # the locked descriptor: ESTALE, EIO): the change failed with the
    # descriptor still open and locked, and every later change of the
    # object, in this process or any other, waited for it for good.
    fstat = os.fstat
    failed = [0]

    def failing_on_target(fd: int) -> os.stat_result:
        try:
            opened = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            opened = ""
        if opened == str(space.target):
            failed[0] += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", failing_on_target)
    await _fails_typed(space, op, "EIO")
    assert failed[0] == 1
    await _recovers(space, monkeypatch, op)


def _done(space: Space, op: str) -> None:
    """Assert ``op`` of ``target`` took place, and left nothing locked."""
    if op == "delete":
        assert space.files() == ["source"]
    else:
        assert space.files() == ["source", "target"]
        assert space.target.read_bytes() == NEW
        _assert_unlocked(space.target)


@pytest.mark.parametrize("code", [errno.EIO, errno.ESTALE], ids=errno.errorcode.get)
@pytest.mark.parametrize("op", OPS)
async def test_a_file_that_cannot_be_opened_to_lock_is_not_changed(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str, code: int) -> None:
    # Any failure of the open of the file to lock (EIO, ESTALE on NFS) was
    # taken for "no file to lock": the change went ahead unlocked, so a
    # generation precondition and the rename it guards were two steps
    # again, on a transient error. Only a path with no file to lock is so.
    opens = _open_of(space.target, monkeypatch, lambda _: code)
    await _fails_typed(space, op, errno.errorcode[code])
    assert opens == [os.O_RDWR]
    await _recovers(space, monkeypatch, op)


@pytest.mark.parametrize("code", [errno.EIO, errno.ESTALE], ids=errno.errorcode.get)
@pytest.mark.parametrize("op", OPS)
async def test_a_file_whose_lock_fails_is_not_changed(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str, code: int) -> None:
    # The same of a failing flock (an NFS lock call failing: EIO, ESTALE):
    # only a filesystem that has no locks changes a file unlocked.
    asked = _flock_of(space.target, monkeypatch, lambda _: code)
    await _fails_typed(space, op, errno.errorcode[code])
    assert asked == [os.O_RDWR]
    await _recovers(space, monkeypatch, op)


@pytest.mark.parametrize("where", ["open", "flock"])
async def test_a_conditional_write_never_goes_ahead_unlocked(
        space: Space, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    current = await space.store.stat(space.bucket, space.n("target"))
    if where == "open":
        _open_of(space.target, monkeypatch, lambda _: errno.EIO)
    else:
        _flock_of(space.target, monkeypatch, lambda _: errno.EIO)
    with pytest.raises(StorageError) as raised:
        await space.store.write(space.bucket, space.n("target"), NEW,
                                if_generation_match=current.generation)
    assert (type(raised.value), raised.value.reason) == (StorageError, "EIO")
    assert space.files() == ["source", "target"]
    assert space.target.read_bytes() == OLD
    monkeypatch.undo()
    await space.store.write(space.bucket, space.n("target"), NEW,
                            if_generation_match=current.generation)
    _done(space, "write")


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL],
                         ids=errno.errorcode.get)
@pytest.mark.parametrize("op", OPS)
async def test_a_filesystem_without_locks_changes_files_unlocked(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str, code: int) -> None:
    # ENOLCK: an NFS mount without a lock manager; ENOSYS: Lustre mounted
    # without flock; EOPNOTSUPP, EINVAL: filesystems that take no flock.
    # Refused there, every change of an existing file would fail.
    asked = _flock_of(space.target, monkeypatch, lambda _: code)
    before = descriptors()
    await space.change(op)()
    assert asked == [os.O_RDWR]
    assert descriptors() == before
    _done(space, op)


@pytest.mark.parametrize("code", [errno.EACCES, errno.ETXTBSY], ids=errno.errorcode.get)
@pytest.mark.parametrize("op", OPS)
async def test_a_file_this_process_may_not_write_is_locked_read_only(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str, code: int) -> None:
    # A file of mode 0444 in a writable directory (EACCES), or a program
    # being run (ETXTBSY), may be replaced or removed (a rename and an
    # unlink need only the directory), but not opened for writing: it went
    # unlocked. A local filesystem's flock needs no write access.
    opens = _open_of(space.target, monkeypatch,
                     lambda flags: code if flags & os.O_ACCMODE == os.O_RDWR else None)
    asked = _flock_of(space.target, monkeypatch, lambda _: None)
    before = descriptors()
    await space.change(op)()
    assert opens == [os.O_RDWR, os.O_RDONLY]
    assert asked == [os.O_RDONLY]
    assert descriptors() == before
    _done(space, op)


@pytest.mark.parametrize("unlockable", ["nfs-read-only", "unreadable"])
@pytest.mark.parametrize("op", OPS)
async def test_a_file_this_process_may_replace_but_not_lock_changes_unlocked(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str, unlockable: str) -> None:
    # NFS's flock is a POSIX write lock, which a read-only descriptor cannot
    # hold (EBADF); a file of mode 000 opens not even read-only. A rename or
    # an unlink needs only the directory (a team's folder of others' files
    # on NFS): the change goes ahead unlocked, as it always did there.
    if unlockable == "unreadable":
        opens = _open_of(space.target, monkeypatch, lambda flags: errno.EACCES)
        asked = _flock_of(space.target, monkeypatch, lambda _: None)
        want_flocks: list[int] = []
    else:
        opens = _open_of(space.target, monkeypatch,
                         lambda flags: errno.EACCES if flags & os.O_ACCMODE == os.O_RDWR
                         else None)
        asked = _flock_of(space.target, monkeypatch,
                          lambda mode: errno.EBADF if mode == os.O_RDONLY else None)
        want_flocks = [os.O_RDONLY]
    before = descriptors()
    await space.change(op)()
    assert opens == [os.O_RDWR, os.O_RDONLY]
    assert asked == want_flocks
    assert descriptors() == before
    _done(space, op)


@pytest.mark.parametrize("op", ["write", "upload", "copy"])
async def test_a_failing_stat_of_the_file_replaced_is_an_error_not_no_file(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    # Once locked, the new file's time is stepped past the replaced one's
    # (its generation). That stat failing (EIO) was taken for "no file
    # there": the new file could get the replaced one's generation, which a
    # precondition then could not tell apart.
    stat = os.stat
    calls = stat_of(space.target, monkeypatch,
                     lambda n: stat(space.target) if n == 1
                     else failing(errno.EIO, space.target)(n))
    await _fails_typed(space, op, "EIO")
    assert calls[0] == 2  # the lock's check, then the time's
    await _recovers(space, monkeypatch, op)


@pytest.mark.parametrize("op", OPS)
async def test_a_file_replaced_while_its_lock_was_awaited_is_locked_anew(
        space: Space, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    # A holder's delete seen three times over (the path names no file
    # when checked, then does again): the lock takes the file there now,
    # and the change goes through.
    stat = os.stat
    calls = stat_of(space.target, monkeypatch,
                     lambda n: failing(errno.ENOENT, space.target)(n) if n <= 3
                     else stat(space.target))
    before = descriptors()
    await space.change(op)()
    assert calls[0] >= 4
    assert descriptors() == before
    if op == "delete":
        assert space.files() == ["source"]
    else:
        assert space.files() == ["source", "target"]
        assert space.target.read_bytes() == NEW
        _assert_unlocked(space.target)


class _Interrupted(BaseException):
    """What a KeyboardInterrupt is to the code it passes through."""


def test_a_lock_interrupted_while_awaited_leaks_no_descriptor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    path.write_bytes(OLD)
    flock = fcntl.flock

    def interrupted(fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX:
            raise _Interrupted
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", interrupted)
    before = descriptors()
    with pytest.raises(_Interrupted), _writes._changing(str(path), "write", "b", "f"):
        pass
    assert descriptors() == before


def test_held_at_takes_only_a_missing_path_for_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    path.write_bytes(OLD)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert held_at(str(path), fd)
        for code in (errno.ENOENT, errno.ENOTDIR):
            calls = stat_of(path, monkeypatch, failing(code, path))
            assert not held_at(str(path), fd)
            assert calls[0] == 1
            monkeypatch.undo()
        for code in (errno.ESTALE, errno.EIO, errno.EACCES):
            # It does not say which file the path names: the taker's error
            # (the disk cache's lock files too, which took it for gone).
            stat_of(path, monkeypatch, failing(code, path))
            with pytest.raises(OSError) as raised:
                held_at(str(path), fd)
            assert raised.value.errno == code
            monkeypatch.undo()
        other = os.stat(tmp_path)
        stat_of(path, monkeypatch, lambda _: other)
        assert not held_at(str(path), fd)
    finally:
        os.close(fd)
