"""The request-rate controller's arithmetic (AIMD over a token bucket), its
state shared through a mapped file, and a virtual-time simulation of several
controllers against one cap. No clock is read: every time is given."""

from __future__ import annotations

import math
import multiprocessing
import os
import random
from collections.abc import Callable

import pytest

from aioflux._core.errors import InvalidArgument
from aioflux._core.rate import controller as rate
from aioflux._core.rate.controller import (
    ADDITIVE_BELOW_RATE,
    CUT_TO,
    MIN_RATE,
    START_RATE_SHARE,
    RateState,
    add_joining_measure,
    answered,
    grown,
    pace_at,
    reserve,
    start,
    stop_pacing_after_quiet,
    throttle,
)
from aioflux._core.rate.shared_table import PROBES, SLOT, SLOTS, SharedRate, Table
from aioflux._core.settings.config import ClientConfig

DOUBLING = 10.0
# The simulated cap's burst, in seconds of it (GCS and S3 absorb short
# bursts; their exact allowance is not published).
BURST = 0.25


def test_growth_is_additive_below_the_floor_then_doubles_per_period() -> None:
    slope = ADDITIVE_BELOW_RATE * math.log(2) / DOUBLING
    assert grown(100.0, 1.0, DOUBLING) == pytest.approx(100.0 + slope)
    assert grown(100.0, 2.0, DOUBLING) - grown(100.0, 1.0, DOUBLING) == pytest.approx(slope)
    # Above the floor a period doubles it, and never more.
    assert grown(2000.0, DOUBLING, DOUBLING) == pytest.approx(4000.0)
    floor = ADDITIVE_BELOW_RATE
    assert grown(floor, DOUBLING / 2, DOUBLING) == pytest.approx(floor * 2 ** 0.5)
    # Continuous across the floor: growing in two steps is growing once.
    across = (ADDITIVE_BELOW_RATE - 100.0) / slope + 3.0
    assert grown(grown(100.0, across - 3.0, DOUBLING), 3.0, DOUBLING) == pytest.approx(
        grown(100.0, across, DOUBLING))
    assert grown(100.0, 0.0, DOUBLING) == 100.0


def test_gcs_pace_by_default() -> None:
    # GCS: at most double every 20 minutes, above the rates a bucket starts at.
    assert grown(5000.0, 1200.0, 1200.0) == pytest.approx(10_000.0)
    assert grown(5000.0, 600.0, 1200.0) < 10_000.0


def _started(now: float = 100.0, measured: float = 200.0) -> RateState:
    state = RateState()
    start(state, now, measured)
    return state


def test_start_paces_at_a_fraction_of_the_measured_rate() -> None:
    state = _started(measured=200.0)
    assert state.throttled and state.epoch == 1
    assert state.rate == pytest.approx(START_RATE_SHARE * 200.0)
    assert _started(measured=0.0).rate == MIN_RATE  # a tight cap still moves


def test_a_burst_of_throttles_is_one_decrease() -> None:
    state = _started()
    before = state.rate
    now = 100.0
    for _ in range(40):  # the 429s of one overshoot, within the first window
        now += 0.005
        reserve(state, now, DOUBLING)
        throttle(state, now, DOUBLING)
    assert state.rate >= before  # not cut yet: the window is open
    closed = 100.0 + rate.SHORT_WINDOW_SECONDS
    assert throttle(state, closed, DOUBLING)  # the window closes: one cut
    # No success answered: what was served is still the guess pacing
    # started from (START_SERVED_SHARE of the measured 200/s).
    assert state.anchor == pytest.approx(rate.START_SERVED_SHARE * 200.0)
    # CUT_TO of the rate, recovered a little towards that guess meanwhile.
    assert CUT_TO * before <= state.rate < before
    assert state.decreased_at == closed
    for _ in range(40):  # the rest of the burst: judged, not cut again
        now = closed + 0.01
        closed = now
        assert not throttle(state, now, DOUBLING)


