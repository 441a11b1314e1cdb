"""The emulator's network: a cap per connection and a cap for the host
(its NIC), which every body sent at once shares.

The schedule is checked on the emulator's own pacing (``_runtime.due_time``
over a :class:`_runtime.Link`, stepped on a clock the test keeps), and
against a running emulator only from below on wall time: a transfer
takes at least its bytes over the caps however idle the machine, and load
only lengthens it.
"""

from __future__ import annotations

import asyncio
import heapq
import io
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from aioflux.testing import GCS_LIKE_PROFILE, Emulator, EmulatorProfile, FaultProxy, _runtime

MB = 1_000_000
CHUNK = 50_000


def _finish_times(
    streams: int, size: int, bandwidth: float | None, host: float | None
) -> list[float]:
    """When each of ``streams`` bodies of ``size`` bytes, started together at
    0, is sent, each stream asking for its next chunk once its last is due
    (as the emulator's writer does after its sleep)."""
    link = _runtime.Link()
    due = [0.0] * streams
    sent = [0] * streams
    asks = [(0.0, i) for i in range(streams)]
    while asks:
        _, i = heapq.heappop(asks)
        due[i] = _runtime.due_time(link, CHUNK, due[i], bandwidth, host)
        sent[i] += CHUNK
        if sent[i] < size:
            heapq.heappush(asks, (due[i], i))
    return due


def test_parallel_streams_share_the_host_evenly() -> None:
    # 8 streams of 1 MB at 100 MB/s each would take 10 ms alone; the host's
    # 80 MB/s gives each 10 MB/s: 100 ms for all, each within a turn of it.
    done = _finish_times(8, MB, 100 * MB, 80 * MB)
    assert max(done) == pytest.approx(8 * MB / (80 * MB))
    assert max(done) - min(done) <= 8 * CHUNK / (80 * MB) + 1e-9


def test_the_connection_cap_holds_under_the_host_cap() -> None:
    # 4 x 100 MB/s fits in 800 MB/s: each stream at its own cap, no faster.
    done = _finish_times(4, MB, 100 * MB, 800 * MB)
    assert done == pytest.approx([MB / (100 * MB)] * 4)
    # No host cap: N streams get N times one stream's bandwidth, what the
    # host cap is for.
    assert _finish_times(32, MB, 100 * MB, None) == pytest.approx([0.01] * 32)
    # The host cap alone paces too.
    assert max(_finish_times(4, MB, None, 40 * MB)) == pytest.approx(0.1)


def test_a_stream_that_waited_on_the_host_does_not_catch_up() -> None:
    # One stream shares the host's 200 MB/s with 3 others for its first
    # half (50 MB/s each), then is alone: its second half goes at its own
    # 100 MB/s, not faster to make up for the wait.
    link = _runtime.Link()
    due = 0.0
    others = [0.0] * 3
    for _ in range(10):  # 500 KB each, turn by turn
        for j in range(3):
            others[j] = _runtime.due_time(link, CHUNK, others[j], 100 * MB, 200 * MB)
        due = _runtime.due_time(link, CHUNK, due, 100 * MB, 200 * MB)
    half = due
    assert half == pytest.approx(4 * 500_000 / (200 * MB))
    for _ in range(10):
        due = _runtime.due_time(link, CHUNK, due, 100 * MB, 200 * MB)
    assert due == pytest.approx(half + 500_000 / (100 * MB))


def test_the_perf_profile_and_the_command_line() -> None:
    from aioflux.testing._serve import _knobs, build_parser

    assert GCS_LIKE_PROFILE.host_bandwidth == 800 * MB
    parse = build_parser().parse_args
    assert _knobs(parse(["--profile", "gcs-like"]))[0] == GCS_LIKE_PROFILE
    profile = _knobs(parse(["--bandwidth-mbps", "50", "--host-bandwidth-mbps", "400"]))[0]
    assert (profile.bandwidth, profile.host_bandwidth) == (50 * MB, 400 * MB)
    assert _knobs(parse([]))[0].host_bandwidth is None
    with pytest.raises(ValueError, match="host_bandwidth"):
        EmulatorProfile(host_bandwidth=0.0)


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    async with Emulator() as emulator:
        emulator.create_bucket("nic")
        emulator.store.put("nic", "big", bytes(range(256)) * 4000)  # 1,024,000 bytes
        yield emulator


