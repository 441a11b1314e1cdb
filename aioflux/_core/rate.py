"""The request-rate controller's arithmetic: AIMD over a token bucket.

One :class:`RateState` per (endpoint, bucket, kind), ``kind`` being reads
or writes (a bucket limits them apart). It is plain numbers, so the same
functions drive the state every process of a node shares
(:mod:`aioflux._core.rate_shared` keeps it in a small mapped file) and the
virtual-time simulation of the tests. Times are ``time.monotonic()``
seconds: CLOCK_MONOTONIC, one clock for every process of a Linux machine.

- Until the first throttle the state is not ``throttled`` and nothing is
  paced: an unthrottled client sends as fast as it did before.
- Throttles (429, S3 ``SlowDown``, Azure ``ServerBusy``) past
  :data:`THROTTLE_SHARE` of a process's requests switch pacing on
  (:func:`start`) at :data:`START_FRACTION` of the rate the processes
  measured just before (each process adds its own share as it sees the
  switch, within :data:`JOIN_WINDOW`: :func:`join`).
- Paced, requests and throttles are counted in windows of
  :data:`DECREASE_WINDOW`; a window whose throttles passed
  :data:`THROTTLE_SHARE` of its requests cuts the rate by :data:`DECREASE`.
  So the burst of 429s one overshoot brings is one decrease, and the odd
  429 a service answers whatever the rate (a hot shard moving) does not
  drag the rate down.
- Between throttles the rate grows with time: by ``floor * ln 2 / doubling``
  requests/s per second below ``floor`` (additive, which makes the
  controllers of several nodes converge to equal shares), then by at most a
  doubling per ``doubling`` seconds (GCS asks for no faster than double every
  20 minutes on a real bucket).
- Requests take tokens; one that finds none reserves the next and waits
  for it (the tokens go negative), up to :data:`AHEAD` seconds of them:
  the order of waiting is mostly the order of asking, and a process that
  dies holding reservations leaves at most that much time, which passes
  anyway: there is no lease to expire.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["AHEAD", "DECREASE", "DECREASE_WINDOW", "JOIN_WINDOW", "MIN_RATE", "RAMP_FLOOR",
           "START_FRACTION", "THROTTLE_SHARE", "RateState", "grown", "join", "pace_at", "relax",
           "reserve", "start", "throttle"]

#: the rate after a throttled window, as a fraction of the rate before it
DECREASE = 0.7
#: requests and throttles are judged per this many seconds: the 429s of
#: one overshoot arrive together (requests already sent when the first
#: came back)
DECREASE_WINDOW = 0.5
#: throttles past this share of the requests mean the rate is too high
THROTTLE_SHARE = 0.1
#: the paced rate starts at this fraction of the rate measured before it
START_FRACTION = 0.7
#: processes that see pacing switched on within this many seconds add
#: their measured rate to the starting rate
JOIN_WINDOW = 2.0
#: requests/s the controller never goes below (a tight cap still moves)
MIN_RATE = 1.0
#: below this many requests/s the rate grows additively (GCS starts a
#: bucket's writes at 1,000/s; its doubling guidance is for rates above)
RAMP_FLOOR = 1000.0
#: most seconds of tokens reserved ahead, by all processes together
AHEAD = 1.0
#: most tokens saved up, in seconds of the rate: a small burst, so that
#: processes that all wake at once do not overshoot together
BURST_SECONDS = 0.05


@dataclass
class RateState:
    """One key's controller (shared by the node's processes when mapped).

    Attributes:
        throttled: pacing is on (a throttle was seen).
        rate: requests/s allowed.
        tokens: tokens in the bucket (negative: reserved ahead).
        refilled_at: when ``tokens`` and ``rate`` were last brought forward.
        decreased_at: the last decrease (or the switch to pacing).
        throttle_at: the last throttle seen.
        started_at: when pacing was last switched on.
        epoch: how many times pacing was switched on.
        resume_at: no request before this time (a ``Retry-After``).
        window_at: when the current window of counts began.
        sent: requests paced in the window.
        refused: throttles in the window.
    """

    throttled: bool = False
    rate: float = 0.0
    tokens: float = 0.0
    refilled_at: float = 0.0
    decreased_at: float = 0.0
    throttle_at: float = 0.0
    started_at: float = 0.0
    epoch: int = 0
    resume_at: float = 0.0
    window_at: float = 0.0
    sent: int = 0
    refused: int = 0


def grown(rate: float, seconds: float, doubling: float, floor: float = RAMP_FLOOR) -> float:
    """``rate`` after ``seconds`` of growth without a throttle.

    The solution of ``dr/dt = ln 2 / doubling * max(r, floor)``: additive
    below ``floor``, a doubling per ``doubling`` seconds above.

    Args:
        rate: requests/s now.
        seconds: time without a throttle (>= 0).
        doubling: seconds the rate takes to double above ``floor``.
        floor: the rate below which growth is additive.

    Returns:
        The grown rate.
    """
    if seconds <= 0:
        return rate
    if rate < floor:
        slope = floor * math.log(2) / doubling
        to_floor = (floor - rate) / slope
        if seconds <= to_floor:
            return rate + slope * seconds
        rate, seconds = floor, seconds - to_floor
    return float(rate * 2.0 ** min(seconds / doubling, 64.0))


def _refill(state: RateState, now: float, doubling: float, ceiling: float | None) -> None:
    elapsed = now - state.refilled_at
    if elapsed <= 0:
        return
    rate = grown(state.rate, elapsed, doubling)
    if ceiling is not None:
        rate = min(rate, ceiling)
    # The tokens of the interval at its mean rate (exact for the additive
    # part, close enough for the doubling one).
    state.tokens = min(max(1.0, rate * BURST_SECONDS),
                       state.tokens + elapsed * (state.rate + rate) / 2)
    state.rate = rate
    state.refilled_at = now


def _judge(state: RateState, now: float, doubling: float, ceiling: float | None) -> bool:
    """Close the window if it is over; cut the rate if it was throttled."""
    if now - state.window_at < DECREASE_WINDOW:
        return False
    cut = state.refused > THROTTLE_SHARE * state.sent
    state.window_at, state.sent, state.refused = now, 0, 0
    if not cut:
        return False
    _refill(state, now, doubling, ceiling)
    state.rate = max(MIN_RATE, state.rate * DECREASE)
    # Reservations made at the old rate keep their place; the bucket saves
    # nothing up across a cut.
    state.tokens = min(state.tokens, 0.0)
    state.decreased_at = now
    return True


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
    _judge(state, now, doubling, ceiling)
    _refill(state, now, doubling, ceiling)
    hold = state.resume_at - now
    if state.tokens - 1.0 < -state.rate * AHEAD:
        return False, max(hold, (-state.rate * AHEAD - state.tokens + 1.0) / state.rate)
    state.sent += 1
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
    state.rate = rate if ceiling is None else min(rate, ceiling)
    state.tokens = 0.0
    state.refilled_at = state.decreased_at = state.started_at = state.window_at = now
    state.sent = state.refused = 0
    state.throttle_at = now
    state.epoch += 1
    if retry_after is not None:
        state.resume_at = max(state.resume_at, now + retry_after)


def throttle(state: RateState, now: float, doubling: float, retry_after: float | None = None,
             ceiling: float | None = None) -> bool:
    """Count a throttle of a paced request; cut the rate if its window is over
    and was throttled.

    Args:
        state: the key's controller, pacing on.
        now: monotonic time.
        doubling: see :func:`grown`.
        retry_after: seconds the server asked to wait, if it did: no
            request of any process goes before then.
        ceiling: the most requests/s allowed (a configured rate).

    Returns:
        True if the rate was cut.
    """
    state.throttle_at = now
    if retry_after is not None:
        state.resume_at = max(state.resume_at, now + retry_after)
    state.refused += 1
    return _judge(state, now, doubling, ceiling)


def join(state: RateState, now: float, measured: float, ceiling: float | None = None) -> None:
    """Add a process's measured rate to a start another process made.

    Each process measures only its own requests: the node's rate before
    the throttle is the sum of what each adds (late joiners add nothing).

    Args:
        state: the key's controller, pacing switched on by another process.
        now: monotonic time.
        measured: this process's requests/s before it saw the switch.
        ceiling: the most requests/s allowed.
    """
    if not state.throttled or now - state.started_at > JOIN_WINDOW:
        return
    rate = state.rate + START_FRACTION * measured
    state.rate = rate if ceiling is None else min(rate, ceiling)


def pace_at(state: RateState, now: float, rate: float) -> None:
    """Switch pacing on at a configured rate (before any throttle).

    Args:
        state: the key's controller.
        now: monotonic time.
        rate: requests/s.
    """
    if not state.throttled:
        state.throttled = True
        state.rate = rate
        state.tokens = max(1.0, rate * BURST_SECONDS)
        state.refilled_at = state.decreased_at = state.started_at = state.window_at = now
        state.sent = state.refused = 0
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
