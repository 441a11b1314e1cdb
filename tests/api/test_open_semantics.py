"""``aioflux.open`` file objects behave as Python's binary files do: line
reading, use after close, retry after an error, corruption, several writers'
threads or tasks."""

from __future__ import annotations

import asyncio
import gc
import gzip
import io
import os
import threading
import warnings
from pathlib import Path

import google_crc32c
import pytest

import aioflux
from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    Client,
    ClientConfig,
    InvalidArgument,
    ReaderOptions,
    RetryPolicy,
    ServerError,
    WriterOptions,
)
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux._engines.reader import ObjectReader
from aioflux._engines.writer import UnclosedWriterWarning
from aioflux.testing import Emulator, Faults

KiB = 1024


def _lines() -> bytes:
    # Lines of every length from 0 to 300 bytes, some longer than a block.
    parts = [b"x" * (i % 301) + b"\n" for i in range(700)]
    parts.append(b"y" * 5000 + b"\n")
    return b"".join(parts) + b"tail without newline"


def test_readline_and_iteration_read_blocks_not_bytes(tmp_path: Path) -> None:
    data = _lines()
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    with aioflux.open(path, "rb", reader=ReaderOptions(block_size=4 * KiB, read_ahead=2)) as f:
        assert isinstance(f, ObjectReader)
        calls = 0
        readinto = f.readinto

        def counted(buffer: bytearray | memoryview) -> int:
            nonlocal calls
            calls += 1
            return readinto(buffer)

        f.readinto = counted  # type: ignore[method-assign]
        got = list(f)
        # io's default readline reads one byte per call: 100k calls here.
        assert calls <= 2 * len(got) + len(data) // (4 * KiB) + 2
    assert got == io.BytesIO(data).readlines()
    with aioflux.open(path, "rb", reader=ReaderOptions(block_size=4 * KiB)) as f:
        ref = io.BytesIO(data)
        for size in (0, 1, 7, 300, 4097, -1, None, 10_000):
            assert f.readline(size) == ref.readline(size)
            assert f.tell() == ref.tell()
        assert f.readlines() == ref.readlines()
        assert f.readline() == b""


def test_use_after_close_raises_value_error(tmp_path: Path) -> None:
    path = tmp_path / "a"
    path.write_bytes(b"abc")
    f = aioflux.open(path, "rb")
    f.close()
    for use in (f.read, f.readline, lambda: f.seek(0), f.tell, f.readable, f.seekable,
                lambda: f.readinto(bytearray(1)), f.__enter__):
        with pytest.raises(ValueError):
            use()


def test_a_reader_refuses_writes_as_pythons_files_do(tmp_path: Path) -> None:
    # A bare NotImplementedError (RawIOBase's), where open(path, "rb") raises
    # io.UnsupportedOperation, an OSError code catching those expects.
    path = tmp_path / "a"
    path.write_bytes(b"abc")
    with aioflux.open(path, "rb") as f:
        with pytest.raises(io.UnsupportedOperation):
            f.write(b"x")
        assert f.read() == b"abc"


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("mode", ["wb", "w"])
@pytest.mark.parametrize("end", ["close", "abort"])
def test_a_closed_writer_refuses_use_as_pythons_files_do(sync_client: Client, bucket: str,
                                                         mode: str, compression: str | None,
                                                         end: str) -> None:
    # writable() answered True, tell() and flush() answered, and a new
    # ``with`` block entered a closed writer, where Python's files raise.
    f = aioflux.open(f"gs://{bucket}/closed-{mode}-{compression}-{end}", mode,
                     client=sync_client, compression=compression)
    f.write(b"abc" if mode == "wb" else "abc")
    getattr(f, end)()
    assert f.closed
    for use in (f.writable, f.seekable, f.flush, f.tell, f.__enter__,
                lambda: f.write(b"x" if mode == "wb" else "x")):
        with pytest.raises(ValueError):
            use()
    getattr(f, end)()  # a second close or abort is still a no-op


