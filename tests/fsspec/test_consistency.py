"""Where two forms of one operation disagreed: ``rm`` of one path and of a
list, ``touch`` on files and on object stores, ``"xb"`` and
``pipe_file(mode="create")`` beside a folder, ``get_file`` and the read
file after a stale entry, ``cat_file`` of a range from the end and the
version its size came from. Each test fails without its fix."""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioflux import ChecksumMismatch, Conflict, InvalidArgument, PreconditionFailed
from aioflux._core.concurrency.portal import call
from aioflux.fsspec import AiofluxFileSystem
from tests.fsspec.conftest import CONFIG


def _twin(fs: AiofluxFileSystem) -> AiofluxFileSystem:
    """Another filesystem on the same store: another writer, with its own memory."""
    s = fs._settings
    return AiofluxFileSystem(fs.scheme, config=fs._config, endpoint=s.endpoint,
                             credentials=s.credentials, region=s.region,
                             skip_instance_cache=True)


@pytest.fixture
def remembering(backend: tuple[AiofluxFileSystem, str]) -> Iterator[
        tuple[AiofluxFileSystem, AiofluxFileSystem, str]]:
    """``(fs, other, root)``: ``fs`` remembers entries until told otherwise
    (local files too); ``other`` writes the same store."""
    fs, root = backend
    fs.dircache.use_listings_cache = True
    fs.dircache.listings_expiry_time = None
    other = _twin(fs)
    yield fs, other, root
    call(other.store.aclose())


# -- rm ----------------------------------------------------------------------------------


