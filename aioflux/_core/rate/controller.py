"""The request-rate controller's arithmetic: AIMD over a token bucket.

One :class:`RateState` per (endpoint, bucket, kind), ``kind`` being reads
or writes (a bucket limits them apart). It is plain numbers, so the same
functions drive the state every process of a node shares
(:mod:`aioflux._core.rate.shared_table` keeps it in a small mapped file) and the
virtual-time simulation of the tests. Times are ``time.monotonic()``
seconds: CLOCK_MONOTONIC, one clock for every process of a Linux machine.

- Unthrottled, nothing is paced. Throttles (429, S3 ``SlowDown``, Azure
  ``ServerBusy``) are counted node-wide (:func:`count_unpaced_throttle`,
  :func:`count_unpaced_success`): each adds one to a debt, each success
  pays back :data:`DEBT_PAID_PER_SUCCESS`. A debt of
  :data:`PACING_SWITCH_DEBT` switches pacing on (:func:`start`): a cap
  overshot refuses runs of requests across the processes, where a flaky
  service refusing under 29% at random pays its debt back faster than it
  grows.
- Pacing starts at :data:`START_RATE_SHARE` of the rate the processes
  measured just before (each adds its share, :func:`add_joining_measure`). That measure
  holds whatever burst the service had saved up. The first windows
  (:data:`SHORT_WINDOW_SECONDS`) calibrate: throttled and served well under the
  rate, the rate goes to a little under what was served (at once, on half
  the successes, if as many paced answers were refused as served: a burst
  spent in under a second made the start far too high). What a window
  calibrated on may hold the rest of a burst saved up in the lull around
  the switch: the window after (:data:`JUDGING_CHECK_CALIBRATED`) calibrates
  again if refused past :data:`STEADY_CUT_SHARE`, a step judged as a cut is
  (a flaky service gets its rate back). Served in full,
  the rate probes (:data:`JUDGING_PROBE`) until a window is throttled past
  :data:`PROBE_FOUND_SHARE`, and goes to a little under what that window was
  served; the window after (:data:`JUDGING_CHECK_FIND`) calibrates that find, which
  a burst the service saved up may have lifted (one that could not send
  the rate, throttled, steps it down a tenth and checks again). A measure of fewer than
  :data:`MIN_MEASURE_SUCCESSES` successes of the node (a process's, times
  those that began with it: a small burst, throttled at once) is
  of the attempts, and the probe starts at once. A window of the probe or
  of the calibration throttled past doubt closes before its end.
- Paced, answers are counted in windows of :data:`WINDOW_SECONDS` (not
  the tokens reserved, up to :data:`MAX_RESERVED_SECONDS` of them). A window with
  :data:`MIN_CUT_THROTTLES` throttles or more, past :data:`CUT_SHARE` of its
  answers above the ``noise``, cuts the rate to :data:`CUT_TO` of what
  was served; a throttled share past :data:`STEADY_CUT_SHARE` over the last
  few windows (``steady``) cuts it to :data:`STEADY_CUT_TO`. A cut voids
  the reservations made before it, and the throttles of requests sent
  before it count towards no other.
- A cut is judged on the :data:`JUDGE_ANSWERS` answers after it. Throttles
  that go on while less is served are not the rate's doing (a flaky
  service): the rate goes back and their share is ``noise``, only
  throttles beyond it cut.
- After a cut the rate recovers within :data:`RECOVER_SECONDS` to
  :data:`RECOVER_SHARE` of what was served, then grows by :func:`grown`
  (additive below :data:`ADDITIVE_BELOW_RATE`, a doubling per ``rate_doubling``
  above). A rate asked for and served in full with no throttle for
  :data:`REPROBE_QUIET_SECONDS` probes again, slowly near the rate found before
  and faster away from it (:func:`aioflux._core.rate.state.probe_growth`):
  a cap lifted is found again in seconds.
- A client's first request of a key whose state had no throttle for
  :data:`REPROBE_QUIET_SECONDS` restarts it (:func:`restart`): that state is an
  earlier job's, no measure of the service now.
- Requests take tokens; one that finds none reserves the next and waits
  for it (the tokens go negative), up to :data:`MAX_RESERVED_SECONDS` of them: a
  process that dies holding reservations leaves at most that much time,
  which passes anyway: there is no lease to expire.
"""

from __future__ import annotations

import math

