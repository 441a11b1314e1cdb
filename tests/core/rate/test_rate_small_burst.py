"""A node's processes against a token bucket that holds little burst (issue
59): the real gates (:class:`aioflux._net.throttle.Gate`, the slow start,
the shared state, the controller) on an event loop whose clock is virtual.

Each simulated process streams its own objects as ``AsyncClient.stream``
does: many requests at once, each through its gate, a throttled one
retried after the transport's backoff (uniform up to 0.1 s). The bucket
answers a success after a few milliseconds and a refusal at once, as the
tests' capping proxy in front of an emulator does. No clock is read: the
loop's time moves to its next timer, so the figures are counts, the same
on any machine."""

from __future__ import annotations

import asyncio
import random
import selectors
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from aioflux._core.metrics import RequestStats
from aioflux._core.rate.shared_table import SharedRate, Table
from aioflux._core.settings.config import ClientConfig
from aioflux._net import throttle as gates
from aioflux._net.throttle import Gate

KEY = "http://sim|b|read"
CAP = 200.0
#: a process's requests in flight (a stream's)
STREAM = 64
#: seconds a success takes; a refusal takes REFUSED
SERVED, REFUSED = 0.004, 0.001


class _Clockwork(selectors.SelectSelector):
    """A selector that never waits: the time it would have slept passes."""

    def __init__(self, now: float) -> None:
        super().__init__()
        self.now = now

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        assert timeout is not None, "every task waits for another: nothing would move"
        self.now += max(0.0, timeout)
        return super().select(0)


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, now: float) -> None:
        self._clockwork = _Clockwork(now)
        super().__init__(self._clockwork)

    def time(self) -> float:
        return self._clockwork.now


@dataclass
class _Bucket:
    """The service's cap: ``CAP`` a second, holding ``burst`` seconds of it."""

    burst: float
    clock: object
    tokens: float = 0.0
    at: float | None = None
    requests: int = 0
    throttled: int = 0
    first_throttle: float | None = None
    served: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tokens = max(1.0, CAP * self.burst)

    def admit(self, now: float) -> bool:
        if self.at is not None:
            self.tokens = min(max(1.0, CAP * self.burst), self.tokens + (now - self.at) * CAP)
        self.at = now
        self.requests += 1
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            self.served.append(now)
            return True
        return self.refuse(now)

    def refuse(self, now: float) -> bool:
        self.throttled += 1
        if self.first_throttle is None:
            self.first_throttle = now
        return False


class _Flaky(_Bucket):
    """A flaky service, not a capped one: the answers of ``first`` in order
    (True served), then a seeded ``share`` of requests refused at random,
    whatever the rate."""

    def __init__(self, share: float, seed: int, first: list[bool]) -> None:
        super().__init__(burst=1.0, clock=None)
        self.share = share
        self.rng = random.Random(seed)
        self.first = list(first)

    def admit(self, now: float) -> bool:
        self.requests += 1
        ok = self.first.pop(0) if self.first else self.rng.random() >= self.share
        if ok:
            self.served.append(now)
            return True
        return self.refuse(now)


async def through_gate(gate: Gate, bucket: _Bucket, loop: _VirtualLoop,
                       took: Callable[[bool], float]) -> bool:
    """One attempt through ``gate`` at ``bucket``, as the transport makes it:
    paced, it waits for its token; else for a place in the slow-start
    window. Its answer comes ``took(served)`` seconds after it was sent.

    Returns:
        Whether the bucket served it.
    """
    window = None
    if gate.shared.paced:
        await gate.admit()
    else:
        window = gate.window
        if window is not None:
            await window.__aenter__()
    try:
        sent = loop.time()
        ok = bucket.admit(sent)
        await asyncio.sleep(took(ok))
        if ok:
            gate.succeeded(loop.time(), sent)
        else:
            gate.throttled(None, sent)
        return ok
    finally:
        if window is not None:
            await window.__aexit__()


@dataclass
class _Run:
    goodput: float  # admitted a second over the whole run, over the cap
    throttled: float  # share of the requests refused
    third_second: float  # admitted from 2 to 3 s after the first refusal, over the cap
    first_wave: float  # attempts the processes could have in flight at first
    slowest_fastest: float  # the slowest process's time over the fastest's
    paced: list[float]  # the first process's paced rate after each of its answers


def _node(monkeypatch: pytest.MonkeyPatch, tmp_path: object, procs: int, per: int,
          burst: float, seed: int = 1, service: _Bucket | None = None,
          config: ClientConfig | None = None) -> _Run:
    """``procs`` processes reading ``per`` objects each through the bucket
    (or through ``service``)."""
    # Below the real clock: the shared table takes a later time for another boot's.
    loop = _VirtualLoop(time.monotonic() - 300.0)
    rng = random.Random(seed)
    monkeypatch.setattr(gates, "time", SimpleNamespace(monotonic=loop.time,
                                                       perf_counter=loop.time))
    monkeypatch.setattr(gates, "random", rng)
    table = Table(str(tmp_path))
    bucket = service or _Bucket(burst, loop.time)
    paced: list[float] = []
    spans: list[tuple[float, float]] = []
    windows: list[float] = []

    async def process() -> None:
        stats = RequestStats()
        gate = Gate(KEY, "b read", config or ClientConfig(), stats, SharedRate(KEY, table))
        first = not windows
        assert gate.window is not None
        windows.append(gate.window.limit)
        left = [per]
        begin = loop.time()

        async def attempt() -> bool:
            ok = await through_gate(gate, bucket, loop,
                                    lambda ok: SERVED * rng.uniform(0.5, 1.5) if ok else REFUSED)
            if first and "b read" in stats.rates:
                paced.append(stats.rates["b read"])
            return ok

        async def reader() -> None:
            while left[0] > 0:
                left[0] -= 1
                while not await attempt():
                    await asyncio.sleep(rng.uniform(0.0, 0.1))  # the retry's backoff

        await asyncio.gather(*(reader() for _ in range(STREAM)))
        spans.append((begin, loop.time()))

    async def node() -> None:
        await asyncio.gather(*(process() for _ in range(procs)))

    try:
        loop.run_until_complete(node())
    finally:
        loop.close()
    wall = max(end for _, end in spans) - min(begin for begin, _ in spans)
    assert bucket.first_throttle is not None
    third = [t for t in bucket.served
             if bucket.first_throttle + 2.0 <= t < bucket.first_throttle + 3.0]
    return _Run(goodput=(bucket.requests - bucket.throttled) / wall / CAP,
                throttled=bucket.throttled / bucket.requests,
                third_second=len(third) / CAP, first_wave=sum(windows),
                slowest_fastest=max(end - begin for begin, end in spans)
                / min(end - begin for begin, end in spans), paced=paced)


