"""The resumable fallback where the server has no XML multipart upload."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

import aioflux
from aioflux import Client, ClientConfig, ReaderOptions, WriterOptions
from aioflux._core.integrity.crc import crc32c
from tests.conftest import FAST_RETRY, unique_bucket

PART = 5 * 1024 * 1024


@pytest.fixture
def fake_client(fake_gcs: object) -> Iterator[tuple[Client, str]]:
    endpoint = fake_gcs.endpoint  # type: ignore[attr-defined]
    with Client(ClientConfig(max_concurrency=8, retry=FAST_RETRY), endpoint=endpoint) as c:
        name = unique_bucket("fb")
        c.create_bucket(name)
        yield c, name


def test_fallback_round_trip(fake_client: tuple[Client, str]) -> None:
    client, bucket = fake_client
    data = os.urandom(3 * PART + 4321)
    with aioflux.open(f"gs://{bucket}/f.bin", "wb", client=client,
                      writer=WriterOptions(part_size=PART, max_in_flight=3)) as f:
        for i in range(0, len(data), 777_777):
            f.write(data[i:i + 777_777])
    assert f.stats.mode == "resumable"  # type: ignore[attr-defined]
    info = client.stat(bucket, "f.bin")
    assert info.size == len(data) and info.crc32c == crc32c(data)
    assert client.read(bucket, "f.bin") == data


def test_fallback_exception_publishes_nothing(fake_client: tuple[Client, str]) -> None:
    client, bucket = fake_client
    with pytest.raises(KeyError):
        with aioflux.open(f"gs://{bucket}/g.bin", "wb", client=client,
                          writer=WriterOptions(part_size=PART)) as f:
            f.write(os.urandom(2 * PART + 1))
            raise KeyError("x")
    assert not client.exists(bucket, "g.bin")


def test_fallback_reader(fake_client: tuple[Client, str]) -> None:
    client, bucket = fake_client
    data = os.urandom(PART + 3)
    client.write(bucket, "r.bin", data)
    with aioflux.open(f"gs://{bucket}/r.bin", "rb", client=client,
                      reader=ReaderOptions(block_size=1 << 20)) as r:
        assert r.read() == data


@pytest.mark.timeout(30)
def test_fallback_failed_part_fails_the_writer_without_hanging(
        fake_client: tuple[Client, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Parts go through the session one at a time, in order. A failed part
    # must still pass the turn on, or the parts queued behind it wait forever
    # (seen: close() hung under connection cuts in front of fake-gcs-server).
    from aioflux._core.errors import TransportError
    from aioflux.gcs._resumable import ResumableUpload

    client, bucket = fake_client
    sent = 0
    real_send = ResumableUpload.send

    async def send(self: ResumableUpload, chunk: bytes | bytearray | memoryview) -> None:
        nonlocal sent
        sent += 1
        if sent == 2:
            await asyncio.sleep(0.3)  # fails once close() waits for every part
            raise TransportError("resumable upload: cut (injected)")
        await real_send(self, chunk)

    monkeypatch.setattr(ResumableUpload, "send", send)
    with pytest.raises(TransportError, match="injected"):
        with aioflux.open(f"gs://{bucket}/h.bin", "wb", client=client,
                          writer=WriterOptions(part_size=PART, max_in_flight=3)) as f:
            f.write(os.urandom(4 * PART + 1))
    assert sent == 2  # the parts after the failed one were not sent
    assert not client.exists(bucket, "h.bin")
