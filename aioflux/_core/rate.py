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
  towards go to a little under what it served (:func:`_calibrate`). The
  rate measured before the switch held the burst the service had saved
  up (16 DataLoader workers measured 360 writes/s together against a cap
  of 200/s, and paced at 250 until a cut).
- Otherwise the cap is above the start, or unknown: the rate probes
  (:data:`PROBING`), growing by :data:`PROBE_GROWTH` a second while the
  windows ask for it (up to :data:`PROBE_REACH` of the rate measured
  before pacing: no ramp-up past where the node was),
  until a window asking for it is throttled beyond
  the noise; then it goes to a little under what that window was served
  (:func:`_found`). Pacing starts low (half the measured rate) for this:
  16 processes started at 0.7 of a rate measured under a cap, below it,
  and grew at the documented pace, served 0.77-0.89 of the cap a run.
- A cut is judged on the :data:`JUDGE_LEAST` answers after it (after one
  more window, which still sees answers to requests sent before it), the
  rate held meanwhile (:func:`_useless`). Under a cap, a cut either ends
  the throttles or leaves as much served (what the cap admits): it
  stands, and ``noise`` is 0. If instead the throttles went on while less
  was served, they are not the rate's doing (a flaky service, refusing a
  share of requests at any rate): slowing down only cost time, so the
  rate recovers to where it was and the share they had is ``noise``
  (halving every :data:`NOISE_HALF_LIFE`, at most :data:`NOISE_MOST`). A
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

import math
from dataclasses import dataclass

__all__ = ["AHEAD", "BUSY", "CALIBRATE_BELOW", "CALIBRATE_LEAST", "CALIBRATING", "CUT_LEAST",
           "DECREASE", "DECREASE_WINDOW", "FIRST_WINDOW", "JOIN_WINDOW", "JUDGE_LEAST",
           "MIN_RATE", "NOISE_HALF_LIFE", "NOISE_MOST", "PROBE_GROWTH", "PROBE_HELD",
           "PROBE_REACH", "PROBING", "RAMP_FLOOR", "RECOVER_SECONDS", "RECOVER_TO",
           "SERVED_WEIGHT", "START_ANCHOR", "START_FRACTION", "STEADY_DECREASE", "STEADY_SHARE",
           "STEADY_WEIGHT", "SWITCH_COUNT", "SWITCH_CREDIT", "THROTTLE_SHARE", "USELESS_FALL",
           "RateState", "alarm", "answered", "calm", "grown", "join", "noise", "pace_at", "relax",
           "reserve", "start", "throttle"]

