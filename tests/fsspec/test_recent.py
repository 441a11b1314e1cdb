"""What the filesystem remembers of recent listings and stats, on every
backend: it answers without a request, forgets what the filesystem's own
writes touch, and never reads a stale entry's bytes as the current ones."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import google_crc32c
import pytest

from aioflux import NotFound, PreconditionFailed
from aioflux._core.concurrency.portal import call
from aioflux.fsspec import AiofluxFileSystem
from aioflux.fsspec._async_file import AsyncReadFile, AsyncWriteFile

_ASKING = ("stat", "list", "list_objects")


def _counted(monkeypatch: pytest.MonkeyPatch, fs: AiofluxFileSystem) -> Counter[str]:
    """Calls of the store's metadata methods from now on."""
    store, calls = fs.store, Counter[str]()
    for name in _ASKING:
        method = getattr(store, name)

        def counting(*args: Any, _method: Callable[..., Any] = method, _name: str = name,
                     **kwargs: Any) -> Any:
            calls[_name] += 1
            return _method(*args, **kwargs)

        monkeypatch.setattr(store, name, counting)
    return calls


def _twin(fs: AiofluxFileSystem, **options: Any) -> AiofluxFileSystem:
    """Another filesystem on the same store: another writer, with its own memory."""
    settings = fs._settings
    return AiofluxFileSystem(fs.scheme, config=fs._config, endpoint=settings.endpoint,
                             credentials=settings.credentials, region=settings.region,
                             skip_instance_cache=True, **options)


def _unhurried(fs: AiofluxFileSystem) -> AiofluxFileSystem:
    """``fs``, remembering until told otherwise: counts never depend on how
    fast this machine gets from a listing to the question. On (local files
    remember nothing by default)."""
    fs.dircache.use_listings_cache = True
    fs.dircache.listings_expiry_time = None
    return fs


def _close(fs: AiofluxFileSystem) -> None:
    call(fs.store.aclose())