def test_the_rate_recovers_to_what_was_served_then_grows_at_the_documented_pace() -> None:
    state = RateState()
    pace_at(state, 0.0, 100.0)
    state.anchor = 100.0  # as a cut leaves it
    state.rate = CUT_TO * 100.0
    slow = 1200.0  # the default doubling: far slower than the recovery
    reserve(state, rate.RECOVER_SECONDS, slow)  # within it: back, and a little more
    assert rate.RECOVER_SHARE * 100.0 <= state.rate <= grown(rate.RECOVER_SHARE * 100.0, 1.0, slow)
    before = state.rate
    reserve(state, rate.RECOVER_SECONDS + 1.0, slow)
    assert state.rate == pytest.approx(grown(before, 1.0, slow))


def test_the_odd_throttle_does_not_cut() -> None:
    state = _started()
    now = 100.0
    for i in range(1, 101):
        now += 0.006
        reserve(state, now, DOUBLING)
        if i % 20 == 0:  # 5% of requests, as a service answers whatever the rate
            throttle(state, now, DOUBLING)
        else:
            answered(state, now, DOUBLING)
    assert state.decreased_at == 100.0
    assert state.rate > START_RATE_SHARE * 200.0


def test_rate_never_below_the_least() -> None:
    state = _started(measured=20.0)
    now = 100.0
    for _ in range(400):  # a service refusing everything; growth held back
        now += 0.06
        reserve(state, now, 1e9)
        throttle(state, now, 1e9)
    # Refusing all is not the noise of a flaky service: still paced, at the least.
    assert state.throttled and state.rate == MIN_RATE


def test_tokens_pace_reservations_in_order() -> None:
    state = RateState()
    pace_at(state, 0.0, 10.0)
    ahead = int(10.0 * rate.MAX_RESERVED_SECONDS)  # tokens of MAX_RESERVED_SECONDS at 10/s
    taken = [reserve(state, 0.0, DOUBLING, ceiling=10.0) for _ in range(ahead + 2)]
    # One token saved (a burst of at least one), then one every 0.1 s, up
    # to MAX_RESERVED_SECONDS of them reserved ahead: the next asks again once one frees.
    assert [t for t, _ in taken] == [True] * (ahead + 1) + [False]
    assert [w for _, w in taken[:-1]] == pytest.approx([k / 10 for k in range(ahead + 1)])
    assert taken[-1][1] == pytest.approx((ahead + 1 - 10.0 * rate.MAX_RESERVED_SECONDS) / 10.0)
    # Time pays the reservations back: 2 s later the bucket holds tokens again.
    assert reserve(state, 2.0, DOUBLING, ceiling=10.0) == (True, 0.0)


def test_ceiling_caps_growth() -> None:
    state = RateState()
    pace_at(state, 0.0, 50.0)
    reserve(state, 1000.0, DOUBLING, ceiling=50.0)
    assert state.rate == 50.0


def test_retry_after_holds_every_request() -> None:
    state = _started(now=10.0)
    throttle(state, 10.0, DOUBLING, retry_after=3.0)
    assert reserve(state, 11.0, DOUBLING)[1] == pytest.approx(2.0)


def test_processes_join_the_start_with_their_share() -> None:
    state = _started(now=10.0, measured=100.0)
    add_joining_measure(state, 10.5, 60.0)
    assert state.rate == pytest.approx(START_RATE_SHARE * 160.0)
    # Too late: measured after the cuts.
    add_joining_measure(state, 10.0 + rate.JOIN_SECONDS + 1, 60.0)
    assert state.rate == pytest.approx(START_RATE_SHARE * 160.0)


def test_relax_after_quiet() -> None:
    state = _started(now=10.0)
    assert not stop_pacing_after_quiet(state, 50.0, quiet=60.0)
    state.tokens = 0.0
    assert stop_pacing_after_quiet(state, 71.0, quiet=60.0)
    assert not state.throttled


