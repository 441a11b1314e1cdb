"""The request-rate controller's windows of answers: a cut when one is
throttled, its judgment, and the first windows' calibration and probe.
:mod:`aioflux._core.rate.controller` tells how they fit together.
"""

from __future__ import annotations

import math

from .state import (
    AT_CAP_SERVED_SHARE,
    BUSY_SHARE,
    CHECKS,
    CUT_SHARE,
    CUT_TO,
    JUDGE_ANSWERS,
    JUDGE_ANSWERS_ONE_THROTTLE,
    JUDGING_CALIBRATE,
    JUDGING_CHECK_CALIBRATED,
    JUDGING_CHECK_FIND,
    JUDGING_PROBE,
    JUDGING_PROBE_HELD,
    MAX_NOISE_SHARE,
    MIN_CUT_THROTTLES,
    MIN_RATE,
    MIN_WINDOW_SUCCESSES,
    PROBE_FOUND_SHARE,
    PROBE_MAX_OVER_SERVED,
    PROBE_START_LOG,
    RECOVER_SHARE,
    REPROBE_QUIET_SECONDS,
    SERVED_AVERAGE_WEIGHT,
    SHORT_WINDOW_SECONDS,
    STEADY_AVERAGE_WEIGHT,
    STEADY_CUT_SHARE,
    STEADY_CUT_TO,
    USELESS_CUT_SERVED_SHARE,
    WINDOW_SECONDS,
    RateState,
    noise,
    recovery_target,
    refill,
)

__all__ = ["judge"]


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
    if answers < (JUDGE_ANSWERS_ONE_THROTTLE if state.judged_refused == 1 else JUDGE_ANSWERS):
        return None
    state.judging = 0
    share = state.judged_refused / answers
    served = state.judged_ok / max(now - state.judged_at, 1e-9)
    return (state.judged_refused >= MIN_CUT_THROTTLES and share <= MAX_NOISE_SHARE
            and served < USELESS_CUT_SERVED_SHARE * state.anchor)


def _calibrate(state: RateState, now: float, served: float, doubling: float,
               ceiling: float | None, below: float) -> bool:
    """A window that calibrates (the first two after pacing started: its
    paced requests' answers) replaces the guesses pacing started from with
    what it was served.

    The guesses came from the rate measured before the switch, which holds
    the burst the service had saved up. A service that refused enough of
    the window's paced requests to cut and served it well under the rate
    is at its cap: the rate and the recovery go to a little under what it
    served. One that served about the rate took it, and one that refused
    few was asked for less (processes waiting out their retries'
    backoff): the guesses stand.

    Returns:
        Whether the rate was set from what was served.
    """
    state.served = served
    refill(state, now, doubling, ceiling)
    if served >= below * state.rate:
        return False
    _to_served(state, now, served)
    return True


def _to_served(state: RateState, now: float, served: float) -> None:
    """The rate and the recovery to a little under ``served``, as after a
    cut: the reservations made at the rate before are void."""
    state.rate = max(MIN_RATE, RECOVER_SHARE * served)
    state.anchor = min(state.anchor, served)
    state.tokens = 0.0
    state.decreased_at = now


def _found(state: RateState, now: float, served: float, share: float, doubling: float,
           ceiling: float | None) -> None:
    """The probe found the cap: a window was throttled beyond the noise.

    The rate goes to a little under what that window was served (the
    probe's last step crossed the cap) and recovers to it after any cut.
    What it served may include a burst the service saved up while the
    rate was below the cap: the window after (:data:`JUDGING_CHECK_FIND`) calibrates
    a rate found too high, as the first windows do, and one found too low
    probes again after :data:`REPROBE_QUIET_SECONDS`.
    """
    refill(state, now, doubling, ceiling)
    state.judging = JUDGING_CHECK_FIND
    state.steady = 0.0
    # What the cap served: the average of late lags a probe's growth.
    state.anchor = state.served = served
    state.rate = max(MIN_RATE, min(state.rate, RECOVER_SHARE * served / (1.0 - share)))
    # As after a cut: the reservations made at the probe's rate are void.
    state.tokens = 0.0
    state.decreased_at = now


def _overshot(state: RateState, now: float, share: float) -> bool:
    """A window of the probe or of those that calibrate throttled past doubt
    (``share`` of its answers beyond the noise) before its end: each
    moment more at that rate overshoots further."""
    answers = state.ok + state.refused
    return (state.ok >= MIN_WINDOW_SUCCESSES and state.refused >= 2 * MIN_CUT_THROTTLES
            and state.refused > (share + noise(state, now)) * answers)


def _grow_or_hold(state: RateState, now: float, busy: bool, served: float, asked: float,
                  doubling: float, ceiling: float | None) -> None:
    """A probe's window not throttled: the probe grows on if the window was
    sent and served at about the rate, else it holds (processes that asked
    for less, waiting out their retries' backoff or short of CPU; or a
    service that served less, a cap hidden by a burst it saved up)."""
    refill(state, now, doubling, ceiling)
    if busy and PROBE_MAX_OVER_SERVED * served >= asked:
        state.judging = JUDGING_PROBE
    else:
        state.judging = JUDGING_PROBE_HELD
        if busy:
            # Served less than it asked, unthrottled: resumed gently from
            # what was served (the growth is fast only far from it).
            state.anchor = max(state.anchor, served / RECOVER_SHARE)


