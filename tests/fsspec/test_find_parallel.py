"""``find`` of a tree of many pages lists it with parallel listers over key
ranges (one lister asked for a hundred pages one after the other), and
still names every object once, in name order, with its folders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioflux import Client
from aioflux._core.concurrency.portal import call
from aioflux.fsspec import AiofluxFileSystem
from aioflux.testing import Emulator
from tests.conftest import unique_bucket
from tests.fsspec.conftest import CONFIG

# Five pages of the emulator's 1,000 names, in two folders.
NAMES = sorted([f"t/a/{i:05d}" for i in range(3000)] + [f"t/b/{i:05d}" for i in range(2000)])


@pytest.fixture
def tree(emulator: Emulator) -> tuple[AiofluxFileSystem, str]:
    bucket = unique_bucket("find")
    with Client(CONFIG, endpoint=emulator.endpoint) as client:
        client.create_bucket(bucket)
    for name in NAMES:
        emulator.store.put(bucket, name, b"x")
    return AiofluxFileSystem("gs", config=CONFIG, endpoint=emulator.endpoint,
                             skip_instance_cache=True), bucket


def test_find_of_many_pages_lists_them_in_parallel(
        tree: tuple[AiofluxFileSystem, str], monkeypatch: pytest.MonkeyPatch) -> None:
    fs, bucket = tree
    store = fs.store
    listing = store.list
    flying = most = 0

    def counted(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async def pages() -> AsyncIterator[Any]:
            nonlocal flying, most
            async for page in listing(*args, **kwargs):
                flying += 1
                most = max(most, flying)
                await asyncio.sleep(0)  # let the other listers' pages come in
                flying -= 1
                yield page
        return pages()

    monkeypatch.setattr(store, "list", counted)
    try:
        found = fs.find(f"{bucket}/t", withdirs=True, detail=True)
        assert most > 1  # more than one lister at once
        assert [n for n, e in found.items() if e["type"] == "file"] == [
            f"{bucket}/{n}" for n in NAMES]
        assert [n for n, e in found.items() if e["type"] == "directory"] == [
            f"{bucket}/t", f"{bucket}/t/a", f"{bucket}/t/b"]
        assert list(found) == sorted(found)
        # And the folders it walked are remembered: ls answers without a request.
        monkeypatch.setattr(store, "list", None)
        assert len(fs.ls(f"{bucket}/t/b", detail=False)) == 2000
    finally:
        call(store.aclose())


def test_find_of_a_bucket_with_its_folders_names_the_bucket_as_any_folder(
        tree: tuple[AiofluxFileSystem, str]) -> None:
    # As fsspec's find of a folder does, maxdepth or not (the bucket was
    # left out without one), and as glob's ** then does.
    fs, bucket = tree
    try:
        fs.pipe_file(f"{bucket}/top", b"x")
        found = fs.find(bucket, withdirs=True)
        assert found[:4] == [bucket, f"{bucket}/t", f"{bucket}/t/a", f"{bucket}/t/a/00000"]
        assert found == fs.find(bucket, withdirs=True, maxdepth=9)
        assert fs.glob(f"{bucket}/**")[:2] == [bucket, f"{bucket}/t"]
        with fs.open(f"{bucket}/top") as f:
            assert f.name == f"{bucket}/top"  # its fsspec path, not the object's name
        with fs.open(f"{bucket}/new", "wb") as w:
            assert w.name == f"{bucket}/new"
    finally:
        call(fs.store.aclose())
