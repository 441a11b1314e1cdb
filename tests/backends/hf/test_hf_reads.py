"""The read half of the conformance suite on the Hub: empty files, ranges
at and past the end, buffers, fetch's checks, a file shorter than the
size a caller knows, for small files (the Hub answers) and LFS files (the
CDN answers after a redirect) alike."""

from __future__ import annotations

import os

import pytest

from aioflux import (
    ClientConfig,
    InvalidArgument,
    InvalidRequest,
    NotFound,
    ProtocolError,
    RetryPolicy,
)
from aioflux._core.integrity.crc import crc32c
from aioflux._core.storage.protocol import ObjectStore
from aioflux.hf import HfStore
from aioflux.testing import FakeHub

BUCKET = "datasets/org/reads"
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0))
SMALL, LFS = "small.bin", "dir/lfs.bin"


@pytest.fixture
def files(hub: FakeHub) -> dict[str, bytes]:
    content = {SMALL: os.urandom(40), LFS: os.urandom(5000), "empty": b""}
    hub.create_repo("org/reads")
    hub.push("org/reads", content)
    return content


@pytest.mark.parametrize("name", [SMALL, LFS])
async def test_ranges_buffers_and_fetch(hub: FakeHub, files: dict[str, bytes],
                                        name: str) -> None:
    data = files[name]
    async with HfStore(CONFIG, endpoint=hub.endpoint, token="") as store:
        assert isinstance(store, ObjectStore) and store.features.scheme == "hf"
        info = await store.stat(BUCKET, name)
        assert info.url == f"hf://{BUCKET}/{name}" and info.size == len(data)
        assert await store.read(BUCKET, name, start=len(data) - 1) == data[-1:]
        assert await store.read(BUCKET, name, start=3, end=10 ** 6) == data[3:]
        assert await store.read(BUCKET, name, start=5, end=5) == b""
        buf = bytearray(len(data) + 10)
        assert await store.read(BUCKET, name, into=buf) == len(data)
        assert bytes(buf[:len(data)]) == data
        with pytest.raises(InvalidArgument, match="do not fit"):
            await store.read(BUCKET, name, into=bytearray(10))
        got = await store.fetch(BUCKET, name, size=info.size, crc=crc32c(data), want_crc=True)
        assert (got.data, got.crc) == (data, crc32c(data))
        for start in (len(data), len(data) + 7):
            with pytest.raises(InvalidRequest) as past:
                await store.read(BUCKET, name, start=start)
            assert (past.value.status, past.value.name) == (416, name)
        # A size the caller knew that the file no longer has (a manifest's).
        with pytest.raises(ProtocolError, match=str(len(data) + 100)):
            await store.fetch(BUCKET, name, start=1, end=len(data) + 50, size=len(data) + 100)


async def test_empty_and_missing_files(hub: FakeHub, files: dict[str, bytes]) -> None:
    async with HfStore(CONFIG, endpoint=hub.endpoint, token="") as store:
        assert (await store.stat(BUCKET, "empty")).size == 0
        assert await store.read(BUCKET, "empty") == b""
        assert await store.read(BUCKET, "empty", into=bytearray(4)) == 0
        assert not await store.exists(BUCKET, "nope")
        with pytest.raises(NotFound) as missing:
            await store.read(BUCKET, "nope")
        assert (missing.value.bucket, missing.value.name) == (BUCKET, "nope")
        assert f"hf://{BUCKET}/nope" in str(missing.value)
