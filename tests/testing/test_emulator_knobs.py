"""Emulator knobs (latency, bandwidth, QPS, faults) and the ways to run it:
in-loop, on a thread, as a subprocess, and the third-party fake-gcs-server."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from aioflux.testing import (
    GCS_LIKE_PROFILE,
    Emulator,
    EmulatorProfile,
    Faults,
    _runtime,
    fake_gcs_server,
    running_emulator,
)

MB = 1_000_000


class _RuntimeAsyncio:
    """``asyncio`` as the emulator's knobs see it (patched into
    ``aioflux.testing._runtime``): each sleep they ask for is recorded, then
    slept; with ``now`` set, their loop's clock reads it and stands still
    until the test moves it.

    What the knobs ask for follows from the profile and the bytes alone,
    where how long a request took also follows from how loaded the machine
    is: the tests bound the former, and of the latter only what load cannot
    break (a lower bound).
    """

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.now: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        await asyncio.sleep(delay)

    def get_running_loop(self) -> Any:
        if self.now is None:
            return asyncio.get_running_loop()
        return SimpleNamespace(time=lambda: self.now)


@pytest.fixture
def knobs(monkeypatch: pytest.MonkeyPatch) -> _RuntimeAsyncio:
    seen = _RuntimeAsyncio()
    monkeypatch.setattr(_runtime, "asyncio", seen)
    return seen


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    # One emulator per test on the test's own loop: knobs never leak.
    async with Emulator() as emulator:
        emulator.create_bucket("knobs")
        emulator.store.put("knobs", "small", b"s" * 1000)
        emulator.store.put("knobs", "big", (bytes(range(256)) * 7813)[: 2 * MB])
        yield emulator


@pytest.fixture
async def http(emu: Emulator) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=emu.endpoint) as session:
        yield session


def test_profile_and_faults_validation() -> None:
    assert GCS_LIKE_PROFILE == EmulatorProfile(ttfb=0.020, bandwidth=100e6, host_bandwidth=800e6)
    for kwargs, field in [
        ({"ttfb": -1.0}, "ttfb"),
        ({"bandwidth": 0.0}, "bandwidth"),
        ({"qps_limit": float("inf")}, "qps_limit"),
    ]:
        with pytest.raises(ValueError, match=field):
            EmulatorProfile(**kwargs)  # type: ignore[arg-type]
    for kwargs, field in [
        ({"p_429": 1.5}, "p_429"),
        ({"p_503": -0.1}, "p_503"),
        ({"p_reset": 2.0}, "p_reset"),
        ({"p_stall": -1.0}, "p_stall"),
        ({"stall_seconds": -1.0}, "stall_seconds"),
    ]:
        with pytest.raises(ValueError, match=field):
            Faults(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        GCS_LIKE_PROFILE.ttfb = 1.0  # type: ignore[misc]


@pytest.mark.asyncio
async def test_injected_503_and_429(emu: Emulator, http: aiohttp.ClientSession) -> None:
    emu.faults = Faults(p_503=1.0)
    async with http.get("/storage/v1/b/knobs/o/small", params={"alt": "media"}) as r:
        assert r.status == 503
        assert (await r.json())["error"]["errors"][0]["reason"] == "backendError"
    async with http.get("/knobs/small") as r:
        assert r.status == 503
        assert "<Code>ServiceUnavailable</Code>" in await r.text()
    # Bucket administration is exempt from faults.
    async with http.get("/storage/v1/b/knobs") as r:
        assert r.status == 200
    emu.faults = Faults(p_429=1.0)
    async with http.get("/storage/v1/b/knobs/o") as r:
        assert r.status == 429 and r.headers["Retry-After"] == "0"
        assert (await r.json())["error"]["errors"][0]["reason"] == "rateLimitExceeded"
    async with http.get("/knobs/small") as r:
        assert "<Code>SlowDown</Code>" in await r.text()
    emu.faults = Faults()
    async with http.get("/knobs/small") as r:
        assert r.status == 200
    assert emu.stats["injected_503"] == 2 and emu.stats["injected_429"] == 2


@pytest.mark.asyncio
async def test_a_refusal_before_the_body_closes_the_connection(emu: Emulator) -> None:
    # A client that sent "Expect: 100-continue" holds its body back; kept
    # open, the connection would read its next request as that body.
    emu.faults = Faults(p_503=1.0)
    for line in ("POST /upload/storage/v1/b/knobs/o?uploadType=media&name=x",
                 "PUT /knobs/x"):
        reader, writer = await asyncio.open_connection("127.0.0.1", emu.port)
        writer.write(f"{line} HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n"
                     "Expect: 100-continue\r\n\r\n".encode())
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        writer.close()
        await writer.wait_closed()
        assert head.startswith(b"http/1.1 503") and b"connection: close" in head, line
    assert emu.stats["injected_503"] == 2


@pytest.mark.asyncio
async def test_fault_draws_are_seeded(emu: Emulator, http: aiohttp.ClientSession) -> None:
    async def run() -> list[int]:
        emu.faults = Faults(p_503=0.5, seed=7)
        statuses = []
        for _ in range(40):
            async with http.get("/knobs/small") as r:
                statuses.append(r.status)
        return statuses

    first = await run()
    assert await run() == first
    assert {200, 503} == set(first)


@pytest.mark.asyncio
async def test_reset_truncates_body(emu: Emulator, http: aiohttp.ClientSession) -> None:
    emu.faults = Faults(p_reset=1.0)
    for url in ("/storage/v1/b/knobs/o/big?alt=media", "/knobs/big"):
        with pytest.raises(aiohttp.ClientError):
            async with http.get(url) as r:
                assert r.status == 200
                await r.read()
    assert emu.stats["resets"] == 2
    emu.faults = Faults()
    async with http.get("/knobs/big") as r:
        assert len(await r.read()) == 2 * MB


@pytest.mark.asyncio
async def test_stall_pauses_mid_body(emu: Emulator, http: aiohttp.ClientSession) -> None:
    emu.faults = Faults(p_stall=1.0, stall_seconds=0.3)
    start = time.monotonic()
    async with http.get("/knobs/big") as r:
        body = await r.read()
    assert time.monotonic() - start >= 0.28
    assert body == emu.store.get("knobs", "big").data
    assert emu.stats["stalls"] == 1


@pytest.mark.asyncio
async def test_ttfb_is_applied(emu: Emulator, http: aiohttp.ClientSession,
                               knobs: _RuntimeAsyncio) -> None:
    # Lower bounds only on wall time: a loaded machine makes any request
    # slower. That without a ttfb none is applied shows in what the
    # emulator asks for: no sleep at all.
    emu.profile = EmulatorProfile(ttfb=0.1)
    urls = ("/storage/v1/b/knobs/o/small?alt=media", "/storage/v1/b/knobs/o", "/knobs/small")
    for url in urls:
        start = time.monotonic()
        async with http.get(url) as r:
            await r.read()
        assert time.monotonic() - start >= 0.095, url
    assert knobs.sleeps == [0.1] * len(urls)
    emu.profile = EmulatorProfile()
    knobs.sleeps.clear()
    for _ in range(3):
        async with http.get("/knobs/small") as r:
            assert r.status == 200 and len(await r.read()) == 1000
    assert knobs.sleeps == []


@pytest.mark.asyncio
async def test_a_one_chunk_body_is_paced_then_sent_with_its_head(
    emu: Emulator, http: aiohttp.ClientSession
) -> None:
    # At 1 MB/s a paced chunk is 16 KiB: a 16,000-byte body (or a range of it)
    # goes out in one write once its last byte is due, never earlier.
    emu.profile = EmulatorProfile(bandwidth=1_000_000)
    data = os.urandom(16_000)
    emu.store.put("knobs", "one-chunk", data)
    start = time.monotonic()
    async with http.get("/storage/v1/b/knobs/o/one-chunk", params={"alt": "media"}) as r:
        assert r.status == 200 and await r.read() == data
    assert time.monotonic() - start >= 0.015
    start = time.monotonic()
    async with http.get("/knobs/one-chunk", headers={"Range": "bytes=1000-8999"}) as r:
        assert r.status == 206 and await r.read() == data[1000:9000]
    assert time.monotonic() - start >= 0.0075


@pytest.mark.asyncio
async def test_bandwidth_caps_downloads_and_uploads(
    emu: Emulator, http: aiohttp.ClientSession, knobs: _RuntimeAsyncio
) -> None:
    # A rate measured against the wall clock has no upper bound a loaded
    # machine cannot break (every transfer is slower there), so the cap is
    # checked from both sides apart: on wall time only from below (a
    # transfer takes at least its bytes over the cap, however idle the
    # machine; load only lengthens it), and from above on the sleeps the
    # emulator asks for, which add up to at most its bytes over the cap
    # (each one ends when the bytes sent so far are due), however loaded.
    cap = 10 * MB

    async def download() -> int:
        async with http.get("/storage/v1/b/knobs/o/big", params={"alt": "media"}) as r:
            return len(await r.read())

    async def ranged() -> int:
        async with http.get("/knobs/big", headers={"Range": "bytes=0-999999"}) as r:
            return len(await r.read())

    async def upload() -> int:
        async with http.put("/knobs/up", data=io.BytesIO(b"u" * MB)) as r:
            assert r.status == 200
        return MB

    emu.profile = EmulatorProfile(bandwidth=cap)
    for transfer, size in ((download, 2 * MB), (ranged, MB), (upload, MB)):
        knobs.sleeps.clear()
        start = time.monotonic()
        assert await transfer() == size
        took = time.monotonic() - start
        assert took >= 0.9 * size / cap, (transfer.__name__, took)
        assert sum(knobs.sleeps) <= size / cap + 1e-6, (transfer.__name__, knobs.sleeps)
    # Small bodies pay for their bytes (1 ms each here), not for timer
    # granularity: no more than their bytes' worth of sleep, one at most each.
    emu.store.put("knobs", "100k", b"k" * 100_000)
    emu.profile = EmulatorProfile(bandwidth=100 * MB)
    knobs.sleeps.clear()
    for _ in range(20):
        async with http.get("/knobs/100k") as r:
            assert len(await r.read()) == 100_000
    assert len(knobs.sleeps) <= 20 and sum(knobs.sleeps) <= 20 * 100_000 / (100 * MB) + 1e-6


@pytest.mark.asyncio
async def test_qps_cap(emu: Emulator, http: aiohttp.ClientSession,
                       knobs: _RuntimeAsyncio) -> None:
    # The token bucket's clock stands still unless the test moves it: how
    # many requests it lets through follows from the test, not from how
    # long the requests took.
    knobs.now = 100.0
    emu.profile = EmulatorProfile(qps_limit=5)

    async def statuses(count: int) -> list[int]:
        got = []
        for _ in range(count):
            async with http.get("/knobs/small") as r:
                got.append(r.status)
        return got

    assert await statuses(12) == [200] * 5 + [429] * 7  # a full bucket, then empty
    knobs.now += 0.25  # a quarter of a second at 5 per second: one token and a bit
    assert await statuses(2) == [200, 429]
    knobs.now += 10  # refilled, to the burst only
    assert await statuses(7) == [200] * 5 + [429] * 2
    assert emu.stats["throttled"] == 7 + 1 + 2


@pytest.mark.asyncio
async def test_qps_cap_limits_reads_and_writes_apart(emu: Emulator, http: aiohttp.ClientSession,
                                                     knobs: _RuntimeAsyncio) -> None:
    # GCS limits a bucket's reads and writes apart (S3 a prefix's GETs and
    # PUTs): a reader at the read cap leaves the writes theirs. One bucket
    # of tokens over both refused every write here.
    knobs.now = 100.0
    emu.profile = EmulatorProfile(qps_limit=5)

    async def statuses(method: str, count: int) -> list[int]:
        got = []
        for i in range(count):
            async with http.request(method, f"/knobs/w{i}" if method == "PUT" else "/knobs/small",
                                    data=b"w" if method == "PUT" else None) as r:
                got.append(r.status)
        return got

    assert await statuses("GET", 6) == [200] * 5 + [429]
    assert await statuses("PUT", 6) == [200] * 5 + [429]
    assert await statuses("HEAD", 1) == [429]  # a read: the reads' bucket is empty
    stats = emu.stats
    assert (stats["reads"], stats["writes"]) == (7, 6)
    assert (stats["throttled_reads"], stats["throttled_writes"], stats["throttled"]) == (2, 1, 3)


@pytest.mark.asyncio
async def test_qps_burst_is_the_seconds_of_tokens_a_bucket_holds(
        emu: Emulator, http: aiohttp.ClientSession, knobs: _RuntimeAsyncio) -> None:
    # A burst of 0.1 s of 100/s admits 10 at once where the default second
    # admits 100: the same 30 requests, at one instant, are refused from
    # the 11th.
    knobs.now = 100.0

    async def refused(count: int) -> list[int]:
        got = []
        for _ in range(count):
            async with http.get("/knobs/small") as r:
                got.append(r.status)
        return [i for i, status in enumerate(got) if status == 429]

    emu.profile = EmulatorProfile(qps_limit=100)
    assert EmulatorProfile().qps_burst == 1.0
    assert await refused(30) == []
    emu.profile = EmulatorProfile(qps_limit=100, qps_burst=0.1)  # restarts the buckets full
    assert await refused(30) == list(range(10, 30))
    knobs.now += 5.0  # refilled, to the burst only
    assert await refused(12) == [10, 11]
    emu.profile = EmulatorProfile(qps_limit=5, qps_burst=0.01)  # never under one token
    assert await refused(2) == [1]
    assert emu.stats["throttled"] == 20 + 2 + 1
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="qps_burst"):
            EmulatorProfile(qps_limit=5, qps_burst=bad)


def test_the_emulator_command_sets_the_burst() -> None:
    from aioflux.testing._serve import _knobs, build_parser, serve_main

    profile, _ = _knobs(build_parser().parse_args(["--qps", "200", "--qps-burst", "0.05"]))
    assert (profile.qps_limit, profile.qps_burst) == (200, 0.05)
    assert _knobs(build_parser().parse_args(["--qps", "200"]))[0].qps_burst == 1.0
    with pytest.raises(SystemExit) as exited:
        serve_main(["--qps", "200", "--qps-burst", "0"])
    assert exited.value.code == 2


def test_running_emulator_thread() -> None:
    with running_emulator(profile=GCS_LIKE_PROFILE) as emu:
        emu.create_bucket("thread-b")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", emu.endpoint)
        with urllib.request.urlopen(f"{emu.endpoint}/storage/v1/b/thread-b") as resp:
            assert resp.status == 200
        endpoint = emu.endpoint
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{endpoint}/storage/v1/b/thread-b", timeout=2)


def test_serve_main_subprocess() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "aioflux.testing", "--port", "0", "--bucket", "pre-made"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.fullmatch(r"aioflux emulator listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert match, line
        s3_line = proc.stdout.readline()
        s3_match = re.fullmatch(r"aioflux emulator S3 API on (http://127\.0\.0\.1:\d+)\n",
                                s3_line)
        assert s3_match, s3_line
        with urllib.request.urlopen(f"{match.group(1)}/storage/v1/b/pre-made") as resp:
            assert resp.status == 200
        head = urllib.request.Request(f"{s3_match.group(1)}/pre-made", method="HEAD")
        with urllib.request.urlopen(head) as resp:
            assert resp.headers["x-amz-bucket-region"] == "us-east-1"
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_serve_main_rejects_bad_probability() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioflux.testing", "--p-503", "2"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "p_503" in result.stderr


@pytest.mark.asyncio
async def test_fake_gcs_server_answers() -> None:
    with fake_gcs_server() as server:
        async with aiohttp.ClientSession(base_url=server.endpoint) as http:
            async with http.post(
                "/storage/v1/b", params={"project": "p"}, json={"name": "fgcs"}
            ) as r:
                assert r.status == 200, await r.text()
            async with http.post(
                "/upload/storage/v1/b/fgcs/o",
                params={"uploadType": "media", "name": "a/b"},
                data=b"hello",
            ) as r:
                assert r.status == 200, await r.text()
            async with http.get("/storage/v1/b/fgcs/o") as r:
                names = [i["name"] for i in (await r.json())["items"]]
            assert names == ["a/b"]
    assert server.process.poll() is not None


async def test_stats_endpoint_reports_counters(emulator: Emulator) -> None:


    emulator.create_bucket("stats-probe")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{emulator.endpoint}/storage/v1/b/stats-probe/o") as resp:
            assert resp.status == 200
        async with session.get(f"{emulator.endpoint}/_aioflux_stats") as resp:
            stats = await resp.json()
    assert stats["list"] >= 1 and stats["requests"] >= 1