def _simulate(groups: list[float], cap: float | Callable[[float], float] | None, seconds: float,
              step: float = 0.01, doubling: float = DOUBLING, flaky: float = 0.0,
              states: list[RateState] | None = None) -> list[list[float]]:
    """Groups of processes (one controller each, as separate nodes have)
    send at their paced rate into one token-bucket cap; the requests over
    the cap are refused at random among what was sent, and ``flaky`` of all
    requests are refused whatever the rate. Each group starts paced, after
    throttles, from the rate it was served before (``groups``). Returns each
    group's rate per virtual second; ``states`` receives the controllers."""
    rng = random.Random(5)
    states = [] if states is None else states
    for measured in groups:
        state = RateState()
        start(state, 0.0, measured)
        states.append(state)
    owed = [0.0] * len(groups)
    cap_at = cap if callable(cap) else (lambda _now: cap)
    tokens = 0.0
    history: list[list[float]] = []
    now = 0.0
    for tick in range(int(seconds / step)):
        now = (tick + 1) * step
        limit = cap_at(now)
        if limit is not None:
            tokens = min(limit * BURST, tokens + limit * step)
        sent: list[int] = []
        for i, state in enumerate(states):
            owed[i] += state.rate * step
            n = int(owed[i])
            owed[i] -= n
            for _ in range(n):
                reserve(state, now, doubling)
            sent.extend([i] * n)
        rng.shuffle(sent)
        for i in sent:
            if rng.random() < flaky:
                throttle(states[i], now, doubling)
            elif limit is None or tokens >= 1:
                tokens -= 1
                answered(states[i], now, doubling)
            else:
                throttle(states[i], now, doubling)
        if tick % int(1 / step) == 0:
            history.append([s.rate for s in states])
    return history


def test_separate_controllers_converge_to_a_fair_share() -> None:
    cap = 400.0
    history = _simulate([20.0, 60.0, 250.0, 500.0], cap, seconds=240.0)
    assert len(history) == 240
    first, last = history[0], history[-60:]
    assert max(first) / min(first) > 20
    means = [sum(h[i] for h in last) / len(last) for i in range(4)]
    # Fair: each group's mean rate within 30% of the others' (from 25x
    # apart). A cut that one group finds useless (the others kept the
    # share up) costs some evenness: the price of not mistaking a flaky
    # service for a cap.
    assert max(means) / min(means) < 1.3
    # And together they use the cap without sitting far above it.
    assert 0.85 * cap < sum(means) < 1.2 * cap


def test_the_rates_follow_a_cap_that_falls() -> None:
    # A ramp that adds less per half-second window than a cut takes off
    # (the default's adds 0.3 requests/s: a doubling per 20 minutes).
    history = _simulate([100.0] * 4, lambda now: 400.0 if now < 60 else 200.0, seconds=150.0,
                        doubling=60.0)
    before = [sum(h) for h in history[30:60]]
    after = [sum(h) for h in history[-60:]]
    assert 0.85 * 400 < sum(before) / len(before) < 1.2 * 400
    assert 0.85 * 200 < sum(after) / len(after) < 1.2 * 200


def test_the_rates_find_a_cap_that_rises_within_seconds() -> None:
    # Paced a while below a cap of 200/s, then the cap is 4,000/s: a paced
    # rate asked for more and no longer throttled probes (after
    # REPROBE_QUIET_SECONDS), and the rates find the new cap in seconds, where
    # the additive growth below ADDITIVE_BELOW_RATE took minutes.
    history = _simulate([50.0] * 4, lambda now: 200.0 if now < 40 else 4000.0, seconds=60.0)
    assert max(sum(h) for h in history[20:40]) < 2.5 * 200
    assert max(sum(h) for h in history[40:50]) >= 0.85 * 4000, history[40:50]


def test_a_flaky_service_is_not_taken_for_a_cap() -> None:
    # 10% of requests refused whatever the rate (a flaky service, not a
    # limit): the usual share is learnt within seconds and the rate is not
    # dragged down (the old controller ended near a tenth of it).
    states: list[RateState] = []
    history = _simulate([200.0], None, seconds=60.0, flaky=0.1, states=states, doubling=1200.0)
    (state,) = states
    assert 0.05 < state.noise < 0.2
    late = [r for (r,) in history[10:]]
    assert sum(late) / len(late) > 0.85 * 200.0, history


