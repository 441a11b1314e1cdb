"""The first contact with a key: the slow start of the attempts in flight
(:class:`aioflux._net.throttle.Window`), the throttles of requests sent
before a cut, and where pacing starts and recovers to.

Counts and events only: the window's tasks are let in by the successes and
throttles the test reports, and every controller time is given."""

from __future__ import annotations

import asyncio

import pytest

from aioflux._core.auth import AnonymousAuth, AuthRequest
from aioflux._core.metrics import RequestStats
from aioflux._core.rate import controller as rate
from aioflux._core.rate.controller import RateState, reserve, start, throttle
from aioflux._core.rate.shared_table import SharedRate, Table
from aioflux._core.settings.config import ClientConfig
from aioflux._net.throttle import FIRST_WINDOW, GROWTH, Gate, gate_key
from aioflux._net.transport import Op, Transport

DOUBLING = 10.0


def _gate(tmp_path: object, most: int = 64, key: str = "http://x|b|read") -> Gate:
    shared = SharedRate(key, Table(str(tmp_path)))
    return Gate(key, "b read", ClientConfig(max_concurrency=most), RequestStats(), shared)


async def _crowd(gate: Gate, n: int) -> tuple[list[asyncio.Task[None]], list[asyncio.Event],
                                               list[int]]:
    """``n`` attempts at the gate's window, each holding its place until its
    event is set; ``inside`` lists those let in, in order."""
    window = gate.window
    assert window is not None
    inside: list[int] = []
    done = [asyncio.Event() for _ in range(n)]

    async def attempt(k: int) -> None:
        async with window:
            inside.append(k)
            await done[k].wait()

    tasks = [asyncio.create_task(attempt(k)) for k in range(n)]
    for _ in range(3):
        await asyncio.sleep(0)  # let every task reach the window
    return tasks, done, inside


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_new_key_starts_with_a_small_window_that_grows_per_success(
        tmp_path: object) -> None:
    gate = _gate(tmp_path)
    tasks, done, inside = await _crowd(gate, 64)
    assert len(inside) == FIRST_WINDOW  # the first wave, not max_concurrency
    # A success lets the next one in and grows the window by GROWTH.
    finished = 0
    for _ in range(FIRST_WINDOW):
        gate.succeeded(0.0)
        done[inside[finished]].set()
        finished += 1
        await _settle()
    assert gate.window is not None
    assert gate.window.limit == pytest.approx(FIRST_WINDOW * (1 + GROWTH))
    assert len(inside) - finished == int(FIRST_WINDOW * (1 + GROWTH))
    assert inside == sorted(inside)  # first come, first served
    for event in done:
        event.set()
    await asyncio.gather(*tasks)


async def test_the_first_throttle_halves_the_window(tmp_path: object) -> None:
    gate = _gate(tmp_path)
    window = gate.window
    assert window is not None
    gate.throttled(None)
    assert window.limit == FIRST_WINDOW / 2
    # The rest of the overshoot's throttles do not halve it again, nor do
    # later ones: pacing is the answer to a cap, and a flaky service's
    # odd 429s must not keep the window closed.
    gate.throttled(None)
    for _ in range(8):
        gate.succeeded(0.0)
    gate.throttled(None)
    assert window.limit == FIRST_WINDOW / 2 + 8 * GROWTH


async def test_a_flaky_service_still_opens_the_window(tmp_path: object) -> None:
    # One request in ten refused whatever the rate: the window still grows
    # (nine tenths of a window per window, less one halving) and opens.
    gate = _gate(tmp_path, most=128)
    requests = 0
    while gate.window is not None and requests < 5000:
        requests += 1
        if requests % 10 == 0:
            gate.throttled(None)
        else:
            gate.succeeded(0.0)
    assert gate.window is None and requests < 5000