def test_seek_takes_integers_only(tmp_path: Path) -> None:
    path = tmp_path / "a"
    path.write_bytes(b"abcdef")
    with aioflux.open(path, "rb") as f:
        with pytest.raises(TypeError):
            f.seek(1.5)  # type: ignore[arg-type]
        assert f.tell() == 0
        assert f.seek(2) == 2 and f.read(2) == b"cd"


def test_a_failed_read_can_be_retried_on_the_same_reader(faults: Emulator, bucket: str) -> None:
    config = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.001,
                                            max_delay=0.002))
    data = os.urandom(300 * KiB)
    with Client(config, endpoint=faults.endpoint) as client:
        client.write(bucket, "o", data)
        with aioflux.open(f"gs://{bucket}/o", "rb", client=client,
                          reader=ReaderOptions(block_size=100 * KiB, read_ahead=2)) as f:
            faults.faults = Faults(p_503=1.0)
            with pytest.raises(ServerError):
                f.read(10)
            faults.faults = Faults()
            # Before: the failed blocks stayed cached, so the reader raised
            # the outage's error for good.
            assert f.read(10) == data[:10]
            assert f.read() == data[10:]


def test_a_corrupt_object_keeps_failing_on_the_same_reader(sync_client: Client, bucket: str,
                                                           emulator: Emulator) -> None:
    good = os.urandom(250 * KiB)
    bad = good[:-100] + bytes(b ^ 0xFF for b in good[-100:])
    # Stored bytes that do not match the crc32c the server reports.
    emulator.store.put(bucket, "o", bad, crc32c=google_crc32c.value(good))
    with aioflux.open(f"gs://{bucket}/o", "rb", client=sync_client,
                      reader=ReaderOptions(block_size=100 * KiB, read_ahead=1)) as f:
        with pytest.raises(ChecksumMismatch, match=f"gs://{bucket}/o"):
            f.read()
        # Before: a second try was served the unchecked last block.
        with pytest.raises(ChecksumMismatch):
            f.read()
        f.seek(0)
        with pytest.raises(ChecksumMismatch):
            f.read()


