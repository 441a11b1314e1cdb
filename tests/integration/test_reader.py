"""Parallel ranged reader against the emulator."""

from __future__ import annotations

import io
import os
import random

import pytest

import aioflux
from aioflux import Client, NotFound, ReaderOptions
from aioflux._engines.reader import ObjectReader
from aioflux.testing import Emulator

KiB = 1024


@pytest.fixture
def blob(sync_client: Client, bucket: str) -> bytes:
    data = os.urandom(1000 * KiB + 17)
    sync_client.write(bucket, "blob", data)
    return data


def test_sequential_read_uses_parallel_ranges(sync_client: Client, bucket: str, blob: bytes,
                                              emulator: Emulator) -> None:
    before = dict(emulator.stats)
    with aioflux.open(f"gs://{bucket}/blob", "rb", client=sync_client,
                      reader=ReaderOptions(block_size=64 * KiB, read_ahead=4)) as r:
        assert r.seekable() and r.readable()
        got = r.read()
    assert got == blob
    gets = sum(emulator.stats.values()) - sum(before.values())
    assert gets >= len(blob) // (64 * KiB)  # one ranged GET per block, plus the stat


def test_readinto_seek_tell_random_access(sync_client: Client, bucket: str, blob: bytes) -> None:
    rng = random.Random(7)
    with aioflux.open(f"gs://{bucket}/blob", "rb", client=sync_client,
                      reader=ReaderOptions(block_size=50 * KiB, read_ahead=3)) as r:
        for _ in range(40):
            start = rng.randrange(0, len(blob))
            n = rng.randrange(0, 200 * KiB)
            assert r.seek(start) == start
            buf = bytearray(n)
            got = r.readinto(buf)
            assert bytes(buf[:got]) == blob[start:start + n]
            assert r.tell() == start + got
        assert r.seek(-10, io.SEEK_END) == len(blob) - 10
        assert r.read(100) == blob[-10:]
        assert r.read(5) == b""
        r.seek(5)
        r.seek(5, io.SEEK_CUR)
        assert r.read(3) == blob[10:13]


def test_buffered_wrapper_and_readline_free_paths(sync_client: Client, bucket: str,
                                                  blob: bytes) -> None:
    raw = aioflux.open(f"gs://{bucket}/blob", "rb", client=sync_client,
                       reader=ReaderOptions(block_size=100 * KiB))
    with io.BufferedReader(raw, buffer_size=8 * KiB) as r:  # type: ignore[arg-type]
        assert r.read(10) == blob[:10]
        assert r.read() == blob[10:]


def test_missing_object(sync_client: Client, bucket: str) -> None:
    with pytest.raises(NotFound):
        aioflux.open(f"gs://{bucket}/nope", "rb", client=sync_client)


def test_generation_is_pinned(sync_client: Client, bucket: str, blob: bytes) -> None:
    r = ObjectReader(sync_client.aio, bucket, "blob", options=ReaderOptions(block_size=100 * KiB,
                                                                            read_ahead=1))
    assert r.read(10) == blob[:10]
    sync_client.write(bucket, "blob", b"new content")
    r.seek(500 * KiB)  # outside the read-ahead window: a fresh GET of the old generation
    with pytest.raises(NotFound):
        r.read(10)
    r.close()


def test_empty_object(sync_client: Client, bucket: str) -> None:
    sync_client.write(bucket, "e", b"")
    with aioflux.open(f"gs://{bucket}/e", "rb", client=sync_client) as r:
        assert r.read() == b""
