"""The state a node's earlier job left (issue 59): it does not hold a new
job below what the service serves. A client's first request of a key whose
state has seen no throttle for a while restarts it (adaptive: no pacing,
the slow start back; a configured rate: paced at that rate), and a paced
rate that meets no throttle probes back up within seconds.

Counts and given times only: the states' clocks are set, never waited."""

from __future__ import annotations

import time

from aioflux._core.auth import AnonymousAuth, AuthRequest
from aioflux._core.metrics import RequestStats
from aioflux._core.rate.controller import RateState, answered, reserve, start, throttle
from aioflux._core.rate.shared_table import SharedRate, Table, reset
from aioflux._core.settings.config import ClientConfig
from aioflux._net.throttle import Gate, gate_key
from aioflux._net.transport import Op, Transport

KEY = "http://x|b|read"
DOUBLING = 1200.0
#: seconds without a throttle after which a state is an earlier job's (the
#: controller's REPROBE_QUIET_SECONDS is 3)
QUIET = 10.0


def _left(tmp_path: object, quiet: float) -> SharedRate:
    """A node state an earlier job left: paced at 14.6/s after throttles
    from a cap of 20/s, the last one ``quiet`` seconds ago."""
    shared = SharedRate(KEY, Table(str(tmp_path)))
    now = time.monotonic()
    with shared.locked() as state:
        start(state, now - quiet - 5.0, 30.0)
        state.judging, state.rate, state.anchor = 0, 14.6, 15.4
        state.throttle_at = now - quiet
    return shared


def _client(shared: SharedRate, **config: object) -> Gate:
    return Gate(KEY, "b read", ClientConfig(max_concurrency=64, **config),  # type: ignore[arg-type]
                RequestStats(), shared)


def test_a_new_client_is_not_held_by_the_pace_an_earlier_job_left(tmp_path: object) -> None:
    # 200 objects took 10.8 s after the cap that had paced the node was
    # lifted, 7.3 s the job after, 4.6 s the one after that (0.06 s fresh).
    shared = _left(tmp_path, QUIET)
    gate = _client(shared)
    assert not shared.paced
    assert gate.window is not None  # the slow start is back: the service is unknown again


def test_a_state_throttled_of_late_still_paces_a_new_client(tmp_path: object) -> None:
    # Another job of the node is being throttled now: its rate is the
    # service's measure, and the new client joins it.
    shared = _left(tmp_path, 0.5)
    _client(shared)
    assert shared.paced
    with shared.locked() as state:
        assert state.rate == 14.6


def test_a_configured_rate_is_not_held_by_an_adaptive_state_left(tmp_path: object) -> None:
    # request_rate=1000 took 3.6 s for 200 objects, paced at the 61/s an
    # earlier adaptive job had left: a number is the budget the user set.
    shared = _left(tmp_path, QUIET)
    _client(shared, request_rate=1000)
    with shared.locked() as state:
        assert state.throttled and state.rate == 1000.0
    # ... and throttles seen while it runs cut it, as any rate.
    now = time.monotonic()
    with shared.locked() as state:
        for k in range(40):
            throttle(state, now + 0.01 * k, DOUBLING, ceiling=1000.0, sent_at=now + 0.01 * k)
            answered(state, now + 0.01 * k, DOUBLING, ceiling=1000.0)
        throttle(state, now + 0.6, DOUBLING, ceiling=1000.0, sent_at=now + 0.6)
        assert state.rate < 1000.0


def _unthrottled(state: RateState, since: float, seconds: float,
                 step: float = 0.002) -> float:
    """Requests as fast as the rate allows (a second reserved ahead, as
    many processes keep), each served at once: a service with no cap.
    Returns the time after."""
    now, owed = since, 0.0
    while now < since + seconds:
        now += step
        owed += state.rate * step
        while owed >= 1.0:
            owed -= 1.0
            reserve(state, now, DOUBLING)
            state.tokens = min(state.tokens, -state.rate)
            answered(state, now, DOUBLING, sent_at=now)
    return now


def test_a_paced_rate_no_longer_throttled_finds_the_service_again_in_seconds() -> None:
    # Paced at 14.6/s by a cap of 20/s that is then lifted: at the growth
    # below ADDITIVE_BELOW_RATE (a doubling per rate_doubling), 0.6 requests/s a
    # second, the rate took minutes to come back.
    state = RateState()
    start(state, 0.0, 30.0)
    state.judging, state.rate, state.anchor, state.throttle_at = 0, 14.6, 15.4, 0.0
    now = _unthrottled(state, 0.0, 2.5)
    assert state.rate < 20.0  # no throttle for under 3 s: the rate holds
    end = now + 10.0
    while state.rate < 1000.0 and now < end:
        now = _unthrottled(state, now, 0.5)
    assert state.rate >= 1000.0, state


async def test_a_configured_rate_paces_on_after_the_state_is_reset(tmp_path: object) -> None:
    # ``aioflux rate reset`` while a request_rate=N job ran: its attempts
    # read the slot's pacing flag, cleared, and went out unpaced until a
    # throttle switched pacing on again.
    config = ClientConfig(max_concurrency=8, request_rate=50)
    transport = Transport(config, AnonymousAuth(), endpoint="http://127.0.0.1:9")
    key = gate_key(transport.endpoint, "bkt", False)
    table = Table(str(tmp_path))
    gate = Gate(key, "bkt read", config, transport.stats, SharedRate(key, table))
    assert transport._gates is not None
    transport._gates[("bkt", False)] = gate
    assert gate.shared.paced
    assert len(reset(lambda entry: True, table)) == 1
    assert not gate.shared.paced

    async def send(state: object, headers: object) -> bytes:
        return b""

    try:
        await transport._attempt(Op("read", "bkt", "o"), AuthRequest(
            "GET", f"{transport.endpoint}/bkt/o", {}, {}), send)
    finally:
        await transport.aclose()
    assert gate.shared.paced  # the attempt took a token: paced at its number again
    with gate.shared.locked() as state:
        assert state.rate == 50.0 and state.tokens < state.rate * 0.05


def test_a_retry_after_holds_the_node_for_the_throttle_deadline_at_most(
        tmp_path: object) -> None:
    # The hold outlives the process that heard it: a Retry-After of a day
    # held every request of every later job of the machine, silently.
    from aioflux._core.rate.state import MAX_RETRY_AFTER_S

    shared = SharedRate(KEY, Table(str(tmp_path)))
    now = time.monotonic()
    with shared.locked() as state:
        start(state, now, 30.0, retry_after=86_400.0)
        assert state.resume_at == now + MAX_RETRY_AFTER_S == now + 300.0
        throttle(state, now + 1.0, DOUBLING, retry_after=10.0**9)
        assert state.resume_at == now + 1.0 + MAX_RETRY_AFTER_S
        throttle(state, now + 2.0, DOUBLING, retry_after=2.0)  # a shorter one holds no less
        assert state.resume_at == now + 1.0 + MAX_RETRY_AFTER_S


def test_a_table_of_garbage_is_reset(tmp_path: object) -> None:
    # ``aioflux rate reset``, the way to clear a bad state, failed on one:
    # the garbage's all-ones version overflowed its +1 (struct.error).
    table = Table(str(tmp_path))
    table.memory[:] = b"\xff" * len(table.memory)
    done = reset(lambda entry: True, table)
    assert done and all(entry.state == RateState() for entry in done)  # garbage is no state
    with table.locked():
        assert table.read(done[0].slot, time.monotonic()) == (RateState(), 1)  # written anew