async def test_the_window_opens_at_max_concurrency_for_the_whole_node(tmp_path: object) -> None:
    gate = _gate(tmp_path, most=32)
    tasks, done, inside = await _crowd(gate, 40)
    successes = 0
    while gate.window is not None:
        gate.succeeded(0.0)
        successes += 1
    # (32 - 8) / 0.25 successes: the window reached max_concurrency.
    assert successes == (32 - FIRST_WINDOW) / GROWTH
    await _settle()
    assert len(inside) == 40  # every waiter went when it opened
    assert gate.shared.opened
    # Another process of the node (another table on the same file) starts
    # without a slow start; a key of another bucket still has one.
    again = SharedRate("http://x|b|read", Table(str(tmp_path)))
    assert again.opened
    config = ClientConfig(max_concurrency=32)
    assert Gate("http://x|b|read", "b read", config, RequestStats(), again).window is None
    other = SharedRate("http://x|c|read", Table(str(tmp_path)))
    assert Gate("http://x|c|read", "c read", config, RequestStats(), other).window is not None
    for event in done:
        event.set()
    await asyncio.gather(*tasks)


def test_a_short_job_leaves_the_window_it_reached_to_the_next_process(
        tmp_path: object) -> None:
    # A job that ends before its window opens the key (a script's few
    # hundred requests): the next process starts where it got to, not at
    # FIRST_WINDOW again.
    gate = _gate(tmp_path, most=64)
    for _ in range(40):  # 8 + 40 x 0.25: 18 in flight, unthrottled
        gate.succeeded(0.0)
    assert gate.window is not None and gate.window.limit == pytest.approx(18.0)
    with gate.shared.locked() as state:
        assert state.reached == pytest.approx(18.0)  # recorded at 1.5x steps: 12, then 18
        state.starting_at -= 60.0  # the next process begins alone
    later = _gate(tmp_path, most=64)
    assert later.window is not None and later.window.limit == pytest.approx(18.0)
    # Processes beginning together share it as they share the first wave.
    together = _gate(tmp_path, most=64)
    assert together.window is not None and together.window.limit == pytest.approx(9.0)
    # Never past max_concurrency: a client allowing fewer starts at its own.
    with gate.shared.locked() as state:
        state.starting_at -= 60.0
    small = _gate(tmp_path, most=12)
    assert small.window is not None and small.window.limit == pytest.approx(12.0)


def test_processes_that_began_together_leave_no_window_to_the_next(tmp_path: object) -> None:
    # They grow theirs together on a burst's saved tokens: the later of a
    # DataLoader's workers would otherwise start from the earlier's.
    first, second = _gate(tmp_path, most=64), _gate(tmp_path, most=64)
    for _ in range(80):
        first.succeeded(0.0)
        second.succeeded(0.0)
    assert first.window is not None and first.window.limit > 1.5 * FIRST_WINDOW
    with first.shared.locked() as state:
        assert state.reached == 0.0


def test_a_window_halved_by_a_throttle_is_not_left_to_others_and_a_cap_clears_it(
        tmp_path: object) -> None:
    gate = _gate(tmp_path, most=64)
    window = gate.window
    assert window is not None
    window.halve()  # the first throttle
    for _ in range(80):
        gate.succeeded(0.0)
    with gate.shared.locked() as state:
        assert state.reached == 0.0
        state.reached = 30.0  # another process's, unthrottled
        start(state, 1.0, 100.0)  # then a cap found: later processes start small again
        assert state.reached == 0.0
        state.starting_at -= 60.0
    later = _gate(tmp_path, most=64)
    assert later.window is not None and later.window.limit == FIRST_WINDOW


async def test_a_cancelled_waiter_leaves_no_place_taken(tmp_path: object) -> None:
    gate = _gate(tmp_path)
    window = gate.window
    assert window is not None
    tasks, done, inside = await _crowd(gate, FIRST_WINDOW + 2)
    tasks[FIRST_WINDOW].cancel()  # the first waiter gives up
    await _settle()
    done[0].set()  # a place frees: the second waiter takes it
    await _settle()
    assert inside[-1] == FIRST_WINDOW + 1 and window.inflight == FIRST_WINDOW
    for event in done:
        event.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert window.inflight == 0


def test_pacing_switched_on_closes_the_node_window_again(tmp_path: object) -> None:
    shared = SharedRate("k", Table(str(tmp_path)))
    with shared.locked() as state:
        state.opened = True
    assert shared.opened
    with shared.locked() as state:
        start(state, 1.0, 100.0)  # a cap found: later processes start small again
    assert not shared.opened and shared.paced


