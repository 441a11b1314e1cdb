"""Streaming multipart writer against the emulator and fake-gcs-server."""

from __future__ import annotations

import os
import threading

import pytest

import aioflux
from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    Client,
    ClientConfig,
    InvalidArgument,
    NotFound,
    ReaderOptions,
    WriterOptions,
)
from aioflux._core.concurrency.portal import call
from aioflux._core.integrity.crc import crc32c
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux._engines.writer import ObjectWriter, UnclosedWriterWarning
from aioflux.testing import Emulator

MiB = 1024 * 1024
PART = 5 * MiB


def _payload(n: int, seed: int = 0) -> bytes:
    return bytes(os.urandom(n)) if seed < 0 else (bytes(range(256)) * (n // 256 + 1))[:n]


def test_multipart_stream_round_trip(sync_client: Client, bucket: str, emulator: Emulator) -> None:
    data = os.urandom(3 * PART + 12345)
    before = emulator.stats["xml_put_part"]
    with aioflux.open(f"gs://{bucket}/ckpt.pt", "wb", client=sync_client,
                      writer=WriterOptions(part_size=PART, max_in_flight=2)) as f:
        for i in range(0, len(data), 1_000_003):  # writes straddle part boundaries
            f.write(data[i:i + 1_000_003])
    assert f.stats.mode == "multipart"  # type: ignore[attr-defined]
    assert emulator.stats["xml_put_part"] - before == 4
    info = sync_client.stat(bucket, "ckpt.pt")
    assert info.size == len(data) and info.crc32c == crc32c(data)
    assert sync_client.read(bucket, "ckpt.pt") == data


def test_exact_multiple_of_part_size(sync_client: Client, bucket: str) -> None:
    data = os.urandom(2 * PART)
    with aioflux.open(f"gs://{bucket}/x", "wb", client=sync_client,
                      writer=WriterOptions(part_size=PART)) as f:
        f.write(data)
    assert sync_client.read(bucket, "x") == data


def test_small_payload_is_one_request(sync_client: Client, bucket: str,
                                      emulator: Emulator) -> None:
    before = emulator.stats["xml_initiate"]
    with aioflux.open(f"gs://{bucket}/small", "wb", client=sync_client) as f:
        f.write(b"hello")
    assert f.stats.mode == "single"  # type: ignore[attr-defined]
    assert emulator.stats["xml_initiate"] == before
    assert sync_client.read(bucket, "small") == b"hello"


def test_empty_object(sync_client: Client, bucket: str) -> None:
    with aioflux.open(f"gs://{bucket}/empty", "wb", client=sync_client):
        pass
    assert sync_client.stat(bucket, "empty").size == 0


@pytest.mark.parametrize("size", [100, 2 * PART + 7])
def test_exception_in_with_body_publishes_nothing(sync_client: Client, bucket: str,
                                                  size: int) -> None:
    url = f"gs://{bucket}/broken.pt"
    with pytest.raises(ZeroDivisionError):
        with aioflux.open(url, "wb", client=sync_client, writer=WriterOptions(part_size=PART)) as f:
            f.write(os.urandom(size))
            1 / 0  # noqa: B018
    assert not sync_client.exists(bucket, "broken.pt")
    assert sync_client.list_multipart_uploads(bucket) == []


def test_abandoned_writer_is_aborted_not_published(sync_client: Client, bucket: str) -> None:
    f = aioflux.open(f"gs://{bucket}/gc", "wb", client=sync_client,
                     writer=WriterOptions(part_size=PART))
    f.write(os.urandom(PART + 1))
    import gc

    with pytest.warns(UnclosedWriterWarning,
                      match=f"unclosed writer gs://{bucket}/gc discarded the {PART + 1:,} "
                            "bytes written"):
        del f
        gc.collect()
    assert not sync_client.exists(bucket, "gc")
    assert sync_client.list_multipart_uploads(bucket) == []


def test_back_pressure_bounds_parts_in_flight(emulator: Emulator, bucket: str) -> None:
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    class Counting(AsyncClient):
        async def upload_part(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal in_flight, peak
            with lock:
                in_flight += 1
                peak = max(peak, in_flight)
            try:
                import asyncio

                await asyncio.sleep(0.02)
                return await super().upload_part(*args, **kwargs)
            finally:
                with lock:
                    in_flight -= 1

    client = Counting(ClientConfig(max_concurrency=16), endpoint=emulator.endpoint)
    data = os.urandom(8 * PART)
    with ObjectWriter(client, bucket, "bp", options=WriterOptions(part_size=PART,
                                                                  max_in_flight=2)) as f:
        f.write(data)
    assert peak == 2
    assert call(client.read(bucket, "bp")) == data
    call(client.aclose())


def test_part_buffers_are_reused(emulator: Emulator, bucket: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux._engines.writer import _Parts

    allocated = []
    real = _Parts.buffer

    def counting(self: _Parts, size: int) -> bytearray:
        buf = real(self, size)
        if all(buf is not seen for seen in allocated):
            allocated.append(buf)
        return buf

    monkeypatch.setattr(_Parts, "buffer", counting)
    client = AsyncClient(ClientConfig(max_concurrency=16), endpoint=emulator.endpoint)
    data = os.urandom(10 * PART + 1234)
    with ObjectWriter(client, bucket, "reuse", options=WriterOptions(part_size=PART,
                                                                     max_in_flight=2)) as f:
        for start in range(0, len(data), 3 * MiB):  # writes straddle part borders
            f.write(data[start:start + 3 * MiB])
    # 11 parts through at most 2 in flight + the one being filled
    assert len(allocated) <= 3
    assert call(client.read(bucket, "reuse")) == data
    call(client.aclose())


def test_failed_part_surfaces_and_aborts(emulator: Emulator, bucket: str) -> None:
    class Failing(AsyncClient):
        async def upload_part(self, bucket, name, upload_id, number, *args):  # type: ignore[no-untyped-def]
            if number == 2:
                raise aioflux.ServerError("injected", operation="upload part")
            return await super().upload_part(bucket, name, upload_id, number, *args)

    client = Failing(endpoint=emulator.endpoint)
    with pytest.raises(aioflux.ServerError, match="injected"):
        with ObjectWriter(client, bucket, "fail", options=WriterOptions(part_size=PART,
                                                                        max_in_flight=1)) as f:
            for _ in range(6):
                f.write(os.urandom(PART))
    assert not call(client.exists(bucket, "fail"))
    assert call(client.list_multipart_uploads(bucket)) == []
    call(client.aclose())


def test_close_after_a_caught_part_failure_says_nothing_was_published(
        emulator: Emulator, bucket: str) -> None:
    # A caller that catches the failed write (a logging handler, a retry
    # loop) and closes: close() returned as if it had published, as the
    # async writer's does not. Said once; a second close() is a no-op.
    class Failing(AsyncClient):
        async def upload_part(self, bucket, name, upload_id, number, *args):  # type: ignore[no-untyped-def]
            raise aioflux.ServerError("injected", operation="upload part")

    client = Failing(endpoint=emulator.endpoint)
    f = ObjectWriter(client, bucket, "caught", options=WriterOptions(part_size=PART,
                                                                     max_in_flight=1))
    with pytest.raises(aioflux.ServerError, match="injected"):
        for _ in range(4):
            f.write(os.urandom(PART))
    with pytest.raises(aioflux.ServerError, match="injected"):
        f.close()
    f.close()
    assert f.closed and not call(client.exists(bucket, "caught"))
    assert call(client.list_multipart_uploads(bucket)) == []
    user = ObjectWriter(client, bucket, "dropped", options=WriterOptions(part_size=PART))
    user.write(b"x")
    user.abort()
    user.close()  # the caller's own abort: nothing to say
    call(client.aclose())


def test_an_abort_that_fails_too_leaves_the_first_error_raised(
        emulator: Emulator, bucket: str) -> None:
    # The abort's own failure (a store's abort can fail: a local file
    # that cannot be removed) took the place of the part's, or the
    # block's, error that caused it.
    class Failing(AsyncClient):
        async def upload_part(self, bucket, name, upload_id, number, *args):  # type: ignore[no-untyped-def]
            raise aioflux.ServerError("injected part", operation="upload part")

    async def failing_abort() -> None:
        raise aioflux.ServerError("injected abort", operation="abort")

    client = Failing(endpoint=emulator.endpoint)
    options = WriterOptions(part_size=PART, max_in_flight=1)
    with pytest.raises(aioflux.ServerError, match="injected part") as part:
        with ObjectWriter(client, bucket, "a", options=options) as f:
            f._session.abort = failing_abort  # type: ignore[method-assign]
            for _ in range(4):
                f.write(os.urandom(PART))
    assert any("injected abort" in note for note in part.value.__notes__)
    with pytest.raises(KeyError) as block:
        with ObjectWriter(client, bucket, "b", options=options) as f:
            f._session.abort = failing_abort  # type: ignore[method-assign]
            f.write(b"x")
            raise KeyError("the caller's")
    assert any("injected abort" in note for note in block.value.__notes__)
    call(client.aclose())


def test_crc_mismatch_deletes_object(emulator: Emulator, bucket: str) -> None:
    class Lying(AsyncClient):
        async def complete_multipart(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            headers = await super().complete_multipart(*args, **kwargs)
            headers["x-goog-hash"] = "crc32c=AAAAAA=="
            return headers

    client = Lying(endpoint=emulator.endpoint)
    with pytest.raises(ChecksumMismatch):
        with ObjectWriter(client, bucket, "bad", options=WriterOptions(part_size=PART)) as f:
            f.write(os.urandom(PART + 10))
    with pytest.raises(NotFound):
        call(client.stat(bucket, "bad"))
    call(client.aclose())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_part_checksums_come_from_the_running_one(sync_client: Client, bucket: str,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  kind: str) -> None:
    # Each part's crc32c (sent to the server, which checks it) is derived from
    # the writer's running checksum: no second pass over any part, the tail too.
    import aioflux.gcs._xml as xml

    def second_pass(data: object) -> int:
        raise AssertionError("a part's checksum was computed again")

    monkeypatch.setattr(xml, "crc32c", second_pass)
    data = os.urandom(2 * PART + 777)
    if kind == "sync":
        with aioflux.open(f"gs://{bucket}/derived", "wb", client=sync_client,
                          writer=WriterOptions(part_size=PART)) as f:
            for i in range(0, len(data), 999_999):
                f.write(data[i:i + 999_999])
    else:
        async def write() -> None:
            async with AsyncObjectWriter(sync_client.aio, bucket, "derived",
                                         options=WriterOptions(part_size=PART)) as w:
                for i in range(0, len(data), 999_999):
                    await w.write(data[i:i + 999_999])

        call(write())
    assert sync_client.read(bucket, "derived") == data


async def test_async_writer(client: AsyncClient, bucket: str) -> None:
    data = os.urandom(2 * PART + 99)
    async with AsyncObjectWriter(client, bucket, "aw", options=WriterOptions(part_size=PART)) as w:
        for i in range(0, len(data), 3 * MiB):
            await w.write(data[i:i + 3 * MiB])
    assert w.stats.mode == "multipart"
    assert await client.read(bucket, "aw") == data
    with pytest.raises(RuntimeError):
        async with AsyncObjectWriter(client, bucket, "aw2",
                                     options=WriterOptions(part_size=PART)) as w:
            await w.write(os.urandom(PART + 1))
            raise RuntimeError("boom")
    assert not await client.exists(bucket, "aw2")
    assert await client.list_multipart_uploads(bucket) == []


async def test_an_async_writer_closed_inside_its_with_stays_published(
        client: AsyncClient, bucket: str) -> None:
    # Its second close (the with's) raised "is closed"; an error after the
    # close aborted what was already published.
    async with AsyncObjectWriter(client, bucket, "twice") as w:
        await w.write(b"data")
        first = await w.close()
    assert await w.close() == first
    with pytest.raises(RuntimeError):
        async with AsyncObjectWriter(client, bucket, "then-fails") as w:
            await w.write(b"kept")
            await w.close()
            raise RuntimeError("after the close")
    assert await client.read(bucket, "twice") == b"data"
    assert await client.read(bucket, "then-fails") == b"kept"


def test_torch_save_into_writer(sync_client: Client, bucket: str) -> None:
    import torch

    state = {"w": torch.randn(1_500_000), "step": 3}
    url = f"gs://{bucket}/model.pt"
    with aioflux.open(url, "wb", client=sync_client, writer=WriterOptions(part_size=PART)) as f:
        torch.save(state, f)
    with aioflux.open(url, "rb", client=sync_client, reader=ReaderOptions(block_size=MiB,
                                                                          read_ahead=4)) as r:
        loaded = torch.load(r)
    assert loaded["step"] == 3 and torch.equal(loaded["w"], state["w"])


async def test_a_closed_async_writer_refuses_a_new_block(client: AsyncClient,
                                                         bucket: str) -> None:
    writer = AsyncObjectWriter(client, bucket, "twice")
    async with writer:
        await writer.write(b"once")
    entered = False
    with pytest.raises(InvalidArgument, match="closed"):
        async with writer:
            entered = True  # (a block that writes nothing passed in silence)
    assert not entered
    assert await client.read(bucket, "twice") == b"once"


async def test_an_abort_from_another_task_stops_a_write_waiting_for_a_slot(
        client: AsyncClient, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The waiting write sent its next part to the aborted upload (NoSuchUpload),
    # or, on a resumable session, returned as if its bytes were taken.
    import asyncio

    writer = AsyncObjectWriter(client, bucket, "aborted",
                               options=WriterOptions(part_size=PART, max_in_flight=1))
    sent: list[int] = []

    async def held(number: int, data: memoryview, checksum: int) -> None:
        sent.append(number)
        await asyncio.Event().wait()  # until the abort cancels it

    monkeypatch.setattr(writer._session, "put", held)
    writing = asyncio.ensure_future(writer.write(os.urandom(3 * PART)))
    while not getattr(writer._slots, "_waiters", None):  # the second part waits
        await asyncio.sleep(0)
    await writer.abort()
    with pytest.raises(InvalidArgument, match="the writer was aborted meanwhile"):
        await writing
    assert sent == [1]
    assert not await client.exists(bucket, "aborted")
    assert await client.list_multipart_uploads(bucket) == []