@pytest.mark.asyncio
async def test_parallel_ranged_reads_share_the_host(emu: Emulator) -> None:
    # 4 ranges of 500 KB at 100 MB/s a connection: 5 ms with no host cap
    # (each connection its own 100 MB/s); the host's 10 MB/s makes the
    # 2 MB take 0.2 s at least.
    emu.profile = EmulatorProfile(bandwidth=100 * MB, host_bandwidth=10 * MB)
    data = bytes(emu.store.get("nic", "big").data)

    async def ranged(http: aiohttp.ClientSession, first: int) -> bytes:
        headers = {"Range": f"bytes={first}-{first + 499_999}"}
        async with http.get("/nic/big", headers=headers) as r:
            assert r.status == 206
            return await r.read()

    async with aiohttp.ClientSession(base_url=emu.endpoint) as http:
        start = time.monotonic()
        bodies = await asyncio.gather(*(ranged(http, first) for first in (0, 1, 2, 3)))
        took = time.monotonic() - start
    assert bodies == [data[i : i + 500_000] for i in (0, 1, 2, 3)]
    assert took >= 0.99 * 2 * MB / (10 * MB)


@pytest.mark.asyncio
async def test_parallel_uploads_share_the_host(emu: Emulator) -> None:
    emu.profile = EmulatorProfile(bandwidth=100 * MB, host_bandwidth=10 * MB)

    async def upload(http: aiohttp.ClientSession, name: str) -> None:
        async with http.put(f"/nic/{name}", data=io.BytesIO(b"u" * 500_000)) as r:
            assert r.status == 200

    async with aiohttp.ClientSession(base_url=emu.endpoint) as http:
        start = time.monotonic()
        await asyncio.gather(*(upload(http, f"up{i}") for i in range(3)))
        took = time.monotonic() - start
    assert [len(bytes(emu.store.get("nic", f"up{i}").data)) for i in range(3)] == [500_000] * 3
    assert took >= 0.99 * 1.5 * MB / (10 * MB)


@pytest.mark.asyncio
async def test_the_proxy_shapes_a_server_that_has_no_profile(emu: Emulator) -> None:
    # The perf harness puts FaultProxy with the emulator's profile in front
    # of the servers that have none (Azurite, nginx): the same host cap,
    # and the latency before each answer.
    data = bytes(emu.store.get("nic", "big").data)
    profile = EmulatorProfile(ttfb=0.05, bandwidth=100 * MB, host_bandwidth=10 * MB)
    with FaultProxy(emu.endpoint, profile=profile) as proxy:
        async with aiohttp.ClientSession(base_url=proxy.endpoint) as http:

            async def ranged(first: int) -> bytes:
                headers = {"Range": f"bytes={first}-{first + 499_999}"}
                async with http.get("/nic/big", headers=headers) as r:
                    assert r.status == 206
                    return await r.read()

            start = time.monotonic()
            bodies = await asyncio.gather(*(ranged(first) for first in (0, 1, 2, 3)))
            took = time.monotonic() - start
            assert bodies == [data[i : i + 500_000] for i in (0, 1, 2, 3)]
            assert took >= 0.99 * 2 * MB / (10 * MB)
            start = time.monotonic()
            for _ in range(3):  # one connection, three answers: each waits
                async with http.get("/storage/v1/b/nic/o/big") as r:
                    assert r.status == 200
            assert time.monotonic() - start >= 3 * 0.05
    assert proxy.stats.bytes_to_client >= 2 * MB
