"""Interim (1xx) heads without end, and Timeouts.total, on both read paths.

A server may send any number of interim heads (100 Continue, 103 Early
Hints) before the final one. Each is fresh bytes, so neither the read-stall
timeout nor the pace rule ever fired, and aiohttp timed only the first
head (and stopped its read timeout after it): a read or a stat answered
with 1xx heads forever, or with one and then silence, hung for good. Now
at most MAX_INTERIM_RESPONSES are taken, their bytes are no progress, the
final head must come within a window of the first byte, and a silence
after an interim head is one like any other. Timeouts.total also caps a
lean exchange, as it does aiohttp's.
"""

from __future__ import annotations

import asyncio
import os
import re

import pytest

from aioflux import AsyncClient, ClientConfig, RetryPolicy, Timeouts, TransportError
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._net.http import MAX_INTERIM_RESPONSES, BodyTruncated, MediaPool
from tests.servers.raw_server import Handler, RawServer, serving

BODY = os.urandom(3000)
OK = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\n"
      f"x-goog-hash: crc32c={encode_crc32c(crc32c(BODY))}\r\n\r\n").encode() + BODY
HINT = b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload; " + b"a" * 4000 + b"\r\n\r\n"
ONE_ATTEMPT = RetryPolicy(max_attempts=1)
# The old code waited forever: this turns that into a failure. Every other
# way out is made longer than this, so a call that ends before it was ended
# by the rule under test, however loaded the machine.
HANG = 30.0
CALLS = ["read (lean)", "read (aiohttp)", "stat"]


def _config(call: str, read_stall: float = 1.0) -> ClientConfig:
    return ClientConfig(retry=ONE_ATTEMPT, timeouts=Timeouts(read_stall=read_stall),
                        lean_reads=call != "read (aiohttp)")


