"""The sync twins added for README parity: ``Client.stream``, ``Client.copy``
and ``Client.transport``, against the emulator with bytes checked."""

from __future__ import annotations

import os

import pytest

from aioflux import Client, InvalidArgument, InvalidURL, NotFound
from aioflux._core.integrity.crc import crc32c


def test_sync_stream_yields_every_object_once_with_its_bytes(sync_client: Client,
                                                             bucket: str) -> None:
    blobs = {f"s/{i:03d}": os.urandom(1000 + i) for i in range(40)}
    for name, data in blobs.items():
        sync_client.write(bucket, name, data)
    sync_client.write(bucket, "other/x", b"not listed")
    got = {item.name: bytes(item.data)
           for item in sync_client.stream(f"gs://{bucket}/s/", concurrency=8)}
    assert got == blobs
    ordered = [item.name for item in sync_client.stream(bucket, "s/", ordered=True)]
    assert ordered == sorted(blobs)


def test_sync_stream_left_early_and_validated_at_once(sync_client: Client, bucket: str) -> None:
    for i in range(20):
        sync_client.write(bucket, f"e/{i:02d}", b"x" * 100)
    it = sync_client.stream(bucket, "e/", concurrency=4, ordered=True)
    first = next(it)
    assert (first.name, bytes(first.data)) == ("e/00", b"x" * 100)
    it.close()  # cancels the rest; the client stays usable
    assert sync_client.read(bucket, "e/19") == b"x" * 100
    with pytest.raises(InvalidArgument, match="concurrency"):
        sync_client.stream(bucket, "e/", concurrency=0)
    with pytest.raises(InvalidURL, match="bucket"):
        sync_client.stream("Not A Bucket")


def test_sync_copy_is_server_side_and_exact(sync_client: Client, bucket: str) -> None:
    data = os.urandom(300_000)
    source = sync_client.write(bucket, "src", data)
    requests_before = sync_client.transport.stats.requests
    info = sync_client.copy(bucket, "src", bucket, "dst/copy")
    assert (info.name, info.size, info.crc32c) == ("dst/copy", len(data), crc32c(data))
    assert info.crc32c == source.crc32c
    assert sync_client.read(bucket, "dst/copy") == data
    assert sync_client.transport.stats.requests >= requests_before + 1
    with pytest.raises(NotFound):
        sync_client.copy(bucket, "missing", bucket, "x")
