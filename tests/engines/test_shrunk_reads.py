"""An object shorter than the size its reader knows, on our emulator's two faces.

The emulator is made to shrink an object in place after its stat (the same
generation, the same ETag: what a server whose sizes lie, or an object
changed without a new version, looks like), so the pinned ranged reads of
``ObjectReader`` and the download planner reach the range check and get a
416 for a range that starts below the size they were given. That is the
object's change, not the caller's range: a ``ProtocolError`` naming the
size, never the ``InvalidRequest`` of a start past the end, which the
reader reported (only the planner mapped it, by itself).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    Downloader,
    DownloadOptions,
    ObjectInfo,
    ProtocolError,
    ReaderOptions,
    S3Store,
)
from aioflux._core.concurrency.portal import get_portal
from aioflux._engines.reader import ObjectReader
from aioflux.testing import Emulator
from tests.conftest import FAST_RETRY

MiB = 1 << 20
SIZE = 3 * MiB
NAME = "d/shrinks"
READER = ReaderOptions(block_size=MiB, read_ahead=2)
RANGES = DownloadOptions(range_size=MiB, ranged_threshold=MiB)


@pytest.fixture(params=["gs", "s3"])
def store(request: pytest.FixtureRequest, emulator: Emulator) -> Iterator[Any]:
    """A store on the emulator's GCS face or its S3 face (on the portal's
    loop, which the blocking reader drives)."""
    portal = get_portal()
    config = ClientConfig(max_concurrency=16, retry=FAST_RETRY)

    async def make() -> Any:
        if request.param == "gs":
            return AsyncClient(config, endpoint=emulator.endpoint, credentials=None)
        return S3Store(config, endpoint=emulator.s3_endpoint, region="us-east-1",
                       addressing="path")

    made = portal.call(make())
    yield made
    portal.call(made.aclose())


def _written(store: Any, bucket: str) -> ObjectInfo:
    """``NAME``, written at ``SIZE`` bytes, as a stat gives it."""
    async def write() -> ObjectInfo:
        await store.write(bucket, NAME, os.urandom(SIZE))
        return await store.stat(bucket, NAME)  # type: ignore[no-any-return]

    return get_portal().call(write())


def _shrink_in_place(emulator: Emulator, bucket: str, data: bytes,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``NAME`` becomes ``data`` under its generation and ETag (neither pin
    notices: the server answers the range as the object now is)."""
    old = emulator.store.get(bucket, NAME)
    with monkeypatch.context() as patched:
        patched.setattr(emulator.store, "next_generation", lambda: old.generation)
        emulator.store.put(bucket, NAME, data, etag=old.etag)
    assert emulator.store.get(bucket, NAME).generation == old.generation


def _names_the_size(error: ProtocolError, info: ObjectInfo) -> None:
    assert (error.operation, error.bucket, error.name, error.status) == \
        ("read", info.bucket, info.name, 416)
    message = str(error)
    assert message.startswith(f"read {info.url} failed: "), message
    assert str(SIZE) in message and "HTTP 416" in message and "shorter" in message, message


@pytest.mark.parametrize("how", ["small read", "block"])
def test_object_reader_past_the_end_of_a_shrunk_object(
        store: Any, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch,
        how: str) -> None:
    info = _written(store, bucket)
    with ObjectReader(store, bucket, NAME, options=READER) as reader:
        assert (reader.size, reader.info.generation) == (SIZE, info.generation)
        _shrink_in_place(emulator, bucket, b"0123456789", monkeypatch)
        reader.seek(2 * MiB)
        # A small read away from the last one is one exact ranged GET; a
        # larger one reads block 2, [2 MiB, 3 MiB): both start past 10 bytes.
        with pytest.raises(ProtocolError) as caught:
            reader.read(100 if how == "small read" else MiB)
    _names_the_size(caught.value, info)


@pytest.mark.parametrize("how", ["small read", "block"])
def test_a_recent_info_of_a_shrunk_object_reads_it_as_it_is_now(
        store: Any, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch,
        how: str) -> None:
    # Opened on a cached info (a listing's): nothing was handed out when the
    # 416 came, so the store says what the object is now (the same version,
    # 10 bytes), as it does when a cached version is gone.
    info = _written(store, bucket)
    _shrink_in_place(emulator, bucket, b"0123456789", monkeypatch)
    with ObjectReader(store, bucket, NAME, options=READER, info=info, recent=True) as reader:
        reader.seek(2 * MiB)
        assert reader.read(100 if how == "small read" else MiB) == b""
        assert (reader.size, reader.info.generation) == (10, info.generation)
        reader.seek(0)
        if info.scheme == "gs":
            assert reader.read() == b"0123456789"
        else:  # the ETag kept is the MD5 of the old bytes: these are not its
            with pytest.raises(ChecksumMismatch, match="MD5"):
                reader.read()


def test_the_planner_keeps_its_error_for_a_shrunk_object(
        store: Any, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its own mapping gone, the planner gets the store's, as before (an
    # empty object refuses every range, the first one too).
    info = _written(store, bucket)
    assert info.crc32c is not None  # else the planner stats it again
    _shrink_in_place(emulator, bucket, b"", monkeypatch)
    with pytest.raises(ProtocolError) as caught:
        get_portal().call(Downloader(store, RANGES).download_many([info]))
    _names_the_size(caught.value, info)