#: the rate after a throttled window, as a fraction of the rate served of
#: late (or of the rate, if less)
DECREASE = 0.7
#: a window cuts only with at least this many throttles: one alone is the
#: odd 429, whatever share of a slow window's requests it is
CUT_LEAST = 2
#: after a cut the rate recovers to this fraction of the rate that served
#: what was served when it cut ...
RECOVER_TO = 0.95
#: ... within this many seconds
RECOVER_SECONDS = 2.0
#: the weight of a window's served rate in ``served``, a moving average
#: (about the last four windows: two seconds)
SERVED_WEIGHT = 0.4
#: a cut is judged on at least this many answers after it (after the
#: window that follows it, which still sees answers to requests sent
#: before it)
JUDGE_LEAST = 20
#: a window calibrates on at least this many successes (and throttles
#: that would cut)
CALIBRATE_LEAST = 20
#: a cut was useless if, throttles going on (CUT_LEAST of them, at most
#: NOISE_MOST of the requests), what was served fell below this fraction
#: of what was served before it
USELESS_FALL = 0.85
#: a share of throttles learnt as noise halves every this many seconds
NOISE_HALF_LIFE = 60.0
#: the most noise believed: a service refusing more whatever the rate is
#: down rather than flaky, and is paced down as a cap is
NOISE_MOST = 0.2
#: requests and throttles are judged per this many seconds: the 429s of
#: one overshoot arrive together (requests already sent when the first
#: came back)
DECREASE_WINDOW = 0.5
#: a window that calibrates, throttled as for a cut and served less than
#: this fraction of the rate, was at the service's cap (timing alone moves it a few
#: percent, a flaky service's refusals a few more)
CALIBRATE_BELOW = 0.85
#: ``judging`` in the first window after pacing starts (the answers to
#: requests sent before it restart it), and CALIBRATING + 1 in the second:
#: what either is served may replace the guesses pacing started from
#: (:func:`_calibrate`). Two: a lull around the switch lets a service's
#: bucket save up again, which the first window spends
CALIBRATING = 3
#: the windows that calibrate are this short: the rate pacing starts at
#: is a guess, from a rate measured with the burst a service had saved
#: up, and may overshoot
FIRST_WINDOW = 0.25
#: ``judging`` after windows that calibrated nothing: the rate pacing
#: started from was served, and the cap is above it or unknown. Until a
#: window is throttled beyond the noise, the rate grows by PROBE_GROWTH a
#: second while the windows ask for it (:func:`_found` ends it)
PROBING = 5
#: ``judging`` while probing after a window that asked for less than
#: BUSY of the rate: the rate holds until one asks for it again
PROBE_HELD = 6
#: a window answered at least this share of the rate was sent at it (the
#: probe grows the rate 14% within a window, and answers come a round
#: trip late): its throttles say where the cap is. One asked for less
#: says nothing of it (processes waiting out retries, or short of CPU:
#: 16 of them sent 270/s while the probe took the rate to 320/s, and
#: then all at once). At 0.85, half the windows of a probe read idle and
#: held it; at 0.75, fewer did, and more probes overshot
BUSY = 0.8
#: the probe goes up to this many times the rate measured before pacing
PROBE_REACH = 1.25
#: how much the rate grows a second while probing: from half a cap to all
#: of it in 1.7 s
PROBE_GROWTH = 1.3
#: throttles past this share of the answers mean the rate is too high
THROTTLE_SHARE = 0.1
#: ... and so do throttles past this share of the answers of late
#: (``steady``): a rate a few percent over a cap, where no one window has
#: THROTTLE_SHARE of them (205/s against 200/s is 2.5%, and the growth
#: after a cut takes half a minute to reach 10%)
STEADY_SHARE = 0.02
#: the rate after a cut for the throttled share of late (``steady``), as
#: a fraction of what was served
STEADY_DECREASE = 0.9
#: the weight of a window's throttled share in ``steady`` (about the last
#: five windows: a flaky service's share, learnt as noise, passes the
#: noise by STEADY_SHARE in a window in 50 or so at 100 answers a window)
STEADY_WEIGHT = 0.2
#: a node's unpaced throttles, less SWITCH_CREDIT per success in between,
#: that switch pacing on: a cap overshot refuses runs of requests across
#: the node's processes, and this many is a few per process of a
#: DataLoader's workers
SWITCH_COUNT = 8
#: the throttles one success pays back: a service refusing a share below
#: SWITCH_CREDIT / (1 + SWITCH_CREDIT), 29%, at random never owes for
#: long (at 10%, reaching SWITCH_COUNT is a chance of about 1e-6 per run
#: of throttles)
SWITCH_CREDIT = 0.4
#: the paced rate starts at this fraction of the rate measured before it:
#: that rate holds the burst the service had saved up (16 DataLoader
#: workers measured 340 writes/s against a cap of 200/s). A start below
#: the cap costs the probe (PROBE_GROWTH) a second or two; one above it,
#: a run of throttles
START_FRACTION = 0.5
#: what was served is first guessed at this fraction of the measured rate
#: (``served``, until windows are counted)
START_ANCHOR = 0.8
#: processes that see pacing switched on within this many seconds, while
#: the first windows calibrate, add their measured rate to the starting
#: rate
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
        peak: the rate before the last cut (where a useless one goes back to).
        noise: the share of requests found refused whatever the rate.
        noise_at: when ``noise`` was found.
        judging: :data:`CALIBRATING` (and one more) in the first (and
            second) window after pacing starts; the last cut is being
            judged: 2 while the window after it runs, 1 while the requests
            after that are counted; 0 judged.
        judged_at: when the counting for the judgment began.
        judged_ok: successes since then.
        judged_refused: throttles since then.
        debt: unpaced throttles of the node's processes, less
            :data:`SWITCH_CREDIT` per success since the first (0: none
            owed; successes are then not counted).
        owed_at: when the debt began (its first throttle).
        owed_ok: the node's successes since then.
        steady: the throttled share of the answers of late: a moving
            average over the windows with :data:`CALIBRATE_LEAST` answers
            or more, since the last cut (or the probe's end).
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


def _grown(state: RateState, seconds: float, doubling: float) -> float:
    """The state's rate after ``seconds``: held while a cut is judged, back
    towards the rate of the last cut within :data:`RECOVER_SECONDS`, then
    :func:`grown`; probing (:data:`PROBING`: the last window asked for
    the rate), up by :data:`PROBE_GROWTH` a second."""
    rate = state.rate
    if 0 < state.judging < CALIBRATING:
        return rate  # held where the cut put it until the cut is judged
    recovered = _recovered(state, seconds, doubling)
    if state.judging == PROBING:
        # Back to about where the node was before pacing, no ramp-up past
        # it: a service that saved up a burst while the rate was low
        # admits past its cap until the burst is spent (4 processes
        # probed from 190 to 390/s against a cap of 200/s before the
        # first throttle). PROBE_REACH: the rate measured before pacing,
        # over at least a second, reads low when the throttles came
        # within the first one (0.8-1.3 of the cap it was served).
        bound = PROBE_REACH * state.peak
        if rate < bound:
            return max(recovered, min(bound, rate * float(PROBE_GROWTH ** seconds)))
    return recovered


def _recovered(state: RateState, seconds: float, doubling: float) -> float:
    """The rate after ``seconds`` back towards the rate of the last cut, then
    :func:`grown`."""
    rate = state.rate
    # Back to the rate that served what was served, throttles included.
    target = RECOVER_TO * state.anchor / (1.0 - min(state.noise, NOISE_MOST))
    if rate < target:
        slope = (1.0 - DECREASE) * target / RECOVER_SECONDS
        to_target = (target - rate) / slope
        if seconds <= to_target:
            return max(rate + slope * seconds, grown(rate, seconds, doubling))
        rate, seconds = target, seconds - to_target
    return grown(rate, seconds, doubling)


def _refill(state: RateState, now: float, doubling: float, ceiling: float | None) -> None:
    elapsed = now - state.refilled_at
    if elapsed <= 0:
        return
    rate = _grown(state, elapsed, doubling)
    if ceiling is not None:
        rate = min(rate, ceiling)
    # The tokens of the interval at its mean rate (exact for the additive
    # part, close enough for the rest).
    state.tokens = min(max(1.0, rate * BURST_SECONDS),
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


def _useless(state: RateState, now: float, ok: int, refused: int) -> bool | None:
    """Count a closed window towards the judgment of the last cut.

    Returns:
        None while still counting, else whether the cut was useless.
    """
    if state.judging == 2:  # answers to requests sent before the cut
        state.judging, state.judged_at = 1, now
        state.judged_ok = state.judged_refused = 0
        return None
    state.judged_ok += ok
    state.judged_refused += refused
    answers = state.judged_ok + state.judged_refused
    if answers < JUDGE_LEAST:
        return None
    state.judging = 0
    share = state.judged_refused / answers
    served = state.judged_ok / max(now - state.judged_at, 1e-9)
    return (state.judged_refused >= CUT_LEAST and share <= NOISE_MOST
            and served < USELESS_FALL * state.anchor)


def _calibrate(state: RateState, now: float, served: float, doubling: float,
               ceiling: float | None) -> bool:
    """A window that calibrates (the first two after pacing started: its
    paced requests' answers) replaces the guesses pacing started from with
    what it was served.

    The rate and the rate it recovers towards came from the rate measured
    before the switch, which held the burst the service had saved up (16
    DataLoader workers measured 360 writes/s together against a cap of
    200/s, and paced at 250). A service that refused enough of the
    window's paced requests to cut and served it well under the rate is
    at its cap: the rate and the recovery go to a little under what it
    served (not a cut to 0.7 of an average still holding the guess). One
    that served about the rate took it, and one that refused few was
    asked for less (processes waiting out their retries' backoff: 16
    processes were held at 150/s a whole run against a cap of 200/s):
    the guesses stand.

    Returns:
        Whether the rate was set from what was served.
    """
    state.served = served
    _refill(state, now, doubling, ceiling)
    if served >= CALIBRATE_BELOW * state.rate:
        return False
    state.rate = max(MIN_RATE, RECOVER_TO * served)
    state.anchor = min(state.anchor, served)
    return True


def _found(state: RateState, now: float, served: float, share: float, doubling: float,
           ceiling: float | None) -> None:
    """The probe found the cap: a window was throttled beyond the noise.

    The rate goes to a little under what that window was served (the
    probe's last step crossed the cap) and recovers towards it after any
    cut, as after a cut. A window throttled enough to cut cuts as well.
    """
    _refill(state, now, doubling, ceiling)
    state.judging = 0
    state.steady = 0.0
    state.anchor = served
    state.rate = max(MIN_RATE, min(state.rate, RECOVER_TO * served / (1.0 - share)))


def _judge(state: RateState, now: float, doubling: float, ceiling: float | None) -> bool:
    """Close the window if it is over: judge the last cut, or cut the rate
    if the window was throttled."""
    span = now - state.window_at
    calibrating = state.judging in (CALIBRATING, CALIBRATING + 1)
    if span < (FIRST_WINDOW if calibrating else DECREASE_WINDOW):
        return False
    ok, refused = state.ok, state.refused
    state.window_at, state.ok, state.refused = now, 0, 0
    served = min(ok / span, state.rate)
    busy = ok + refused >= BUSY * state.rate * span  # asked for the rate
    if calibrating:
        throttled = refused >= CUT_LEAST and refused > (
            THROTTLE_SHARE + noise(state, now)) * (ok + refused)
        if ok >= CALIBRATE_LEAST and throttled and _calibrate(
                state, now, served, doubling, ceiling):
            state.judging = 0
            return False
        state.judging = CALIBRATING + 1 if state.judging == CALIBRATING else PROBING
    elif busy:
        # Only windows that asked for the rate say what the service serves:
        # one in which the processes sent less (short of CPU, or waiting
        # out retries) would drag what a cut recovers towards down (16
        # processes stalled a second, and then paced at 0.85 of a cap).
        state.served += SERVED_WEIGHT * (served - state.served)
        if ok + refused >= CALIBRATE_LEAST:
            state.steady += STEADY_WEIGHT * (refused / (ok + refused) - state.steady)
    if 0 < state.judging < CALIBRATING:
        useless = _useless(state, now, ok, refused)
        if useless:
            # Throttled alike at the lower rate while less was served: that
            # share is noise (the rate recovers past it, and only throttles
            # beyond it cut).
            state.noise = max(noise(state, now),
                              state.judged_refused / (state.judged_ok + state.judged_refused))
            state.noise_at = now
            # Back to the rate before the cut, within RECOVER_SECONDS.
            state.anchor = state.peak * (1.0 - state.noise) / RECOVER_TO
        elif useless is not None:
            state.noise = 0.0  # a cut that helped: the throttles were the rate's
        return False  # no second cut before the first is judged
    share = noise(state, now)
    if state.judging in (PROBING, PROBE_HELD):
        # Sent at about the rate: its throttles say where the cap is, and
        # the probe may go on growing. Asked for less (processes waiting
        # out their retries' backoff, or short of CPU to send as fast), it
        # says nothing of the cap, and the rate waits for them.
        if busy and refused >= CUT_LEAST and refused > share * (ok + refused):
            _found(state, now, served, share, doubling, ceiling)
        else:
            state.judging = PROBING if busy else PROBE_HELD
    heavy = refused > (THROTTLE_SHARE + share) * (ok + refused)
    if refused < CUT_LEAST or (not heavy and state.steady <= STEADY_SHARE + share):
        return False
    _refill(state, now, doubling, ceiling)
    # The first cut since pacing started keeps the rate measured before it
    # as the peak, when higher: the rate a useless cut goes back to.
    first = state.decreased_at == state.started_at
    state.peak = max(state.rate, state.peak) if first else state.rate
    # What the cap admits: the least of what was served of late and what
    # this window was, if it asked for the rate and was served enough to
    # tell (a storm of refusals is no measure). The average still holds
    # the windows that drained a burst the service had saved up while the
    # rate was low (a probe served 330/s against a cap of 200/s, and
    # recovered to 280/s after its cut, to overshoot again).
    told = busy and ok >= CALIBRATE_LEAST
    state.anchor = min(state.served, served) if told else state.served
    # A rate a few percent over the cap (``steady``) needs a few percent
    # off, not a multiplicative cut: 16 processes cut to 0.7 paced under
    # the cap for a second or two each time, which let the cap save up a
    # burst that the recovery then overshot on.
    decrease = DECREASE if heavy else STEADY_DECREASE
    state.rate = max(MIN_RATE, decrease * min(state.rate, state.anchor))
    # Reservations made at the old rate are void: their requests reserve
    # again as their waits end (:mod:`aioflux._net.throttle`), in the order
    # they were to go, at the cut rate. Kept, each would reserve behind
    # all of them, and the node sent next to nothing for a second after
    # every cut (then the cap's saved-up burst at once). Nothing saved up
    # crosses a cut either.
    state.tokens = 0.0
    state.decreased_at = now
    state.judging = 2
    state.steady = 0.0
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
    return _judge(state, now, doubling, ceiling)


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
    return _judge(state, now, doubling, ceiling)


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
    calibrate add to what a useless cut goes back to, not to the rate (16
    DataLoader workers joining over 0.6 s lifted it from 200 to 226/s
    against a cap of 200/s once those windows had passed).

    Args:
        state: the key's controller, pacing switched on by another process.
        now: monotonic time.
        measured: this process's requests/s before it saw the switch.
        ceiling: the most requests/s allowed.
    """
    if not state.throttled or now - state.started_at > JOIN_WINDOW:
        return
    if state.judging not in (CALIBRATING, CALIBRATING + 1):
        # The windows that calibrate are over: what they were served is
        # the measure now, and the probe after them raises the rate.
        state.peak += measured
        return
    rate = state.rate + START_FRACTION * measured
    state.rate = rate if ceiling is None else min(rate, ceiling)
    state.served += START_ANCHOR * measured
    state.anchor += START_FRACTION * measured
    state.peak += measured


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