def test_what_find_listed_answers_info_exists_open_and_get(
        backend: tuple[AiofluxFileSystem, str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    fs, root = backend
    _unhurried(fs)
    bodies = {f"{root}/d/{n}": os.urandom(100 + i) for i, n in enumerate(["a", "b", "e/c"])}
    fs.pipe(bodies)
    fs.find(root)
    calls = _counted(monkeypatch, fs)
    for path, body in bodies.items():
        assert fs.isfile(path) and fs.exists(path) and fs.size(path) == len(body)
    assert fs.isdir(f"{root}/d/e") and not fs.isfile(f"{root}/d/e")
    assert sum(calls.values()) == 0, calls
    fresh = _unhurried(_twin(fs))
    try:
        fresh_calls = _counted(monkeypatch, fresh)
        for _ in range(3):  # a folder no listing holds: asked once, then remembered
            assert fresh.isdir(f"{root}/d")
        assert fresh_calls == {"stat": 1, "list": 1}, fresh_calls
    finally:
        _close(fresh)
    assert not fs.exists(f"{root}/d/missing")
    assert fs.ls(f"{root}/d", detail=False) == [f"{root}/d/a", f"{root}/d/b", f"{root}/d/e"]
    assert sum(calls.values()) == 0, calls
    for path, body in bodies.items():
        with fs.open(path, "rb") as f:
            assert f.read() == body
        fs.get_file(path, str(tmp_path / "got"))
        assert (tmp_path / "got").read_bytes() == body
        assert call(_read_async(fs, path)) == body
    # An entry with the object's crc32c serves as is (a GCS or Azure listing);
    # an S3 listing has none: then open (beside its first GET), get_file and
    # open_async ask once each.
    asked = sum(fs.info(p)["crc32c"] is None for p in bodies)
    assert calls["stat"] == 3 * asked and calls["list"] == calls["list_objects"] == 0


async def _read_async(fs: AiofluxFileSystem, path: str, *, seek: int = 0,
                      length: int = -1) -> bytes:
    f = await fs.open_async(path, "rb")
    assert isinstance(f, AsyncReadFile)
    async with f:
        f.seek(seek)
        return await f.read(length)


def test_what_info_found_answers_the_open_after_it(
        backend: tuple[AiofluxFileSystem, str], monkeypatch: pytest.MonkeyPatch) -> None:
    fs, root = backend
    _unhurried(fs).pipe_file(f"{root}/o", b"x" * 1000)
    calls = _counted(monkeypatch, fs)
    assert fs.isfile(f"{root}/o")  # pyarrow's open_input_file, then its open
    with fs.open(f"{root}/o", "rb") as f:
        assert f.read() == b"x" * 1000
    assert calls["stat"] == 1


def test_an_open_by_an_entry_without_a_crc32c_stats_beside_its_first_get(
        backend: tuple[AiofluxFileSystem, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # An S3 listing gives no crc32c: the stat that gives it runs
    # beside the first GET, not before it (a small file's open cost a round
    # trip), and the read is still checked against it.
    fs, root = backend
    body = os.urandom(3000)
    _unhurried(fs).pipe_file(f"{root}/o", body)
    fs.find(root)
    listed = fs.info(f"{root}/o")
    store, fetched, order = fs.store, asyncio.Event(), []
    stat, fetch = store.stat, store.fetch

    async def fetch_first(*args: Any, **kwargs: Any) -> Any:
        order.append("fetch")
        fetched.set()
        return await fetch(*args, **kwargs)

    async def stat_after(*args: Any, **kwargs: Any) -> Any:
        try:
            await asyncio.wait_for(fetched.wait(), 30)
        except TimeoutError:
            raise AssertionError("the open stat'ed before its first GET") from None
        order.append("stat")
        return await stat(*args, **kwargs)

    monkeypatch.setattr(store, "fetch", fetch_first)
    monkeypatch.setattr(store, "stat", stat_after)
    with fs.open(f"{root}/o", "rb") as f:
        assert f.read() == body
        checked = f.raw.info.crc32c
    if listed["crc32c"] is None:
        assert order == ["fetch", "stat"]
    else:  # a GCS or Azure listing's entry serves as is
        assert order == ["fetch"] and checked is not None
    assert checked == google_crc32c.value(body)


def test_the_filesystem_sees_its_own_writes_at_once(
        backend: tuple[AiofluxFileSystem, str], tmp_path: Path) -> None:
    fs, root = backend
    fs.pipe({f"{root}/d/a": b"a", f"{root}/d/b": b"b"})
    local = tmp_path / "local"
    local.write_bytes(b"from a local file")

    def listed() -> dict[str, int]:
        return {e["name"].rpartition("/")[2]: e["size"] for e in fs.ls(f"{root}/d")}

    assert listed() == {"a": 1, "b": 1}
    fs.pipe_file(f"{root}/d/c", b"cc")
    assert listed() == {"a": 1, "b": 1, "c": 2}
    with fs.open(f"{root}/d/a", "wb") as f:
        f.write(b"aaa")
    assert fs.info(f"{root}/d/a")["size"] == 3 and fs.cat_file(f"{root}/d/a") == b"aaa"
    fs.put_file(str(local), f"{root}/d/b")
    assert fs.size(f"{root}/d/b") == 17
    with fs.open(f"{root}/d/b", "rb") as f:
        assert f.read() == b"from a local file"
    fs.cp_file(f"{root}/d/c", f"{root}/d/e/c")
    assert fs.isdir(f"{root}/d/e") and fs.cat_file(f"{root}/d/e/c") == b"cc"
    with fs.transaction:
        with fs.open(f"{root}/d/t", "wb") as f:
            f.write(b"t")
        assert not fs.exists(f"{root}/d/t")
    assert fs.exists(f"{root}/d/t")

    async def write_async() -> None:
        f = await fs.open_async(f"{root}/d/x", "wb")
        assert isinstance(f, AsyncWriteFile)
        async with f:
            await f.write(b"xxxx")

    fs.ls(f"{root}/d")
    call(write_async())
    assert listed()["x"] == 4
    fs.rm_file(f"{root}/d/x")
    assert "x" not in listed() and not fs.exists(f"{root}/d/x")
    fs.pipe_file(f"{root}/only/o", b"o")
    assert fs.isdir(f"{root}/only")  # remembered as a folder
    fs.rm_file(f"{root}/only/o")  # its last object: the folder is gone too
    assert not fs.exists(f"{root}/only")
    fs.rm(f"{root}/d", recursive=True)
    assert not fs.exists(f"{root}/d/a") and not fs.exists(f"{root}/d")
    # What the writes made it forget left no time behind (fsspec's own
    # dircache keeps one for every folder it ever held).
    assert sorted(fs.dircache._times) == sorted(fs.dircache._cache)


def test_an_entry_made_stale_by_another_writer_reads_the_current_version(
        backend: tuple[AiofluxFileSystem, str], tmp_path: Path) -> None:
    fs, root = backend
    _unhurried(fs)
    other = _twin(fs)
    try:
        path = f"{root}/o"
        fs.pipe_file(path, b"old" * 1000)
        assert fs.info(path)["size"] == 3000  # remembered, crc32c and version too
        fs.find(root)
        other.pipe_file(path, b"the new version")
        with fs.open(path, "rb") as f:  # opened by the stale entry
            assert f.read() == b"the new version"
        fs.find(root)
        other.pipe_file(path, b"a longer new version")  # the rest, sized by the entry, was cut
        with fs.open(path, "rb") as f:
            assert f.read() == b"a longer new version"
        fs.find(root)
        other.pipe_file(path, b"the newest, longer still")
        assert fs.read_text(path) == "the newest, longer still"
        fs.info(path)
        fs.find(root)
        other.pipe_file(path, b"n" * 5000)
        with fs.open(path, "rb") as f:  # the first read after a seek
            f.seek(4990)
            assert f.read(10) == b"n" * 10
        for stale, (seek, length), want in [
                (b"a" * 10, (0, -1), b"for open_async"),  # the version is gone
                (b"b" * 10, (10, 4), b"sync"),  # a read past the listed end
                (b"c" * 3000, (0, 3), b"for")]:  # the first bytes of a shorter one
            fs.pipe_file(path, stale)
            fs.find(root)
            other.pipe_file(path, b"for open_async")
            assert call(_read_async(fs, path, seek=seek, length=length)) == want
        fs.info(path)
        other.pipe_file(path, b"for get_file")
        fs.get_file(path, str(tmp_path / "got"))
        assert (tmp_path / "got").read_bytes() == b"for get_file"
        fs.info(path)
        fs.find(root)
        other.rm_file(path)
        with pytest.raises((FileNotFoundError, NotFound)), fs.open(path, "rb") as f:
            f.read()
        with pytest.raises((FileNotFoundError, NotFound)):
            fs.get_file(path, str(tmp_path / "gone"))
        with pytest.raises(NotFound):
            call(_read_async(fs, path))
        assert not (tmp_path / "gone").exists()
    finally:
        _close(other)


async def _tail(fs: AiofluxFileSystem, path: str, count: int) -> tuple[bytes, int, bool]:
    """The last ``count`` bytes by a seek from the end of ``open_async``'s
    file, its size then, and whether a first attempt was refused."""
    f = await fs.open_async(path, "rb")
    assert isinstance(f, AsyncReadFile)
    async with f:
        f.seek(-count, os.SEEK_END)
        try:
            return await f.read(count), f.size, False
        except PreconditionFailed:
            f.seek(-count, os.SEEK_END)  # from the current version's end, once said
            return await f.read(count), f.size, True


def _stale_entry(fs: AiofluxFileSystem, other: AiofluxFileSystem, path: str,
                 current: bytes) -> None:
    """``fs`` remembers 3,000 bytes at ``path`` (a listing's entry); the
    store has ``current``, which ``other`` wrote."""
    fs.pipe_file(path, b"old" * 1000)
    fs.find(path.rpartition("/")[0])
    other.pipe_file(path, current)


def test_a_files_size_is_that_of_the_version_it_reads(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    # A file opened by a stale entry reads the current version; its size
    # must be that version's, or a read must refuse to go on by the listed
    # one: fsspec's read_block (dask's read_bytes) reads f.size bytes, and
    # read a prefix of a longer version; an async tail read bytes by the
    # listed end.
    fs, root = backend
    _unhurried(fs)
    other = _twin(fs)
    path = f"{root}/o"
    try:
        for current in (os.urandom(5000), b"shorter", b"n" * 3000):
            changed = len(current) != 3000
            _stale_entry(fs, other, path, current)
            with fs.open(path, "rb") as f:  # read first: the size is the version read
                assert f.read(3) == current[:3]
                assert f.size == f.info()["size"] == f.details["size"] == len(current)
                assert f.seek(0, os.SEEK_END) == len(current)
            _stale_entry(fs, other, path, current)
            with fs.open(path, "rb") as f:  # asked first: the listed size, held to
                assert f.size == 3000
                if changed:
                    with pytest.raises(PreconditionFailed, match="changed since it was opened"):
                        f.read()
                    assert f.size == len(current)  # reads go on at the current version
                    f.seek(0)
                assert f.read() == current
            _stale_entry(fs, other, path, current)
            if changed:
                with pytest.raises(PreconditionFailed):
                    fs.read_block(path, 0, None)
            else:
                assert fs.read_block(path, 0, None) == current
            _stale_entry(fs, other, path, current)
            data, size, refused = call(_tail(fs, path, 5))
            assert (data, size) == (current[-5:], len(current))
            # Refused where the entry had a crc32c (else open_async stats first).
            assert refused in ((True, False) if changed else (False,))
    finally:
        _close(other)


def test_a_file_that_finds_its_entry_stale_makes_the_filesystem_forget_it(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    # "Open it again", said the refusal, and the file opened again from the
    # same entry was refused again, for as long as the entry lived.
    fs, root = backend
    _unhurried(fs)
    other = _twin(fs)
    path = f"{root}/o"

    def tail() -> bytes:
        with fs.open(path, "rb") as f:
            f.seek(-5, os.SEEK_END)
            return f.read()

    try:
        body = os.urandom(5000)
        _stale_entry(fs, other, path, body)
        with pytest.raises(PreconditionFailed):
            tail()
        assert tail() == body[-5:]
        _stale_entry(fs, other, path, body)
        with pytest.raises(PreconditionFailed):
            fs.read_block(path, 0, None)
        assert fs.read_block(path, 0, None) == body
        _stale_entry(fs, other, path, b"x" * 3000)  # another version, the same size
        assert fs.cat_file(path) == b"x" * 3000 and fs.open(path).read() == b"x" * 3000
        assert fs.info(path)["version"] == other.info(path)["version"]
        _stale_entry(fs, other, path, b"y" * 3000)
        call(_read_async(fs, path))
        assert fs.info(path)["version"] == other.info(path)["version"]
        _stale_entry(fs, other, path, b"gone")
        other.rm_file(path)
        with pytest.raises((FileNotFoundError, NotFound)), fs.open(path, "rb") as f:
            f.read()
        assert not fs.exists(path)
    finally:
        _close(other)


def test_get_file_by_an_entry_of_an_empty_object_reads_the_current_version(
        backend: tuple[AiofluxFileSystem, str], tmp_path: Path) -> None:
    # No byte to fetch, so no GET found the version gone: the file got was
    # empty while the object held bytes.
    fs, root = backend
    _unhurried(fs)
    other = _twin(fs)
    try:
        fs.pipe_file(f"{root}/o", b"")
        assert fs.info(f"{root}/o")["size"] == 0
        other.pipe_file(f"{root}/o", b"written since")
        fs.get_file(f"{root}/o", str(tmp_path / "got"))
        assert (tmp_path / "got").read_bytes() == b"written since"
    finally:
        _close(other)


def test_entries_expire_and_can_be_forgotten_or_refused(
        backend: tuple[AiofluxFileSystem, str], monkeypatch: pytest.MonkeyPatch) -> None:
    fs, root = backend
    _unhurried(fs).pipe_file(f"{root}/o", b"o")
    brief = _twin(fs, listings_expiry_time=0.05)
    never = _twin(fs, use_listings_cache=False)
    try:
        for each in (fs, brief, never):
            each.ls(root)
            each.info(f"{root}/o")
        time.sleep(0.1)  # longer than brief's expiry
        fs.invalidate_cache(root)
        counts = [_counted(monkeypatch, each) for each in (fs, brief, never)]
        for each in (fs, brief, never):
            assert each.info(f"{root}/o")["size"] == 1
        assert [c["stat"] for c in counts] == [1, 1, 1]
        assert fs.info(f"{root}/o")["size"] == 1
        assert counts[0]["stat"] == 1  # remembered again
        assert never.info(f"{root}/o")["size"] == 1
        assert counts[2]["stat"] == 2
    finally:
        _close(brief)
        _close(never)


def test_cat_of_many_paths_follows_on_error(backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    paths = [f"{root}/{i}" for i in range(20)]
    fs.pipe({p: p.encode() for p in paths})
    missing = f"{root}/missing"
    assert fs.cat(paths) == {p: p.encode() for p in paths}
    assert fs.cat([*paths, missing], on_error="omit") == {p: p.encode() for p in paths}
    got = fs.cat([missing, *paths], on_error="return", batch_size=3)
    assert isinstance(got[missing], FileNotFoundError | NotFound)
    assert all(got[p] == p.encode() for p in paths)
    with pytest.raises((FileNotFoundError, NotFound)):
        fs.cat([*paths, missing])
    assert fs.cat(paths[0]) == paths[0].encode()  # one path: its bytes, not a dict


def test_local_files_are_never_remembered_unless_asked(tmp_path: Path) -> None:
    # A program writes beside the filesystem with plain open() (fsspec's
    # LocalFileSystem remembers nothing): a listing made before must not
    # hide the new file, nor a stat its new size.
    fs = AiofluxFileSystem("file", skip_instance_cache=True)
    remembering = AiofluxFileSystem("file", use_listings_cache=True, skip_instance_cache=True)
    try:
        for each in (fs, remembering):
            each.pipe_file(str(tmp_path / "a"), b"a")
            assert each.ls(str(tmp_path), detail=False) == [str(tmp_path / "a")]
            assert each.info(str(tmp_path / "a"))["size"] == 1
        (tmp_path / "b").write_bytes(b"bb")
        (tmp_path / "a").write_bytes(b"aaa")
        assert fs.exists(str(tmp_path / "b")) and fs.size(str(tmp_path / "a")) == 3
        assert fs.ls(str(tmp_path), detail=False) == [str(tmp_path / "a"), str(tmp_path / "b")]
        assert not remembering.exists(str(tmp_path / "b"))  # what it was asked for
        assert remembering.size(str(tmp_path / "a")) == 1
    finally:
        _close(fs)
        _close(remembering)