def test_rm_of_a_list_refuses_what_rm_of_one_path_refuses_and_removes_nothing(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    fs.pipe({f"{root}/a": b"a", f"{root}/b": b"b", f"{root}/d/x": b"x"})
    everything = sorted(fs.find(root))
    # Each was silently passed over, and the others removed.
    with pytest.raises(FileNotFoundError, match="missing1: no such object"):
        fs.rm([f"{root}/missing1", f"{root}/missing2"])
    with pytest.raises(FileNotFoundError, match="missing: no such object"):
        fs.rm([f"{root}/a", f"{root}/missing"])
    with pytest.raises(IsADirectoryError, match="recursive=True"):
        fs.rm([f"{root}/a", f"{root}/d"])
    with pytest.raises(IsADirectoryError, match="recursive=True"):
        fs.rm(f"{root}/*")  # a pattern matching a folder, as a list naming one
    with pytest.raises(FileNotFoundError, match="missing: no such object"):
        fs.rm([f"{root}/d", f"{root}/missing"], recursive=True)
    with pytest.raises(FileNotFoundError):
        fs.rm([f"{root}/a", f"{root}/nothing-*"])  # a pattern matching nothing
    fs.invalidate_cache()
    assert sorted(fs.find(root)) == everything  # nothing was removed
    fs.rm([f"{root}/a", f"{root}/b"])
    assert sorted(fs.find(root)) == [f"{root}/d/x"]
    fs.pipe_file(f"{root}/a", b"a")
    fs.rm([f"{root}/a", f"{root}/d"], recursive=True)
    fs.invalidate_cache()
    assert fs.find(root) == []


def test_rm_of_a_list_refuses_by_the_stores_word_not_a_stale_listings(
        remembering: tuple[AiofluxFileSystem, AiofluxFileSystem, str]) -> None:
    fs, other, root = remembering
    fs.pipe({f"{root}/a": b"a", f"{root}/d/x": b"x"})
    assert fs.find(root) == [f"{root}/a", f"{root}/d/x"]  # remembered
    other.pipe_file(f"{root}/b", b"b")
    given = [f"{root}/a", f"{root}/b"]
    if fs.scheme != "file":  # a file and a folder cannot share a path
        other.pipe_file(f"{root}/d", b"an object beside the folder")
        given.append(f"{root}/d")
    fs.rm(given)  # not "no such object", nor "a folder"
    assert other.find(root) == [f"{root}/d/x"]


# -- touch -------------------------------------------------------------------------------


def test_touch_without_truncate_never_rewrites_an_object(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    path = f"{root}/o"
    fs.touch(path, truncate=False)  # missing: made empty, as fsspec's touch makes it
    assert fs.cat_file(path) == b""
    fs.pipe_file(path, b"kept")
    version = fs.info(path)["version"]
    if fs.scheme == "file":
        old = datetime.datetime(2001, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
        os.utime(path, (old, old))
        fs.touch(path, truncate=False)  # LocalFileSystem's: the time, not the bytes
        assert fs.modified(path).year >= 2024
        assert fs.info(path)["version"] != version
    else:
        # A bare NotImplementedError (fsspec's default); s3fs's is a ValueError.
        with pytest.raises(InvalidArgument, match="cannot update the time") as refused:
            fs.touch(path, truncate=False)
        assert isinstance(refused.value, NotImplementedError)
        assert isinstance(refused.value, ValueError)
        fs.invalidate_cache()
        assert fs.info(path)["version"] == version  # nothing was written
    assert fs.cat_file(path) == b"kept"
    with fs.transaction:  # staged as fsspec's touch stages it: published at the commit
        fs.touch(path)
        fs.touch(f"{root}/new", truncate=False)
        if fs.scheme != "file":
            with pytest.raises(InvalidArgument, match="cannot update the time"):
                fs.touch(path, truncate=False)
        assert fs.cat_file(path) == b"kept" and not fs.exists(f"{root}/new")
    assert fs.cat_file(path) == b"" and fs.cat_file(f"{root}/new") == b""
    fs.pipe_file(path, b"kept")
    fs.touch(path)  # truncate=True: emptied, as fsspec's
    assert fs.cat_file(path) == b""


# -- "xb" beside a folder ----------------------------------------------------------------


def test_xb_and_create_only_pipe_agree_beside_a_folder(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    fs.pipe_file(f"{root}/d/x", b"x")
    fs.pipe_file(f"{root}/e/x", b"x")
    if fs.scheme == "file":
        # A file and a folder cannot share a path: both refuse.
        with pytest.raises(FileExistsError):
            fs.open(f"{root}/d", "xb")
        with pytest.raises(Conflict, match="cannot share a path"):
            fs.pipe_file(f"{root}/e", b"e", mode="create")
        assert not os.path.isfile(f"{root}/d") and not os.path.isfile(f"{root}/e")
        return
    # A folder is a prefix, no object: the name is free, for both.
    fs.pipe_file(f"{root}/e", b"e", mode="create")
    with fs.open(f"{root}/d", "xb") as f:  # was refused: "exists"
        f.write(b"d")
    assert fs.cat([f"{root}/d", f"{root}/e", f"{root}/d/x"]) == {
        f"{root}/d": b"d", f"{root}/e": b"e", f"{root}/d/x": b"x"}
    with pytest.raises(FileExistsError):  # now an object has the name
        fs.open(f"{root}/d", "xb")


# -- get_file after a stale entry --------------------------------------------------------


def test_get_file_forgets_a_stale_entry_as_the_read_file_does(
        remembering: tuple[AiofluxFileSystem, AiofluxFileSystem, str], tmp_path: Path) -> None:
    fs, other, root = remembering
    path, got = f"{root}/o", tmp_path / "got"
    fs.pipe_file(path, b"old" * 1000)
    fs.info(path)  # remembered
    other.pipe_file(path, b"the new version")
    fs.get_file(path, str(got))
    assert got.read_bytes() == b"the new version"
    # Forgotten: the filesystem says what the store has (it said 3,000 bytes).
    assert fs.info(path)["version"] == other.info(path)["version"]
    assert fs.size(path) == len(b"the new version")
    fs.pipe_file(path, b"")
    fs.info(path)
    other.pipe_file(path, b"no longer empty")
    fs.get_file(path, str(got))  # an empty entry's: asked of the store
    assert got.read_bytes() == b"no longer empty" and fs.size(path) == 15
    fs.info(path)
    other.rm_file(path)
    with pytest.raises(FileNotFoundError):
        fs.get_file(path, str(tmp_path / "gone"))
    assert not fs.exists(path)  # it still said the object was there


def test_get_file_recovers_from_a_stale_entry_of_the_same_version_as_the_read_file(
        tmp_path: Path) -> None:
    # A file rewritten keeping its modification time (cp -p, rsync -t) is
    # the same version to a file store, as is any object on a store without
    # versions: the read file recovers on the size, get_file raised
    # ChecksumMismatch.
    fs = AiofluxFileSystem("file", config=CONFIG, use_listings_cache=True,
                           listings_expiry_time=None, skip_instance_cache=True)
    path, got = str(tmp_path / "o"), tmp_path / "got"

    def stale_entry(old: bytes, current: bytes) -> None:
        fs.pipe_file(path, old)
        when = os.stat(path).st_mtime_ns
        assert fs.info(path)["size"] == len(old)  # remembered
        Path(path).write_bytes(current)
        os.utime(path, ns=(when, when))

    try:
        for current in (b"a longer version than the old one", b"short"):
            stale_entry(b"old" * 5, current)
            with fs.open(path, "rb") as f:
                assert f.read() == current  # the read file's recovery
            stale_entry(b"old" * 5, current)
            fs.get_file(path, str(got))
            assert got.read_bytes() == current
            assert fs.size(path) == len(current)  # and forgotten
        # The same size and version, other bytes: nothing tells a stale
        # entry, and the checksum's error is the read's own, as the read
        # file's is.
        stale_entry(b"x" * 10, b"y" * 10)
        with pytest.raises(ChecksumMismatch), fs.open(path, "rb") as f:
            f.read()
        with pytest.raises(ChecksumMismatch):
            fs.get_file(path, str(tmp_path / "bad"))
        assert not (tmp_path / "bad").exists()
    finally:
        call(fs.store.aclose())


# -- cat_file from the end ---------------------------------------------------------------


def _replaced_after_stat(monkeypatch: pytest.MonkeyPatch, fs: AiofluxFileSystem,
                         bucket: str, name: str, new: bytes | None) -> None:
    """The next stat of the object answers, then another writer replaces
    it with ``new`` (deletes it, None) before the read that follows."""
    store = fs.store
    stat = store.stat
    done = False

    async def stat_then_replace(b: str, n: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal done
        info = await stat(b, n, *args, **kwargs)
        if not done and (b, n) == (bucket, name):
            done = True
            if new is None:
                await store.delete(b, n)
            else:
                await store.write(b, n, new)
        return info

    monkeypatch.setattr(store, "stat", stat_then_replace)


@pytest.mark.parametrize(("start", "end"), [(-5, None), (0, -5), (-10, -5), (10, -5)])
def test_cat_file_from_the_end_reads_the_version_its_size_came_from(
        backend: tuple[AiofluxFileSystem, str], monkeypatch: pytest.MonkeyPatch,
        start: int, end: int | None) -> None:
    fs, root = backend
    path = f"{root}/o"
    bucket, name = fs._split(path)
    old, new = bytes(range(100)), bytes(range(200, 256)) * 4
    for replacement in (new, old[:50] + new[:50]):  # longer; the same size
        fs.pipe_file(path, old)
        _replaced_after_stat(monkeypatch, fs, bucket, name, replacement)
        try:
            got = fs.cat_file(path, start, end)
        except PreconditionFailed as exc:
            assert fs.unstrip_protocol(path) in str(exc) and exc.name == name
        else:
            # The stat's version read consistently (the old size's range of
            # the new bytes was read: another range of other bytes).
            assert got == old[start:end]
        monkeypatch.undo()
    fs.pipe_file(path, old)
    _replaced_after_stat(monkeypatch, fs, bucket, name, None)
    with pytest.raises(FileNotFoundError):
        fs.cat_file(path, start, end)