@pytest.mark.parametrize("scheme", ["file", "gs"])
def test_writes_from_two_threads_each_land_whole(scheme: str, tmp_path: Path,
                                                  sync_client: Client, bucket: str) -> None:
    url = str(tmp_path / "t.bin") if scheme == "file" else f"gs://{bucket}/t.bin"
    # Several parts, so threads meet at part boundaries (GCS' smallest: 5 MiB).
    part = 64 * KiB if scheme == "file" else 5 * 2**20
    count, chunk = 300, part // 50
    with aioflux.open(url, "wb", client=sync_client,
                      writer=WriterOptions(part_size=part, max_in_flight=2)) as f:

        def writer(tag: int) -> None:
            for _ in range(count):
                assert f.write(bytes([tag]) * chunk) == chunk

        threads = [threading.Thread(target=writer, args=(tag,)) for tag in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert f.tell() == 2 * count * chunk
    with aioflux.open(url, "rb", client=sync_client) as r:
        data = r.read()
    assert len(data) == 2 * count * chunk
    assert data.count(1) == data.count(2) == count * chunk
    # Each write is contiguous: no other thread's bytes inside it.
    pieces = [data[k:k + chunk] for k in range(0, len(data), chunk)]
    assert all(len(set(p)) == 1 for p in pieces)


async def test_async_writes_from_two_tasks_each_land_whole(client: AsyncClient,
                                                           bucket: str) -> None:
    count, chunk = 300, 100 * KiB
    w = AsyncObjectWriter(client, bucket, "a.bin",
                          options=WriterOptions(part_size=5 * 2**20, max_in_flight=1))

    async def writer(tag: int) -> None:
        for _ in range(count):
            assert await w.write(bytes([tag]) * chunk) == chunk

    async with w:
        await asyncio.gather(writer(1), writer(2))
    data = await client.read(bucket, "a.bin")
    assert len(data) == 2 * count * chunk
    pieces = [data[k:k + chunk] for k in range(0, len(data), chunk)]
    assert all(len(set(p)) == 1 for p in pieces)
    assert data.count(1) == data.count(2) == count * chunk


def test_the_callers_buffer_may_change_after_write(tmp_path: Path) -> None:
    path = tmp_path / "m.bin"
    buf = bytearray(b"a" * 100_000)
    with aioflux.open(path, "wb", writer=WriterOptions(part_size=64 * KiB)) as f:
        f.write(buf)
        f.write(memoryview(buf)[:10])
        buf[:] = b"b" * 100_000
    assert path.read_bytes() == b"a" * 100_010


async def test_an_async_writer_dropped_unclosed_aborts_its_upload(client: AsyncClient,
                                                                  bucket: str) -> None:
    # As ObjectWriter does when collected: no multipart upload stays open
    # (stored and billed) until `aioflux clean`, and nothing is published.
    part = 5 * 2**20
    writer = AsyncObjectWriter(client, bucket, "dropped", options=WriterOptions(part_size=part))
    await writer.write(os.urandom(2 * part + 1))  # two parts on their way
    while not await client.list_multipart_uploads(bucket):
        await asyncio.sleep(0.01)
    while writer._tasks:  # the parts' callbacks hold the writer until they end
        await asyncio.sleep(0.01)
    with pytest.warns(UnclosedWriterWarning, match=f"unclosed writer gs://{bucket}/dropped "
                                                   f"discarded the {2 * part + 1:,} bytes written"):
        del writer
        gc.collect()
    for _ in range(100):
        if not await client.list_multipart_uploads(bucket):
            break
        await asyncio.sleep(0.02)
    assert await client.list_multipart_uploads(bucket) == []
    assert not await client.exists(bucket, "dropped")


@pytest.mark.parametrize("scheme", ["gs", "file"])
def test_reading_a_whole_object_peaks_at_its_size(scheme: str, sync_client: Client,
                                                  bucket: str, tmp_path: Path) -> None:
    import tracemalloc

    size = 24 << 20
    url = f"gs://{bucket}/big" if scheme == "gs" else str(tmp_path / "big")
    client = sync_client if scheme == "gs" else None
    data = os.urandom(size)
    with aioflux.open(url, "wb", client=client) as f:
        f.write(data)
    small = ReaderOptions(block_size=256 * KiB, read_ahead=2)
    with aioflux.open(url, "rb", client=client, reader=small) as f:
        tracemalloc.start()
        try:
            got = f.read()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert got == data
    # The bytes returned plus a few blocks, not a second copy of them.
    assert peak < size + (4 << 20), peak


@pytest.mark.parametrize("scheme", ["gs", "file"])
def test_readinto_a_read_only_buffer_is_refused_before_any_request(
        scheme: str, tmp_path: Path, sync_client: Client, bucket: str,
        emulator: Emulator) -> None:
    data = os.urandom(300 * KiB)
    url = f"gs://{bucket}/o" if scheme == "gs" else f"file://{tmp_path}/o"
    client = sync_client if scheme == "gs" else None
    with aioflux.open(url, "wb", client=client) as w:
        w.write(data)
    with aioflux.open(url, "rb", client=client,
                      reader=ReaderOptions(block_size=64 * KiB, read_ahead=2)) as f:
        before = sum(emulator.stats.values())
        # A long read goes straight into the buffer: into a read-only one,
        # every GET failed and was retried (gs: a TransportError after 8
        # attempts, each a "Fatal error on transport"; files: a BufferError).
        for target in (bytes(200 * KiB), memoryview(bytes(10)), bytes(10)):
            with pytest.raises(InvalidArgument, match=f"read {url}: .*read-only"):
                f.readinto(target)
        assert sum(emulator.stats.values()) == before
        assert f.tell() == 0 and f.read() == data


def test_files_say_their_mode_as_pythons_do(tmp_path: Path) -> None:
    path = tmp_path / "a"
    path.write_bytes(b"abc")
    (tmp_path / "python").write_bytes(b"abc")
    for mode in ("rb", "br", "wb", "bw", "r", "rt", "w", "wt"):
        with open(tmp_path / "python", mode) as python, aioflux.open(path, mode) as f:
            assert f.mode == python.mode, mode
    with aioflux.open(path, "wb", compression="zstd") as f:
        assert f.mode == "wb"
    with aioflux.open(path, "rb", compression="zstd") as f:
        assert f.mode == "rb"
    # gzip (as soundfile, tarfile) reads a file's mode: without one it took
    # the writer for a file to read ("write() on read-only GzipFile object").
    with aioflux.open(path, "wb") as raw, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # gzip's: "specify the mode"
        with gzip.GzipFile(fileobj=raw) as g:
            g.write(b"compressed")
    assert gzip.decompress(path.read_bytes()) == b"compressed"


@pytest.mark.parametrize("scheme", ["gs", "file"])
def test_peek_read1_and_readinto1_as_a_buffered_reader(scheme: str, tmp_path: Path,
                                                       sync_client: Client,
                                                       bucket: str) -> None:
    data = os.urandom(100 * KiB + 7)
    url = f"gs://{bucket}/o" if scheme == "gs" else str(tmp_path / "o")
    client = sync_client if scheme == "gs" else None
    with aioflux.open(url, "wb", client=client) as w:
        w.write(data)
    size = len(data)
    with aioflux.open(url, "rb", client=client,
                      reader=ReaderOptions(block_size=16 * KiB, read_ahead=2)) as f:
        for pos in (0, 1, 16 * KiB - 1, 16 * KiB, 50_000, size - 1, size, size + 5):
            f.seek(pos)
            peeked = f.peek()
            assert f.tell() == pos
            assert peeked == data[pos:pos + len(peeked)] and bool(peeked) == (pos < size)
            got = f.read1(10)
            assert got == data[pos:pos + len(got)] and bool(got) == (pos < size)
            assert f.tell() == pos + len(got)
            buf = bytearray(20 * KiB)
            n = f.readinto1(buf)
            assert bytes(buf[:n]) == data[pos + len(got):pos + len(got) + n]
            assert f.tell() == pos + len(got) + n
            assert f.read1(0) == b"" and f.tell() == pos + len(got) + n
        f.seek(0)
        pieces = []
        while piece := f.read1():
            pieces.append(piece)
        assert b"".join(pieces) == data
    with aioflux.open(url, "rb", client=client) as f:
        f.close()
        for use in (f.peek, f.read1, lambda: f.readinto1(bytearray(1))):
            with pytest.raises(ValueError):
                use()


def test_read1_front_to_back_is_still_checked(sync_client: Client, bucket: str,
                                              emulator: Emulator) -> None:
    good = os.urandom(250 * KiB)
    bad = good[:-100] + bytes(b ^ 0xFF for b in good[-100:])
    emulator.store.put(bucket, "o", bad, crc32c=google_crc32c.value(good))
    options = ReaderOptions(block_size=100 * KiB, read_ahead=1)
    for step in ("peek", "read1", "readinto1"):
        with aioflux.open(f"gs://{bucket}/o", "rb", client=sync_client, reader=options) as f:
            with pytest.raises(ChecksumMismatch, match=f"gs://{bucket}/o"):
                while True:
                    if step == "peek":
                        piece = f.peek()
                        f.seek(len(piece), os.SEEK_CUR)
                    elif step == "read1":
                        piece = f.read1()
                    else:
                        piece = bytes(7 * KiB)[:f.readinto1(bytearray(7 * KiB))]
                    assert piece, "the corrupt object read to its end unchecked"


def test_read_takes_integers_only(tmp_path: Path) -> None:
    path = tmp_path / "a"
    path.write_bytes(b"abcdef")
    with aioflux.open(path, "rb") as f:
        for size in (1.5, "2"):
            for pos in (0, 10):  # at the end too, where 1.5 read b"" in silence
                f.seek(pos)
                with pytest.raises(TypeError):
                    f.read(size)  # type: ignore[arg-type]
        f.seek(0)
        assert f.read(True) == b"a" and f.read(None) == b"bcdef"
