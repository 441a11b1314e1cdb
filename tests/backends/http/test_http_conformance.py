"""The read half of the conformance suite (tests/backends/
test_client_conformance.py) on the http store over nginx: the objects are
written as files into the directory nginx serves (the store takes no
writes), each with a modification time of its own, since nginx's ETag is
the file's mtime in seconds and its size."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from aioflux import (
    ClientConfig,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    ProtocolError,
    RetryPolicy,
    StorageError,
)
from aioflux._core.integrity.crc import crc32c
from aioflux._core.records.types import ObjectInfo
from aioflux._core.storage.protocol import ObjectStore
from aioflux.http import HttpStore
from tests.servers.nginx import Nginx, running_nginx

_STAMPS = itertools.count(1_600_000_000, 7)


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    root = tmp_path_factory.mktemp("http-conformance")
    with running_nginx(root) as server:
        yield server


@dataclass
class Target:
    """The store, nginx's bucket, and a writer of files nginx serves."""

    store: HttpStore
    bucket: str
    root: Path

    async def write(self, name: str, data: bytes) -> ObjectInfo:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        stamp = next(_STAMPS)
        os.utime(path, (stamp, stamp))  # a new ETag even within one second
        return await self.store.stat(self.bucket, quote(name))


@pytest.fixture
async def target(nginx: Nginx) -> AsyncIterator[Target]:
    config = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0))
    async with HttpStore(config, scheme="http") as store:
        yield Target(store, nginx.bucket, nginx.root)


async def test_is_an_object_store(target: Target) -> None:
    assert isinstance(target.store, ObjectStore)
    assert target.store.features.scheme == "http"


async def test_write_stat_read(target: Target) -> None:
    store, bucket = target.store, target.bucket
    data = os.urandom(100_003)
    info = await target.write("dir/a b.bin", data)
    name = "dir/a%20b.bin"  # a URL's path, percent-encoded as written
    stat = await store.stat(bucket, name)
    assert (stat.size, stat.generation) == (len(data), info.generation)
    assert stat.scheme == "http" and stat.url == f"http://{bucket}/{name}"
    assert await store.read(bucket, name) == data
    assert await store.exists(bucket, name)
    assert not await store.exists(bucket, "dir/missing")


async def test_overwrite_changes_generation_and_bytes(target: Target) -> None:
    infos = [await target.write("over", bytes([i]) * 10) for i in range(5)]
    assert len({i.generation for i in infos}) == 5  # same size: the mtime tells them apart
    assert await target.store.read(target.bucket, "over") == bytes([4]) * 10


async def test_empty_object(target: Target) -> None:
    info = await target.write("empty", b"")
    assert info.size == 0
    assert await target.store.read(target.bucket, "empty") == b""
    assert await target.store.read(target.bucket, "empty", into=bytearray(4)) == 0


async def test_ranged_reads_and_into(target: Target) -> None:
    store, bucket = target.store, target.bucket
    data = os.urandom(50_000)
    await target.write("obj", data)
    assert await store.read(bucket, "obj", start=100, end=1100) == data[100:1100]
    assert await store.read(bucket, "obj", start=49_000) == data[49_000:]
    assert await store.read(bucket, "obj", start=49_999, end=80_000) == data[49_999:]
    assert await store.read(bucket, "obj", start=5, end=5) == b""
    buf = bytearray(60_000)
    assert await store.read(bucket, "obj", into=buf) == len(data)
    assert bytes(buf[: len(data)]) == data
    view = memoryview(buf)[10:1010]
    assert await store.read(bucket, "obj", start=2000, end=3000, into=view) == 1000
    assert bytes(view) == data[2000:3000]
    with pytest.raises(InvalidArgument, match="do not fit"):
        await store.read(bucket, "obj", into=bytearray(10))
    with pytest.raises(InvalidArgument, match="bad range"):
        await store.read(bucket, "obj", start=10, end=5)


async def test_read_starting_past_the_end(target: Target) -> None:
    store, bucket = target.store, target.bucket
    await target.write("short", b"0123456789")
    for start in (10, 11, 1000):
        with pytest.raises(InvalidRequest) as info:
            await store.read(bucket, "short", start=start)
        assert (info.value.status, info.value.name) == (416, "short")
    assert await store.read(bucket, "short", start=9) == b"9"
    await target.write("none", b"")
    assert await store.read(bucket, "none", start=0) == b""
    assert await store.read(bucket, "none", start=0, end=10) == b""
    assert await store.read(bucket, "none", start=0, end=1) == b""
    for kw in ({"start": 1}, {"start": 2, "end": 4}):
        with pytest.raises(InvalidRequest) as info:
            await store.read(bucket, "none", **kw)
        assert (info.value.status, info.value.name) == (416, "none")


async def test_fetch_checks_and_reports(target: Target) -> None:
    store, bucket = target.store, target.bucket
    data = os.urandom(30_000)
    info = await target.write("fetched", data)
    got = await store.fetch(bucket, "fetched", size=info.size, crc=crc32c(data), want_crc=True)
    assert (got.data, got.count, got.crc) == (data, len(data), crc32c(data))
    buf = memoryview(bytearray(1000))
    part = await store.fetch(bucket, "fetched", start=1000, end=2000, into=buf, want_crc=True)
    assert (part.data, part.count, part.crc) == (None, 1000, crc32c(data[1000:2000]))
    assert bytes(buf) == data[1000:2000]


async def test_fetch_of_an_object_shorter_than_its_known_size(target: Target) -> None:
    store, bucket, name = target.store, target.bucket, "shrunk"
    info = await target.write(name, os.urandom(50_000))
    await target.write(name, os.urandom(1000))
    for start, end in ((10_000, 20_000), (1000, 2000), (1000, None)):
        with pytest.raises(StorageError) as caught:
            await store.fetch(bucket, name, start=start, end=end, size=info.size)
        error = caught.value
        assert type(error) is ProtocolError, repr(error)
        assert (error.operation, error.bucket, error.name) == ("read", bucket, name)
        assert "50000" in str(error) and str(error).startswith(f"read {info.url} "), str(error)
    with pytest.raises(NotFound):
        await store.fetch(bucket, name, start=10_000, end=20_000, generation=info.generation,
                          size=info.size)
    for start in (1000, 5000):
        with pytest.raises(InvalidRequest) as past:
            await store.fetch(bucket, name, start=start, size=1000)
        assert (past.value.status, past.value.name) == (416, name)
    await target.write(name, b"")
    with pytest.raises(ProtocolError, match="50000"):
        await store.fetch(bucket, name, start=0, end=10_000, size=info.size)


async def test_read_missing_is_not_found(target: Target) -> None:
    store, bucket = target.store, target.bucket
    with pytest.raises(NotFound) as info:
        await store.read(bucket, "nope")
    assert (info.value.bucket, info.value.name, info.value.attempts) == (bucket, "nope", 1)
    assert "nope" in str(info.value)
    with pytest.raises(NotFound):
        await store.stat(bucket, "nope")


async def test_read_pinned_generation(target: Target) -> None:
    store, bucket = target.store, target.bucket
    first = await target.write("pinned", b"one")
    assert await store.read(bucket, "pinned", generation=first.generation) == b"one"
    second = await target.write("pinned", b"two")
    assert await store.read(bucket, "pinned", generation=second.generation) == b"two"
    with pytest.raises(NotFound):  # that version is gone
        await store.read(bucket, "pinned", generation=first.generation)
