"""What fsspec's callers expect of a filesystem, where aioflux's differed:
relative local paths, peers' settings, get/put of many files in bounded
memory, mv and rm of folders, file modes, checksums, open ranges, an
object beside a folder of its name, a missing path, create-only opens in
async mode. Each test fails without its fix."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioflux import InvalidArgument
from aioflux._core.concurrency.portal import call
from aioflux.fsspec import AiofluxFileSystem, _transfers
from aioflux.testing import Emulator
from tests.fsspec.conftest import CONFIG, Site

BOTH = pytest.mark.parametrize("backend", ["emulator", "localfs"], indirect=True)


@pytest.fixture
def local_fs() -> Iterator[AiofluxFileSystem]:
    fs = AiofluxFileSystem("file", config=CONFIG, skip_instance_cache=True)
    yield fs
    call(fs.store.aclose())


def test_a_relative_local_path_is_the_working_directorys(
        local_fs: AiofluxFileSystem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    local_fs.pipe("out/x.txt", b"relative")  # was /out/x.txt
    local_fs.pipe("~/y.txt", b"home")  # was /~/y.txt
    local_fs.pipe("file://out/z.txt", b"url")  # fsspec's file:// of a relative path
    assert (tmp_path / "out" / "x.txt").read_bytes() == b"relative"
    assert (tmp_path / "home" / "y.txt").read_bytes() == b"home"
    assert (tmp_path / "out" / "z.txt").read_bytes() == b"url"
    assert local_fs.cat("out/x.txt") == b"relative"  # a one-part path was a bucket
    assert local_fs.glob("out/*.txt") == [str(tmp_path / "out" / "x.txt"),
                                          str(tmp_path / "out" / "z.txt")]
    assert local_fs.info("out/x.txt")["name"] == str(tmp_path / "out" / "x.txt")
    with local_fs.open("out/x.txt") as f, local_fs.open("out/w.txt", "wb") as w:
        # Named as LocalFileSystem's files are: a path that opens them here too.
        assert (f.name, w.name) == (str(tmp_path / "out" / "x.txt"), str(tmp_path / "out/w.txt"))


def test_the_peers_endpoint_and_region_settings_are_taken_and_others_refused(
        site: Site, tmp_path: Path) -> None:
    if site.scheme == "file":
        pytest.skip("files take no endpoint")
    endpoint = site.options["endpoint"]
    written = site.path("o")
    site.fs.pipe_file(written, b"there")
    # s3fs's and gcsfs's names of the endpoint (the store went to AWS or GCS).
    region = {"region_name": "us-east-1"} if site.scheme == "s3" else {}
    for options in ({"endpoint_url": endpoint},
                    {"client_kwargs": {"endpoint_url": endpoint, **region}}):
        fs = AiofluxFileSystem(site.scheme, config=CONFIG, skip_instance_cache=True,
                               **options)
        try:
            assert fs.cat_file(written) == b"there"
        finally:
            call(fs.store.aclose())
    # What aioflux does not take is said, not dropped.
    with pytest.raises(InvalidArgument, match="'key', 'secret' are not settings.*AWS chain"
                       if site.scheme == "s3" else "'key', 'secret' are not settings"):
        AiofluxFileSystem(site.scheme, endpoint=endpoint, key="k", secret="s",
                          skip_instance_cache=True)
    with pytest.raises(InvalidArgument, match="the endpoint given twice"):
        AiofluxFileSystem(site.scheme, endpoint=endpoint, endpoint_url="http://127.0.0.1:9",
                          skip_instance_cache=True)
    with pytest.raises(InvalidArgument, match="'version_aware' is not a setting"):
        AiofluxFileSystem(site.scheme, endpoint=endpoint, version_aware=True,
                          skip_instance_cache=True)
    if site.scheme == "gs":
        with pytest.raises(InvalidArgument, match="region is an S3 setting"):
            AiofluxFileSystem("gs", endpoint=endpoint, region="us-east-1",
                              skip_instance_cache=True)


def test_gcsfs_anonymous_token_is_anonymous_credentials(emulator: Emulator) -> None:
    fs = AiofluxFileSystem("gs", endpoint_url=emulator.endpoint, token="anon",
                           skip_instance_cache=True)
    try:
        assert fs._settings.credentials == "anonymous"
    finally:
        call(fs.store.aclose())
    with pytest.raises(InvalidArgument, match="'token' is not a setting"):
        AiofluxFileSystem("gs", endpoint=emulator.endpoint, token="/path/key.json",
                          skip_instance_cache=True)


def _most_at_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """``[now, most]`` calls of ``owner.name`` running at once, from now on."""
    seen = [0, 0]
    method = getattr(owner, name)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        seen[1] = max(seen)
        try:
            await asyncio.sleep(0)  # let the others in
            return await method(*args, **kwargs)
        finally:
            seen[0] -= 1

    monkeypatch.setattr(owner, name, counted)
    return seen


@BOTH
def test_get_and_put_of_many_files_hold_a_bounded_number_of_blocks(
        backend: tuple[AiofluxFileSystem, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fs, root = backend
    # Small blocks: many files of several blocks each, as 8 MiB ones would be.
    monkeypatch.setattr(_transfers, "_GET_BLOCK", 4096)
    monkeypatch.setattr(_transfers, "_PUT_CHUNK", 4096)
    local = tmp_path / "up"
    local.mkdir()
    for i in range(40):
        (local / f"f{i:02d}").write_bytes(os.urandom(4 * 4096 + i))
    streaming = _most_at_once(monkeypatch, _transfers, "_put_streaming")
    fs.put(str(local) + "/", f"{root}/d/", recursive=True)
    assert streaming[1] == _transfers.STREAMING_PUTS  # fsspec ran all 40 at once
    fetching = _most_at_once(monkeypatch, fs.store, "fetch")
    fs.get(f"{root}/d/", str(tmp_path / "down") + "/", recursive=True)
    # Each file reads up to 5 blocks ahead; 40 files were 160+ blocks at once.
    assert _transfers._GET_AHEAD < fetching[1] <= _transfers.TRANSFER_BLOCKS
    for i in range(40):
        assert (tmp_path / "down" / f"f{i:02d}").read_bytes() == \
            (local / f"f{i:02d}").read_bytes()


@BOTH
def test_get_file_writes_the_blocks_behind_a_late_one_as_they_arrive(
        backend: tuple[AiofluxFileSystem, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The first block's GET waits until the 39 after it have been fetched:
    # in input order, the 15 after it filled the window and nothing more
    # started (a hang here).
    fs, root = backend
    monkeypatch.setattr(_transfers, "_GET_BLOCK", 4096)
    data = os.urandom(40 * 4096 - 5)
    fs.pipe_file(f"{root}/big", data)
    fetch, others, fetched, waited = fs.store.fetch, threading.Event(), [0], []

    async def held(*args: Any, start: int = 0, **kwargs: Any) -> Any:
        if start == 0:
            waited.append(await asyncio.to_thread(others.wait, 60))
        got = await fetch(*args, start=start, **kwargs)
        if start:
            fetched[0] += 1
            if fetched[0] == 39:
                others.set()
        return got

    monkeypatch.setattr(fs.store, "fetch", held)
    fs.get_file(f"{root}/big", str(tmp_path / "big"))
    assert waited == [True]  # the others were fetched while the first was held
    assert (tmp_path / "big").read_bytes() == data


@BOTH
def test_mv_and_rm_of_a_folder(backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    fs.pipe({f"{root}/src/a": b"a", f"{root}/src/sub/b": b"b"})
    fs.mv(f"{root}/src", f"{root}/dst", recursive=True)  # failed at the folder entries
    assert sorted(fs.find(root)) == [f"{root}/dst/a", f"{root}/dst/sub/b"]
    if fs.scheme != "file":
        # Folder placeholders, as consoles make them, go with rm -r.
        bucket, name = fs._split(f"{root}/dst", folder=True)
        call(fs.store.write(bucket, name + "/", b""))
        call(fs.store.write(bucket, name + "/sub/", b""))
    fs.rm(f"{root}/dst", recursive=True)
    assert not fs.exists(f"{root}/dst")
    fs.invalidate_cache()
    assert fs.find(root) == [] and not fs.exists(f"{root}/dst")
    with pytest.raises(FileNotFoundError):  # a missing path is said
        fs.rm(f"{root}/missing")


@BOTH
def test_mv_removes_only_what_it_copied(backend: tuple[AiofluxFileSystem, str]) -> None:
    # fsspec's mv copies, then removes the source: its rm dropped maxdepth,
    # and took a path spelled two ways, or a folder moved into itself, for
    # two trees. Each lost objects that were never copied.
    fs, root = backend
    fs.pipe({f"{root}/src/a": b"a", f"{root}/src/sub/b": b"b"})
    fs.mv(f"{root}/src", f"{root}/dst", recursive=True, maxdepth=1)
    assert fs.cat_file(f"{root}/src/sub/b") == b"b"  # below maxdepth: neither copied nor gone
    assert not fs.exists(f"{root}/src/a")
    assert sorted(fs.cat(fs.find(root)).values()) == [b"a", b"b"]
    fs.pipe({f"{root}/one": b"1", f"{root}/f/x": b"x"})
    fs.mv(fs.unstrip_protocol(f"{root}/one"), f"{root}/one")  # one object, as URL and path
    fs.mv(f"{root}/f/", f"{root}/f", recursive=True)
    fs.mv([fs.unstrip_protocol(f"{root}/one"), f"{root}/f/x"], [f"{root}/one", f"{root}/f/y"])
    assert fs.cat([f"{root}/one", f"{root}/f/y"]) == {f"{root}/one": b"1", f"{root}/f/y": b"x"}
    assert not fs.exists(f"{root}/f/x")
    before = fs.find(root)
    with pytest.raises(ValueError, match="into itself"):
        fs.mv(f"{root}/src", f"{root}/src/sub/deeper", recursive=True)
    with pytest.raises(ValueError, match="into itself"):
        fs.mv([f"{root}/f"], fs.unstrip_protocol(f"{root}/f/in"), recursive=True)
    assert fs.find(root) == before
    fs.mv(f"{root}/src", f"{root}/moved", recursive=True)  # a whole tree still moves
    assert fs.cat_file(f"{root}/moved/sub/b") == b"b" and not fs.exists(f"{root}/src")


@BOTH
def test_update_modes_are_refused_in_text_as_in_binary(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    # "w+" gave a write-only text file ("wb+" is refused): reading it back
    # failed only later, after the object was published.
    fs, root = backend
    for mode in ("w+", "w+b", "x+", "r+", "a"):
        with pytest.raises(ValueError, match="not supported"):
            fs.open(f"{root}/o", mode)
    assert not fs.exists(f"{root}/o")


def test_get_file_makes_files_as_open_does(local_fs: AiofluxFileSystem,
                                           tmp_path: Path) -> None:
    local_fs.pipe_file(str(tmp_path / "src"), b"x")
    old = os.umask(0o022)
    try:
        local_fs.get_file(str(tmp_path / "src"), str(tmp_path / "got"))
    finally:
        os.umask(old)
    assert (tmp_path / "got").stat().st_mode & 0o777 == 0o644  # mkstemp's was 0o600


def test_checksum_takes_all_of_the_version(monkeypatch: pytest.MonkeyPatch,
                                           local_fs: AiofluxFileSystem) -> None:
    # Two times of whole seconds: the same last 8 characters.
    keys = iter(["1700000000000000000", "1700000100000000000"])
    monkeypatch.setattr(local_fs, "ukey", lambda path: next(keys))
    assert local_fs.checksum("/a") != local_fs.checksum("/a")


@BOTH
def test_cat_ranges_of_open_ranges(backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    body = bytes(range(100))
    fs.pipe_file(f"{root}/o", body)
    got = fs.cat_ranges([f"{root}/o"] * 3, [0, 50, 90], [None, 60, None])
    assert got == [body, body[50:60], body[90:]]  # a TypeError escaped


def test_an_object_beside_a_folder_of_its_name_stays_a_file(
        site: Site) -> None:
    if site.scheme == "file":
        pytest.skip("a file and a folder cannot share a path")
    fs = site.fs
    fs.pipe({site.path("d"): b"obj", site.path("d/x"): b"x"})
    assert fs.info(site.path("d"))["type"] == "file"
    fs.find(site.path("d"))
    assert fs.info(site.path("d"))["type"] == "file" and fs.isfile(site.path("d"))
    fs.invalidate_cache()
    fs.ls(site.path("d"))  # its own listing was taken for a folder's
    assert fs.info(site.path("d"))["type"] == "file" and fs.isfile(site.path("d"))


def test_create_only_open_on_an_asynchronous_filesystem(site: Site) -> None:
    fs = AiofluxFileSystem(site.scheme, config=CONFIG, asynchronous=True,
                           skip_instance_cache=True, **site.options)
    try:
        with fs.open(site.path("x"), "xb") as f:  # "Loop is not running"
            f.write(b"once")
        assert site.fs.cat_file(site.path("x")) == b"once"
        with pytest.raises(FileExistsError):
            fs.open(site.path("x"), "xb")
    finally:
        call(fs.store.aclose())


def test_a_collected_filesystem_closes_its_connections(emulator: Emulator) -> None:
    import gc

    bucket = f"leak-{os.getpid()}"
    emulator.create_bucket(bucket)
    AiofluxFileSystem("gs", endpoint=emulator.endpoint,
                      skip_instance_cache=True).pipe_file(f"{bucket}/o", b"x")

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    def one_call() -> None:  # one filesystem a call, as code passing its options does
        fs = AiofluxFileSystem("gs", endpoint=emulator.endpoint, skip_instance_cache=True)
        assert fs.cat_file(f"{bucket}/o") == b"x"

    one_call()
    gc.collect()
    before = descriptors()
    for _ in range(30):
        one_call()
    gc.collect()
    # The closes run on aioflux's loop thread: wait for those started, then
    # for the server to see its ends close (polled: no fixed window counts).
    from aioflux._core.concurrency import portal

    async def closed() -> None:
        await asyncio.sleep(0)  # the finalizers' closes are started by now
        await asyncio.gather(*portal._closing, return_exceptions=True)

    call(closed())
    for _ in range(6000):
        if descriptors() <= before + 4:
            break
        call(asyncio.sleep(0.005))
    assert descriptors() <= before + 4  # each kept two (client and server side) before
