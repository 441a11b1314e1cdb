"""The request-rate controller against servers: our emulator capped by its
token bucket (``qps_limit``, 429 past it), in one process and in several
spawned ones sharing the budget, and scripted servers for ``Retry-After``
and a service that throttles forever.

Bounded by counts: how many requests, how many were throttled, how many
failed; a wait is asserted only from below (a sleep is at least as long
as asked)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aioflux import AsyncClient, ClientConfig, RateLimited, RetryPolicy, S3Store
from aioflux._core.auth import AnonymousAuth
from aioflux._core.rate.controller import MAX_RESERVED_SECONDS, PACING_SWITCH_DEBT, grown
from aioflux._core.rate.shared_table import SharedRate, shared_rate
from aioflux._core.rate.state import recovery_target
from aioflux._net.throttle import gate_key
from aioflux._net.transport import Op, Transport
from aioflux.s3._xml import raise_if_error
from aioflux.testing import Emulator, EmulatorProfile, running_emulator
from tests.conftest import unique_bucket
from tests.servers.raw_server import RawServer

BUCKET = "throttled"
PAYLOAD = b"x" * 200


@pytest.fixture
def capped() -> Iterator[Emulator]:
    """An emulator of its own (its cap affects no other test), with
    objects o0..o599 in ``BUCKET``."""
    with running_emulator() as emu:
        emu.create_bucket(BUCKET)

        async def seed() -> None:
            async with AsyncClient(ClientConfig(max_concurrency=32),
                                   endpoint=emu.endpoint) as client:
                await asyncio.gather(*(client.write(BUCKET, f"o{i}", PAYLOAD)
                                       for i in range(600)))

        asyncio.run(seed())
        yield emu


def _config(**changes: Any) -> ClientConfig:
    # A fast ramp (the default is GCS's: a doubling per 20 minutes).
    return ClientConfig(max_concurrency=16, rate_doubling=60.0, **changes)


async def _read_all(endpoint: str, names: list[str], config: ClientConfig) -> dict[str, Any]:
    async with AsyncClient(config, endpoint=endpoint) as client:
        got = await asyncio.gather(*(client.read(BUCKET, n) for n in names),
                                   return_exceptions=True)
        stats = client.transport.stats
        return {"failures": [repr(g) for g in got if isinstance(g, BaseException)],
                "wrong": sum(1 for g in got if not isinstance(g, BaseException)
                             and g != PAYLOAD),
                "attempts": stats.requests, "throttled": stats.throttled,
                "waited": stats.budget_wait, "rates": dict(stats.rates)}


def test_one_process_under_a_cap_does_not_fail(capped: Emulator) -> None:
    capped.profile = EmulatorProfile(qps_limit=100)
    result = asyncio.run(_read_all(capped.endpoint, [f"o{i}" for i in range(400)], _config()))
    assert result["failures"] == [] and result["wrong"] == 0
    # The requests already in flight when the first 429s came back are
    # throttled, and the first paced window's: the rate a process measured
    # over its first quarter second holds the emulator's second of burst,
    # and pacing starts above the cap until that window calibrates it
    # (measured: 10-13% of 430-460 attempts); the rest are paced.
    assert result["throttled"] <= 0.16 * result["attempts"], result
    assert result["waited"] > 0 and f"{BUCKET} read" in result["rates"], result


#: the most of four processes' attempts throttled (600 reads, 150 each,
#: at most 16 in flight each, a cap of 200/s holding a second of it). A
#: bound by counts, whatever this machine's speed: a slow machine sends
#: slower and is refused less (the cap refills with time). A fast one is
#: refused, before pacing, at most what the slow starts have in flight
#: when the burst runs out (a shared first wave of ~17, a quarter more per
#: success: under 70 after the burst's 200) and the 8 the node owes;
#: paced, at most the first window's overshoot (the start is half of a
#: measure taken over at least 0.25 s: under 400/s, under 50 refused
#: before the window calibrates, and it ends early past 4) and the cuts
#: that follow, each after a window past 10% of its answers. Under 150
#: of 600+.
_THROTTLED_MOST = 0.25


def _process(endpoint: str, names: list[str], barrier: Any, conn: Any) -> None:
    barrier.wait()
    conn.send(asyncio.run(_read_all(endpoint, names, _config())))


def _four_processes(capped: Emulator, target: Callable[..., None],
                    method: str = "spawn") -> list[dict[str, Any]]:
    """Run ``target`` in 4 processes started by ``method``, 150 objects
    each, released at once; their results (every process exited cleanly,
    read all, right)."""
    context = multiprocessing.get_context(method)
    barrier = context.Barrier(4)
    children = []
    for k in range(4):
        ours, theirs = context.Pipe()
        names = [f"o{i}" for i in range(k * 150, (k + 1) * 150)]
        child = context.Process(target=target, args=(capped.endpoint, names, barrier, theirs))
        child.start()
        children.append((child, ours))
    results = []
    for child, ours in children:
        results.append(ours.recv())
        child.join(60)
        assert child.exitcode == 0
    assert all(r["failures"] == [] and r["wrong"] == 0 for r in results), results
    return results


def test_processes_share_one_budget(capped: Emulator) -> None:
    capped.profile = EmulatorProfile(qps_limit=200)
    results = _four_processes(capped, _process)
    attempts = sum(r["attempts"] for r in results)
    throttled = sum(r["throttled"] for r in results)
    # Without the controller 4 processes had 76% of their requests
    # throttled and 3 of them failed; with it, a few percent (measured
    # 5-12% here, the in-flight requests of the first overshoot). A bound
    # by counts (_THROTTLED_MOST), not by this machine's speed.
    assert throttled <= _THROTTLED_MOST * attempts, results
    assert sum(1 for r in results if r["waited"] > 0) >= 2, results


def test_forked_workers_share_the_budget_the_parent_mapped(capped: Emulator) -> None:
    # As a DataLoader forks its workers: the parent has read the bucket (its
    # process holds the node's table mapped, the key's slot claimed, and the
    # lock's file open), then forks. A child that kept the parent's open
    # file would share its flock, and the workers' changes to the state
    # would race; each reopens it.
    key = gate_key(capped.endpoint, BUCKET, False)
    parent = shared_rate(key)
    before = asyncio.run(_read_all(capped.endpoint, ["o0"], _config()))
    assert before["failures"] == [] and parent.shared
    # The node's table outlives processes: this key's slot may be an earlier
    # emulator's on the same port (its epoch counted on).
    with parent.locked() as state:
        epoch = state.epoch
    capped.profile = EmulatorProfile(qps_limit=200)
    results = _four_processes(capped, _process, method="fork")
    attempts = sum(r["attempts"] for r in results)
    throttled = sum(r["throttled"] for r in results)
    assert throttled <= _THROTTLED_MOST * attempts, results
    assert sum(1 for r in results if r["waited"] > 0) >= 2, results
    # One budget: the node switched pacing on once (not once a worker), and
    # the parent's own mapping sees it. Not every worker need have been
    # paced: on a loaded machine a worker may read its 150 before the others
    # run, or its pacing end after a quiet spell (its rate then leaves
    # stats.rates); two at least were (the waits above).
    assert sum(1 for r in results if f"{BUCKET} read" in r["rates"] or r["waited"] > 0) >= 2, \
        results
    with parent.locked() as state:
        assert state.throttled and state.epoch == epoch + 1, state


def _default_process(endpoint: str, names: list[str], barrier: Any, conn: Any) -> None:
    barrier.wait()
    # max_concurrency at its default (128): all of a process's reads at once.
    conn.send(asyncio.run(_read_all(endpoint, names, ClientConfig(rate_doubling=60.0))))


def test_the_first_wave_of_processes_new_to_a_bucket_is_bounded(capped: Emulator) -> None:
    # 4 processes meet a cap of 100 requests/s (a burst of 100) on a key
    # their node has never read. Each used to send max_concurrency (128)
    # at once: 512 into a burst of 100, 400 or more refused before the
    # first 429 came back. A slow start sends 8 each, 1.25 times more per
    # round trip: what is in flight when the burst runs out is the shared
    # first wave (8 + 4 + 2.7 + 2) plus a quarter of the burst (measured:
    # 20-60 throttled in all). Counts bound it (see _THROTTLED_MOST): a
    # slower machine only sends slower, and is refused less.
    capped.profile = EmulatorProfile(qps_limit=100)
    results = _four_processes(capped, _default_process)
    throttled = sum(r["throttled"] for r in results)
    assert throttled <= 150, (throttled, results)


async def test_the_rate_follows_a_cap_that_falls_then_one_that_rises(capped: Emulator) -> None:
    # Phases end on counts of reads answered, which the cap makes last at
    # least so long: a slow machine only lengthens them.
    doubling = 60.0
    label = f"{BUCKET} read"
    key = gate_key(capped.endpoint, BUCKET, False)
    async with AsyncClient(_config(), endpoint=capped.endpoint) as client:
        stats = client.transport.stats
        samples: list[tuple[float, float]] = []

        async def sample() -> None:
            while True:
                if label in stats.rates:
                    samples.append((time.monotonic(), stats.rates[label]))
                await asyncio.sleep(0.02)

        async def reads(n: int) -> None:
            got = await asyncio.gather(*(client.read(BUCKET, f"o{i % 600}") for i in range(n)))
            assert got == [PAYLOAD] * n

        sampler = asyncio.create_task(sample())
        try:
            capped.profile = EmulatorProfile(qps_limit=200)
            await reads(600)
            assert label in stats.rates  # paced
            capped.profile = EmulatorProfile(qps_limit=80)
            fell = time.monotonic()
            await reads(400)  # at least 4 s of it after its burst
            # Followed down: well under the old cap (with a cap's burst saved
            # up under it, the rate grows past it for a few seconds before a
            # cut: to 1.25-1.5 times it at this test's pace), and what is
            # throttled is the odd overshoot's, not a storm (at 200/s, 60%).
            # Judged at the lowest: a process short of CPU sends under the
            # cap, unthrottled, while the rate recovers from its last cut.
            throttled, requests = stats.throttled, stats.requests
            await reads(320)
            tail = (stats.throttled - throttled) / (stats.requests - requests)
            assert tail <= 0.2, (tail, stats)
            lowest = min(r for t, r in samples if t > fell)
            assert lowest <= 0.65 * 200, (lowest, stats.rates)
            with shared_rate(key).locked() as state:
                # Where it may go from here, unthrottled: back to what a cut
                # recovers towards, then up at the documented pace.
                highest = max(state.rate, recovery_target(state))
                since = state.refilled_at
            capped.profile = EmulatorProfile(qps_limit=400)
            await reads(800)
        finally:
            sampler.cancel()
    after = [(t, r) for t, r in samples if t > since]
    # Followed up: at least at the documented pace (a doubling per 60 s
    # above 1,000/s, and as fast in requests/s below it), and faster once
    # no throttle came for a few seconds (a probe). The phase lasts as
    # long as this machine takes for its 800 reads: the pace's bound stops
    # at 0.6 of the cap of 400 (a rate that met it is cut to 70% of what
    # it was served), so a slow machine's longer phase cannot ask more.
    end, rate_at_end = after[-1]
    assert rate_at_end >= max(1.5 * 80, min(0.6 * 400, 0.8 * grown(
        highest, end - since, doubling))), (highest, end - since, rate_at_end)


async def test_writers_each_throttled_a_little_switch_the_node_on() -> None:
    # A write cap with its burst spent, met by 8 writers (a node's
    # processes: clients of their own, each its own meter, one shared slot
    # per key), each writing one object at a time. Each is refused in turn
    # and sends again after a short backoff: none alone sees the third of
    # its requests refused that the old rule needed before it paced (it
    # took about 7 refusals in a row in one of them: some 50 in all). The
    # node counts them together: pacing is on at its PACING_SWITCH_DEBT-th
    # throttle, and the others then in flight (one a writer, at most).
    writers = 8
    bucket = unique_bucket("owed")  # a slot of its own in the node's table
    with running_emulator(EmulatorProfile(qps_limit=1)) as emu:
        emu.create_bucket(bucket)
        config = ClientConfig(max_concurrency=1, retry=RetryPolicy(initial_delay=0.001))
        clients = [AsyncClient(config, endpoint=emu.endpoint) for _ in range(writers)]
        shared = SharedRate(gate_key(emu.endpoint, bucket, True))

        async def write(k: int, client: AsyncClient) -> None:
            for i in range(1000):
                await client.write(bucket, f"w{k}-{i}", PAYLOAD)

        tasks = [asyncio.ensure_future(write(k, c)) for k, c in enumerate(clients)]
        try:
            while not shared.paced:
                await asyncio.sleep(0)  # every turn: nothing answered goes uncounted
            before = sum(c.transport.stats.throttled for c in clients)
            with shared.locked() as state:
                ok = state.owed_ok
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for client in clients:
                await client.aclose()
    # A success between the throttles (one token a second) pays back 0.4.
    assert before <= PACING_SWITCH_DEBT + writers + ok, (before, ok)


def _throttle_answer(retry_after: str | None) -> bytes:
    body = json.dumps({"error": {"code": 429, "message": "The rate of requests is too high",
                                 "errors": [{"reason": "rateLimitExceeded"}]}}).encode()
    extra = f"Retry-After: {retry_after}\r\n" if retry_after is not None else ""
    return (f"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


_HELLO = b"HTTP/1.1 200 OK\r\nx-goog-generation: 7\r\nContent-Length: 5\r\n\r\nhello"


async def test_retry_after_is_honoured_and_throttles_are_no_failed_attempts() -> None:
    arrivals: list[float] = []
    answers = [_throttle_answer("1"), _throttle_answer(None), _HELLO]

    def script(conn: int, index: int) -> bytes:
        arrivals.append(time.monotonic())
        return answers[min(len(arrivals) - 1, 2)]

    # One attempt allowed: the two throttles do not count against it.
    config = ClientConfig(retry=RetryPolicy(max_attempts=1))
    async with RawServer(script) as base, AsyncClient(config, endpoint=base) as client:
        assert await client.read("bkt", "o") == b"hello"
        assert client.transport.stats.throttled == 2
    assert len(arrivals) == 3
    assert arrivals[1] - arrivals[0] >= 0.99  # Retry-After: 1, waited in full


async def test_with_the_controller_off_a_throttle_is_a_failed_attempt() -> None:
    config = ClientConfig(request_rate="off", retry=RetryPolicy(max_attempts=1))
    async with RawServer(lambda conn, index: _throttle_answer(None)) as base, \
            AsyncClient(config, endpoint=base) as client:
        with pytest.raises(RateLimited):
            await client.read("bkt", "o")
        assert client.transport.stats.requests == 1


async def test_a_service_throttling_forever_fails_after_the_deadline() -> None:
    config = ClientConfig(throttle_deadline=1.0, retry=RetryPolicy(initial_delay=0.01))
    async with RawServer(lambda conn, index: _throttle_answer(None)) as base, \
            AsyncClient(config, endpoint=base) as client:
        with pytest.raises(RateLimited) as caught:
            await client.read("bkt", "o")
        attempts = client.transport.stats.requests
    message = str(caught.value)
    assert "gs://bkt/o" in message and "HTTP 429" in message, message
    assert "throttle_deadline=1 s" in message and "no request of this client succeeded" \
        in message, message
    # Paced down to a request a second once throttled: no tight loop. By
    # counts: the 8 throttles the node owes before pacing, then paced at
    # half their rate over the meter's least span (8 in 0.25 s: 16/s) for
    # the probe's first quarter-second window (4), which finds nothing
    # served (1/s from there, a second at most); a slow machine makes
    # fewer. The least: a second of the deadline at 10 ms backoffs.
    assert 3 <= attempts <= 15, attempts


def _hog(endpoint: str, conn: Any) -> None:
    async def run() -> None:
        config = _config(request_rate=20.0)
        async with AsyncClient(config, endpoint=endpoint) as client:
            tasks = [asyncio.ensure_future(client.read(BUCKET, f"o{i}")) for i in range(100)]
            stats = client.transport.stats
            while stats.budget_wait < 5:  # reservations up to MAX_RESERVED_SECONDS ahead
                await asyncio.sleep(0.01)
            conn.send("holding")
            await asyncio.gather(*tasks)

    asyncio.run(run())


def test_a_killed_process_leaves_at_most_its_reservations_ahead(capped: Emulator) -> None:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    hog = context.Process(target=_hog, args=(capped.endpoint, theirs))
    hog.start()
    assert ours.poll(60) and ours.recv() == "holding"
    assert hog.pid is not None
    os.kill(hog.pid, signal.SIGKILL)
    hog.join(30)
    assert hog.exitcode == -signal.SIGKILL
    shared = SharedRate(gate_key(capped.endpoint, BUCKET, False))
    with shared.locked() as state:
        # What the dead process held: at most MAX_RESERVED_SECONDS at the rate.
        assert state.throttled and state.rate == 20.0
        assert state.tokens >= -state.rate * MAX_RESERVED_SECONDS - 1
    # The others go on: all their reads at the configured rate.
    result = asyncio.run(_read_all(capped.endpoint, [f"o{i}" for i in range(40)],
                                   _config(request_rate=20.0)))
    assert result["failures"] == [] and result["wrong"] == 0
    assert result["throttled"] == 0 and result["rates"] == {f"{BUCKET} read": 20.0}


async def test_s3_slowdown_drives_the_controller(capped: Emulator) -> None:
    # The emulator's S3 face answers its cap with S3's 503 SlowDown.
    capped.profile = EmulatorProfile(qps_limit=100)
    async with S3Store(_config(), endpoint=capped.s3_endpoint, region="us-east-1",
                       addressing="path") as store:
        got = await asyncio.gather(*(store.read(BUCKET, f"o{i}") for i in range(300)))
        stats = store.stats
    assert got == [PAYLOAD] * 300
    assert stats.throttled > 0 and stats.failures == 0
    assert stats.throttled <= 0.15 * stats.requests, (stats.throttled, stats.requests)
    assert stats.budget_wait > 0 and f"{BUCKET} read" in stats.rates


async def test_a_200_carrying_slowdown_is_a_throttle() -> None:
    # S3 answers CompleteMultipartUpload and CopyObject 200 and may put a
    # SlowDown <Error> in the body; the handler that reads it raises, and
    # that is a throttle like a 503's: outside max_attempts, counted.
    body = (b"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>SlowDown</Code>"
            b"<Message>Please reduce your request rate.</Message></Error>")
    slow = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    done = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    answers = iter([slow, slow, done])
    op = Op("copy", "bkt", "o", "s3")

    async def handler(resp: Any) -> bytes:
        data: bytes = await resp.read()
        if data.startswith(b"<?xml"):
            raise_if_error(ET.fromstring(data), op)
        return data

    config = ClientConfig(retry=RetryPolicy(max_attempts=1))
    async with RawServer(lambda conn, index: next(answers)) as base:
        transport = Transport(config, AnonymousAuth(), endpoint=base)
        try:
            assert await transport.request(op, "PUT", f"{base}/bkt/o", handler) == b"ok"
        finally:
            await transport.aclose()
    assert transport.stats.throttled == 2 and transport.stats.requests == 3


def _flaky(share: float, seed: int, first: list[bytes] | None = None) -> Any:
    """A script answering 429 to a seeded ``share`` of requests (after the
    answers of ``first``, in order), hello to the others: a flaky service,
    not a capped one, whatever the rate."""
    import random
    rng = random.Random(seed)
    queued = list(first or [])

    def script(conn: int, index: int) -> bytes:
        if queued:
            return queued.pop(0)
        return _throttle_answer(None) if rng.random() < share else _HELLO
    return script


async def test_a_flaky_service_does_not_switch_pacing_on() -> None:
    # 10% of requests refused at random: each retry's backoff is enough, and
    # pacing (which the old controller switched on within a few hundred
    # requests, then cut to a crawl) would only cost time.
    config = ClientConfig(max_concurrency=8, retry=RetryPolicy(initial_delay=0.001))
    async with RawServer(_flaky(0.1, seed=11)) as base, \
            AsyncClient(config, endpoint=base) as client:
        got = await asyncio.gather(*(client.read("bkt", f"o{i}") for i in range(1500)))
        assert got == [b"hello"] * 1500
        stats = client.transport.stats
        assert stats.throttled >= 100
        assert stats.rates == {} and stats.budget_wait == 0.0, (stats.rates, stats.budget_wait)


async def test_s3_throttling_a_head_without_a_body_is_a_throttle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # S3 answers a HEAD it throttles "503 Slow Down" with no body (a HEAD
    # has none) to carry the SlowDown code: stat and exists must drive the
    # controller as reads do, outside max_attempts.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    slow = b"HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n"
    found = (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e\"\r\n"
             b"Last-Modified: Wed, 25 Nov 2026 10:00:00 GMT\r\n\r\n")
    answers = iter([slow, slow, found])
    config = ClientConfig(retry=RetryPolicy(max_attempts=1, initial_delay=0.001))
    async with RawServer(lambda conn, index: next(answers)) as base, \
            S3Store(config, endpoint=base, region="us-east-1", addressing="path") as store:
        info = await store.stat("bkt", "o")
        assert info.size == 5
        assert store.stats.throttled == 2 and store.stats.requests == 3
