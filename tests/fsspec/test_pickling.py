"""Files of ``fs.open`` handed to other processes (DataLoader workers, dask,
multiprocessing under spawn), on every backend: a read file pickles as
fsspec's do, by opening its path again, here at the version it reads and
the position it had; a write file refuses, naming the object. Each test
failed before: a read file could not be pickled, and a write file's
refusal named neither the file nor the reason (on files, an ``open_async``
one pickled into a copy that published on its own)."""

from __future__ import annotations

import concurrent.futures
import gzip
import multiprocessing
import os
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from aioflux import NotFound
from aioflux._core.concurrency.portal import call
from aioflux.fsspec import AiofluxFileSystem
from tests.fsspec._read_rest import read_rest

MiB = 1024 * 1024
# Two of the reader's 4 MiB blocks, so the position can sit in the second.
SIZE = 5 * MiB + 7
BOTH = pytest.mark.parametrize("backend", ["emulator", "localfs"], indirect=True)


@pytest.fixture
def unpickled() -> Iterator[list[Any]]:
    """Files the test unpickled: closed after it, with their filesystems'
    connections (fsspec's instance cache, where unpickling put the
    filesystems, is emptied)."""
    files: list[Any] = []
    yield files
    for f in files:
        f.close()
    for fs in {id(f.fs): f.fs for f in files}.values():
        call(fs.store.aclose())
    AiofluxFileSystem.clear_instance_cache()


def _loads(blob: bytes, unpickled: list[Any]) -> Any:
    f = pickle.loads(blob)
    unpickled.append(f)
    return f


def test_a_read_file_unpickles_at_its_version_and_position(
        backend: tuple[AiofluxFileSystem, str], unpickled: list[Any]) -> None:
    fs, root = backend
    data = os.urandom(SIZE)
    fs.pipe_file(f"{root}/o", data)
    with fs.open(f"{root}/o", "rb") as f:
        fresh = _loads(pickle.dumps(f), unpickled)  # before any read
        assert f.read(1000) == data[:1000]
        f.seek(4 * MiB - 10)
        assert f.read(20) == data[4 * MiB - 10:4 * MiB + 10]
        back = _loads(pickle.dumps(f), unpickled)
        assert back.tell() == f.tell() == 4 * MiB + 10
        assert back.fs is not f.fs and back.fs.storage_options == fs.storage_options
        assert (back.path, back.size, back.mode) == (f.path, len(data), "rb")
        assert back.details == f.details
        assert back.read() == data[4 * MiB + 10:]
        assert f.read() == data[4 * MiB + 10:]  # the original reads on
    assert fresh.tell() == 0 and fresh.read() == data


def test_a_file_opened_from_a_listing_unpickles_with_the_objects_checksums(
        backend: tuple[AiofluxFileSystem, str], unpickled: list[Any]) -> None:
    # An S3 listing's entry has no checksum: the file it opened took one
    # from a stat beside its first read, and so does the unpickled one.
    fs, root = backend
    data = os.urandom(1000)
    fs.pipe_file(f"{root}/o", data)
    fs.ls(root)
    with fs.open(f"{root}/o", "rb") as f:
        back = _loads(pickle.dumps(f), unpickled)
    fs.invalidate_cache()
    stat = fs.info(f"{root}/o")
    key = "crc32c" if stat["crc32c"] else "md5"  # what reads are checked against
    assert stat[key] and back.details[key] == stat[key]
    assert back.read() == data


def test_an_unpickled_read_file_never_reads_a_replaced_object(
        backend: tuple[AiofluxFileSystem, str], request: pytest.FixtureRequest,
        unpickled: list[Any]) -> None:
    fs, root = backend
    old, new = os.urandom(SIZE), os.urandom(SIZE)
    fs.pipe_file(f"{root}/o", old)
    # Opened by a stat, and by a listing's entry (on S3, one without a
    # checksum: pickled before any read, it is stat'ed when unpickled).
    by_stat = fs.open(f"{root}/o", "rb")
    assert by_stat.read(100) == old[:100]
    fs.ls(root)
    by_listing = fs.open(f"{root}/o", "rb")
    by_listing.seek(100)
    blobs = [pickle.dumps(by_stat), pickle.dumps(by_listing)]
    by_stat.close()
    by_listing.close()
    fs.pipe_file(f"{root}/o", new)  # the same size: the rest of it would read as the rest
    for blob in blobs:
        back = _loads(blob, unpickled)
        assert back.tell() == 100
        with pytest.raises(NotFound):
            back.read()


@pytest.mark.timeout(180)
def test_a_spawned_process_reads_the_rest_of_a_file_it_is_handed(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    data = os.urandom(SIZE)
    fs.pipe_file(f"{root}/o", data)
    context = multiprocessing.get_context("spawn")
    with fs.open(f"{root}/o", "rb") as f, concurrent.futures.ProcessPoolExecutor(
            1, mp_context=context) as pool:
        f.seek(4 * MiB)
        assert f.read(5) == data[4 * MiB:4 * MiB + 5]
        position, rest, pid = pool.submit(read_rest, f).result(timeout=120)
        assert f.read() == data[4 * MiB + 5:]
    assert pid != os.getpid()
    assert position == 4 * MiB + 5 and rest == data[4 * MiB + 5:]


def test_a_closed_read_file_refuses_to_pickle(backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    fs.pipe_file(f"{root}/o", b"bytes")
    with fs.open(f"{root}/o", "rb") as f:
        assert f.read(2) == b"by"
    with pytest.raises(ValueError, match=r"cannot pickle .*/o: the file is closed"):
        pickle.dumps(f)


@BOTH
def test_a_file_open_for_writing_refuses_to_pickle_and_writes_on(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    refused = r"cannot pickle the file writing \S+/{}: its upload is this process's"
    for name, kwargs in (("wb", {}), ("xb", {}), ("gz", {"compression": "gzip"})):
        with fs.open(f"{root}/{name}", "xb" if name == "xb" else "wb", **kwargs) as f:
            f.write(b"written ")
            with pytest.raises(TypeError, match=refused.format(name)):
                pickle.dumps(f)
            f.write(b"whole")
    assert fs.cat_file(f"{root}/wb") == fs.cat_file(f"{root}/xb") == b"written whole"
    assert gzip.decompress(fs.cat_file(f"{root}/gz")) == b"written whole"
    with fs.transaction:
        f = fs.open(f"{root}/staged", "wb")
        f.write(b"staged")
        with pytest.raises(TypeError, match=refused.format("staged")):
            pickle.dumps(f)
        f.close()
        with pytest.raises(TypeError, match=refused.format("staged")):  # closed, not committed
            pickle.dumps(f)
    assert fs.cat_file(f"{root}/staged") == b"staged"
    with fs.open(f"{root}/text", "w") as t, pytest.raises(TypeError):
        pickle.dumps(t)


@BOTH
async def test_an_async_file_open_for_writing_refuses_to_pickle(
        backend: tuple[AiofluxFileSystem, str]) -> None:
    fs, root = backend
    afs = AiofluxFileSystem(fs.scheme, config=fs._config, endpoint=fs._settings.endpoint,
                            asynchronous=True, skip_instance_cache=True)
    try:
        async with await afs.open_async(f"{root}/a", "wb") as f:
            await f.write(b"once")
            with pytest.raises(TypeError, match=r"cannot pickle the file writing \S+/a:"):
                pickle.dumps(f)
        assert await afs._cat_file(f"{root}/a") == b"once"
    finally:
        await afs.store.aclose()