def test_a_cap_under_a_flaky_service_is_still_followed() -> None:
    states: list[RateState] = []
    history = _simulate([100.0] * 2, 400.0, seconds=60.0, flaky=0.03, states=states)
    means = [sum(h) for h in history[-30:]]
    assert 0.75 * 400 < sum(means) / len(means) < 1.3 * 400


def test_shared_state_is_one_for_two_handles(tmp_path: object) -> None:
    table, again = Table(str(tmp_path)), Table(str(tmp_path))  # two opens: two processes'
    a = SharedRate("http://x|b|read", table)
    b = SharedRate("http://x|b|read", again)
    other = SharedRate("http://x|b|write", table)
    assert table.shared and table.path == again.path
    assert os.path.getsize(table.path or "") == SLOT * SLOTS
    assert not a.paced
    with a.locked() as state:
        start(state, 1.0, 100.0)  # an old time: still in the past
    assert b.paced and not other.paced
    with b.locked() as state:
        assert state.throttled and state.rate == pytest.approx(START_RATE_SHARE * 100.0)
        state.rate = 42.0
    with a.locked() as state:
        assert state.rate == 42.0


def test_the_table_never_grows_and_reuses_the_idlest_slot(tmp_path: object) -> None:
    table = Table(str(tmp_path))
    keys = [f"http://127.0.0.1:{port}|b|read" for port in range(2000)]
    handles = [SharedRate(key, table) for key in keys]  # a test suite's worth of ports
    assert os.path.getsize(table.path or "") == SLOT * SLOTS
    # The latest key still has its slot; an early one lost it, and finds
    # one again (fresh: its state went with the slot) when it is used.
    latest, early = handles[-1], handles[0]
    assert not table.holds(early._slot, early._digest)
    with latest.locked() as state:
        start(state, 1.0, 50.0)
    assert latest.paced
    with early.locked() as state:
        assert not state.throttled
    with latest.locked() as state:
        assert state.throttled  # its own slot was not the idlest
    assert PROBES < SLOTS


def test_times_of_a_previous_boot_are_forgotten(tmp_path: object) -> None:
    a = SharedRate("k", Table(str(tmp_path)))
    with a.locked() as state:
        start(state, 1e12, 100.0)  # the future: CLOCK_MONOTONIC restarted since
    with a.locked() as state:
        assert not state.throttled and state.rate == 0.0


def _child_cuts(shared: SharedRate, conn: object) -> None:
    with shared.locked() as state:
        state.rate = 7.0
    conn.send(shared.table._fd)  # type: ignore[attr-defined]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_fork_child_locks_on_its_own_description(tmp_path: object) -> None:
    shared = SharedRate("forked", Table(str(tmp_path)))
    with shared.locked() as state:
        start(state, 1.0, 10.0)
    parent_fd = shared.table._fd
    context = multiprocessing.get_context("fork")
    parent_end, child_end = context.Pipe()
    child = context.Process(target=_child_cuts, args=(shared, child_end))
    child.start()
    child_fd = parent_end.recv()
    child.join(30)
    assert child.exitcode == 0
    # The child opened its own file description (flock would not exclude
    # the parent's otherwise), and its change is in the one state.
    assert child_fd >= 0 and shared.table._fd == parent_fd
    with shared.locked() as state:
        assert state.rate == 7.0 and state.throttled


@pytest.mark.parametrize("value", ["fast", 0, -5.0, float("inf"), float("nan"), True, [100]])
def test_request_rate_setting_refuses(value: object) -> None:
    with pytest.raises(InvalidArgument, match="request_rate"):
        ClientConfig(request_rate=value)  # type: ignore[arg-type]


def test_request_rate_settings() -> None:
    assert ClientConfig().paces and ClientConfig().rate_ceiling is None
    assert ClientConfig(request_rate=250).rate_ceiling == 250.0
    assert not ClientConfig(request_rate="off").paces
    assert not ClientConfig(request_rate=None).paces
    for name in ("rate_doubling", "throttle_deadline"):
        with pytest.raises(InvalidArgument, match=name):
            ClientConfig(**{name: 0})  # type: ignore[arg-type]
