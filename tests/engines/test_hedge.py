"""The hedge delay estimator, the budget and the race between two reads
(no server: reads are coroutines that sleep; the emulator tests are in
tests/engines/test_hedged_reads.py)."""

from __future__ import annotations

import asyncio

import pytest

from aioflux import NotFound
from aioflux._engines.hedge import (
    AUTO_FLOOR,
    AUTO_MIN_SAMPLES,
    HEDGE_BURST,
    HedgeBudget,
    Hedger,
    check_hedge,
)


def test_budget_never_exceeds_its_ratio_and_saves_up_a_burst() -> None:
    budget = HedgeBudget(0.05)
    granted = 0
    for reads in range(1, 1001):
        budget.earn()
        if budget.take():
            granted += 1
        assert granted <= 0.05 * reads + 1e-9
    assert granted == 50
    calm = HedgeBudget(0.05)
    for _ in range(10_000):
        calm.earn()
    burst = 0
    while calm.take():
        burst += 1
    assert burst == HEDGE_BURST  # not 500: a store slowing down as a whole
    assert not HedgeBudget(0.0).take()


def test_delay_fixed_none_and_auto() -> None:
    assert Hedger(None).delay() is None
    assert Hedger(0.2).delay() == 0.2
    auto = Hedger("auto")
    for _ in range(AUTO_MIN_SAMPLES - 1):
        auto.stats.latency.record(0.030)
    assert auto.delay() is None  # too few samples to trust a p95
    auto.stats.latency.record(0.030)
    delay = auto.delay()
    assert delay is not None and 0.030 <= delay <= 0.030 * 1.2  # one bucket wide
    # One slow read in 100 does not move the p95; six do.
    for _ in range(79):
        auto.stats.latency.record(0.030)
    auto.stats.latency.record(2.0)
    assert auto.delay() == delay
    for _ in range(6):
        auto.stats.latency.record(2.0)
    assert auto.delay() is not None and auto.delay() >= 2.0  # type: ignore[operator]
    fast = Hedger("auto")
    for _ in range(AUTO_MIN_SAMPLES):
        fast.stats.latency.record(0.0001)
    assert fast.delay() == AUTO_FLOOR


def test_check_hedge() -> None:
    check_hedge("X", "auto", 0.05)
    check_hedge("X", None, 0.0)
    check_hedge("X", 1, 1)
    for after in (0, -1.0, float("inf"), "never", False):
        with pytest.raises(ValueError, match=r"X\.hedge_after"):
            check_hedge("X", after, 0.05)
    for budget in (-0.01, 1.01, "5%", None):
        with pytest.raises(ValueError, match=r"X\.hedge_budget"):
            check_hedge("X", None, budget)


def _reads(*plan: tuple[float, object]) -> tuple[list[str], object]:
    """A read factory answering per ``plan`` (delay, result or exception);
    returns the log of what each call did and the factory."""
    log: list[str] = []
    calls = iter(plan)

    async def read() -> object:
        n = len([e for e in log if e.startswith("start")])
        delay, outcome = next(calls)
        log.append(f"start {n}")
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            log.append(f"cancelled {n}")
            raise
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return log, read


async def test_the_duplicate_wins_and_the_first_is_cancelled_before_return() -> None:
    hedger = Hedger(0.02, budget=1.0)
    log, read = _reads((5.0, "slow"), (0.0, "fast"))
    assert await hedger.run(read) == "fast"  # type: ignore[arg-type]
    assert log == ["start 0", "start 1", "cancelled 0"]
    stats = hedger.stats
    assert (stats.reads, stats.sent, stats.won, stats.latency.count) == (1, 1, 1, 1)


async def test_the_first_wins_when_it_answers_before_the_duplicate() -> None:
    hedger = Hedger(0.02, budget=1.0)
    log, read = _reads((0.05, "first"), (5.0, "second"))
    assert await hedger.run(read) == "first"  # type: ignore[arg-type]
    assert log == ["start 0", "start 1", "cancelled 1"]
    assert (hedger.stats.sent, hedger.stats.won) == (1, 0)


async def test_a_failed_read_leaves_the_other_to_answer() -> None:
    hedger = Hedger(0.02, budget=1.0)
    _, read = _reads((0.05, NotFound("read gs://b/o failed")), (0.1, "second"))
    assert await hedger.run(read) == "second"  # type: ignore[arg-type]
    _, read = _reads((0.05, NotFound("read gs://b/o: first")),
                     (0.0, NotFound("read gs://b/o: second")))
    with pytest.raises(NotFound, match="first"):  # both failed: the first read's error
        await hedger.run(read)  # type: ignore[arg-type]


async def test_cancelling_the_caller_cancels_both_reads() -> None:
    hedger = Hedger(0.01, budget=1.0)
    log, read = _reads((5.0, "a"), (5.0, "b"))
    task = asyncio.ensure_future(hedger.run(read))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(log) == ["cancelled 0", "cancelled 1", "start 0", "start 1"]


async def test_no_budget_no_duplicate() -> None:
    hedger = Hedger(0.01, budget=0.0)
    log, read = _reads((0.05, "only"))
    assert await hedger.run(read) == "only"  # type: ignore[arg-type]
    assert log == ["start 0"] and hedger.stats.denied == 1 and hedger.stats.sent == 0



async def test_a_denied_read_asks_again_as_tokens_are_earned() -> None:
    hedger = Hedger(0.02, budget=0.5)
    log, read = _reads((5.0, "stuck"), (0.0, "duplicate"))
    stuck = asyncio.ensure_future(hedger.run(read))  # type: ignore[arg-type]
    await asyncio.sleep(0.03)  # past the delay with half a token: denied
    assert hedger.stats.denied == 1 and hedger.stats.sent == 0
    # Another read earns the other half; the stuck one asks again at 2x.
    other_log, other = _reads((0.0, "other"))
    assert await hedger.run(other) == "other"  # type: ignore[arg-type]
    assert await asyncio.wait_for(stuck, 1.0) == "duplicate"
    assert (hedger.stats.sent, hedger.stats.won, hedger.stats.denied) == (1, 1, 1)
    assert log == ["start 0", "start 1", "cancelled 0"] and other_log == ["start 0"]


async def test_auto_hedges_a_read_started_before_its_estimate() -> None:
    hedger = Hedger("auto", budget=1.0)
    for _ in range(AUTO_MIN_SAMPLES - 1):
        hedger.stats.latency.record(0.001)
    log, read = _reads((5.0, "stuck"), (0.0, "duplicate"))
    stuck = asyncio.ensure_future(hedger.run(read))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    assert hedger.stats.sent == 0  # no estimate yet: no duplicate
    hedger.stats.latency.record(0.001)  # another read completes: now there is one
    assert await asyncio.wait_for(stuck, 1.0) == "duplicate"
    assert log == ["start 0", "start 1", "cancelled 0"]


async def test_first_gets_leave_the_duplicates_their_share_of_permits() -> None:
    assert Hedger(0.5, max_concurrency=128).first_permits == 121  # 5% of 128 kept
    assert Hedger(0.5, budget=1.0, max_concurrency=8).first_permits == 4  # at most half
    assert Hedger(0.5, max_concurrency=1).first_permits == 1
    # A delay no 20 ms read reaches, however the machine stalls: a duplicate
    # takes no permit of the first gets', and would count here.
    hedger = Hedger(60.0, max_concurrency=20)
    running = peak = 0

    async def read() -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return 1

    assert sum(await asyncio.gather(*(hedger.run(read) for _ in range(40)))) == 40
    assert peak == 19
