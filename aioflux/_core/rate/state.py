"""The request-rate controller's numbers: its settings, its state (one
:class:`RateState` per endpoint, bucket and kind), and how the rate grows
with time. :mod:`aioflux._core.rate.controller` tells how they fit together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ADDITIVE_BELOW_RATE", "AT_CAP_SERVED_SHARE", "BUSY_SHARE", "CHECKS", "CUT_SHARE",
           "CUT_TO",
           "DEBT_PAID_PER_SUCCESS", "JOIN_SECONDS", "JUDGE_ANSWERS", "JUDGE_ANSWERS_ONE_THROTTLE",
           "JUDGING_CALIBRATE", "JUDGING_CHECK_CALIBRATED", "JUDGING_CHECK_FIND", "JUDGING_PROBE",
           "JUDGING_PROBE_HELD",
           "MAX_NOISE_SHARE", "MAX_RATE", "MAX_RESERVED_SECONDS", "MAX_RETRY_AFTER_S",
           "MAX_SAVED_SECONDS",
           "MIN_CUT_THROTTLES", "MIN_MEASURE_SUCCESSES", "MIN_RATE", "MIN_WINDOW_SUCCESSES",
           "NOISE_HALF_LIFE", "PACING_SWITCH_DEBT", "PROBE_BASE_GROWTH", "PROBE_FOUND_SHARE",
           "PROBE_GROWTH_PER_LOG", "PROBE_MAX_GROWTH", "PROBE_MAX_OVER_SERVED", "PROBE_START_LOG",
           "RECOVER_SECONDS", "RECOVER_SHARE", "REPROBE_QUIET_SECONDS", "SERVED_AVERAGE_WEIGHT",
           "SHORT_WINDOW_SECONDS", "START_RATE_SHARE", "START_SERVED_SHARE",
           "STEADY_AVERAGE_WEIGHT", "STEADY_CUT_SHARE", "STEADY_CUT_TO", "USELESS_CUT_SERVED_SHARE",
           "WINDOW_SECONDS", "grown", "noise", "probe_growth", "RateState", "recovery_target",
           "refill"]

#: the rate after a throttled window, as a fraction of the rate served of
#: late (or of the rate, if less)
CUT_TO = 0.7
#: a window cuts only with at least this many throttles: one alone is the
#: odd 429, whatever share of a slow window's requests it is
MIN_CUT_THROTTLES = 2
#: after a cut the rate recovers to this fraction of the rate that served
#: what was served when it cut ...
RECOVER_SHARE = 0.95
#: ... within this many seconds
RECOVER_SECONDS = 2.0
#: the weight of a window's served rate in ``served``, a moving average
#: (about the last four windows: two seconds)
SERVED_AVERAGE_WEIGHT = 0.4
#: a cut is judged on at least this many answers after it (after the
#: window that follows it, which still sees answers to requests sent
#: before it)
JUDGE_ANSWERS = 20
#: ... and, with one throttle among them, on this many: one throttle in
#: a few dozen answers is no proof that a cut helped (a service refusing
#: 10% at random gives one in 34 answers a time in ten; one or none in
#: 80, a time in 500). None is judged at JUDGE_ANSWERS: a cut below a cap
#: ends the throttles, and holding every judgment longer holds the nodes
#: that send least longest
JUDGE_ANSWERS_ONE_THROTTLE = 80
#: a window calibrates on at least this many successes (and throttles
#: that would cut)
MIN_WINDOW_SUCCESSES = 20
#: a cut was useless if, throttles going on (MIN_CUT_THROTTLES of them, at most
#: MAX_NOISE_SHARE of the requests), what was served fell below this fraction
#: of what was served before it
USELESS_CUT_SERVED_SHARE = 0.85
#: a share of throttles learnt as noise halves every this many seconds
NOISE_HALF_LIFE = 60.0
#: the most noise believed: a service refusing more whatever the rate is
#: down rather than flaky, and is paced down as a cap is
MAX_NOISE_SHARE = 0.2
#: requests and throttles are judged per this many seconds: the 429s of
#: one overshoot arrive together (requests already sent when the first
#: came back)
WINDOW_SECONDS = 0.5
#: a window that calibrates, throttled as for a cut and served less than
#: this fraction of the rate, was at the service's cap (timing alone moves it a few
#: percent, a flaky service's refusals a few more)
AT_CAP_SERVED_SHARE = 0.85
#: ``judging`` in the first window after pacing starts (the answers to
#: requests sent before it restart it), and JUDGING_CALIBRATE + 1 in the second:
#: what either is served may replace the guesses pacing started from
#: (:func:`_calibrate`). Two: a lull around the switch lets a service's
#: bucket save up again, which the first window spends
JUDGING_CALIBRATE = 3
#: the windows that calibrate are this short: the rate pacing starts at
#: is a guess, from a rate measured with the burst a service had saved
#: up, and may overshoot
SHORT_WINDOW_SECONDS = 0.25
#: ``judging`` while the rate probes for the cap (:data:`PROBE_BASE_GROWTH`):
#: after windows that calibrated nothing (the cap is above the start, or
#: unknown), and after :data:`REPROBE_QUIET_SECONDS` without a throttle. It ends
#: at a window throttled beyond the noise (:func:`_found`)
JUDGING_PROBE = 5
#: ``judging`` while probing after a window that asked for less than
#: BUSY_SHARE of the rate: the rate holds until one asks for it again
JUDGING_PROBE_HELD = 6
#: ``judging`` in the window after the probe found the cap: what it found
#: may hold a burst the service saved up, and this window calibrates as
#: the first ones do
JUDGING_CHECK_FIND = 7
#: ``judging`` in the window after one calibrated (one of the first, or a
#: find's check): what that one was served may hold the rest of a burst the
#: service saved up in a lull, and this window calibrates again if refused
#: past :data:`STEADY_CUT_SHARE`, a step judged as a cut is
JUDGING_CHECK_CALIBRATED = 8
#: the windows that check a rate just set from what was served
CHECKS = (JUDGING_CHECK_FIND, JUDGING_CHECK_CALIBRATED)
#: a window answered at least this share of the rate was sent at it: its
#: throttles say where the cap is. One asked for less says nothing of it
#: (processes waiting out retries, or short of CPU)
BUSY_SHARE = 0.8
#: the probe's growth where it starts from the rate it recovers to (the
#: cap found before), in ln(rate) a second: 10%/s, gentle next to a cap
PROBE_BASE_GROWTH = 0.05
#: ... plus this many times ln(rate / that rate): slow near it, fast away
#: from it (1.1x in 0.55 s, 1.35x in a second, 1.9x in 1.3 s) ...
PROBE_GROWTH_PER_LOG = 0.7
#: ... up to this: a doubling per window of the probe (SHORT_WINDOW_SECONDS); a
#: window throttled past doubt ends early, and the window after a find
#: checks it
PROBE_MAX_GROWTH = math.log(16.0)
#: a probe's window throttled past this share of its answers (beyond the
#: noise) found the cap: the odd few a small burst refuses below a cap,
#: where requests leave a busy machine in clumps, are not it
PROBE_FOUND_SHARE = 0.05
#: the probe's rate is at most this many times what its last window was
#: served: a service that saved up a burst serves past its cap until the
#: burst is spent, and a probe grown meanwhile overshoots by as much
PROBE_MAX_OVER_SERVED = 1.5
#: a rate paced this many seconds without a throttle, asked for and served
#: in full, probes again: a cap lifted (or a state an earlier job left) is
#: found again in seconds (as TCP validates its window after idle)
REPROBE_QUIET_SECONDS = 3.0
#: throttles past this share of the answers mean the rate is too high
CUT_SHARE = 0.1
#: ... and so do throttles past this share of the answers of late
#: (``steady``): a rate a few percent over a cap, where no one window has
#: CUT_SHARE of them (205/s against 200/s is 2.5%)
STEADY_CUT_SHARE = 0.02
#: the rate after a cut for the throttled share of late (``steady``), as
#: a fraction of what was served
STEADY_CUT_TO = 0.9
#: the weight of a window's throttled share in ``steady`` (about the last
#: five windows: a flaky service's share, learnt as noise, passes the
#: noise by STEADY_CUT_SHARE in a window in 50 or so at 100 answers a window)
STEADY_AVERAGE_WEIGHT = 0.2
#: a node's unpaced throttles, less DEBT_PAID_PER_SUCCESS per success in between,
#: that switch pacing on: a cap overshot refuses runs of requests across
#: the node's processes, and this many is a few per process of a
#: DataLoader's workers
PACING_SWITCH_DEBT = 8
#: the throttles one success pays back: a service refusing a share below
#: DEBT_PAID_PER_SUCCESS / (1 + DEBT_PAID_PER_SUCCESS), 29%, at random never owes for
#: long (at 10%, reaching PACING_SWITCH_DEBT is a chance of about 1e-6 per run
#: of throttles)
DEBT_PAID_PER_SUCCESS = 0.4
#: the paced rate starts at this fraction of the rate measured before it:
#: that rate holds the burst the service had saved up. A start below the
#: cap costs the probe a second or two; one above it, a run of throttles
START_RATE_SHARE = 0.5
#: a rate measured before pacing on fewer successes than this is no
#: measure of the cap (a small burst throttled at once): the probe looks
#: for it at once, from below, at its fastest
MIN_MEASURE_SUCCESSES = 20
#: what was served is first guessed at this fraction of the measured rate
#: (``served``, until windows are counted)
START_SERVED_SHARE = 0.8
#: processes that see pacing switched on within this many seconds, while
#: the first windows calibrate, add their measured rate to the starting
#: rate
JOIN_SECONDS = 2.0
#: requests/s the controller never goes below (a tight cap still moves)
MIN_RATE = 1.0
#: requests/s a probe that meets no throttle stops at
MAX_RATE = 1e7
#: below this many requests/s the rate grows additively (GCS starts a
#: bucket's writes at 1,000/s; its doubling guidance is for rates above)
ADDITIVE_BELOW_RATE = 1000.0
#: most seconds of tokens reserved ahead, by all processes together: the
#: requests a rate sends go out this long after it is set, so a probe's
#: windows see its growth this late
MAX_RESERVED_SECONDS = 0.25
#: most seconds a ``Retry-After`` holds every process's requests of a key
#: (the default ``ClientConfig.throttle_deadline``): the state outlives
#: the process that heard it, and holds every later job of the machine too
MAX_RETRY_AFTER_S = 300.0
#: most tokens saved up, in seconds of the rate: a small burst, so that
#: processes that all wake at once do not overshoot together
MAX_SAVED_SECONDS = 0.05


@dataclass
class RateState:
    """One key's controller (shared by the node's processes when mapped).

    Attributes:
        throttled: pacing is on (a throttle was seen).
        opened: a process of the node had its whole ``max_concurrency`` of
            requests in flight, unpaced and unthrottled: the processes that
            start after it skip the slow start (:mod:`aioflux._net.throttle`).
        rate: requests/s allowed.
        tokens: tokens in the bucket (negative: reserved ahead).
        refilled_at: when ``tokens`` and ``rate`` were last brought forward.
        decreased_at: the last decrease (or the switch to pacing).
        throttle_at: the last throttle seen.
        started_at: when pacing was last switched on.
        epoch: how many times pacing was switched on.
        resume_at: no request before this time (a ``Retry-After``).
        window_at: when the current window of counts began.
        ok: successes answered in the window.
        refused: throttles answered in the window.
        served: the rate served of late: a moving average over the
            windows of their successes a second (the first window after
            pacing starts, with enough of them, replaces the guess).
        anchor: ``served`` when the last cut was made (what the rate
            recovers towards).
        peak: where a useless cut goes back to: the rate before the last
            cut, or the rate it was recovering towards, if higher.
        noise: the share of requests found refused whatever the rate.
        noise_at: when ``noise`` was found.
        judging: :data:`JUDGING_CALIBRATE` (and one more) in the first (and
            second) window after pacing starts; the last cut is being
            judged: 2 while the window after it runs, 1 while the requests
            after that are counted; 0 judged.
        judged_at: when the counting for the judgment began.
        judged_ok: successes since then.
        judged_refused: throttles since then.
        debt: unpaced throttles of the node's processes, less
            :data:`DEBT_PAID_PER_SUCCESS` per success since the first (0: none
            owed; successes are then not counted).
        owed_at: when the debt began (its first throttled request was sent).
        owed_ok: the node's successes since then.
        steady: the throttled share of the answers of late: a moving
            average over the windows with :data:`MIN_WINDOW_SUCCESSES` answers
            or more, since the last cut (or the probe's end).
        window_rate: the rate when the current window began (what its
            answers are measured against while the rate grows within it).
        starting: the node's processes whose slow starts on the key began
            together (:mod:`aioflux._net.throttle`: they share the first
            wave).
        starting_at: when the last of them began.
        reached: the largest slow-start window a process of the node had
            on the key without a throttle (0: none yet): the processes
            that start after it begin there instead of at
            :data:`aioflux._net.throttle.FIRST_WINDOW`: a short job never
            has all of ``max_concurrency`` in flight to open the key.
    """

    throttled: bool = False
    opened: bool = False
    rate: float = 0.0
    tokens: float = 0.0
    refilled_at: float = 0.0
    decreased_at: float = 0.0
    throttle_at: float = 0.0
    started_at: float = 0.0
    epoch: int = 0
    resume_at: float = 0.0
    window_at: float = 0.0
    ok: int = 0
    refused: int = 0
    served: float = 0.0
    anchor: float = 0.0
    peak: float = 0.0
    noise: float = 0.0
    noise_at: float = 0.0
    judging: int = 0
    judged_at: float = 0.0
    judged_ok: int = 0
    judged_refused: int = 0
    debt: float = 0.0
    owed_at: float = 0.0
    owed_ok: int = 0
    steady: float = 0.0
    window_rate: float = 0.0
    starting: float = 0.0
    starting_at: float = 0.0
    reached: float = 0.0


def grown(rate: float, seconds: float, doubling: float,
          floor: float = ADDITIVE_BELOW_RATE) -> float:
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


def _grown(state: RateState, seconds: float, doubling: float) -> float:
    """The state's rate after ``seconds``: held while a cut is judged, back
    towards the rate of the last cut within :data:`RECOVER_SECONDS`, then
    :func:`grown`; probing (:data:`JUDGING_PROBE`: the last window asked for
    the rate and was served it), up by :func:`probe_growth`."""
    rate = state.rate
    if 0 < state.judging < JUDGING_CALIBRATE or state.judging in CHECKS:
        return rate  # held where the cut (or find) put it until it is judged
    recovered = _recovered(state, seconds, doubling)
    if state.judging == JUDGING_PROBE:
        target = recovery_target(state)
        above = math.log(rate / target) if rate > target > 0 else 0.0
        return max(recovered, rate * probe_growth(above, seconds))
    return recovered


def probe_growth(above: float, seconds: float) -> float:
    """The factor the probe grows the rate by in ``seconds``, from ``above``
    (ln of the rate over the rate it recovers to): ``d above / dt =
    PROBE_BASE_GROWTH + PROBE_GROWTH_PER_LOG * above``, at most :data:`PROBE_MAX_GROWTH`.

    Args:
        above: ln(rate / recovery rate), >= 0.
        seconds: the time it grows (>= 0).

    Returns:
        The factor (>= 1).
    """
    a, b, fastest = PROBE_BASE_GROWTH, PROBE_GROWTH_PER_LOG, PROBE_MAX_GROWTH
    turn = (fastest - a) / b  # where the growth reaches its fastest
    x = above
    if x < turn:
        to_turn = math.log((turn + a / b) / (x + a / b)) / b
        if seconds <= to_turn:
            return math.exp((x + a / b) * math.expm1(b * seconds))
        seconds -= to_turn
        x = turn
    return math.exp(min(40.0, x - above + fastest * seconds))


#: ln(rate / recovery rate) at which the probe grows at its fastest: where
#: the probe after pacing starts begins (no cap is known)
PROBE_START_LOG = (PROBE_MAX_GROWTH - PROBE_BASE_GROWTH) / PROBE_GROWTH_PER_LOG


def recovery_target(state: RateState) -> float:
    """The rate a cut recovers towards: the rate that served what was served
    when it cut (``anchor``), throttles of the noise included."""
    return RECOVER_SHARE * state.anchor / (1.0 - min(state.noise, MAX_NOISE_SHARE))


def _recovered(state: RateState, seconds: float, doubling: float) -> float:
    """The rate after ``seconds`` back towards the rate of the last cut, then
    :func:`grown`."""
    rate = state.rate
    target = recovery_target(state)
    if rate < target:
        slope = (1.0 - CUT_TO) * target / RECOVER_SECONDS
        to_target = (target - rate) / slope
        if seconds <= to_target:
            return max(rate + slope * seconds, grown(rate, seconds, doubling))
        rate, seconds = target, seconds - to_target
    return grown(rate, seconds, doubling)


def refill(state: RateState, now: float, doubling: float, ceiling: float | None) -> None:
    """Bring ``rate`` and ``tokens`` forward to ``now`` (at most ``ceiling``)."""
    elapsed = now - state.refilled_at
    if elapsed <= 0:
        return
    rate = min(_grown(state, elapsed, doubling), MAX_RATE if ceiling is None else ceiling)
    # The tokens of the interval at its mean rate (exact for the additive
    # part, close enough for the rest).
    state.tokens = min(max(1.0, rate * MAX_SAVED_SECONDS),
                       state.tokens + elapsed * (state.rate + rate) / 2)
    state.rate = rate
    state.refilled_at = now


def noise(state: RateState, now: float) -> float:
    """The share of requests the service was found to refuse whatever the
    rate, halved every :data:`NOISE_HALF_LIFE` since.

    Args:
        state: the key's controller.
        now: monotonic time.

    Returns:
        The share (0 if none was found).
    """
    if not state.noise:
        return 0.0
    return float(state.noise * 0.5 ** (max(0.0, now - state.noise_at) / NOISE_HALF_LIFE))