def _shed(state: RateState, now: float, doubling: float, ceiling: float | None) -> bool:
    """The first window that calibrates, as many of its paced answers
    refused as served by the time it has half the successes it calibrates
    on (:data:`MIN_WINDOW_SUCCESSES`), or twice as many by a quarter of
    them: the rate pacing started at is well
    over the cap (its measure held a burst the service had saved up, spent
    in less than a second), and each moment more at it overshoots further.
    The rate goes at once to a little under what was served, and the
    window starts again at it.

    Returns:
        Whether the rate was cut.
    """
    ok, refused = state.ok, state.refused
    span = now - state.window_at
    enough = MIN_WINDOW_SUCCESSES // (4 if refused >= 2 * ok else 2)
    if state.judging != JUDGING_CALIBRATE or span <= 0.0 or refused < ok or ok < enough:
        return False
    refill(state, now, doubling, ceiling)
    _to_served(state, now, min(ok / span, state.rate))
    state.window_at = now
    state.ok = state.refused = 0
    state.window_rate = state.rate
    return True


def judge(state: RateState, now: float, doubling: float, ceiling: float | None) -> bool:
    """Close the window if it is over: judge the last cut, or cut the rate
    if the window was throttled."""
    if _shed(state, now, doubling, ceiling):
        return True
    span = now - state.window_at
    calibrating = state.judging in (JUDGING_CALIBRATE, JUDGING_CALIBRATE + 1, *CHECKS)
    probing = state.judging in (JUDGING_PROBE, JUDGING_PROBE_HELD)
    # The probe's windows are short too: it grows fast, and the window
    # that finds the cap ends its overshoot.
    if span < (SHORT_WINDOW_SECONDS if calibrating or probing else WINDOW_SECONDS) and not (
            (calibrating or probing) and span >= SHORT_WINDOW_SECONDS / 4 and _overshot(
                state, now, 2 * (PROBE_FOUND_SHARE if probing else CUT_SHARE))):
        return False
    cut = _close(state, now, span, calibrating, doubling, ceiling)
    state.window_rate = state.rate
    return cut


