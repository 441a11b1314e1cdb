"""FaultProxy: relays intact bytes, cuts where and as often as asked, counts."""

from __future__ import annotations

import math
import os
import random
import socket

import pytest

from aioflux import AsyncClient, ClientConfig, RetryPolicy, TransportError
from aioflux._core.integrity.crc import crc32c
from aioflux.testing import Emulator, FaultProxy
from aioflux.testing._fault_proxy import CHUNK, _bytes_to_cut
from tests.conftest import FAST_RETRY


def raw_get(endpoint: str, path: str) -> tuple[bytes, bool]:
    """One ``Connection: close`` GET; returns what arrived and whether it
    ended with a reset (rather than a FIN)."""
    host, port = endpoint.removeprefix("http://").split(":")
    got = bytearray()
    try:
        # A proxy closing a client at once may reset it while it still
        # connects or sends (seen on a loaded machine): nothing arrived.
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                         "Connection: close\r\n\r\n".encode())
            while chunk := sock.recv(1 << 20):
                got += chunk
    except ConnectionResetError:
        return bytes(got), True
    return bytes(got), False


def body_of(response: bytes) -> bytes:
    return response.split(b"\r\n\r\n", 1)[1]


async def test_relays_bytes_intact_without_cuts(emulator: Emulator, bucket: str) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    with FaultProxy(emulator.endpoint) as proxy:
        async with AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=proxy.endpoint) as c:
            info = await c.write(bucket, "through", data)
            got = await c.read(bucket, "through")
        stats = proxy.stats
    assert info.crc32c == crc32c(data) and got == data
    assert stats.connections >= 1 and stats.cuts == 0
    # Both bodies and their HTTP heads went through, nothing more than a few KiB of heads.
    assert len(data) < stats.bytes_to_server < len(data) + 16 * 1024
    assert len(data) < stats.bytes_to_client < len(data) + 16 * 1024


def test_p1_cuts_every_large_body_within_the_first_chunk(emulator: Emulator,
                                                         bucket: str) -> None:
    data = os.urandom(1024 * 1024)
    emulator.store.put(bucket, "big", data)
    endings = []
    with FaultProxy(emulator.endpoint, p_cut_response=1.0, seed=4) as proxy:
        for _ in range(12):
            got, reset = raw_get(proxy.endpoint, f"/{bucket}/big")
            endings.append(reset)
            if not reset:
                # A FIN: the client sees a short response whose bytes are
                # exactly the start of the real one.
                assert len(got) < CHUNK
                assert got.startswith(b"HTTP/1.1 200")
                if b"\r\n\r\n" in got:
                    assert data.startswith(body_of(got))
        stats = proxy.stats
    assert stats.connections == 12 and stats.response_cuts == 12 and stats.request_cuts == 0
    assert stats.bytes_to_client < 12 * CHUNK
    # Some cuts are resets, some are FINs.
    assert True in endings and False in endings


def test_p0_relays_the_whole_response(emulator: Emulator, bucket: str) -> None:
    data = os.urandom(1024 * 1024)
    emulator.store.put(bucket, "big", data)
    with FaultProxy(emulator.endpoint) as proxy:
        got, reset = raw_get(proxy.endpoint, f"/{bucket}/big")
    assert not reset and body_of(got) == data
    assert proxy.stats.bytes_to_client == len(got)


async def test_request_cuts_stop_an_upload(emulator: Emulator, bucket: str) -> None:
    with FaultProxy(emulator.endpoint, p_cut_request=1.0, seed=1) as proxy:
        config = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.001,
                                                max_delay=0.01))
        async with AsyncClient(config, endpoint=proxy.endpoint) as c:
            with pytest.raises(TransportError, match=f"write gs://{bucket}/never"):
                await c.write(bucket, "never", os.urandom(300_000))
        stats = proxy.stats
    assert stats.request_cuts == 2 and stats.response_cuts == 0
    assert stats.bytes_to_server < 2 * CHUNK
    assert "never" not in emulator.store.bucket(bucket).objects


