"""Retries under injected faults, with every byte checked."""

from __future__ import annotations

import asyncio
import os

import pytest

from aioflux import (
    AsyncClient,
    ClientConfig,
    NotFound,
    PreconditionFailed,
    RetryPolicy,
    ServerError,
    Timeouts,
    TransportError,
)
from aioflux._core.integrity.crc import crc32c
from aioflux.testing import Emulator, Faults
from tests.conftest import FAST_RETRY
from tests.servers.raw_server import RawServer


async def _seed(client: AsyncClient, bucket: str, count: int, size: int) -> dict[str, int]:
    sums = {}

    async def put(i: int) -> None:
        data = os.urandom(size)
        await client.write(bucket, f"obj/{i:05d}", data)
        sums[f"obj/{i:05d}"] = crc32c(data)

    await asyncio.gather(*(put(i) for i in range(count)))
    return sums


async def test_2000_reads_byte_identical_under_faults(faults: Emulator, bucket: str) -> None:
    config = ClientConfig(max_concurrency=32, retry=RetryPolicy(
        max_attempts=12, initial_delay=0.001, max_delay=0.01))
    async with AsyncClient(config, endpoint=faults.endpoint) as client:
        sums = await _seed(client, bucket, 2000, 4096)
        faults.faults = Faults(p_503=0.10, p_429=0.05, p_reset=0.02, seed=7)
        before = dict(faults.stats)
        datas = await asyncio.gather(*(client.read(bucket, n) for n in sums))
        injected = {k: faults.stats[k] - before.get(k, 0)
                    for k in ("injected_503", "injected_429", "resets")}
    assert [crc32c(d) for d in datas] == list(sums.values())
    assert all(len(d) == 4096 for d in datas)
    # The knobs really fired, and every fault cost a retry.
    assert injected["injected_503"] > 100 and injected["injected_429"] > 40
    assert injected["resets"] > 10
    assert client.transport.stats.retries >= sum(injected.values())


async def test_ranged_reads_under_resets(faults: Emulator, client: AsyncClient,
                                        bucket: str) -> None:
    data = os.urandom(300_000)
    await client.write(bucket, "r", data)
    faults.faults = Faults(p_reset=0.5, seed=3)
    chunks = await asyncio.gather(*(client.read(bucket, "r", start=s, end=s + 30_000)
                                    for s in range(0, 300_000, 30_000)))
    assert b"".join(chunks) == data


async def test_4xx_fails_at_once(faults: Emulator, client: AsyncClient, bucket: str) -> None:
    await client.write(bucket, "exists", b"x")
    before = client.transport.stats.requests
    with pytest.raises(NotFound) as info:
        await client.read(bucket, "missing")
    assert info.value.attempts == 1
    with pytest.raises(PreconditionFailed):
        await client.write(bucket, "exists", b"y", if_generation_match=0)
    assert client.transport.stats.requests - before == 2
    assert client.transport.stats.retries == 0


async def test_persistent_503_gives_up_with_typed_error(faults: Emulator, bucket: str) -> None:
    config = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0))
    async with AsyncClient(config, endpoint=faults.endpoint) as client:
        await client.write(bucket, "o", b"data")
        faults.faults = Faults(p_503=1.0)
        with pytest.raises(ServerError, match="gave up after 3 attempts") as info:
            await client.read(bucket, "o")
    assert info.value.status == 503
    assert info.value.attempts == 3


async def test_read_stall_times_out_and_retries(faults: Emulator, bucket: str) -> None:
    config = ClientConfig(timeouts=Timeouts(read_stall=0.2),
                          retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
    async with AsyncClient(config, endpoint=faults.endpoint) as client:
        data = os.urandom(200_000)
        await client.write(bucket, "slow", data)
        faults.faults = Faults(p_stall=1.0, stall_seconds=1.0)
        # Three bodies stall midway: each attempt times out after the bytes
        # it got (100, 50, 25 KB: progress, so max_attempts=2 does not end
        # the read) and the next resumes after them; the fourth is served.
        read = asyncio.create_task(client.read(bucket, "slow"))
        while faults.stats["stalls"] < 3:
            await asyncio.sleep(0.005)
        faults.faults = Faults()
        assert await read == data
        assert client.transport.stats.retries == 3


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_read_cut_after_a_few_bytes_is_no_progress(faults: Emulator, bucket: str,
                                                         lean: bool) -> None:
    # Every body stalls midway, and the halves left are under 16 KiB: those
    # attempts count against max_attempts, whichever timer (the silence or
    # the pace window) ends them, or a server that hands out a few bytes per
    # connection would be read until the deadline.
    config = ClientConfig(timeouts=Timeouts(read_stall=0.2), lean_reads=lean,
                          retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
    async with AsyncClient(config, endpoint=faults.endpoint) as client:
        await client.write(bucket, "slow", os.urandom(20_000))
        faults.faults = Faults(p_stall=1.0, stall_seconds=1.0)
        with pytest.raises(TransportError, match="after 5000 of 10000 bytes") as info:
            await client.read(bucket, "slow")
    assert info.value.attempts == 2


async def test_no_token_in_errors_or_repr(emulator: Emulator, bucket: str) -> None:
    secret = "ya29.SECRET-TOKEN-VALUE"
    async with AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=emulator.endpoint,
                           credentials=secret) as client:
        with pytest.raises(NotFound) as info:
            await client.read(bucket, "nope")
        assert secret not in str(info.value)
        assert secret not in repr(info.value)
        assert secret not in repr(client.transport.auth)
        emulator.faults = Faults(p_503=1.0)
        try:
            with pytest.raises(ServerError) as failed:
                await client.stat(bucket, "nope")
        finally:
            emulator.faults = Faults()
        assert secret not in str(failed.value)
        assert failed.value.__cause__ is None and failed.value.__context__ is None


async def test_crc_mismatch_is_retried_then_raised(client: AsyncClient, bucket: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import aioflux._net.checked_reads as client_mod
    from aioflux import ChecksumMismatch

    await client.write(bucket, "c", b"payload")
    calls = []
    real = client_mod.crc32c

    def corrupt_twice(data: bytes | memoryview, value: int = 0) -> int:
        calls.append(1)
        return real(data, value) ^ (1 if len(calls) <= 2 else 0)

    monkeypatch.setattr(client_mod, "crc32c", corrupt_twice)
    assert await client.read(bucket, "c") == b"payload"  # third attempt verifies
    assert client.transport.stats.retries == 2
    monkeypatch.setattr(client_mod, "crc32c", lambda data, value=0: real(data, value) ^ 1)
    with pytest.raises(ChecksumMismatch, match="crc32c"):
        await client.read(bucket, "c")


async def test_delete_whose_answer_was_lost_succeeds() -> None:
    # The first DELETE is cut before its answer (the server may have acted);
    # the retry's 404 then means the object is gone, as asked. A 404 to a
    # first attempt is still NotFound.
    not_found = (b'{"error": {"code": 404, "message": "No such object: bkt/o", '
                 b'"errors": [{"reason": "notFound"}]}}')
    answer_404 = (b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(not_found), not_found))
    server = RawServer(lambda conn, i: None if conn == 0 else answer_404)
    async with server as base, AsyncClient(ClientConfig(retry=FAST_RETRY),
                                           endpoint=base) as client:
        await client.delete("bkt", "o")
        assert len(server.requests) == 2
        with pytest.raises(NotFound) as info:
            await client.delete("bkt", "o")
        assert info.value.attempts == 1
