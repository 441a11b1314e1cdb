"""Pacing switched on by the throttles of a node's processes together
(:func:`aioflux._core.rate.controller.count_unpaced_throttle`,
:func:`aioflux._core.rate.controller.count_unpaced_success`): many
processes each seeing a few throttles when together they overshoot a cap,
which none of them alone could tell from a flaky service.

Counts only: each gate stands for a process (its own meter and window, the
node's one slot), and the test reports its successes and throttles."""

from __future__ import annotations

import random
import time

from aioflux._core.metrics import RequestStats
from aioflux._core.rate import controller as rate
from aioflux._core.rate.controller import (
    DEBT_PAID_PER_SUCCESS,
    PACING_SWITCH_DEBT,
    RateState,
    count_unpaced_success,
    count_unpaced_throttle,
)
from aioflux._core.rate.shared_table import SharedRate, Table
from aioflux._core.settings.config import ClientConfig
from aioflux._net.throttle import Gate

KEY = "http://x|b|write"


def _processes(tmp_path: object, n: int) -> list[Gate]:
    table = Table(str(tmp_path))
    return [Gate(KEY, "b write", ClientConfig(max_concurrency=4), RequestStats(),
                 SharedRate(KEY, table)) for _ in range(n)]


def test_a_few_throttles_in_each_of_many_processes_switch_pacing_on(tmp_path: object) -> None:
    # 16 DataLoader workers meet a write cap whose burst is spent: each
    # has a write or two refused (the old rule, a third of a process's own
    # recent requests, never switched pacing on for any of them: it took
    # about 60 throttles and 2.7 s of retries before one did). The node's
    # count switches it on at its PACING_SWITCH_DEBT-th throttle.
    gates = _processes(tmp_path, 16)
    for gate in gates:
        for _ in range(20):
            gate.succeeded(1.0)  # the burst the cap had saved up
    shared = gates[0].shared
    refused = 0
    for gate in gates * 2:  # one throttle each, then one more each
        gate.throttled(None)
        refused += 1
        if shared.paced:
            break
    assert shared.paced and refused == PACING_SWITCH_DEBT


def test_answers_to_requests_sent_before_the_debt_began_pay_nothing_back(
        tmp_path: object) -> None:
    # 16 DataLoader workers on a loaded machine: the cap's burst is spent,
    # and the answers queued before it come back among the refusals. Each
    # paid 0.4 of a throttle back: pacing switched on 42 ms after the first
    # refusal, 37 more writes refused meanwhile (perf's aioflux-dl-w16).
    gates = _processes(tmp_path, 16)
    shared = gates[0].shared
    began = time.perf_counter()
    refused = 0
    for gate in gates:
        gate.throttled(None, sent=began)
        refused += 1
        if shared.paced:
            break
        for _ in range(3):  # served from the burst, before the first refusal
            gate.succeeded(time.perf_counter(), sent=began - 0.05)
    assert shared.paced and refused == PACING_SWITCH_DEBT
    # Successes sent since the debt began pay it back, as before.
    other = _processes(tmp_path / "other", 2)  # type: ignore[operator]
    other[0].throttled(None, sent=began)
    for _ in range(3):
        other[1].succeeded(time.perf_counter(), sent=began + 0.001)
    assert not other[0].shared.owed


def test_successes_between_throttles_pay_the_debt_back(tmp_path: object) -> None:
    # A service refusing one request in ten at random (flaky, not capped)
    # across 4 processes: each success pays back DEBT_PAID_PER_SUCCESS of a
    # throttle, so the debt never nears PACING_SWITCH_DEBT and nothing is paced.
    gates = _processes(tmp_path, 4)
    rng = random.Random(3)
    for i in range(4000):
        gate = gates[i % 4]
        if rng.random() < 0.1:
            gate.throttled(None)
        else:
            gate.succeeded(1.0)
    shared = gates[0].shared
    assert not shared.paced
    with shared.locked() as state:
        assert state.debt < PACING_SWITCH_DEBT / 2


def test_an_unthrottled_node_takes_no_lock_per_success(tmp_path: object) -> None:
    gates = _processes(tmp_path, 2)
    shared = gates[0].shared
    assert not shared.owed
    gates[0].throttled(None)
    assert shared.owed  # one throttle owed: the successes are counted...
    for _ in range(3):
        gates[1].succeeded(1.0)
    assert not shared.owed  # ...until it is paid back (3 x 0.4 > 1)


def test_the_debt_random_walk() -> None:
    state = RateState()
    assert not any(count_unpaced_throttle(state, 1.0) for _ in range(PACING_SWITCH_DEBT - 1))
    assert state.owed_at == 1.0 and state.debt == PACING_SWITCH_DEBT - 1
    count_unpaced_success(state)
    assert state.owed_ok == 1 and state.debt == PACING_SWITCH_DEBT - 1 - DEBT_PAID_PER_SUCCESS
    for _ in range(100):
        count_unpaced_success(state)
    assert state.debt == 0.0  # never below nothing owed
    assert not count_unpaced_throttle(state, 2.0) and state.owed_at == 2.0 and state.owed_ok == 0
    rate.start(state, 3.0, 100.0)
    assert state.debt == 0.0  # paced: the debt is settled