from .state import (
    ADDITIVE_BELOW_RATE,
    AT_CAP_SERVED_SHARE,
    BUSY_SHARE,
    CUT_SHARE,
    CUT_TO,
    DEBT_PAID_PER_SUCCESS,
    JOIN_SECONDS,
    JUDGE_ANSWERS,
    JUDGE_ANSWERS_ONE_THROTTLE,
    JUDGING_CALIBRATE,
    JUDGING_CHECK_CALIBRATED,
    JUDGING_CHECK_FIND,
    JUDGING_PROBE,
    JUDGING_PROBE_HELD,
    MAX_NOISE_SHARE,
    MAX_RATE,
    MAX_RESERVED_SECONDS,
    MAX_RETRY_AFTER_S,
    MAX_SAVED_SECONDS,
    MIN_CUT_THROTTLES,
    MIN_MEASURE_SUCCESSES,
    MIN_RATE,
    MIN_WINDOW_SUCCESSES,
    NOISE_HALF_LIFE,
    PACING_SWITCH_DEBT,
    PROBE_BASE_GROWTH,
    PROBE_FOUND_SHARE,
    PROBE_GROWTH_PER_LOG,
    PROBE_MAX_GROWTH,
    PROBE_MAX_OVER_SERVED,
    PROBE_START_LOG,
    RECOVER_SECONDS,
    RECOVER_SHARE,
    REPROBE_QUIET_SECONDS,
    SERVED_AVERAGE_WEIGHT,
    SHORT_WINDOW_SECONDS,
    START_RATE_SHARE,
    START_SERVED_SHARE,
    STEADY_AVERAGE_WEIGHT,
    STEADY_CUT_SHARE,
    STEADY_CUT_TO,
    USELESS_CUT_SERVED_SHARE,
    WINDOW_SECONDS,
    RateState,
    grown,
    noise,
    refill,
)
from .windows import judge

__all__ = ["ADDITIVE_BELOW_RATE", "AT_CAP_SERVED_SHARE", "BUSY_SHARE", "CUT_SHARE", "CUT_TO",
           "DEBT_PAID_PER_SUCCESS", "JOIN_SECONDS", "JUDGE_ANSWERS", "JUDGE_ANSWERS_ONE_THROTTLE",
           "JUDGING_CALIBRATE", "JUDGING_CHECK_CALIBRATED", "JUDGING_CHECK_FIND", "JUDGING_PROBE",
           "JUDGING_PROBE_HELD",
           "MAX_NOISE_SHARE", "MAX_RATE", "MAX_RESERVED_SECONDS", "MAX_SAVED_SECONDS",
           "MIN_CUT_THROTTLES", "MIN_MEASURE_SUCCESSES", "MIN_RATE", "MIN_WINDOW_SUCCESSES",
           "NOISE_HALF_LIFE", "PACING_SWITCH_DEBT", "PROBE_BASE_GROWTH", "PROBE_FOUND_SHARE",
           "PROBE_GROWTH_PER_LOG", "PROBE_MAX_GROWTH", "PROBE_MAX_OVER_SERVED", "RECOVER_SECONDS",
           "RECOVER_SHARE", "REPROBE_QUIET_SECONDS", "SERVED_AVERAGE_WEIGHT",
           "SHORT_WINDOW_SECONDS", "START_RATE_SHARE", "START_SERVED_SHARE",
           "STEADY_AVERAGE_WEIGHT", "STEADY_CUT_SHARE", "STEADY_CUT_TO", "USELESS_CUT_SERVED_SHARE",
           "WINDOW_SECONDS", "add_joining_measure", "answered", "count_unpaced_success",
           "count_unpaced_throttle", "grown", "noise", "pace_at", "RateState", "reserve", "restart",
           "start", "stop_pacing_after_quiet", "throttle"]


def reserve(state: RateState, now: float, doubling: float,
            ceiling: float | None = None) -> tuple[bool, float]:
    """Take a token for one request, reserving it when there is none, unless
    :data:`MAX_RESERVED_SECONDS` seconds of tokens are reserved already.

    The bound is what a process killed while holding reservations costs
    the others: the time it had reserved, at most :data:`MAX_RESERVED_SECONDS`.

    Args:
        state: the key's controller, pacing on.
        now: monotonic time.
        doubling: see :func:`grown`.
        ceiling: the most requests/s allowed (a configured rate).

    Returns:
        Whether a token was taken, and the seconds to wait: before sending
        if it was, before asking again if not.
    """
    judge(state, now, doubling, ceiling)
    refill(state, now, doubling, ceiling)
    hold = state.resume_at - now
    if state.tokens - 1.0 < -state.rate * MAX_RESERVED_SECONDS:
        most = -state.rate * MAX_RESERVED_SECONDS
        return False, max(hold, (most - state.tokens + 1.0) / state.rate)
    state.tokens -= 1.0
    wait = 0.0 if state.tokens >= 0 else -state.tokens / state.rate
    return True, max(wait, hold)