def test_no_slow_start_where_a_rate_is_configured(tmp_path: object) -> None:
    shared = SharedRate("k", Table(str(tmp_path)))
    config = ClientConfig(max_concurrency=64, request_rate=100.0)
    assert Gate("k", "b read", config, RequestStats(), shared).window is None


def test_throttles_of_requests_sent_before_the_start_do_not_cut() -> None:
    # Pacing starts at t=10; the 429s of the requests already in flight
    # come back in the windows after it: they answer the unpaced rate.
    state = RateState()
    start(state, 10.0, 200.0)
    before = state.rate
    now = 10.0
    for _ in range(60):
        now += 0.02
        reserve(state, now, DOUBLING)
        assert not throttle(state, now, DOUBLING, sent_at=9.99)
    assert state.rate >= before and state.decreased_at == 10.0
    # The same throttles of requests sent at the paced rate cut it.
    for _ in range(30):
        now += 0.02
        reserve(state, now, DOUBLING)
        throttle(state, now, DOUBLING, sent_at=now - 0.01)
    assert state.decreased_at > 10.0 and state.judging == 2


def test_pacing_holds_its_start_until_answers_raise_it() -> None:
    # The rate measured before the first throttle includes the burst the
    # service had saved up (16 workers: 340/s against a cap of 200/s).
    # Pacing starts at half of it and stays there, but for the documented
    # growth, until windows served at the rate let the probe raise it.
    state = RateState()
    start(state, 0.0, 300.0)
    assert state.rate == pytest.approx(rate.START_RATE_SHARE * 300.0)
    later = rate.RECOVER_SECONDS + 1.0
    reserve(state, later, 1200.0)
    first = rate.START_RATE_SHARE * 300.0
    assert first <= state.rate <= rate.grown(first, later, 1200.0)


def test_reservations_ahead_are_not_counted_as_served() -> None:
    # The queue pacing starts with reserves a second ahead in one window:
    # what is served is counted no higher than the rate.
    state = RateState()
    start(state, 0.0, 100.0)
    now = 0.0
    for _ in range(int(state.rate * rate.MAX_RESERVED_SECONDS)):
        reserve(state, now, DOUBLING)
    reserve(state, now + rate.WINDOW_SECONDS, DOUBLING)
    assert state.served <= state.rate + 1e-9


async def test_bulk_attempts_skip_the_slow_start(tmp_path: object) -> None:
    # A request-rate cap is met by many small requests: a part of 2 MiB
    # sent, or a read into a buffer of 2 MiB, is not held behind the window.
    config = ClientConfig(max_concurrency=64)
    transport = Transport(config, AnonymousAuth(), endpoint="http://127.0.0.1:9")
    key = gate_key(transport.endpoint, "bkt", False)
    gate = Gate(key, "bkt read", config, transport.stats, SharedRate(key, Table(str(tmp_path))))
    assert transport._gates is not None
    transport._gates[("bkt", False)] = gate
    inside = most = 0
    release = asyncio.Event()

    async def send(state: object, headers: object) -> bytes:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await release.wait()
        inside -= 1
        return b""

    op = Op("read", "bkt", "o")
    url = f"{transport.endpoint}/bkt/o"

    async def wave(bulk: bool = False) -> int:
        nonlocal most
        most = 0
        release.clear()
        tasks = [asyncio.create_task(transport._attempt(
            op, AuthRequest("GET", url, {}, {}), send, bulk=bulk)) for _ in range(20)]
        await _settle()
        seen = most
        release.set()
        await asyncio.gather(*tasks)
        return seen

    try:
        assert await wave() == FIRST_WINDOW
        assert gate.window is not None and gate.window.limit < 20
        assert await wave(bulk=True) == 20
    finally:
        await transport.aclose()


def test_opening_skips_a_waiter_of_a_closed_loop(tmp_path: object) -> None:
    # After a fork, a gate may hold the parent's waiters, of a loop that
    # is closed in the child: opening the window must not fail on them.
    gate = _gate(tmp_path)
    window = gate.window
    assert window is not None
    loop = asyncio.new_event_loop()
    stale = loop.create_future()
    loop.close()
    window.loop = object()  # type: ignore[assignment]  # the parent's loop
    window.waiters.append(stale)
    gate.open()
    assert gate.window is None and not stale.done() and gate.shared.opened
