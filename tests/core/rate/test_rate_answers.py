"""Pacing judged on answers (issue 50): windows count the successes and
throttles that came back, not the tokens reserved; the first window after
pacing starts replaces the guesses it started from; and tokens reserved
before a cut are reserved again at the cut rate.

Counts and given times only: the gates' sleeps are recorded, not slept."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from aioflux._core.metrics import RequestStats
from aioflux._core.rate import controller as rate
from aioflux._core.rate.controller import (
    JUDGING_PROBE,
    RECOVER_SHARE,
    START_RATE_SHARE,
    RateState,
    add_joining_measure,
    answered,
    pace_at,
    reserve,
    start,
    throttle,
)
from aioflux._core.rate.shared_table import SharedRate, Table
from aioflux._core.rate.state import recovery_target
from aioflux._core.settings.config import ClientConfig
from aioflux._net import throttle as gates
from aioflux._net.throttle import Gate

DOUBLING = 1200.0
KEY = "http://x|b|write"


def _answers(state: RateState, since: float, seconds: float, ok: int, refused: int,
             one_window: bool = False) -> float:
    """``ok`` successes and ``refused`` throttles (of requests sent after
    ``since``) coming back evenly over ``seconds``; returns the time after
    (with ``one_window``, stops when the window closes: what comes after
    was sent at the rate it set)."""
    n = ok + refused
    step = seconds / n
    every = n // refused if refused else n + 1
    now = since
    window_at = state.window_at
    for i in range(n):
        if one_window and state.window_at != window_at:
            break
        now += step
        if i % every == 0 and refused:
            refused -= 1
            throttle(state, now, DOUBLING, sent_at=now - 0.001)
        else:
            answered(state, now, DOUBLING)
    return now


def _probing(rate: float, served: float) -> RateState:
    """A state probing at ``rate`` since 1.0, ``served`` its average of late
    (a small burst's start: pacing from the attempts' rate)."""
    state = RateState()
    start(state, 0.0, 16.0, thin=True)
    state.rate = state.window_rate = rate
    state.served, state.window_at = served, 1.0
    state.refilled_at = 1.0
    return state


def test_a_window_is_judged_on_answers_not_tokens_reserved() -> None:
    # 16 DataLoader workers queue 150 requests the moment pacing starts
    # (tokens reserved up to a second ahead). Counted as requests, the
    # window's 15 throttles were a tenth of 165 and cut nothing; of the
    # 100 answers that came back they are 15%.
    state = RateState()
    start(state, 0.0, 330.0)
    state.judging = 0  # past the windows that calibrate
    for _ in range(150):
        reserve(state, 0.001, DOUBLING)
    before = state.rate
    end = _answers(state, 0.0, rate.WINDOW_SECONDS, ok=85, refused=15)
    answered(state, end + 0.01, DOUBLING)  # closes the window
    assert state.rate < before and state.judging
    # The cut voids the 150 reservations: their requests reserve again
    # as their waits end, not behind the whole old queue.
    assert state.tokens == 0.0


def test_the_first_window_replaces_the_guesses_pacing_started_from() -> None:
    # The rate measured before the switch held the burst the cap had saved
    # up: 504/s against a cap of 200/s. Paced at half of it, the first
    # window is served 200/s (what the cap admits) and refused some: the
    # rate and the rate it recovers towards go to a little under that.
    state = RateState()
    start(state, 0.0, 504.0)
    assert state.rate == pytest.approx(START_RATE_SHARE * 504.0)
    seconds = rate.SHORT_WINDOW_SECONDS + 0.001
    end = _answers(state, 0.0, seconds, ok=50, refused=20, one_window=True)
    # Throttled past doubt (20 successes, more than a fifth refused), the
    # window closed before its end: each moment more overshoots.
    assert 0.0 < state.window_at == end < seconds
    assert state.judging == rate.JUDGING_CHECK_CALIBRATED  # the next window checks it
    served = 50 / seconds
    assert state.rate == pytest.approx(RECOVER_SHARE * served, rel=0.1)
    assert state.anchor == pytest.approx(served, rel=0.1)
    later = end + rate.RECOVER_SECONDS + 1.0
    reserve(state, later, DOUBLING)
    assert state.rate < 200.0  # recovered to under the cap, not to 256


def test_answers_to_requests_sent_before_the_start_restart_the_first_window() -> None:
    # The requests in flight at the switch come back in its first tenth of
    # a second: counted, 20 more successes made the cap of 200/s look like
    # 280 (capped at the rate: the guesses stood, and paced at 252 the
    # node overshot the cap until a cut).
    state = RateState()
    start(state, 0.0, 504.0)
    guess = state.rate
    now = 0.0
    for _ in range(20):
        now += 0.005
        answered(state, now, DOUBLING, sent_at=-0.01)
    throttle(state, now, DOUBLING, sent_at=-0.01)
    assert state.window_at == now and state.ok == 0
    seconds = rate.SHORT_WINDOW_SECONDS + 0.001
    _answers(state, now, seconds, ok=50, refused=20, one_window=True)
    assert state.rate == pytest.approx(RECOVER_SHARE * 50 / seconds, rel=0.1)
    assert state.rate < guess


def test_a_start_refused_twice_as_often_as_served_is_shed_on_a_quarter_of_the_successes() -> None:
    # 16 DataLoader workers through a cap holding a second of tokens
    # (perf's aioflux-dl-w16, traced): pacing started at 339/s against a
    # cap of 200/s, and 34 paced writes were refused by the time the
    # window had 10 successes, with 59 more in flight at that rate: 6.4%
    # of the job's writes throttled. Refused twice as often as served, the
    # rate is shed on a quarter of the successes the window calibrates on.
    state = RateState()
    start(state, 0.0, 677.0)
    assert state.rate > 1.5 * 200.0
    now, served = 0.0, 0
    while state.decreased_at == state.started_at:  # 200 served a second
        now += 0.005
        answered(state, now, DOUBLING, sent_at=now - 0.002)
        served += 1
        for _ in range(3):
            throttle(state, now, DOUBLING, sent_at=now - 0.001)
    assert served == rate.MIN_WINDOW_SUCCESSES // 4, served
    assert state.rate <= 200.0, state
    assert state.judging == rate.JUDGING_CALIBRATE, state


def test_the_window_after_a_calibration_checks_it() -> None:
    # 16 DataLoader workers' backoff after the first refusals let the cap
    # save up a few tokens, which the window that calibrated spent: it was
    # served 217/s from a cap of 200/s, and paced at 206/s the node was
    # refused 3% of its writes until the job ended. The window after
    # calibrates again, as a cut judged.
    state = RateState()
    start(state, 0.0, 504.0)
    seconds = rate.SHORT_WINDOW_SECONDS + 0.001
    now = _answers(state, 0.0, seconds, ok=56, refused=20, one_window=True)
    assert state.judging == rate.JUDGING_CHECK_CALIBRATED
    calibrated = state.rate
    served = 0.93 * calibrated  # the cap, and 4% refused
    ok = round(served * seconds)
    _answers(state, now, seconds, ok=ok, refused=2)
    assert state.judging == 2, state  # a cut, to be judged
    assert state.rate == pytest.approx(RECOVER_SHARE * served, rel=0.05)
    assert state.peak == calibrated  # where a useless one goes back to


def test_a_start_far_over_the_cap_is_shed_on_half_the_first_windows_successes() -> None:
    # 16 DataLoader workers spent a second's burst in 0.37 s: 257 writes
    # served, measured 692/s, paced at 346/s against a cap of 200/s. The
    # paced throttles came back first and were forgotten at each answer
    # to a request sent before the switch; then the window waited for 20
    # successes at the cap: 56 of 866 writes throttled (perf's
    # aioflux-dl-w16). The throttles stay counted, and as many refused as
    # served by half the successes sheds the rate to what was served.
    state = RateState()
    start(state, 0.0, 692.0)
    assert state.rate > 1.5 * 200.0
    now = 0.0
    # Paced refusals, back fast, among late answers (fewer than twice the
    # successes to come: see the next test).
    for i in range(4):
        now += 0.005
        throttle(state, now, DOUBLING, sent_at=now - 0.004)
        if i % 2:
            answered(state, now, DOUBLING, sent_at=-0.01)
    assert state.refused == 4 and state.ok == 0
    since = now
    served = refused = 0
    # Then the answers of a node sending 346/s through a cap of 200/s:
    # 200 served and 146 refused a second.
    while served < rate.MIN_WINDOW_SUCCESSES // 2:
        now += 0.005
        answered(state, now, DOUBLING, sent_at=now - 0.02)
        served += 1
        if served % 4:
            throttle(state, now, DOUBLING, sent_at=now - 0.004)
            refused += 1
    assert served + refused <= 20  # a tenth of a second of answers
    assert state.rate == pytest.approx(RECOVER_SHARE * served / (now - since), rel=0.1)
    assert state.rate <= 200.0
    assert state.decreased_at == now and state.tokens == 0.0  # reservations void
    # Still calibrating: the windows after it time the cap on a full count.
    assert state.judging == rate.JUDGING_CALIBRATE
    # A worker joining late adds nothing to what was served.
    shed = state.rate
    add_joining_measure(state, now + 0.01, 40.0)
    assert state.rate == shed


def test_a_window_asked_for_less_than_the_rate_does_not_calibrate() -> None:
    # Processes waiting out their retries' backoff ask for less than the
    # rate: served 120/s, a throttle or two (under a cut's share), is no
    # cap (16 processes were held at 150/s a whole run against a cap of
    # 200/s, 4 at 130/s).
    state = RateState()
    start(state, 0.0, 360.0)
    guess, anchor = state.rate, state.anchor
    for refused in (0, 2):  # both windows that calibrate
        _answers(state, state.window_at, rate.SHORT_WINDOW_SECONDS + 0.001, ok=30, refused=refused)
    # Nor does the probe after them find the cap there: it holds, until
    # a window asks for the rate.
    assert state.rate >= guess and state.anchor <= anchor
    assert state.judging == rate.JUDGING_PROBE_HELD
    _answers(state, state.window_at, rate.WINDOW_SECONDS + 0.001, ok=60, refused=3)
    assert state.rate >= guess and state.judging == rate.JUDGING_PROBE_HELD


def test_a_rate_the_first_window_was_served_stands() -> None:
    # A service that served the rate pacing started at took it: the
    # guesses stand (the rate recovers towards 0.75 of what was measured).
    state = RateState()
    start(state, 0.0, 200.0)
    before, anchor = state.rate, state.anchor
    short = rate.SHORT_WINDOW_SECONDS
    end = _answers(state, 0.0, short, ok=int(before * short), refused=0)
    answered(state, end + 0.01, DOUBLING)
    assert state.rate >= before and state.anchor == anchor


def _capped(state: RateState, cap: float, since: float, seconds: float,
            step: float = 0.002) -> tuple[float, int, int]:
    """Requests waiting for tokens (a second of them reserved ahead, as
    many processes keep), sent as the tokens come, each answered at once
    by a token-bucket cap of ``cap``/s that starts empty. Returns the time
    after, the successes and the throttles."""
    now, owed, bucket, ok, refused = since, 0.0, 0.0, 0, 0
    while now < since + seconds:
        now += step
        bucket = min(cap * 0.05, bucket + cap * step)
        owed += state.rate * step
        while owed >= 1.0:  # one request per token of the paced rate
            owed -= 1.0
            reserve(state, now, DOUBLING)
            state.tokens = min(state.tokens, -state.rate)  # a second reserved ahead
            if bucket >= 1.0:
                bucket -= 1.0
                ok += 1
                answered(state, now, DOUBLING, sent_at=now)
            else:
                refused += 1
                throttle(state, now, DOUBLING, sent_at=now)
    return now, ok, refused


def test_a_start_below_the_cap_probes_up_to_it() -> None:
    # 16 processes measured 240/s together and paced at 70% of it, a cap
    # of 200/s above: the rate grew 0.6 requests/s a second and the node
    # was served 0.7-0.88 of the cap for a whole run. The windows that
    # calibrate are served the rate (no cap found), so the probe raises it
    # (fast: no cap is known) while the rate is asked for, until a window
    # is throttled: the rate goes to a little under what it was served.
    state = RateState()
    start(state, 0.0, 240.0)
    assert state.rate == pytest.approx(START_RATE_SHARE * 240.0)
    now, _, refused = _capped(state, 200.0, 0.0, 1.5)
    assert state.judging not in (JUDGING_PROBE, rate.JUDGING_PROBE_HELD), state  # the cap found
    assert 0.85 * 200.0 <= state.rate <= 200.0
    # The probe's last step over the cap, and the window after its find,
    # which the cap's saved-up burst had lifted.
    assert refused <= 0.06 * 200.0 * 1.5
    # Then served near the cap, a few throttles at most (a rate a little
    # over it is cut by the throttled share of late, ``steady``).
    # It probes again after REPROBE_QUIET_SECONDS without a throttle (a cap may
    # have been lifted), which costs a few throttles each time.
    now, ok, more = _capped(state, 200.0, now, 20.0)
    assert ok >= 0.85 * 200.0 * 20.0 and more <= 0.04 * (ok + more), (ok, more, state)


def test_a_cut_recovers_towards_what_its_window_was_served() -> None:
    # A probe that drained a burst the cap had saved up was served 330/s
    # against a cap of 200/s; the average of late still held it at the
    # cut, and the rate recovered to 280/s, to overshoot again.
    state = RateState()
    start(state, 0.0, 400.0)
    state.judging, state.served, state.rate = 0, 330.0, 340.0
    end = _answers(state, 0.0, rate.WINDOW_SECONDS, ok=100, refused=70)
    answered(state, end + 0.01, DOUBLING)  # closes the window: a cut
    assert state.judging == 2
    assert state.anchor == pytest.approx(101 / (end + 0.01), rel=0.02)  # ~200/s, not 330


def test_a_probe_held_low_by_a_low_measure_reaches_the_cap() -> None:
    # Throttles answered at once, successes after the server's time: 16
    # processes measured 32/s in all against a cap of 100/s, and their
    # probe stopped at 40/s for the rest of the run (0.64 of the cap).
    state = RateState()
    start(state, 0.0, 32.0)
    now, _, _ = _capped(state, 100.0, 0.0, 5.0)
    _, ok, refused = _capped(state, 100.0, now, 10.0)
    assert ok >= 0.9 * 100 * 10 and refused <= 0.05 * (ok + refused), (ok, refused)


def test_a_probe_past_the_cap_that_could_not_send_its_rate_finds_the_cap() -> None:
    # 4 processes on a loaded machine (load ~10 on 2 cores) probing at
    # 460/s against 200/s: their answers came in clumps, short of the rate,
    # and the window that crossed the cap (20 served, 4 refused in 82 ms)
    # was not "busy". It was cut as a steady window is, to 0.7 of the
    # average of late (111/s, lagging the probe): 78/s, 0.3-0.4 of the cap
    # from 2 to 3 s after the first throttle, and a job of 8 s at 0.62.
    state = _probing(rate=460.0, served=111.0)
    assert state.judging == JUDGING_PROBE
    end = _answers(state, 1.0, 0.082, ok=20, refused=4)
    assert state.judging == rate.JUDGING_CHECK_FIND, state  # a find, checked by the next window
    assert state.rate >= RECOVER_SHARE * 20 / (end - 1.0) * 0.95, state


def test_a_check_sent_in_clumps_steps_down_and_checks_again() -> None:
    # 16 processes on a loaded machine: the probe found 237/s against a
    # 200/s cap, and the window that checks it sent in clumps (40 answers
    # in a quarter second, 6 refused). Calibrated to what it was served,
    # 136/s (what the node sent, not the cap), the rate stayed there until
    # it had been quiet for REPROBE_QUIET_SECONDS: the node was served
    # 0.65-0.75 of the cap in the third second after the first throttle.
    state = _probing(rate=460.0, served=111.0)
    end = _answers(state, 1.0, 0.1, ok=25, refused=5)
    assert state.judging == rate.JUDGING_CHECK_FIND, state
    found = state.rate
    end = _answers(state, end, 0.25, ok=34, refused=6)
    assert state.judging == rate.JUDGING_CHECK_FIND, state
    assert rate.STEADY_CUT_TO * found * 0.99 <= state.rate < found, (found, state)
    # Sent at the rate this time: what it was served is the cap.
    _answers(state, end, 0.25, ok=50, refused=4)
    assert state.judging == rate.JUDGING_CHECK_CALIBRATED, state
    assert 0.9 * 200.0 <= state.rate <= 200.0, state


def test_the_window_after_a_finds_check_checks_it_too() -> None:
    # 16 processes through a bucket holding 0.1 s of tokens (perf's
    # aioflux-p16-burst0.1, one round in three): the probe found 279/s
    # against a cap of 200/s, and the check of the find, a sixth of a
    # second, spent the tokens the bucket had saved: 39 served and 10
    # refused, 250/s. Paced at 238/s, the node was refused 15% until a
    # steady window cut it to 0.7 of the cap: 0.74 of the cap two to three
    # seconds after the first throttle. The window after the check
    # calibrates again, as a cut judged.
    state = _probing(rate=396.0, served=163.0)
    end = _answers(state, 1.0, 0.079, ok=22, refused=4)
    assert state.judging == rate.JUDGING_CHECK_FIND, state
    end = _answers(state, end, 0.156, ok=39, refused=10, one_window=True)
    assert state.judging == rate.JUDGING_CHECK_CALIBRATED, state
    over = state.rate
    assert over > 1.1 * 200.0, state
    seconds = rate.SHORT_WINDOW_SECONDS + 0.001
    _answers(state, end, seconds, ok=round(200.0 * seconds), refused=9, one_window=True)
    assert state.judging == 2, state  # a cut, to be judged
    assert state.rate == pytest.approx(RECOVER_SHARE * 200.0, rel=0.05), state
    assert state.peak == over  # where a useless one goes back to


def test_a_check_served_all_it_asked_yet_refused_is_calibrated_on_its_share() -> None:
    # 16 processes through a bucket holding 0.1 s of tokens: the probe
    # found 276/s against a cap of 200/s, and the check of the find was
    # served 291/s (its answers held the bucket's saved tokens and requests
    # sent at the probe's 416/s), with 8 of 38 refused. Taken as served in
    # full, the find stood, the throttles cut it to 0.7 of 276/s, and the
    # recovery went back towards 276/s, past the cap, to a second cut to
    # 0.7 of the cap. What it was served of what it asked measures the cap.
    state = _probing(rate=416.0, served=158.0)
    end = _answers(state, 1.0, 0.076, ok=22, refused=4)
    assert state.judging == rate.JUDGING_CHECK_FIND, state
    found = state.rate
    assert found > 1.2 * 200.0, state
    _answers(state, end, 0.103, ok=30, refused=8, one_window=True)
    assert state.judging == rate.JUDGING_CHECK_CALIBRATED, state  # no cut: a measure
    assert state.rate == pytest.approx(RECOVER_SHARE * found * 30 / 38, rel=0.05), state
    assert state.anchor <= found * 30 / 38 * 1.05, state


def test_a_rate_a_little_over_a_cap_is_cut() -> None:
    # 3% over the cap: no window holds a tenth of throttles, and the rate
    # sat there for a whole run. The share of late does.
    state = RateState()
    pace_at(state, 0.0, 206.0)
    now, _, _ = _capped(state, 200.0, 0.0, 3.0)
    assert state.decreased_at > 0.0 and state.rate < 200.0, state
    now, ok, more = _capped(state, 200.0, now, 10.0)
    assert more <= 0.03 * (ok + more), (ok, more, state)


def test_a_flaky_service_is_measured_by_its_share_of_late() -> None:
    # One judgment found the service flaky on 2 throttles in 67 answers
    # (3%) while it refused 10% at random: the share of late then passed
    # that noise and cut, window after window, from 150 to 17/s. The share
    # of late measures the noise once a service is found flaky.
    state = RateState()
    pace_at(state, 0.0, 200.0)
    state.judging, state.served, state.anchor = 0, 180.0, 180.0
    state.noise, state.noise_at = 0.03, 0.0
    now = 0.0
    for _ in range(20):
        now = _answers(state, now, rate.WINDOW_SECONDS, ok=90, refused=10)
    answered(state, now + 0.01, DOUBLING)
    assert state.decreased_at == 0.0, state  # never cut
    assert 0.08 <= rate.noise(state, now) <= 0.12, state
    assert state.rate >= 200.0


def test_one_throttle_after_a_cut_is_no_proof_that_it_helped() -> None:
    # A service refusing 10% at random shows one throttle in 34 answers
    # once in eight: judged then, the cut "helped", the noise was dropped,
    # and the rate stayed cut. One throttle waits for JUDGE_ANSWERS_ONE_THROTTLE answers.
    state = RateState()
    pace_at(state, 0.0, 150.0)
    state.judging, state.served, state.anchor = 0, 135.0, 135.0
    now = _answers(state, 0.0, rate.WINDOW_SECONDS, ok=60, refused=12)
    answered(state, now + 0.001, DOUBLING)  # closes the window: a cut
    assert state.judging == 2
    cut, peak = state.rate, state.peak
    now = _answers(state, now + 0.001, rate.WINDOW_SECONDS, ok=36, refused=4)  # sent before it
    now = _answers(state, now, rate.WINDOW_SECONDS, ok=33, refused=1)
    answered(state, now + 0.001, DOUBLING)
    assert state.judging == 1 and state.rate == cut  # still judging, the rate held
    now = _answers(state, now + 0.001, rate.WINDOW_SECONDS, ok=31, refused=4)
    answered(state, now + 0.1, DOUBLING)
    # Throttled alike at the lower rate: useless, the noise learnt, the
    # rate recovering to where it was.
    assert state.judging == 0 and rate.noise(state, now) > 0.05, state
    assert state.anchor == pytest.approx(peak * (1 - state.noise) / RECOVER_SHARE)


def test_a_useless_cut_goes_back_to_where_the_rate_was_heading() -> None:
    # A flaky service (10% refused at random): a first cut found useless
    # sends the rate back towards 300/s. On the way, at 90/s, a random run
    # of throttles cuts again, and that cut is found useless too. It went
    # back to 90/s (the rate when it cut), and the paced rate ended at
    # 100/s where it had started at 150/s; it goes back towards 300/s.
    state = RateState()
    pace_at(state, 0.0, 300.0)
    state.judging, state.served, state.noise = 0, 70.0, 0.03
    state.anchor = 300.0 * (1 - state.noise) / RECOVER_SHARE
    heading = recovery_target(state)
    assert heading == pytest.approx(300.0)
    state.rate, state.decreased_at = 90.0, -1.0  # recovering, a second after the first cut
    now = _answers(state, 0.0, rate.WINDOW_SECONDS, ok=33, refused=7)
    answered(state, now + 0.001, DOUBLING)
    assert state.judging == 2 and state.rate < 90.0  # cut
    for _ in range(3):  # one still answering requests sent before the cut
        now = _answers(state, now + 0.001, rate.WINDOW_SECONDS, ok=22, refused=1)
    answered(state, now + 0.1, DOUBLING)
    assert state.judging == 0 and rate.noise(state, now) > 0.03, state  # useless
    assert recovery_target(state) == pytest.approx(heading, rel=0.02), state


def test_the_probe_grows_only_while_the_rate_is_asked_for() -> None:
    # Processes short of CPU sent 270/s while the probe took the rate to
    # 320/s, and then all at once. A window that asked for less than
    # BUSY_SHARE of the rate holds the probe, and is not what the service serves.
    state = RateState()
    start(state, 0.0, 140.0)  # paced at 70/s
    now = _answers(state, 0.0, 0.3, ok=21, refused=0)
    now = _answers(state, now, 0.3, ok=21, refused=0)
    assert state.judging == JUDGING_PROBE
    served = state.served
    now = _answers(state, now, 0.55, ok=20, refused=0)  # 36/s asked of 70/s
    reserve(state, now, DOUBLING)
    held = state.rate
    now = _answers(state, now, 0.55, ok=20, refused=0)
    reserve(state, now, DOUBLING)
    assert state.judging == rate.JUDGING_PROBE_HELD and state.served == served
    assert state.rate == pytest.approx(held, rel=0.01)
    now = _answers(state, now, 0.55, ok=int(0.55 * state.rate) + 1, refused=0)
    reserve(state, now, DOUBLING)
    before = state.rate
    now = _answers(state, now, 1.0, ok=int(before * 1.1), refused=0)
    reserve(state, now, DOUBLING)
    assert state.rate > before


def test_processes_joining_after_the_windows_that_calibrate_leave_the_rate() -> None:
    # 16 DataLoader workers saw the switch over a second and more; the
    # late ones' measured shares lifted the rate from 200 to 226/s against
    # a cap of 200/s after the windows that calibrate had passed, and 14
    # throttles followed. Those windows measured the rate; the probe, not
    # the late shares, raises it.
    state = RateState()
    start(state, 0.0, 200.0)
    add_joining_measure(state, 0.1, 60.0)  # while the first window calibrates
    assert state.rate == pytest.approx(START_RATE_SHARE * 260.0)
    _answers(state, 0.1, 0.3, ok=50, refused=0)
    _answers(state, 0.4, 0.3, ok=50, refused=0)
    assert state.judging == JUDGING_PROBE
    rate_before = state.rate
    add_joining_measure(state, 0.8, 60.0)
    assert state.rate == rate_before


def _gate(table: Table, ceiling: float | None = None) -> Gate:
    config = ClientConfig(max_concurrency=4, request_rate=ceiling or "adaptive")
    return Gate(KEY, "b write", config, RequestStats(), SharedRate(KEY, table))


def _sleeps(monkeypatch: pytest.MonkeyPatch, then: list[object]) -> list[float]:
    """Replace the gates' sleep: record each wait, and run the next of
    ``then`` (a callable, or None) after it."""
    slept: list[float] = []
    real = asyncio.sleep

    async def sleep(wait: float) -> None:
        slept.append(wait)
        action = then.pop(0) if then else None
        if callable(action):
            action()
        await real(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return slept


def _frozen(monkeypatch: pytest.MonkeyPatch) -> float:
    """Stop the gates' monotonic clock (no refill, no window closing) at
    now: the shared table takes times up to now as this boot's."""
    now = time.monotonic()
    monkeypatch.setattr(gates, "time", SimpleNamespace(monotonic=lambda: now,
                                                       perf_counter=time.perf_counter))
    return now


