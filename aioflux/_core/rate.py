"""The request-rate controller's arithmetic: AIMD over a token bucket.

One :class:`RateState` per (endpoint, bucket, kind), ``kind`` being reads
or writes (a bucket limits them apart). It is plain numbers, so the same
functions drive the state every process of a node shares
(:mod:`aioflux._core.rate_shared` keeps it in a small mapped file) and the
virtual-time simulation of the tests. Times are ``time.monotonic()``
seconds: CLOCK_MONOTONIC, one clock for every process of a Linux machine.

- Until the first throttle the state is not ``throttled`` and nothing is
  paced: an unthrottled client sends as fast as it did before.
- Throttles (429, S3 ``SlowDown``, Azure ``ServerBusy``) are counted
  node-wide before pacing (:func:`alarm`, :func:`calm`): each adds one to
  a debt, each success of any process while it is owed pays back
  :data:`SWITCH_CREDIT`. A debt of :data:`SWITCH_COUNT` switches pacing on
  (:func:`start`) at :data:`START_FRACTION` of the rate the processes
  measured just before (each process adds its own share as it sees the
  switch, while the first windows calibrate: :func:`join`). So the few throttles
  each of many processes sees when they together overshoot a cap add up,
  where one process's share of them never looked like more than a flaky
  service; and a service refusing under 29% of requests at random
  pays its debt back faster than it grows (a random walk drifting to
  zero), and is not paced.
- Paced, answers are counted in windows of :data:`DECREASE_WINDOW`: the
  successes (:func:`answered`) and the throttles (:func:`throttle`) that
  came back in it, not the tokens taken (a paced node reserves up to
  :data:`AHEAD` of them at once, which thinned a window's throttled share
  so that the first overshoot was not cut). A window with at least
  :data:`CUT_LEAST` throttles, past :data:`THROTTLE_SHARE` of its answers
  above the share the service refuses whatever the rate (``noise``), cuts
  the rate to :data:`DECREASE` of what the service served of late (the
  successes a second). So the burst of 429s one overshoot brings is one
  cut, and the odd 429 is none. So does a throttled share past
  :data:`STEADY_SHARE` above the noise over the last few windows
  (``steady``): a rate a few percent over a cap, which no one window
  shows; that cut is to :data:`STEADY_DECREASE`. A cut voids the
  reservations made before it: their requests reserve again at the new
  rate as their waits end
  (:mod:`aioflux._net.throttle`), so a cut paces at once what was queued.
- What was served is a moving average over the windows that asked for
  about the rate (:data:`BUSY`: processes short of CPU, or waiting out
  retries, send less, which says nothing of the service). The first
  window after pacing starts (:data:`FIRST_WINDOW`, restarted by the
  answers to requests sent before it) calibrates: served well under the
  rate, the service is at its cap, and the rate and the rate it recovers
  towards go to a little under what it served (:mod:`.rate_windows`). The
  rate measured before the switch held the burst the service had saved
  up (16 DataLoader workers measured 360 writes/s together against a cap
  of 200/s, and paced at 250 until a cut).
- Otherwise the cap is above the start, or unknown: the rate probes
  (:data:`PROBING`), growing by :data:`PROBE_GROWTH` a second while the
  windows ask for it (up to :data:`PROBE_REACH` of the rate measured
  before pacing, fast only back to where the node was; past it by
  :data:`PROBE_EXTEND` a window served in full, as that measure may
  read low),
  until a window asking for it is throttled beyond
  the noise; then it goes to a little under what that window was served
  (:mod:`.rate_windows`). Pacing starts low (half the measured rate) for this:
  16 processes started at 0.7 of a rate measured under a cap, below it,
  and grew at the documented pace, served 0.77-0.89 of the cap a run.
- A cut is judged on the :data:`JUDGE_LEAST` answers after it (after one
  more window, which still sees answers to requests sent before it), the
  rate held meanwhile (:mod:`.rate_windows`). Under a cap, a cut either ends
  the throttles or leaves as much served (what the cap admits): it
  stands, and ``noise`` is 0. If instead the throttles went on while less
  was served, they are not the rate's doing (a flaky service, refusing a
  share of requests at any rate): slowing down only cost time, so the
  rate recovers to where it was (or was heading, if it was recovering
  from an earlier cut) and the share they had is ``noise``
  (halving every :data:`NOISE_HALF_LIFE`, at most :data:`NOISE_MOST`).
  One throttle among those answers proves nothing either way: the
  judgment waits for :data:`JUDGE_HELPED`. Once found, the noise follows
  the throttled share of late (``steady``) up: one judgment's few
  throttles measure it poorly. A
  node cannot tell this from other nodes keeping a shared cap overshot,
  which costs the nodes' shares some evenness.
- After a cut the rate recovers within :data:`RECOVER_SECONDS` to
  :data:`RECOVER_TO` of the rate that served what was served when it cut
  (a rate the service just took). Above that it grows with time: by
  ``floor * ln 2 / doubling`` requests/s per second below ``floor``
  (additive, which makes the controllers of several nodes converge to
  equal shares), then by at most a doubling per ``doubling`` seconds (GCS
  asks for no faster than double every 20 minutes on a real bucket).
- Requests take tokens; one that finds none reserves the next and waits
  for it (the tokens go negative), up to :data:`AHEAD` seconds of them:
  the order of waiting is mostly the order of asking, and a process that
  dies holding reservations leaves at most that much time, which passes
  anyway: there is no lease to expire.
"""

