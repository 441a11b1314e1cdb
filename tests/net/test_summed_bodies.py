"""A large body's crc32c summed as its bytes land (``_net/connection.py``),
and the checked reads that take it (``_net/checked_reads.py``) instead of a
pass over the whole body once it is in; a read pieced together from two
responses is checked whole, as before, and a corrupt body fails either way."""

from __future__ import annotations

import os

import pytest

from aioflux import AsyncClient, ChecksumMismatch, ClientConfig, RetryPolicy
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._net import checked_reads
from aioflux._net.connection import SUMMED_FROM
from aioflux._net.http import MediaPool
from tests.servers.raw_server import RawServer

BIG = os.urandom(3 << 20)
HASH = encode_crc32c(crc32c(BIG))
CUT = 1 << 20  # where a first response is cut short


def _response(body: bytes = BIG, *, hash_: str = HASH, status: str = "200 OK",
              extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nx-goog-hash: crc32c={hash_}"
            f"\r\n{extra}\r\n").encode() + body


def _pool() -> MediaPool:
    return MediaPool(user_agent="t", connect_timeout=2, read_stall=5, idle_timeout=5)


async def test_a_large_body_is_summed_as_it_lands_when_asked() -> None:
    small = BIG[:SUMMED_FROM - 1]
    answers = [_response(), _response(), _response(), _response(small)]
    pool = _pool()
    async with RawServer(lambda conn, i: answers[i]) as base:
        own = await pool.get(base + "/o", {}, limit=len(BIG), summed=True)
        buf = bytearray(len(BIG))
        into = await pool.get(base + "/o", {}, memoryview(buf), limit=len(BIG), summed=True)
        unasked = await pool.get(base + "/o", {}, limit=len(BIG))
        short = await pool.get(base + "/o", {}, limit=len(small), summed=True)
    pool.close()
    assert own is not None and own.body == BIG and own.crc == crc32c(BIG)
    assert into is not None and buf == BIG and into.crc == crc32c(BIG)
    assert unasked is not None and unasked.body == BIG and unasked.crc is None
    # One pass at the end costs less than a call a piece.
    assert short is not None and short.body == small and short.crc is None


def _counting_passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths the checked reads hash in one pass once a body is in."""
    passes: list[int] = []
    real = checked_reads.crc32c

    def counted(data: bytes | bytearray | memoryview, value: int = 0) -> int:
        passes.append(len(data))
        return real(data, value)

    monkeypatch.setattr(checked_reads, "crc32c", counted)
    return passes


def _client(base: str, attempts: int = 3) -> AsyncClient:
    retry = RetryPolicy(max_attempts=attempts, initial_delay=0, max_delay=0)
    return AsyncClient(ClientConfig(retry=retry), endpoint=base)


async def test_a_checked_read_takes_the_sum_and_a_corrupt_body_still_fails(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    passes = _counting_passes(monkeypatch)
    async with RawServer(lambda conn, i: _response()) as base, _client(base) as client:
        assert await client.read("bkt", "obj") == BIG
        buf = bytearray(len(BIG))
        assert await client.read("bkt", "obj", into=buf) == len(BIG) and buf == BIG
        fetched = await client.fetch("bkt", "obj", want_crc=True)
        assert fetched.data == BIG and fetched.crc == crc32c(BIG)
    assert passes == []  # no second pass over a body summed as it landed

    wrong = encode_crc32c(crc32c(BIG) ^ 1)
    async with RawServer(lambda conn, i: _response(hash_=wrong)) as base, \
            _client(base, attempts=2) as client:
        with pytest.raises(ChecksumMismatch, match="crc32c"):
            await client.read("bkt", "obj")


async def test_a_read_pieced_from_two_responses_is_checked_whole(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    passes = _counting_passes(monkeypatch)
    rest = _response(BIG[CUT:], status="206 Partial Content",
                     extra=f"Content-Range: bytes {CUT}-{len(BIG) - 1}/{len(BIG)}\r\n")
    answers = {0: (_response()[:-(len(BIG) - CUT)], "close"), 1: rest}
    async with RawServer(lambda conn, i: answers[conn]) as base, _client(base) as client:
        assert await client.read("bkt", "obj") == BIG
        assert client.transport.stats.retries == 1
    assert passes == [len(BIG)]  # the first response's bytes and the second's, together

    corrupt = bytearray(BIG)
    corrupt[CUT + 5] ^= 1
    rest = _response(bytes(corrupt[CUT:]), status="206 Partial Content",
                     extra=f"Content-Range: bytes {CUT}-{len(BIG) - 1}/{len(BIG)}\r\n")
    # A mismatch reads the object again from its start: whole, and as corrupt.
    answers = {(0, 0): (_response()[:-(len(BIG) - CUT)], "close"), (1, 0): rest}
    again = _response(bytes(corrupt))
    passes.clear()
    async with RawServer(lambda conn, i: answers.get((conn, i), again)) as base, \
            _client(base) as client:
        with pytest.raises(ChecksumMismatch):
            await client.read("bkt", "obj")
    # Each attempt checked whole (after the pieced one, the body it kept
    # takes the whole answers' bytes too: checked in one pass, not summed).
    assert passes and set(passes) == {len(BIG)}