async def test_a_token_reserved_before_a_cut_is_reserved_again_at_the_cut_rate(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # 50 tokens reserved at 250/s: the last waits 0.2 s. A cut to 125/s
    # while it waits voids the reservations: it reserves again at the cut
    # rate when its wait ends (the queue at the old rate went on
    # overshooting the cap for up to MAX_RESERVED_SECONDS), in the order the requests
    # wake, not behind the whole of the old queue (which stalled the node
    # for a second after every cut).
    table = Table(str(tmp_path))
    gate = _gate(table)
    shared = gate.shared
    now = _frozen(monkeypatch)
    with shared.locked() as state:
        rate.pace_at(state, now, 250.0)
        state.tokens = -49.0
        gate._epoch = state.epoch

    def cut() -> None:
        with shared.locked() as state:
            state.rate /= 2
            state.tokens = 0.0  # as a cut leaves them
            state.throttle_at = now  # the throttles that made it
            state.decreased_at = now - 1e-6  # another time than the one reserved at

    slept = _sleeps(monkeypatch, [cut])
    await gate.admit()
    assert len(slept) == 2
    assert slept[0] == pytest.approx(50 / 250.0)
    assert slept[1] == pytest.approx(1 / 125.0)  # first of the new queue, at the cut rate
    with shared.locked() as state:
        assert state.tokens == pytest.approx(-1.0)  # one token taken, the void one not counted


async def test_one_request_of_a_process_asks_while_the_queue_is_full(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # A second of tokens reserved ahead: the queue is full. Every waiting
    # request asking again as each place freed (5 ms at 200/s) took the
    # shared lock 450,000 times for 6,500 requests of 16 processes, most
    # of two cores. One request of the process asks, every _ASK_EVERY or
    # so; the others wait their turn without touching the shared state.
    table = Table(str(tmp_path))
    gate = _gate(table)
    shared = gate.shared
    now = _frozen(monkeypatch)  # no refill: the queue stays full
    with shared.locked() as state:
        rate.pace_at(state, now, 100.0)
        state.tokens = -100.0
        state.throttle_at = now
        gate._epoch = state.epoch
    calls: list[float] = []
    real_reserve = gates.reserve

    def counted(*args: object, **kwargs: object) -> tuple[bool, float]:
        calls.append(1.0)
        return real_reserve(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gates, "reserve", counted)
    real_sleep = asyncio.sleep
    slept = _sleeps(monkeypatch, [])
    tasks = [asyncio.ensure_future(gate.admit()) for _ in range(20)]
    for _ in range(10):
        await real_sleep(0)
    asked = len(calls)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert 1 <= asked <= 11, asked  # one asker, not twenty
    assert slept and min(slept) >= 0.5 * gates._ASK_EVERY