from __future__ import annotations

from .rate_state import (
    AHEAD,
    BURST_SECONDS,
    BUSY,
    CALIBRATE_BELOW,
    CALIBRATE_LEAST,
    CALIBRATING,
    CUT_LEAST,
    DECREASE,
    DECREASE_WINDOW,
    FIRST_WINDOW,
    JOIN_WINDOW,
    JUDGE_HELPED,
    JUDGE_LEAST,
    MIN_RATE,
    NOISE_HALF_LIFE,
    NOISE_MOST,
    PROBE_EXTEND,
    PROBE_GROWTH,
    PROBE_HELD,
    PROBE_REACH,
    PROBING,
    RAMP_FLOOR,
    RECOVER_SECONDS,
    RECOVER_TO,
    SERVED_WEIGHT,
    START_ANCHOR,
    START_FRACTION,
    STEADY_DECREASE,
    STEADY_SHARE,
    STEADY_WEIGHT,
    SWITCH_COUNT,
    SWITCH_CREDIT,
    THROTTLE_SHARE,
    USELESS_FALL,
    RateState,
    grown,
    noise,
    refill,
)
from .rate_windows import judge

__all__ = ["AHEAD", "BURST_SECONDS", "BUSY", "CALIBRATE_BELOW", "CALIBRATE_LEAST",
           "CALIBRATING", "CUT_LEAST", "DECREASE", "DECREASE_WINDOW", "FIRST_WINDOW",
           "JOIN_WINDOW", "JUDGE_HELPED", "JUDGE_LEAST", "MIN_RATE", "NOISE_HALF_LIFE",
           "NOISE_MOST", "PROBE_EXTEND",
           "PROBE_GROWTH", "PROBE_HELD", "PROBE_REACH", "PROBING", "RAMP_FLOOR",
           "RECOVER_SECONDS", "RECOVER_TO", "SERVED_WEIGHT", "START_ANCHOR", "START_FRACTION",
           "STEADY_DECREASE", "STEADY_SHARE", "STEADY_WEIGHT", "SWITCH_COUNT", "SWITCH_CREDIT",
           "THROTTLE_SHARE", "USELESS_FALL", "RateState", "alarm", "answered", "calm", "grown",
           "join", "noise", "pace_at", "relax", "reserve", "start", "throttle"]