def start(state: RateState, now: float, measured: float, retry_after: float | None = None,
          ceiling: float | None = None, thin: bool = False) -> None:
    """Switch pacing on after throttles, at a fraction of the measured rate.

    Args:
        state: the key's controller, not paced.
        now: monotonic time.
        measured: this process's successful requests/s just before.
        retry_after: seconds the server asked to wait, if it did.
        ceiling: the most requests/s allowed (a configured rate).
        thin: the measure counted fewer than :data:`MIN_MEASURE_SUCCESSES`
            successes (a small burst, throttled at once): no measure of
            the cap, which the probe looks for at once, from below.
    """
    rate = max(MIN_RATE, START_RATE_SHARE * measured)
    state.throttled = True
    # A cap was found: processes starting after it (once pacing stops)
    # begin with a small window again.
    state.opened = False
    state.reached = 0.0
    state.rate = rate if ceiling is None else min(rate, ceiling)
    # No recovery above the start: what a service admits at first includes
    # the burst it had saved up (a second of its rate, on the emulator),
    # more than it sustains. The probe raises the rate on answers served
    # at it; a first cut found useless (a flaky service) goes back to the
    # whole of the measured rate.
    state.served = START_SERVED_SHARE * measured
    state.anchor = state.rate
    state.peak = measured
    # The first window calibrates, then cuts as any other: the rate paced
    # at first may still be far too high.
    state.judging = JUDGING_CALIBRATE
    if thin:
        _probe_from(state, state.rate)
    state.tokens = 0.0
    state.refilled_at = state.decreased_at = state.started_at = state.window_at = now
    state.window_rate = state.rate
    state.ok = state.refused = 0
    state.steady = 0.0
    state.throttle_at = now
    state.debt = 0.0  # paced: the successes are no longer counted against it
    state.epoch += 1
    if retry_after is not None:
        state.resume_at = max(state.resume_at, now + min(retry_after, MAX_RETRY_AFTER_S))


def throttle(state: RateState, now: float, doubling: float, retry_after: float | None = None,
             ceiling: float | None = None, sent_at: float | None = None) -> bool:
    """Count a throttle of a paced request; cut the rate if its window is over
    and was throttled.

    A request sent before the last cut (or the start of pacing) was sent
    at the rate that cut already answered: its throttle is not counted
    towards another (the burst of 429s an overshoot brings back, 20 ms
    and more after the first, is one cut, as TCP cuts once per window of
    data).

    Args:
        state: the key's controller, pacing on.
        now: monotonic time.
        doubling: see :func:`grown`.
        retry_after: seconds the server asked to wait, if it did: no
            request of any process goes before then.
        ceiling: the most requests/s allowed (a configured rate).
        sent_at: when the throttled request was sent (monotonic), if known.

    Returns:
        True if the rate was cut.
    """
    state.throttle_at = now
    if retry_after is not None:
        state.resume_at = max(state.resume_at, now + min(retry_after, MAX_RETRY_AFTER_S))
    if sent_at is not None and sent_at < state.decreased_at:
        _before_calibrating(state, now, sent_at)
        return False
    state.refused += 1
    return judge(state, now, doubling, ceiling)


def answered(state: RateState, now: float, doubling: float, ceiling: float | None = None,
             sent_at: float | None = None) -> bool:
    """Count a success of a paced request; cut the rate if its window is over
    and was throttled.

    Args:
        state: the key's controller, pacing on.
        now: monotonic time.
        doubling: see :func:`grown`.
        ceiling: the most requests/s allowed (a configured rate).
        sent_at: when the request was sent (monotonic), if known.

    Returns:
        True if the rate was cut.
    """
    if _before_calibrating(state, now, sent_at):
        return False
    state.ok += 1
    return judge(state, now, doubling, ceiling)


def _before_calibrating(state: RateState, now: float, sent_at: float | None) -> bool:
    """An answer to a request sent unpaced, before pacing started, in the
    window that calibrates: it restarts the window's successes, which are
    to count the paced requests' answers alone (those in flight at the
    switch would make a cap look higher than it is). The paced throttles,
    back first, stay counted."""
    if state.judging != JUDGING_CALIBRATE or sent_at is None or sent_at >= state.started_at:
        return False
    state.window_at, state.ok = now, 0
    state.window_rate = state.rate
    return True


def count_unpaced_throttle(state: RateState, now: float, sent_at: float | None = None) -> bool:
    """Count a throttle of an unpaced request of any of the node's processes.

    Args:
        state: the key's controller, not paced.
        now: monotonic time.
        sent_at: when the throttled request was sent (monotonic), if known:
            the first of a debt's says when it began.

    Returns:
        Whether the node's debt of throttles reached :data:`PACING_SWITCH_DEBT`:
        pacing is to start.
    """
    if state.debt <= 0.0:
        state.owed_at, state.owed_ok = now if sent_at is None else sent_at, 0
    state.debt += 1.0
    return state.debt >= PACING_SWITCH_DEBT