def _close(state: RateState, now: float, span: float, calibrating: bool, doubling: float,
           ceiling: float | None) -> bool:
    ok, refused = state.ok, state.refused
    state.window_at, state.ok, state.refused = now, 0, 0
    # No cut since pacing started (a find is none: the window after it
    # checks it, and may cut as a first cut would).
    first = state.decreased_at == state.started_at or state.judging == JUDGING_CHECK_FIND
    served = min(ok / span, state.rate)
    # Asked for the rate: the rate it began with (a growing rate's requests
    # go out a little behind it, reserved up to MAX_RESERVED_SECONDS before).
    asked = min(state.rate, state.window_rate) if state.window_rate > 0 else state.rate
    busy = ok + refused >= BUSY_SHARE * asked * span
    if calibrating:
        # Twice a cut's share: a flaky service's refusals (a tenth, say)
        # are left to the probe, whose cut is judged. After a find, the
        # probe's share: the window sent at what was found, which held any
        # burst the service saved up.
        checking = state.judging in CHECKS
        share = (STEADY_CUT_SHARE if state.judging == JUDGING_CHECK_CALIBRATED
                 else PROBE_FOUND_SHARE if checking else 2 * CUT_SHARE)
        throttled = refused >= MIN_CUT_THROTTLES and refused > (
            share + noise(state, now)) * (ok + refused)
        if checking and throttled and not busy:
            # Sent in clumps (a loaded machine's processes), the check was
            # served what the node sent, no measure of the cap, and its
            # throttles say the find is high: a little lower, checked again.
            refill(state, now, doubling, ceiling)
            state.rate = max(MIN_RATE, STEADY_CUT_TO * state.rate)
            state.tokens = 0.0
            state.decreased_at = now
            return False
        peak = state.rate
        if checking and throttled and served >= state.rate:
            # Served all it asked for, yet refused past the share: its
            # answers held a burst the service saved up, or requests sent
            # at the probe's rate before. The share of its answers served,
            # of the rate it asked for, is the measure.
            served = asked * ok / (ok + refused)
        if ok >= MIN_WINDOW_SUCCESSES and throttled and _calibrate(
                state, now, served, doubling, ceiling, 1.0 if checking else AT_CAP_SERVED_SHARE):
            if state.judging == JUDGING_CHECK_CALIBRATED:
                # Judged as a cut is: a flaky service, refusing alike at
                # the lower rate, gets the rate back.
                state.peak, state.judging = peak, 2
            else:
                # A short window (the first ones, or the check of a find)
                # may have spent a burst the service saved up, and
                # measured more than the cap: the next one checks it.
                state.judging = JUDGING_CHECK_CALIBRATED
            return False
        if state.judging == JUDGING_CALIBRATE:
            state.judging = JUDGING_CALIBRATE + 1
        elif checking:
            state.judging = 0  # what the probe found, or was served, stands
        else:
            # Served what it asked for: the cap is above, and nothing says
            # where. The probe starts at its fastest.
            # The probe starts at its fastest: as if the rate it recovers
            # to were well below.
            refill(state, now, doubling, ceiling)
            state.judging = JUDGING_PROBE
            if state.decreased_at == state.started_at:
                state.anchor = min(state.anchor,
                                   state.rate * math.exp(-PROBE_START_LOG) / RECOVER_SHARE)
            # (else the first window's answers shed the rate to what was
            # served: the cap is near, where the probe grows gently)
    elif busy:
        # Only windows that asked for the rate say what the service serves:
        # one in which the processes sent less (short of CPU, or waiting
        # out retries) would drag what a cut recovers towards down.
        state.served += SERVED_AVERAGE_WEIGHT * (served - state.served)
        if ok + refused >= MIN_WINDOW_SUCCESSES:
            state.steady += STEADY_AVERAGE_WEIGHT * (refused / (ok + refused) - state.steady)
            learnt = noise(state, now)
            if 0.0 < learnt < state.steady:
                # A service found flaky refuses a steady share whatever the
                # rate, which one judgment's few throttles measure poorly
                # (2 in 67, against 10% refused at random): the share of
                # late is the better measure. Taken low, the steady share
                # would pass it and cut, each cut lower than the last.
                state.noise, state.noise_at = min(state.steady, MAX_NOISE_SHARE), now
    if 0 < state.judging < JUDGING_CALIBRATE:
        useless = _useless(state, now, ok, refused)
        if useless:
            # Throttled alike at the lower rate while less was served: that
            # share is noise (the rate recovers past it, and only throttles
            # beyond it cut).
            state.noise = max(noise(state, now),
                              state.judged_refused / (state.judged_ok + state.judged_refused))
            state.noise_at = now
            # Back to the rate before the cut, within RECOVER_SECONDS.
            state.anchor = state.peak * (1.0 - state.noise) / RECOVER_SHARE
        elif useless is not None:
            state.noise = 0.0  # a cut that helped: the throttles were the rate's
        return False  # no second cut before the first is judged
    share = noise(state, now)
    if state.judging in (JUDGING_PROBE, JUDGING_PROBE_HELD):
        # Throttled beyond the noise, the probe found the cap; the window
        # after checks what it found (no cut before that).
        # A window that asked for less (a loaded machine sends in clumps,
        # short of the rate) and was throttled as for a cut crossed the cap
        # too: what it was served measures the cap, which the average of
        # late, lagging the probe, does not.
        found = PROBE_FOUND_SHARE if busy else CUT_SHARE
        if refused >= MIN_CUT_THROTTLES and refused > (found + share) * (ok + refused):
            if not first:
                state.peak = state.rate  # where a useless cut after it goes back to
            told = busy or ok >= MIN_WINDOW_SUCCESSES
            served = ok / span if told else max(ok / span, state.served)
            _found(state, now, min(served, state.rate), share, doubling, ceiling)
            return False
        else:
            _grow_or_hold(state, now, busy, served, asked, doubling, ceiling)
    elif (state.judging == 0 and busy and refused == 0 and now - state.throttle_at
          >= REPROBE_QUIET_SECONDS and served >= AT_CAP_SERVED_SHARE * state.rate):
        # Asked for and served in full, with no throttle for a while: the
        # cap may have been lifted, or the rate left by an earlier job.
        refill(state, now, doubling, ceiling)
        state.judging = JUDGING_PROBE
    heavy = refused > (CUT_SHARE + share) * (ok + refused)
    if refused < MIN_CUT_THROTTLES or (not heavy and state.steady <= STEADY_CUT_SHARE + share):
        return False
    refill(state, now, doubling, ceiling)
    # The rate a useless cut goes back to: the rate measured before pacing,
    # for the first cut since it started; after that, the rate a cut made
    # while recovering was heading for (the rate at the cut alone would
    # let a flaky service's random runs of throttles ratchet it down).
    state.peak = max(state.rate, state.peak if first else recovery_target(state))
    # What the cap admits: the least of what was served of late and what
    # this window was, if it asked for the rate and was served enough to
    # tell (a storm of refusals is no measure). The average still holds
    # the windows that drained a burst the service had saved up while the
    # rate was low.
    told = busy and ok >= MIN_WINDOW_SUCCESSES
    state.anchor = min(state.served, served) if told else state.served
    # A rate a few percent over the cap (``steady``) needs a few percent
    # off, not a multiplicative cut, which would pace under the cap long
    # enough for it to save up a burst the recovery then overshoots on.
    decrease = CUT_TO if heavy else STEADY_CUT_TO
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