def reserve(state: RateState, now: float, doubling: float,
            ceiling: float | None = None) -> tuple[bool, float]:
    """Take a token for one request, reserving it when there is none, unless
    :data:`AHEAD` seconds of tokens are reserved already.

    The bound is what a process killed while holding reservations costs
    the others: the time it had reserved, at most :data:`AHEAD`.

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
    if state.tokens - 1.0 < -state.rate * AHEAD:
        return False, max(hold, (-state.rate * AHEAD - state.tokens + 1.0) / state.rate)
    state.tokens -= 1.0
    wait = 0.0 if state.tokens >= 0 else -state.tokens / state.rate
    return True, max(wait, hold)


def start(state: RateState, now: float, measured: float, retry_after: float | None = None,
          ceiling: float | None = None) -> None:
    """Switch pacing on after throttles, at a fraction of the measured rate.

    Args:
        state: the key's controller, not paced.
        now: monotonic time.
        measured: this process's successful requests/s just before.
        retry_after: seconds the server asked to wait, if it did.
        ceiling: the most requests/s allowed (a configured rate).
    """
    rate = max(MIN_RATE, START_FRACTION * measured)
    state.throttled = True
    # A cap was found: processes starting after it (once pacing stops)
    # begin with a small window again.
    state.opened = False
    state.rate = rate if ceiling is None else min(rate, ceiling)
    # No recovery above the start: what a service admits at first includes
    # the burst it had saved up (a second of its rate, on the emulator),
    # more than it sustains. The probe raises the rate on answers served
    # at it; a first cut found useless (a flaky service) goes back to the
    # whole of the measured rate.
    state.served = START_ANCHOR * measured
    state.anchor = state.rate
    state.peak = measured
    # The first window calibrates, then cuts as any other: the rate paced
    # at first may still be far too high.
    state.judging = CALIBRATING
    state.tokens = 0.0
    state.refilled_at = state.decreased_at = state.started_at = state.window_at = now
    state.ok = state.refused = 0
    state.steady = 0.0
    state.throttle_at = now
    state.debt = 0.0  # paced: the successes are no longer counted against it
    state.epoch += 1
    if retry_after is not None:
        state.resume_at = max(state.resume_at, now + retry_after)


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
        state.resume_at = max(state.resume_at, now + retry_after)
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
    window that calibrates: it restarts the window (which is to count the
    paced requests' answers alone: 16 workers' requests in flight at the
    switch made a cap of 200/s look like 240)."""
    if state.judging != CALIBRATING or sent_at is None or sent_at >= state.started_at:
        return False
    state.window_at, state.ok, state.refused = now, 0, 0
    return True


def alarm(state: RateState, now: float) -> bool:
    """Count a throttle of an unpaced request of any of the node's processes.

    Args:
        state: the key's controller, not paced.
        now: monotonic time.

    Returns:
        Whether the node's debt of throttles reached :data:`SWITCH_COUNT`:
        pacing is to start.
    """
    if state.debt <= 0.0:
        state.owed_at, state.owed_ok = now, 0
    state.debt += 1.0
    return state.debt >= SWITCH_COUNT



def calm(state: RateState) -> None:
    """Count a success of an unpaced request while the node owes throttles.

    Args:
        state: the key's controller, not paced.
    """
    state.owed_ok += 1
    state.debt = max(0.0, state.debt - SWITCH_CREDIT)


def join(state: RateState, now: float, measured: float, ceiling: float | None = None) -> None:
    """Add a process's measured rate to a start another process made.

    Each process measures only its own requests: the node's rate before
    the throttle is the sum of what each adds. Late joiners (after
    :data:`JOIN_WINDOW`) add nothing; those after the windows that
    calibrate add to the measure (``peak``: how far the probe reaches,
    and what a useless cut goes back to), not to the rate (16 DataLoader
    workers joining over 0.6 s lifted it from 200 to 226/s against a cap
    of 200/s once those windows had passed).

    Args:
        state: the key's controller, pacing switched on by another process.
        now: monotonic time.
        measured: this process's requests/s before it saw the switch.
        ceiling: the most requests/s allowed.
    """
    if not state.throttled or now - state.started_at > JOIN_WINDOW:
        return
    state.peak += measured
    if state.judging not in (CALIBRATING, CALIBRATING + 1):
        # The windows that calibrate are over: what they were served is
        # the measure now, and the probe after them raises the rate.
        return
    rate = state.rate + START_FRACTION * measured
    state.rate = rate if ceiling is None else min(rate, ceiling)
    state.served += START_ANCHOR * measured
    state.anchor = state.rate  # no recovery above the start (see start)


def pace_at(state: RateState, now: float, rate: float) -> None:
    """Switch pacing on at a configured rate (before any throttle).

    Args:
        state: the key's controller.
        now: monotonic time.
        rate: requests/s.
    """
    if not state.throttled:
        state.throttled = True
        state.rate = state.served = state.peak = rate
        state.anchor, state.judging = 0.0, 0
        state.tokens = max(1.0, rate * BURST_SECONDS)
        state.refilled_at = state.decreased_at = state.started_at = state.window_at = now
        state.ok = state.refused = 0
        state.debt = 0.0
        state.epoch += 1


def relax(state: RateState, now: float, quiet: float) -> bool:
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