def count_unpaced_success(state: RateState, sent_at: float | None = None) -> None:
    """Count a success of an unpaced request while the node owes throttles.

    Args:
        state: the key's controller, not paced.
        sent_at: when the request was sent (monotonic), if known. One sent
            before the debt began pays nothing back: it was served before
            the service began to refuse (a cap's burst spent, the answers
            of a loaded machine's queue), no sign of a service that refuses
            a share at random.
    """
    if sent_at is not None and sent_at < state.owed_at:
        return
    state.owed_ok += 1
    state.debt = max(0.0, state.debt - DEBT_PAID_PER_SUCCESS)


def add_joining_measure(state: RateState, now: float, measured: float,
                        ceiling: float | None = None) -> None:
    """Add a process's measured rate to a start another process made.

    Each process measures only its own requests: the node's rate before
    the throttle is the sum of what each adds. Late joiners (after
    :data:`JOIN_SECONDS`) add nothing; those after the windows that
    calibrate add to the measure (``peak``: what a useless cut goes back
    to), not to the rate, which those windows set from what was served.

    Args:
        state: the key's controller, pacing switched on by another process.
        now: monotonic time.
        measured: this process's requests/s before it saw the switch.
        ceiling: the most requests/s allowed.
    """
    if not state.throttled or now - state.started_at > JOIN_SECONDS:
        return
    state.peak += measured
    # A thin start probes at once: the processes' shares still add up in
    # its first window.
    thin = state.judging == JUDGING_PROBE and now - state.started_at < SHORT_WINDOW_SECONDS
    if (state.judging not in (JUDGING_CALIBRATE, JUDGING_CALIBRATE + 1)
            or state.decreased_at != state.started_at) and not thin:
        # The windows that calibrate are over, or their answers cut the
        # rate: what was served is the measure now, and the probe after
        # them raises the rate.
        return
    rate = state.rate + START_RATE_SHARE * measured
    state.rate = rate if ceiling is None else min(rate, ceiling)
    state.served += START_SERVED_SHARE * measured
    if thin:
        _probe_from(state, state.rate)
    else:
        state.anchor = state.rate  # no recovery above the start (see start)


def _probe_from(state: RateState, rate: float) -> None:
    """Probe from ``rate`` at the fastest growth: no cap is known."""
    state.judging = JUDGING_PROBE
    state.anchor = rate * math.exp(-PROBE_START_LOG) / RECOVER_SHARE


def pace_at(state: RateState, now: float, rate: float, again: bool = False) -> None:
    """Switch pacing on at a configured rate (before any throttle).

    Args:
        state: the key's controller.
        now: monotonic time.
        rate: requests/s.
        again: also if pacing is on (whatever rate it had).
    """
    if again or not state.throttled:
        state.throttled = True
        state.rate = state.served = state.peak = rate
        state.anchor, state.judging = 0.0, 0
        state.tokens = max(1.0, rate * MAX_SAVED_SECONDS)
        state.refilled_at = state.decreased_at = state.started_at = state.window_at = now
        state.window_rate = rate
        state.ok = state.refused = 0
        state.debt = state.steady = 0.0
        state.epoch += 1


def restart(state: RateState, now: float, ceiling: float | None) -> bool:
    """A client's first request of a key: a state not throttled for
    :data:`REPROBE_QUIET_SECONDS` is what an earlier job left, and no measure of
    the service now (TCP restarts its window after idle for the same
    reason). Adaptive, pacing stops and the slow start is back; a
    configured rate paces at that rate again.

    Args:
        state: the key's controller.
        now: monotonic time.
        ceiling: the configured requests/s, if any.

    Returns:
        True if the state was restarted.
    """
    if state.throttled and now - state.throttle_at < REPROBE_QUIET_SECONDS:
        return False  # throttled of late: the service's measure stands
    if ceiling is not None:
        if state.throttled and state.rate == ceiling:
            return False
        pace_at(state, now, ceiling, again=True)
        return True
    if not state.throttled:
        return False
    state.throttled = state.opened = False
    state.reached = 0.0
    return True


def stop_pacing_after_quiet(state: RateState, now: float, quiet: float) -> bool:
    """Switch pacing off after ``quiet`` seconds without a throttle.

    A day-old state (the next job's, on the same bucket) or a cap long
    since lifted would otherwise pace forever at whatever it reached.

    Args:
        state: the key's controller.
        now: monotonic time.
        quiet: seconds without a throttle after which pacing stops.

    Returns:
        True if pacing was switched off.
    """
    if state.throttled and now - state.throttle_at > quiet and state.tokens >= 0:
        state.throttled = False
        return True
    return False