def _hints(pause: float, sent: list[int], hint: bytes = HINT) -> Handler:
    """A server answering a request with 1xx heads, one every ``pause`` s."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            while True:
                writer.write(hint)
                sent.append(len(hint))
                await writer.drain()
                await asyncio.sleep(pause)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return serve


@pytest.mark.parametrize("call", CALLS)
async def test_endless_interim_heads_fail_after_the_cap(call: str) -> None:
    # ~400 KB/s of 103s: neither silent nor slow, and the window a final head
    # must come within (read_stall) is a minute: only the cap ends it.
    sent: list[int] = []
    async with serving(_hints(0.01, sent)) as base, \
            AsyncClient(_config(call, read_stall=60), endpoint=base) as client:
        coro = client.stat("bkt", "o") if call == "stat" else client.read("bkt", "o")
        with pytest.raises(TransportError, match=rf"more than {MAX_INTERIM_RESPONSES} interim"):
            await asyncio.wait_for(coro, HANG)
    # One more than the cap was parsed; a few more may have been in flight.
    assert MAX_INTERIM_RESPONSES < len(sent) < 3 * MAX_INTERIM_RESPONSES


@pytest.mark.parametrize("call", CALLS)
async def test_slow_interim_heads_are_no_progress(call: str) -> None:
    # 40 KB of 1xx heads every 0.4 s: never silent for read_stall (1 s) and
    # more than the 16 KiB a window must move, under the cap until 3.6 s.
    # The final head must come within a window: the call fails as too slow
    # (not at the cap, which says so), before the cap's count of heads.
    sent: list[int] = []
    hint = b"HTTP/1.1 103 Early Hints\r\n" + \
        b"".join(b"Link: </%d>; rel=preload; %s\r\n" % (i, b"a" * 4000) for i in range(10)) + \
        b"\r\n"
    async with serving(_hints(0.4, sent, hint)) as base, \
            AsyncClient(_config(call), endpoint=base) as client:
        coro = client.stat("bkt", "o") if call == "stat" else client.read("bkt", "o")
        with pytest.raises(TransportError, match="too slow"):
            await asyncio.wait_for(coro, HANG)
    assert len(sent) <= MAX_INTERIM_RESPONSES


@pytest.mark.parametrize("call", CALLS)
async def test_silence_after_an_interim_head_times_out(call: str) -> None:
    # aiohttp stopped its read timeout at the 103 and never started it again.
    # The server stays silent until the client gives up: the read-stall
    # timer, named in the error, is what ended the call.
    server = RawServer(lambda conn, index: (b"HTTP/1.1 103 Early Hints\r\n\r\n", "stall"))
    async with server as base, AsyncClient(_config(call, read_stall=0.5),
                                           endpoint=base) as client:
        coro = client.stat("bkt", "o") if call == "stat" else client.read("bkt", "o")
        with pytest.raises(TransportError, match=r"timed out.*Timeouts\.read_stall"):
            await asyncio.wait_for(coro, HANG)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
@pytest.mark.parametrize("count", [MAX_INTERIM_RESPONSES, MAX_INTERIM_RESPONSES + 1])
async def test_interim_heads_up_to_the_cap_are_skipped(lean: bool, count: int) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" * (count - 1) + \
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    server = RawServer(lambda conn, index: interim + OK)
    config = ClientConfig(retry=ONE_ATTEMPT, lean_reads=lean)
    async with server as base, AsyncClient(config, endpoint=base) as client:
        read = asyncio.wait_for(client.read("bkt", "o"), HANG)
        if count <= MAX_INTERIM_RESPONSES:
            assert await read == BODY
            assert await client.read("bkt", "o") == BODY  # the connection stays usable
        else:
            with pytest.raises(TransportError, match="interim"):
                await read


def _slow_body(requests: list[bytes], size: int, data: bytes | None = None,
               slow: int = 1 << 30) -> Handler:
    """A body of ``size`` bytes, ``data`` or else x's (a 206 from wherever
    Range asks), to the first ``slow`` requests at ~320 KB/s, fast enough
    for the pace rule but whole only after far longer than the hang guard;
    to the next ones at once."""
    def part(at: int, end: int) -> bytes:
        return b"x" * (end - at) if data is None else data[at:end]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                requests.append(request)
                asked = re.search(rb"Range: bytes=(\d+)-", request)
                start = int(asked.group(1)) if asked else 0
                status = "206 Partial Content" if asked else "200 OK"
                writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {size - start}\r\n"
                             f"Content-Range: bytes {start}-{size - 1}/{size}\r\n\r\n".encode())
                if len(requests) > slow:
                    writer.write(part(start, size))
                    await writer.drain()
                    continue
                for at in range(start, size, 32768):
                    writer.write(part(at, min(size, at + 32768)))
                    await writer.drain()
                    await asyncio.sleep(0.1)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return serve


async def test_timeouts_total_cuts_a_lean_exchange_and_keeps_its_bytes() -> None:
    # 1 GiB at ~320 KB/s, never silent (read_stall is a minute): only
    # Timeouts.total, named in the error, ends the exchange.
    requests: list[bytes] = []
    async with serving(_slow_body(requests, 1 << 30)) as base:
        pool = MediaPool(user_agent="t", connect_timeout=2, read_stall=60, idle_timeout=5,
                         total=0.5)
        try:
            started = asyncio.get_running_loop().time()
            with pytest.raises(BodyTruncated, match=r"ran past Timeouts\.total") as info:
                await asyncio.wait_for(pool.get(f"{base}/o", {}), HANG)
            # Not before its time (a lower bound only: load can only lengthen it).
            assert asyncio.get_running_loop().time() >= started + 0.5
            response = info.value.response
            assert response is not None and 0 < response.received < 1 << 30
        finally:
            pool.close()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_timeouts_total_bounds_every_attempt_of_a_read(lean: bool) -> None:
    # The first two answers would take ~50 s each: each attempt is cut at
    # 0.5 s and resumes after what arrived (progress, so max_attempts=2 does
    # not count it); the third answer is sent whole.
    data = os.urandom(16 << 20)
    requests: list[bytes] = []
    config = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0),
                          timeouts=Timeouts(total=0.5, read_stall=60), lean_reads=lean)
    async with serving(_slow_body(requests, len(data), data, slow=2)) as base, \
            AsyncClient(config, endpoint=base) as client:
        assert await asyncio.wait_for(client.read("bkt", "o"), HANG) == data
    assert len(requests) == 3
    starts = [int(m.group(1)) if (m := re.search(rb"Range: bytes=(\d+)-", r)) else 0
              for r in requests]
    assert 0 == starts[0] < starts[1] < starts[2] < len(data)  # each attempt resumed