async def test_answer_cuts_lose_the_outcome_of_a_write(emulator: Emulator,
                                                      bucket: str) -> None:
    data = os.urandom(1000)
    with FaultProxy(emulator.endpoint, p_cut_answer=1.0, seed=2) as proxy:
        config = ClientConfig(retry=RetryPolicy(max_attempts=1))
        async with AsyncClient(config, endpoint=proxy.endpoint) as c:
            with pytest.raises(TransportError, match=f"write gs://{bucket}/acted"):
                await c.write(bucket, "acted", data)
        stats = proxy.stats
    # The server stored the object; only its answer was lost.
    assert emulator.store.get(bucket, "acted").crc32c == crc32c(data)
    assert (stats.answer_cuts, stats.response_cuts, stats.request_cuts) == (1, 0, 0)
    assert stats.bytes_to_client == 0


def test_same_seed_cuts_at_the_same_bytes(emulator: Emulator, bucket: str) -> None:
    emulator.store.put(bucket, "big", os.urandom(4 * 1024 * 1024))

    def relayed(seed: int) -> int:
        with FaultProxy(emulator.endpoint, p_cut_response=0.3, seed=seed) as proxy:
            raw_get(proxy.endpoint, f"/{bucket}/big")
            assert proxy.stats.response_cuts == 1
            return proxy.stats.bytes_to_client

    first = relayed(5)
    assert relayed(5) == first
    assert relayed(6) != first


def test_knobs_change_at_runtime(emulator: Emulator, bucket: str) -> None:
    data = os.urandom(512 * 1024)
    emulator.store.put(bucket, "obj", data)
    with FaultProxy(emulator.endpoint, p_cut_response=1.0) as proxy:
        assert len(raw_get(proxy.endpoint, f"/{bucket}/obj")[0]) < CHUNK
        proxy.p_cut_response = 0.0
        got, _ = raw_get(proxy.endpoint, f"/{bucket}/obj")
        assert body_of(got) == data
        assert proxy.stats.response_cuts == 1


def test_cut_rate_is_per_64_kib() -> None:
    rng = random.Random(0)
    draws = [_bytes_to_cut(rng, 0.02) for _ in range(20_000)]
    # A cut within any given 64 KiB stretch about 2% of the time...
    within = sum(1 for d in draws if d < CHUNK)
    assert 330 < within < 470
    # ...and within 10 stretches 1 - 0.98 ** 10 = 18% of the time.
    within10 = sum(1 for d in draws if d < 10 * CHUNK)
    assert abs(within10 / len(draws) - (1 - 0.98 ** 10)) < 0.015
    assert _bytes_to_cut(rng, 0.0) == math.inf
    assert all(0 <= _bytes_to_cut(rng, 1.0) < CHUNK for _ in range(100))


def test_bad_settings_raise() -> None:
    with pytest.raises(ValueError, match="p_cut_response"):
        FaultProxy("http://127.0.0.1:1", p_cut_response=1.5)
    with pytest.raises(ValueError, match="p_cut_request"):
        FaultProxy("http://127.0.0.1:1", p_cut_request=-0.1)
    with pytest.raises(ValueError, match="p_cut_answer"):
        FaultProxy("http://127.0.0.1:1", p_cut_answer=2)
    with pytest.raises(ValueError, match="HOST:PORT"):
        FaultProxy("http://127.0.0.1")
    with pytest.raises(RuntimeError, match="not running"):
        _ = FaultProxy("http://127.0.0.1:1").endpoint


def test_unreachable_upstream_closes_the_client() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with FaultProxy(f"http://127.0.0.1:{port}") as proxy:
            got, _ = raw_get(proxy.endpoint, "/x")
            assert got == b""
            assert proxy.stats.connections == 1
