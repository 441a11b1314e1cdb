"""Whole-object reads land in the bytes handed out (issue 61: one CPU cost a
byte): a body of the lean client's own grows in place as it arrives, the
reader's ``read()`` fetches its blocks straight into the bytes it returns,
and an http(s) whole read goes over the lean client. Every check holds on
these paths: the bytes are the object's, a wrong crc32c raises
``ChecksumMismatch``, a body cut short resumes under the version it began
with, and another version answering is refused."""

from __future__ import annotations

import os
import re
from pathlib import Path

import google_crc32c
import pytest

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    Client,
    ClientConfig,
    NotFound,
    PreconditionFailed,
    ReaderOptions,
    RetryPolicy,
    TransportError,
)
from aioflux._core.integrity.crc import encode_crc32c
from aioflux._engines.reader import ObjectReader
from aioflux.http import HttpStore
from aioflux.testing import Emulator
from tests.servers.nginx import running_nginx
from tests.servers.raw_server import RawServer

KiB, MiB = 1024, 1024 * 1024
# Past the lean client's first buffer (1 MiB) and two doublings of it.
BIG = os.urandom(5 * MiB + 3)
BIG_CRC = google_crc32c.value(BIG)
RETRY = RetryPolicy(max_attempts=3, initial_delay=0.0, max_delay=0.0)
_RANGE = re.compile(rb"Range: bytes=(\d+)-")


def _answer(data: bytes, first: int, generation: int, cut: int | None = None
            ) -> bytes | tuple[bytes, str]:
    """A GCS media answer from byte ``first``, closed after ``cut`` body bytes."""
    body = data[first:]
    status = "206 Partial Content" if first else "200 OK"
    head = (f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n"
            f"x-goog-generation: {generation}\r\n"
            f"x-goog-hash: crc32c={encode_crc32c(google_crc32c.value(data))}\r\n"
            f"x-goog-stored-content-length: {len(data)}\r\n")
    if first:
        head += f"Content-Range: bytes {first}-{len(data) - 1}/{len(data)}\r\n"
    raw = head.encode() + b"\r\n" + body
    if cut is None:
        return raw
    return raw[:len(raw) - len(body) + cut], "close"


async def test_a_large_body_arrives_whole_as_bytes(client: AsyncClient, bucket: str) -> None:
    await client.write(bucket, "big", BIG)
    before = client.stats.lean_reads
    got = await client.read(bucket, "big")
    assert type(got) is bytes and got == BIG
    assert client.stats.lean_reads == before + 1  # over the lean client, grown in place


async def test_a_large_body_with_a_wrong_crc32c_raises(client: AsyncClient, bucket: str,
                                                       emulator: Emulator) -> None:
    emulator.store.put(bucket, "bad", BIG, crc32c=BIG_CRC ^ 1)
    with pytest.raises(ChecksumMismatch, match=f"gs://{bucket}/bad"):
        await client.read(bucket, "bad")


async def test_a_large_body_cut_short_resumes_at_its_version() -> None:
    cut = 3 * MiB + 17  # past two doublings of the body's buffer

    def script(conn: int, index: int) -> bytes | tuple[bytes, str]:
        match = _RANGE.search(server.requests[-1])
        first = int(match[1]) if match else 0
        return _answer(BIG, first, 7, cut if conn == 0 else None)

    server = RawServer(script)
    async with server as base, AsyncClient(ClientConfig(retry=RETRY), endpoint=base) as client:
        assert await client.read("bkt", "o") == BIG
    assert len(server.requests) == 2
    assert f"Range: bytes={cut}-".encode() in server.requests[1]
    assert b"generation=7" in server.requests[1]  # the resumed read pinned to the first's