@pytest.mark.parametrize(("procs", "per", "burst", "most_throttled"), [
    (4, 400, 0.05, 0.05), (4, 400, 0.1, 0.05), (4, 400, 1.0, 0.05),
    (16, 100, 0.05, 0.10), (16, 100, 0.1, 0.05)])
def test_a_job_of_8_s_at_the_cap_is_served_the_cap_whatever_the_burst(
        monkeypatch: pytest.MonkeyPatch, tmp_path: object, procs: int, per: int, burst: float,
        most_throttled: float) -> None:
    # 4 x 400 objects through 200/s holding 0.1 s of tokens: 0.22-0.35 of
    # the cap at first, 0.58-0.6 after the last fix. The first throttle
    # came before any success: the rate measured before pacing was next to
    # nothing, the start a few requests a second, the probe's windows
    # (half a second, judged against the rate at their end) too slow to
    # climb out of it in a job of seconds.
    run = _node(monkeypatch, tmp_path, procs, per, burst)
    assert run.goodput >= 0.9, run
    assert run.throttled <= most_throttled, run
    # Within 3 s of the first throttle, the node is served the cap.
    assert run.third_second >= 0.85, run


def test_processes_starting_together_share_the_first_wave(
        monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    # 16 processes each sent FIRST_WINDOW at once: 128 requests into a
    # bucket of 20 tokens, 108 refused before any answer came back (6.75%
    # of a job of 16 x 100). The k-th shares it: FIRST_WINDOW / k.
    run = _node(monkeypatch, tmp_path, 16, 100, 0.1)
    # 8 x (1 + 1/2 + ... + 1/8), and at least one each after: 29.7.
    assert run.first_wave <= 30.0
    assert run.throttled <= 0.05, run


@pytest.mark.parametrize("burst", [0.05, 0.1])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_processes_starting_together_finish_a_short_job_together(
        monkeypatch: pytest.MonkeyPatch, tmp_path: object, burst: float, seed: int) -> None:
    # 16 x 100 objects (~8 s at the cap). Through a bucket holding a second
    # of tokens, the first process's first window was 8, the 16th's 1, and
    # each grew by its successes: the first took most of the burst and
    # finished in 1.5-2.1 times less time than the last. At their first
    # success they all have the same share of the first wave. Paced, the
    # process asking as a place in the queue of tokens freed took it: one
    # took twice the others' share in the first seconds (1.3-1.7 at 0.05
    # and 0.1 s of tokens). Each holds its share of the queue at most.
    run = _node(monkeypatch, tmp_path, 16, 100, burst, seed)
    assert run.slowest_fastest <= 1.3, run
    assert run.goodput >= 0.9, run


def test_processes_sharing_a_seconds_burst_finish_a_short_job_together(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A second's burst is served unpaced, where a process whose first
    # answer was a refusal halves its window while the others grow theirs:
    # one seed in eight or so draws a spread near 1.5. The target
    # (1.3) holds for the median, as perf judges its rounds.
    runs = [_node(monkeypatch, tmp_path / str(seed), 16, 100, 1.0, seed) for seed in range(1, 9)]
    spreads = sorted(run.slowest_fastest for run in runs)
    assert statistics.median(spreads) <= 1.3, spreads
    assert spreads[-1] <= 1.6, spreads
    assert min(run.goodput for run in runs) >= 0.9, runs


def test_paced_a_flaky_service_is_not_cut_to_a_crawl(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: object) -> None:
    # Pacing on (a run of 12 refusals after 300 answers, as an overshoot
    # brings), then 10% refused at random: the cuts that do not lower the
    # share are found useless and the rate goes back (the old controller
    # cut it by 30% a window, to a tenth and less). Over 8 seeds the paced
    # rate never falls below 0.4 of where it began, and ends above it in 6;
    # seeds 2 and 6 end at 0.64-0.68 of it, in a cut not yet undone.
    ended_higher = 0
    for seed in range(1, 9):
        service = _Flaky(0.1, seed=seed, first=[True] * 300 + [False] * 12)
        config = ClientConfig(rate_doubling=1200.0)
        run = _node(monkeypatch, tmp_path, 1, 1500, 1.0, service=service, config=config)
        assert service.throttled >= 100, service.throttled
        assert run.paced, "pacing never began"
        begun = run.paced[0]
        assert min(run.paced) >= 0.35 * begun, (seed, begun, min(run.paced))
        assert run.paced[-1] >= 0.5 * begun, (seed, begun, run.paced[-1])
        ended_higher += run.paced[-1] >= begun
    assert ended_higher >= 6, ended_higher
