"""Custom metadata on streaming uploads (``start_upload(metadata=)``): the
writer publishes it with the object on every path (one request, XML
multipart, a resumable session), and files refuse it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import aioflux
from aioflux import AsyncClient, ClientConfig, InvalidArgument, S3Store, WriterOptions
from aioflux._core.concurrency.portal import call
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux.testing import Emulator, MemoryStore
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket

MiB = 1024 * 1024
PARTS = WriterOptions(part_size=5 * MiB)
BIG = os.urandom(12 * MiB)  # three parts
ASCII = {"owner": "team-a", "step": "100"}
# XML headers carry neither (nor an upper-case key exactly): a GCS upload
# takes the JSON API's resumable session for them.
ANY_TEXT = {"Owner": "équipe", "note": "line\tbreak"}


def _write_and_stat(url: str, data: bytes, metadata: dict[str, str],
                    client: Any) -> tuple[bytes, dict[str, str], str | None]:
    with aioflux.open(url, "wb", client=client, writer=PARTS, content_type="text/plain",
                      metadata=metadata) as f:
        f.write(data)
    info = f.stats.info  # type: ignore[attr-defined]
    assert info is not None and dict(info.metadata) == metadata
    with aioflux.open(url, "rb", client=client) as f:
        back = f.read()
    bucket, name = aioflux.parse_url(url)
    stat = call(client.stat(bucket, name))
    return back, dict(stat.metadata), stat.content_type


@pytest.mark.parametrize("data", [b"small", BIG], ids=["one-request", "parts"])
@pytest.mark.parametrize("metadata", [ASCII, ANY_TEXT], ids=["ascii", "any-text"])
def test_gcs_streaming_upload_publishes_its_metadata(emulator: Emulator, bucket: str,
                                                     data: bytes,
                                                     metadata: dict[str, str]) -> None:
    client = AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=emulator.endpoint)
    try:
        assert _write_and_stat(f"gs://{bucket}/obj", data, metadata, client) == (
            data, metadata, "text/plain")
    finally:
        call(client.aclose())


def test_the_upload_mode_follows_what_headers_can_carry(emulator: Emulator,
                                                        bucket: str) -> None:
    async def mode(metadata: dict[str, str]) -> str:
        async with AsyncClient(ClientConfig(retry=FAST_RETRY),
                               endpoint=emulator.endpoint) as client:
            async with AsyncObjectWriter(client, bucket, "m", options=PARTS,
                                         metadata=metadata) as out:
                await out.write(BIG)
            return out.stats.mode

    assert call(mode(ASCII)) == "multipart"
    assert call(mode(ANY_TEXT)) == "resumable"


def test_fake_gcs_server_resumable_session_publishes_metadata(fake_gcs: Any) -> None:
    client = AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=fake_gcs.endpoint,
                         credentials="anonymous")
    name = unique_bucket("meta")
    try:
        call(client.create_bucket(name))
        # (Its resumable sessions ignore the content type sent, either way.)
        assert _write_and_stat(f"gs://{name}/obj", BIG, ASCII, client)[:2] == (BIG, ASCII)
    finally:
        call(client.aclose())


@pytest.mark.parametrize("data", [b"small", BIG], ids=["one-request", "parts"])
def test_s3_multipart_upload_publishes_its_metadata(moto_s3: MotoS3, data: bytes) -> None:
    store = S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint)
    name = unique_bucket("meta")
    try:
        call(store.create_bucket(name))
        assert _write_and_stat(f"s3://{name}/obj", data, ASCII, store) == (
            data, ASCII, "text/plain")
    finally:
        call(store.aclose())


def test_memory_store_streaming_upload_publishes_its_metadata() -> None:
    store = MemoryStore(buckets=["mem"])

    async def run() -> dict[str, str]:
        async with AsyncObjectWriter(store, "mem", "o", options=WriterOptions(part_size=4),
                                     metadata=ANY_TEXT) as out:
            await out.write(b"0123456789")
        return dict((await store.stat("mem", "o")).metadata)

    assert call(run()) == ANY_TEXT


def test_files_refuse_metadata_and_reads_take_none(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="no custom metadata"):
        aioflux.open(tmp_path / "f", "wb", metadata={"k": "v"})
    assert not list(tmp_path.iterdir())
    (tmp_path / "g").write_bytes(b"x")
    with pytest.raises(InvalidArgument, match="metadata is for writing"):
        aioflux.open(tmp_path / "g", "rb", metadata={"k": "v"})
    with pytest.raises(InvalidArgument, match="metadata"):
        aioflux.open(tmp_path / "h", "wb", metadata={"k": 1})  # type: ignore[dict-item]


def test_s3_refuses_metadata_no_header_can_carry(moto_s3: MotoS3) -> None:
    # A typed error naming the object, before anything is sent (aiohttp's
    # own ValueError came out of write()).
    store = S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint)
    name = unique_bucket("meta")
    bad = {"note": "line\nbreak"}
    try:
        call(store.create_bucket(name))
        with pytest.raises(InvalidArgument, match=f"s3://{name}/o: custom metadata 'note'"):
            call(store.write(name, "o", b"x", metadata=bad))
        with pytest.raises(InvalidArgument, match="custom metadata 'note'"):
            aioflux.open(f"s3://{name}/o", "wb", client=store, metadata=bad)
        assert not call(store.exists(name, "o"))
        assert call(store.list_multipart_uploads(name)) == []
    finally:
        call(store.aclose())
