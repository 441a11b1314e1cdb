"""Names the filesystem cannot hold, on the local store.

An object name may have a segment longer than the filesystem's longest file
name (255 bytes on ext4, XFS, NFS), as GCS names may; no file can be there.
Every call on such a name failed as a bare ``StorageError`` ("File name too
long"): ``exists`` raised instead of answering False, a delete with
``missing_ok`` failed, and a listing of such a prefix failed where it holds
nothing. Now a lookup is ``NotFound`` (``exists`` is False, an empty
listing), and a write or a copy to such a name is ``InvalidRequest`` naming
the object (final: no retry makes it fit).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aioflux import ClientConfig, InvalidRequest, NotFound, StorageError
from aioflux._core.records.urls import parse_url
from aioflux.local import LocalStore


class Space:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bucket, self.prefix = parse_url(f"{root}/")
        self.store = LocalStore(ClientConfig(max_concurrency=4))
        # One byte past what this filesystem takes in a file name.
        self.long = "x" * (os.pathconf(root, "PC_NAME_MAX") + 1)

    def n(self, name: str) -> str:
        return self.prefix + name


@pytest.fixture
async def space(tmp_path: Path) -> AsyncIterator[Space]:
    (tmp_path / "objects").mkdir()
    local = Space(tmp_path / "objects")
    async with local.store:
        yield local


async def test_an_overlong_name_is_not_found(space: Space) -> None:
    store, bucket = space.store, space.bucket
    await store.write(bucket, space.n("ok"), b"source")
    for name in (space.n(space.long), space.n(f"{space.long}/model.pt")):
        with pytest.raises(NotFound) as stat:
            await store.stat(bucket, name)
        assert (stat.value.operation, stat.value.bucket, stat.value.name) == ("stat", bucket,
                                                                               name)
        with pytest.raises(NotFound):
            await store.read(bucket, name)
        assert await store.exists(bucket, name) is False
        with pytest.raises(NotFound):
            await store.delete(bucket, name)
        await store.delete(bucket, name, missing_ok=True)
        with pytest.raises(NotFound):
            await store.copy(bucket, name, bucket, space.n("copy"))
    assert sorted(os.listdir(space.root)) == ["ok"]


async def test_a_listing_under_an_overlong_folder_is_empty(space: Space) -> None:
    store, bucket = space.store, space.bucket
    await store.write(bucket, space.n("ok"), b"x")
    for delimiter in (None, "/"):
        pages = [page async for page in store.list(bucket, space.n(f"{space.long}/"),
                                                   delimiter=delimiter)]
        assert [(p.objects, p.prefixes) for p in pages] == [([], [])]


async def test_a_write_to_an_overlong_name_is_an_invalid_request(space: Space) -> None:
    store, bucket = space.store, space.bucket
    await store.write(bucket, space.n("ok"), b"source")
    for name in (space.n(space.long), space.n(f"{space.long}/model.pt")):
        with pytest.raises(InvalidRequest) as write:
            await store.write(bucket, name, b"payload")
        assert (write.value.operation, write.value.bucket, write.value.name) == (
            "write", bucket, name)
        assert write.value.reason == "ENAMETOOLONG"
        with pytest.raises(InvalidRequest) as copy:
            await store.copy(bucket, space.n("ok"), bucket, name)
        assert copy.value.name == name  # the destination that cannot be written
        upload = store.start_upload(bucket, name)
        with pytest.raises(InvalidRequest):
            await upload.put(1, memoryview(b"part"))
        await upload.abort()
    assert sorted(os.listdir(space.root)) == ["ok"]  # no temporary, no directory left


async def test_other_failures_stay_storage_errors(space: Space) -> None:
    # Only the name's length is the caller's: a full disk, say, is not.
    store, bucket = space.store, space.bucket
    await store.write(bucket, space.n("ok"), b"x")
    os.mkfifo(space.root / "fifo")
    with pytest.raises(StorageError) as info:
        await store.write(bucket, space.n("fifo/inside"), b"x")
    assert not isinstance(info.value, (InvalidRequest, NotFound))