async def test_a_large_body_cut_short_is_never_finished_from_another_version() -> None:
    def script(conn: int, index: int) -> bytes | tuple[bytes, str]:
        if conn == 0:
            return _answer(BIG, 0, 7, 2 * MiB + 5)
        match = _RANGE.search(server.requests[-1])
        return _answer(BIG, int(match[1]) if match else 0, 8)  # the pin ignored

    server = RawServer(script)
    async with server as base, AsyncClient(ClientConfig(retry=RETRY), endpoint=base) as client:
        with pytest.raises(PreconditionFailed, match="gs://bkt/o"):
            await client.read("bkt", "o")


async def test_a_body_that_never_arrives_whole_is_a_typed_error() -> None:
    # Every answer closes before its first body byte: no attempt adds bytes,
    # so the retries run out, and the error names the object.
    server = RawServer(lambda conn, i: _answer(BIG, 0, 7, 0))
    async with server as base, AsyncClient(ClientConfig(retry=RETRY), endpoint=base) as client:
        with pytest.raises(TransportError, match="gs://bkt/o") as info:
            await client.read("bkt", "o")
    assert info.value.attempts == 3 and len(server.requests) == 3


def test_the_readers_read_of_the_rest_is_the_object_checked(
        sync_client: Client, bucket: str, emulator: Emulator) -> None:
    options = ReaderOptions(block_size=512 * KiB, read_ahead=2)
    sync_client.write(bucket, "big", BIG)
    with ObjectReader(sync_client.aio, bucket, "big", options=options) as r:
        assert r.read(10) == BIG[:10]
        rest = r.read()
        assert type(rest) is bytes and rest == BIG[10:]
        assert r._check.next * r.block_size >= len(BIG) and r._check.corrupt is None
    with ObjectReader(sync_client.aio, bucket, "big", options=options) as r:
        assert r.read() == BIG
    bad = bytearray(BIG)
    bad[3 * MiB] ^= 1  # in a block fetched straight into the bytes returned
    emulator.store.put(bucket, "bad", bytes(bad), crc32c=BIG_CRC)
    with ObjectReader(sync_client.aio, bucket, "bad", options=options) as r, \
            pytest.raises(ChecksumMismatch, match=f"gs://{bucket}/bad"):
        r.read()


def test_the_readers_read_holds_its_version(sync_client: Client, bucket: str) -> None:
    options = ReaderOptions(block_size=512 * KiB, read_ahead=2)
    sync_client.write(bucket, "v", BIG)
    with ObjectReader(sync_client.aio, bucket, "v", options=options) as r:
        sync_client.write(bucket, "v", BIG[::-1])  # replaced after the open's stat
        with pytest.raises((NotFound, PreconditionFailed), match=f"gs://{bucket}/v"):
            r.read()


async def test_an_http_whole_read_goes_over_the_lean_client(tmp_path: Path) -> None:
    # nginx (sendfile on): a read of the whole file is one GET over the lean
    # client, landing in the bytes returned; it holds the version it began
    # with, and a file replaced since is never read at its old pin.
    (tmp_path / "big.bin").write_bytes(BIG)
    with running_nginx(tmp_path) as server:
        async with HttpStore(ClientConfig(retry=RETRY), scheme="http") as store:
            got = await store.read(server.bucket, "big.bin")
            assert type(got) is bytes and got == BIG
            assert store.stats.lean_reads == 1
            info = await store.stat(server.bucket, "big.bin")
            fetched = await store.fetch(server.bucket, "big.bin", size=len(BIG), crc=BIG_CRC,
                                        generation=info.generation)
            assert fetched.data == BIG and store.stats.lean_reads == 2
            with pytest.raises(ChecksumMismatch, match=r"big\.bin"):
                await store.fetch(server.bucket, "big.bin", crc=BIG_CRC ^ 1)
            os.utime(tmp_path / "big.bin", ns=(1, 1))  # a new version: its ETag changes
            with pytest.raises((NotFound, PreconditionFailed), match=r"big\.bin"):
                await store.read(server.bucket, "big.bin", generation=info.generation)
