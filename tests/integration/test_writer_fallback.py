"""The resumable fallback where the server has no XML multipart upload."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import aioflux
from aioflux import Client, ClientConfig
from aioflux._crc import crc32c

from ..conftest import FAST_RETRY, unique_bucket

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
    with aioflux.open(f"gs://{bucket}/f.bin", "wb", client=client, part_size=PART,
                      max_in_flight=3) as f:
        for i in range(0, len(data), 777_777):
            f.write(data[i:i + 777_777])
    assert f.stats.mode == "resumable"  # type: ignore[attr-defined]
    info = client.stat(bucket, "f.bin")
    assert info.size == len(data) and info.crc32c == crc32c(data)
    assert client.read(bucket, "f.bin") == data


def test_fallback_exception_publishes_nothing(fake_client: tuple[Client, str]) -> None:
    client, bucket = fake_client
    with pytest.raises(KeyError):
        with aioflux.open(f"gs://{bucket}/g.bin", "wb", client=client, part_size=PART) as f:
            f.write(os.urandom(2 * PART + 1))
            raise KeyError("x")
    assert not client.exists(bucket, "g.bin")


def test_fallback_reader(fake_client: tuple[Client, str]) -> None:
    client, bucket = fake_client
    data = os.urandom(PART + 3)
    client.write(bucket, "r.bin", data)
    with aioflux.open(f"gs://{bucket}/r.bin", "rb", client=client, chunk_size=1 << 20) as r:
        assert r.read() == data
