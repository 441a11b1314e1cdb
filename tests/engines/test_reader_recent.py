"""A reader opened on a recent info (a listing's, an earlier stat's) that
went stale: the object was replaced by a shorter one before the first read.

Nothing was handed out yet, so the reader reads the current version. On
every backend a read pinned to the cached version finds it gone before
any range is looked at (GCS's 404 on ``generation=``, S3's and Azure's 412
on ``If-Match``, the local and memory stores' generation check), so the
first half proves the replacement is always seen as a gone version. What
cannot tell versions apart finds another size instead (a 416 below the
size cached, a store comparing sizes itself): an info with no version,
and a file rewritten keeping its modification time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aioflux import (
    AsyncClient,
    ClientConfig,
    NotFound,
    ObjectInfo,
    PreconditionFailed,
    ProtocolError,
    ReaderOptions,
    S3Store,
)
from aioflux._core.concurrency.portal import get_portal
from aioflux._core.records.urls import parse_url
from aioflux._engines.reader import ObjectReader
from aioflux.azure import AzureStore
from aioflux.local import LocalStore
from aioflux.testing import MemoryStore
from tests.conftest import FAST_RETRY, unique_bucket

KiB = 1024
OLD = os.urandom(300 * KiB)
NEW = os.urandom(1000)
OPTIONS = ReaderOptions(block_size=64 * KiB, read_ahead=2)
BACKENDS = ["gs", "fake-gcs", "s3", "moto", "azurite", "file", "memory"]


@dataclass
class Target:
    """A store (on the portal's loop, which the blocking reader drives) and
    the object a test reads; ``path`` is its file on the local store."""

    kind: str
    store: Any
    bucket: str
    name: str
    path: Path | None = None

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return get_portal().call(getattr(self.store, method)(self.bucket, self.name, *args,
                                                             **kwargs))


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    kind: str = request.param
    config = ClientConfig(max_concurrency=16, retry=FAST_RETRY)
    server: Any = None
    if kind in ("gs", "s3", "fake-gcs", "moto", "azurite"):
        server = request.getfixturevalue({"gs": "emulator", "s3": "emulator",
                                          "fake-gcs": "fake_gcs", "moto": "moto_s3"}.get(
                                              kind, kind))

    async def make() -> Target:
        if kind == "memory":
            return Target(kind, MemoryStore(config, buckets=["mem"]), "mem", "o")
        if kind == "file":
            (tmp_path / "objects").mkdir()
            url = parse_url(str(tmp_path / "objects") + "/")
            return Target(kind, LocalStore(config), url.bucket, url.name + "o",
                          tmp_path / "objects" / "o")
        store: Any
        if kind in ("gs", "fake-gcs"):
            store = AsyncClient(config, endpoint=server.endpoint, credentials=None)
        elif kind == "azurite":
            store = AzureStore(config, connection_string=server.connection_string)
        else:
            store = S3Store(config, endpoint=server.s3_endpoint if kind == "s3"
                            else server.endpoint, region="us-east-1", addressing="path")
        bucket = unique_bucket("recent")
        await store.create_bucket(bucket)
        return Target(kind, store, bucket, "o")

    made = get_portal().call(make())
    yield made
    get_portal().call(made.store.aclose())


def _cached(target: Target) -> ObjectInfo:
    """``OLD`` written, as a stat gives it (what the cache then holds)."""
    target.call("write", OLD)
    return target.call("stat")  # type: ignore[no-any-return]


# The first read of each of the reader's paths, past the end of NEW.
FIRST_READS: dict[str, Callable[[ObjectReader], object]] = {
    "exact": lambda r: (r.seek(200 * KiB), r.read(100))[1],  # one small GET
    "blocks": lambda r: (r.seek(200 * KiB), r.read(64 * KiB))[1],
    "across": lambda r: (r.seek(10 * KiB), r.readinto(bytearray(250 * KiB)))[1],  # into it
    "readline": lambda r: (r.seek(200 * KiB), r.readline())[1],
    "peek": lambda r: (r.seek(200 * KiB), r.peek(10))[1],
}


def _reads_the_current_version(target: Target, cached: ObjectInfo, first: str) -> None:
    with ObjectReader(target.store, target.bucket, target.name, options=OPTIONS, info=cached,
                      recent=True) as r:
        assert r.size == len(OLD)  # as the cache said, until a read finds it stale
        assert FIRST_READS[first](r) in (b"", 0)  # the current version ends before there
        assert r.size == len(NEW)
        r.seek(4)
        assert r.read(3) == NEW[4:7]
        r.seek(0)
        assert r.read() == NEW
        r.verify()


@pytest.mark.parametrize("target", BACKENDS, indirect=True)
@pytest.mark.parametrize("first", list(FIRST_READS))
def test_a_replaced_object_is_a_gone_version_and_read_anew(target: Target, first: str) -> None:
    cached = _cached(target)
    target.call("write", NEW)
    _reads_the_current_version(target, cached, first)


@pytest.mark.parametrize("target", BACKENDS, indirect=True)
@pytest.mark.parametrize("first", ["exact", "blocks", "across"])
def test_an_info_with_no_version_that_went_stale_reads_the_current_one(
        target: Target, first: str) -> None:
    # As a listing without ETags gives it (an S3-compatible store's): the
    # reads are not pinned, and found a 416 below the size cached (a
    # ProtocolError), or a store's own size check (ChecksumMismatch).
    cached = _cached(target)._replace(generation=0)
    target.call("write", NEW)
    _reads_the_current_version(target, cached, first)


@pytest.mark.parametrize("target", ["file"], indirect=True)
@pytest.mark.parametrize("first", ["exact", "blocks", "across", "readline"])
def test_a_file_rewritten_keeping_its_mtime_reads_the_current_version(
        target: Target, first: str) -> None:
    # cp -p, rsync -t, or two writes within one timestamp tick: the file's
    # generation (its mtime) is the same, its size is not, and the local
    # store's size check was a ChecksumMismatch.
    cached = _cached(target)
    assert target.path is not None
    before = target.path.stat()
    target.path.write_bytes(NEW)
    os.utime(target.path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.call("stat").generation == cached.generation
    _reads_the_current_version(target, cached, first)


@pytest.mark.parametrize("target", ["gs", "file"], indirect=True)
def test_a_deleted_object_is_not_found(target: Target) -> None:
    cached = _cached(target)._replace(generation=0)
    target.call("delete")
    with ObjectReader(target.store, target.bucket, target.name, options=OPTIONS, info=cached,
                      recent=True) as r, pytest.raises(NotFound):
        r.read(10)


@pytest.mark.parametrize("target", ["gs", "s3"], indirect=True)
def test_an_error_the_stat_does_not_explain_is_raised(
        target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cache was right (the stat names its version and size): the
    # read's own error stands, after one stat, and is not asked about again.
    cached = _cached(target)
    stats: list[str] = []
    stat = target.store.stat

    async def counted(*args: Any, **kwargs: Any) -> Any:
        stats.append(args[1])
        return await stat(*args, **kwargs)

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise ProtocolError("read: scripted", operation="read", bucket=target.bucket,
                            name=target.name)

    monkeypatch.setattr(target.store, "stat", counted)
    monkeypatch.setattr(target.store, "fetch", broken)
    with ObjectReader(target.store, target.bucket, target.name, options=OPTIONS, info=cached,
                      recent=True) as r:
        for _ in range(2):
            with pytest.raises(ProtocolError, match="scripted"):
                r.read(10)
        assert stats == [target.name] and r.info == cached and r.tell() == 0


# Longer than the cached OLD, so that a read of "the rest" sized by the
# cache stops short of it; small and large reads take different paths.
LONGER = {"small": os.urandom(10 * KiB), "large": os.urandom(3 * 1024 * KiB)}


@pytest.mark.parametrize("target", BACKENDS, indirect=True)
@pytest.mark.parametrize("size", list(LONGER))
@pytest.mark.parametrize("versioned", [True, False])
def test_reading_the_rest_of_a_replaced_longer_object_reads_all_of_it(
        target: Target, size: str, versioned: bool) -> None:
    # read() sized its "rest" by the cached size before its first GET found
    # the version gone: it returned the new version cut at the old size.
    old = os.urandom(5 * KiB if size == "small" else 1024 * KiB)
    target.call("write", old)
    cached = target.call("stat")
    if not versioned:
        cached = cached._replace(generation=0)
    new = LONGER[size]
    target.call("write", new)
    with ObjectReader(target.store, target.bucket, target.name, options=OPTIONS, info=cached,
                      recent=True) as r:
        assert r.read() == new
        assert r.size == len(new) and r.tell() == len(new)


@pytest.mark.parametrize("target", ["gs", "s3", "file"], indirect=True)
@pytest.mark.parametrize("new_size", [1000, 500 * KiB])
def test_a_size_handed_out_then_found_stale_is_an_error_not_other_bytes(
        target: Target, new_size: int) -> None:
    # seek(-n, SEEK_END) (a Parquet reader's footer, a tail) placed the
    # position by the cached size; the read then found the object replaced
    # and read the current version there: the middle of a longer one, or
    # nothing of a shorter one, handed out as the tail.
    cached = _cached(target)
    target.call("write", os.urandom(new_size))
    with ObjectReader(target.store, target.bucket, target.name, options=OPTIONS, info=cached,
                      recent=True) as r:
        r.seek(-100, os.SEEK_END)
        with pytest.raises(PreconditionFailed, match="changed since it was opened") as info:
            r.read(100)
        assert (info.value.bucket, info.value.name) == (target.bucket, target.name)
        assert r.seek(0, os.SEEK_END) == new_size  # the current version, from now on
    # A size nobody asked for is no offset of the caller's: the read goes on.
    with ObjectReader(target.store, target.bucket, target.name, options=OPTIONS, info=cached,
                      recent=True) as r:
        assert len(r.read()) == new_size
