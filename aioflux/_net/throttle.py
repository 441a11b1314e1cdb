"""The transport's side of the request-rate controller: one :class:`Gate`
per (bucket, kind) of a client.

Every attempt reads the gate's pacing flag (a byte of the state the node's
processes share, :mod:`aioflux._core.rate.shared_table`); only once the service
has throttled that key does an attempt take the lock, a token, and wait
for it (one attempt of the process asking at a time while the queue of
reservations is full). Before that, every throttle is counted node-wide, and a success
takes the lock only while the node owes one (another byte): the debt that
switches pacing on (:func:`aioflux._core.rate.controller.count_unpaced_throttle`). Paced, a success
takes the lock too: windows are judged on answers (:func:`aioflux._core.rate.controller.answered`).
Each gate measures its own successful requests per second, the share it
adds when pacing starts (:func:`aioflux._core.rate.controller.add_joining_measure`). A client's
gate made on a state with no throttle for
:data:`aioflux._core.rate.controller.REPROBE_QUIET_SECONDS` restarts it
(:func:`aioflux._core.rate.controller.restart`): an earlier job's pace does not hold
a new one.

Before that, a slow start: a process's first contact with a key sends at
most :data:`FIRST_WINDOW` attempts at once, :data:`GROWTH` more per
success (1.25 times per round trip: TCP's slow start doubles, which has
half of what a cap's burst admits in flight when its first throttle
comes back, all of it refused), halved at the first throttle. Processes
whose slow starts begin together share the first wave (the k-th starts
at :data:`FIRST_WINDOW` / k, at least one): N processes meeting a cap
send about 8 (1 + ln N) of them, not N x ``max_concurrency``, and few
are in flight when the throttles that switch pacing on come back. At its
first success each keeps at most :data:`FIRST_WINDOW` / N (the first
would otherwise take most of a burst, and finish a short job first). Once
the window reaches ``max_concurrency`` it is gone (an attribute read per
success, nothing per attempt), and the key's slot says so: the node's
processes that start after it, a DataLoader's workers, begin without it,
and those in their slow start leave it. A process whose job ends before
that (a script's few hundred requests) leaves the window it got to
(``RateState.reached``, written each time it grew 1.5 times unthrottled,
by a process that began alone), and the processes after it start there,
sharing it as they would the first wave; a cap found clears it with
``opened``. On a server without a cap the slow start costs the node
about 12 round trips of a smaller window (8 to 128 in flight), once per
key: a few hundred milliseconds at a 25 ms round trip. A process costs
the node nothing more: the window is the process's own (a few numbers
and a queue of waiters), and the node shares one flag byte and the
window reached per key.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
import weakref

from .._core.metrics import RequestStats
from .._core.rate.controller import (
    MAX_RESERVED_SECONDS,
    MIN_MEASURE_SUCCESSES,
    RateState,
    add_joining_measure,
    answered,
    count_unpaced_success,
    count_unpaced_throttle,
    pace_at,
    reserve,
    restart,
    start,
    stop_pacing_after_quiet,
    throttle,
)
from .._core.rate.shared_table import SharedRate, shared_rate
from .._core.settings.config import ClientConfig

__all__ = ["FIRST_WINDOW", "GROWTH", "Gate", "Window", "gate_key"]

log = logging.getLogger("aioflux.rate")

# Pacing stops after this many doublings' time without a throttle (and at
# least a minute): by then the rate is far past what was refused.
_QUIET_DOUBLINGS = 2.0
_QUIET_LEAST = 60.0
# The shortest span a measured rate is taken over: a process throttled at
# once (a service with a small burst) has counted a few successes only,
# and over a whole second they read as next to nothing.
_METER_LEAST = 0.25
# Seconds a process's asker waits at least before asking again while the
# queue of reservations is full (a place frees every token's time: 5 ms at
# 200/s, too often for many processes to ask each time).
_ASK_EVERY = 0.02
# Processes whose slow starts on a key begin within this many seconds of
# the last one's share the first wave (``Gate._first_window``).
_STARTING = 1.0
# Seconds between the marks a gate in use leaves on its slot.
_TOUCH = 30.0
#: attempts a process has in flight at first on a key its node has not
#: seen take ``max_concurrency`` unthrottled (one more per success)
FIRST_WINDOW = 8
# A window this many times the one a process last recorded is recorded
# (``RateState.reached``): a lock a few times a slow start, not a success.
_RECORD_STEP = 1.5
#: attempts the window grows by per success: 1.25 times per round trip.
#: What a cap's burst admits before its first throttle comes back is
#: about GROWTH / (1 + GROWTH) of it in flight (a fifth; TCP's doubling
#: would have half of it in flight, all throttled)
GROWTH = 0.25


def gate_key(endpoint: str, bucket: str, write: bool) -> str:
    """The name of a shared state: endpoint, bucket and kind.

    Args:
        endpoint: the service's API root.
        bucket: the bucket (or container).
        write: writes (anything but GET and HEAD) rather than reads.

    Returns:
        The key.
    """
    return f"{endpoint}|{bucket}|{'write' if write else 'read'}"


class _Meter:
    """Successful and throttled requests per second over the last one to
    two seconds (two bins of a second)."""

    __slots__ = ("ok", "previous", "refused", "since")

    def __init__(self) -> None:
        self.since = time.perf_counter()  # the meter's clock
        self.ok = self.refused = 0
        self.previous: tuple[int, int] | None = None  # the bin before (ok, refused)

    def turn(self, now: float) -> None:
        if now - self.since >= 1.0:
            self.previous = (self.ok, self.refused) if now - self.since < 2.0 else None
            self.ok = self.refused = 0
            self.since = now

    def refuse(self, now: float) -> None:
        self.turn(now)
        self.refused += 1

    def _counts(self, now: float) -> tuple[int, int, float]:
        self.turn(now)
        ok, refused, span = self.ok, self.refused, now - self.since
        if self.previous is not None:
            ok, refused, span = ok + self.previous[0], refused + self.previous[1], span + 1.0
        return ok, refused, span

    def rate(self, now: float, together: float = 1.0) -> tuple[float, bool]:
        """Successful requests/s, and whether they were too few to measure
        the cap (a small burst, throttled at once): then the attempts/s,
        throttled or not, what the process asked of the service (the
        controller's probe starts from a fraction of it).

        Args:
            now: the meter's clock.
            together: the node's processes that began with this one, each
                counting about as many: the node's successes judge the
                measure (16 DataLoader workers have a few dozen each
                after a second's burst: not a small burst).
        """
        ok, refused, span = self._counts(now)
        if ok * together < MIN_MEASURE_SUCCESSES:
            return (ok + refused) / max(span, _METER_LEAST), True
        return ok / max(span, _METER_LEAST), False


class Window:
    """The slow start: at most ``limit`` attempts in flight, one more per
    success, until ``limit`` reaches ``most``.

    An async context manager around an attempt (before the permit of the
    client's semaphore: a request waiting here holds none). Waiters are
    let in first come, first served, each handed its place by the attempt
    that leaves (no barging). One event loop's: a gate used from a second
    loop opens the window (:meth:`open`), which wakes every waiter on its
    own loop.

    Args:
        gate: the gate whose pacing a waiter checks once let in.
        limit: attempts in flight at first.
        most: the limit at which the window opens (``max_concurrency``).
        base: the first wave of the processes that began together
            (:data:`FIRST_WINDOW`, or the window the key ``reached``).
    """

    __slots__ = ("alone", "base", "gate", "halved", "inflight", "leveled", "limit", "loop",
                 "most", "recorded", "waiters")

    def __init__(self, gate: Gate, limit: float, most: int, base: float = FIRST_WINDOW) -> None:
        self.gate = gate
        self.limit = float(limit)
        self.most = most
        #: the first wave the processes that began with this one share
        self.base = base
        #: the window last recorded as the key's ``reached``
        self.recorded = float(limit)
        #: it began alone (known at its first success): only then is its
        #: window recorded. Processes that began together grow theirs on
        #: a burst's saved tokens all at once, and the later of them would
        #: start from the earlier's, more in flight when the cap answers.
        self.alone = False
        self.inflight = 0
        self.halved = self.leveled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            if self.loop is not None:
                self.gate.open()  # a second loop: no slow start across threads
                return
            self.loop = loop
        if self.inflight < self.limit and not self.waiters:
            self.inflight += 1
        else:
            waiter = loop.create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._leave()  # handed a place it will not use
                raise
        if self.gate.shared.paced:
            # Pacing switched on while this attempt waited: it takes a
            # token like the attempts that came after the switch.
            try:
                await self.gate.admit()
            except BaseException:
                self._leave()
                raise

    async def __aexit__(self, *exc: object) -> None:
        self._leave()

    def halve(self) -> None:
        """The first throttle: half the window, so that fewer go out unpaced
        while the pacing is decided (the rest of one overshoot's throttles
        come back together). Only the first: a service refusing a share of
        requests at any rate (flaky, not capped) still opens it."""
        if not self.halved:
            self.limit = max(1.0, self.limit / 2)
            self.halved = True

    def grow(self) -> None:
        """A success: :data:`GROWTH` more in flight."""
        self.limit += GROWTH

    def _leave(self) -> None:
        self.inflight -= 1
        self.wake()

    def wake(self) -> None:
        """Hand the places free to the first waiters."""
        waiters = self.waiters
        while waiters and (self.inflight < self.limit or self.gate.window is not self):
            waiter = waiters.popleft()
            if waiter.done():
                continue  # cancelled while waiting
            self.inflight += 1
            if waiter.get_loop() is self.loop and self.gate.window is self:
                waiter.set_result(None)
            else:
                try:
                    waiter.get_loop().call_soon_threadsafe(_let_in, waiter)
                except RuntimeError:
                    pass  # its loop is closed (a parent's waiter, after a fork)


def _let_in(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Gate:
    """Paces the attempts of one bucket and kind of one client.

    Args:
        key: see :func:`gate_key`.
        label: the key in ``stats.rates`` (``"bucket read"``).
        config: the client's settings (``request_rate``, ``rate_doubling``).
        stats: the client's counters.
        shared: the state (default: the process's one for ``key``).
    """

    __slots__ = ("_asking", "_ceiling", "_doubling", "_epoch", "_fixed", "_held", "_meter",
                 "_quiet", "_touched", "label", "shared", "stats", "window")

    def __init__(self, key: str, label: str, config: ClientConfig, stats: RequestStats,
                 shared: SharedRate | None = None) -> None:
        #: ``shared.paced`` says whether attempts are paced
        self.shared = shared or shared_rate(key)
        self.label = label
        self.stats = stats
        self._ceiling = config.rate_ceiling
        self._fixed = self._ceiling is not None
        self._doubling = config.rate_doubling
        self._quiet = max(_QUIET_LEAST, _QUIET_DOUBLINGS * config.rate_doubling)
        self._meter = _Meter()
        self._epoch = -1
        #: when the tokens this gate reserved and waits for are due (monotonic)
        self._held: collections.deque[float] = collections.deque()
        self._touched = time.perf_counter()
        # One request of this process (per event loop) asks for a token at
        # a time: while MAX_RESERVED_SECONDS of tokens are reserved, the asker retries as
        # each place frees, and the rest wait their turn here: every waiting
        # request asking (a DataLoader's or a stream's hundreds) would take
        # the lock hundreds of times per request sent.
        self._asking: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary())
        if self._fixed or self.shared.paced:
            with self.shared.locked() as state:
                now = time.monotonic()
                if restart(state, now, self._ceiling):
                    log.info("%s: paced by an earlier job, unthrottled for %.1f s: %s",
                             label, now - state.throttle_at,
                             "restarted" if self._fixed else "no longer paced")
                if self._ceiling is not None:
                    pace_at(state, now, self._ceiling)
                    self._epoch = state.epoch
        #: the slow start (None: opened, or a configured rate paces)
        self.window: Window | None = None
        if not self._fixed and not self.shared.opened and config.max_concurrency > FIRST_WINDOW:
            base, limit = self._first_window(config.max_concurrency)
            self.window = Window(self, limit, config.max_concurrency, base)

    def _first_window(self, most: int) -> tuple[float, float]:
        """The first wave, and the attempts this process has in flight at
        first: the node's processes that begin their slow start on the key
        together share the first wave (the k-th of them the wave / k), so
        16 DataLoader workers send ~27 at first, not 128 (a small burst
        refuses most of 128). The wave is :data:`FIRST_WINDOW`, or the
        window a process of the node already had on the key unthrottled
        (``RateState.reached``: a short job grows it and ends before it
        opens the key, and the next begins where it got to)."""
        now = time.monotonic()
        with self.shared.locked() as state:
            if now - state.starting_at > _STARTING:
                state.starting = 0.0
            state.starting += 1.0
            state.starting_at = now
            base = min(float(most), max(float(FIRST_WINDOW), state.reached))
            return base, max(1.0, base / state.starting)

    def _first_share(self, base: float) -> tuple[float, bool]:
        """At a process's first success, the first wave's share of each of
        the processes that began with it (``base`` / their number): those
        that began first would otherwise keep the larger window, grow it
        faster and take most of a burst (a short job's first process
        finished in half the last one's time). And whether it began alone."""
        with self.shared.locked() as state:
            if time.monotonic() - state.starting_at > _STARTING:
                return float("inf"), True
            together = max(1.0, state.starting)
            return max(1.0, base / together), together <= 1.0

    def _record(self, window: Window) -> None:
        """Record the window a process had unthrottled, for those that start
        after it (``RateState.reached``)."""
        window.recorded = window.limit
        with self.shared.locked() as state:
            if not state.throttled:
                state.reached = max(state.reached, window.limit)

    @staticmethod
    def _together(state: RateState, now: float) -> float:
        """The processes whose slow starts on the key began with the last
        one's, if that was within :data:`_STARTING` (else one)."""
        return max(1.0, state.starting) if now - state.starting_at <= _STARTING else 1.0

    @property
    def fixed(self) -> bool:
        """A configured rate paces: every attempt takes a token, also once
        the node's state was reset (``aioflux rate reset``) under it."""
        return self._fixed

    async def admit(self) -> None:
        """Take a token, waiting for it (call when ``shared.paced`` or
        :attr:`fixed`).

        A token reserved before a cut is void (the cut cleared the
        reservations): once its wait is over, another is reserved at the
        cut rate. The requests queued at the old rate would otherwise go
        on overshooting for up to :data:`aioflux._core.rate.controller.MAX_RESERVED_SECONDS`."""
        shared = self.shared
        loop = asyncio.get_running_loop()
        asking = self._asking.get(loop)
        if asking is None:
            asking = self._asking[loop] = asyncio.Lock()
        while True:
            async with asking:
                reserved = await self._reserve()
            if reserved is None:
                return  # pacing stopped
            wait, cut_at = reserved
            if wait > 0:
                self.stats.budget_wait += wait
                due = time.monotonic() + wait
                self._held.append(due)
                try:
                    await asyncio.sleep(wait)
                finally:
                    self._held.remove(due)
                if shared.cut_at != cut_at and shared.paced:
                    continue  # reserved before a cut: void
            return

    async def _reserve(self) -> tuple[float, float] | None:
        """Reserve a token, asking again while the queue is full.

        Returns:
            The seconds to wait for it and the time of the last cut when it
            was reserved; None if pacing stopped.
        """
        while True:
            now = time.monotonic()
            with self.shared.locked() as state:
                if not self._fixed and stop_pacing_after_quiet(state, now, self._quiet):
                    self.stats.rates.pop(self.label, None)
                    log.info("%s: no throttle for %.0f s, requests no longer paced",
                             self.label, self._quiet)
                    return None
                if self._fixed and not state.throttled:
                    pace_at(state, now, self._ceiling)  # type: ignore[arg-type]
                if state.epoch != self._epoch:
                    measured = self._meter.rate(time.perf_counter(),
                                                self._together(state, now))[0]
                    add_joining_measure(state, now, measured, self._ceiling)
                    self._epoch = state.epoch
                held, together = self._held, state.starting
                if together > 1.0 and held and (
                        len(held) >= MAX_RESERVED_SECONDS * state.rate / together):
                    # Its share of the queue (the processes that began
                    # together share it) held: the others' turn until its
                    # next token is due. The first to ask as a place freed
                    # took it, and a short job's luckiest process finished
                    # in 0.6 of the others' time.
                    taken, wait, turn = False, max(0.0, min(held) - now), True
                else:
                    taken, wait = reserve(state, now, self._doubling, self._ceiling)
                    turn = False
                rate, cut_at = state.rate, state.decreased_at
            self.stats.rates[self.label] = rate
            if taken:
                return wait, cut_at
            if not turn:
                # Jittered: processes asking in step, the same one came first
                # after each place freed, and took it every time.
                wait = max(wait, _ASK_EVERY * random.uniform(0.5, 1.5))
            self.stats.budget_wait += wait
            await asyncio.sleep(wait)

    def succeeded(self, now: float, sent: float | None = None) -> None:
        """Count a successful attempt (the measured rate): on every
        request, so a few operations.

        Args:
            now: ``time.perf_counter()``.
            sent: when the attempt was sent (``time.perf_counter()``): the
                answer to a request sent before pacing started does not
                count towards the window that calibrates it.
        """
        meter = self._meter
        if now - meter.since >= 1.0:
            meter.turn(now)
            if now - self._touched > _TOUCH:
                # The table reuses the slots of keys idle the longest: a
                # key in use but never throttled says so now and then.
                self._touched = now
                with self.shared.locked():
                    pass
        meter.ok += 1
        shared = self.shared
        if shared.paced or shared.owed:
            # Paced, its window counts the answers (a lock per success, as
            # per token); owing throttles, a success pays some back. An
            # unthrottled node takes no lock.
            clock = time.monotonic()
            with shared.locked() as state:
                if state.throttled:
                    answered(state, clock, self._doubling, self._ceiling,
                             None if sent is None else clock - (now - sent))
                elif state.debt > 0.0:
                    count_unpaced_success(state, None if sent is None else clock - (now - sent))
        window = self.window
        if window is not None:
            if not window.leveled:
                window.leveled = True
                share, window.alone = self._first_share(window.base)
                window.limit = min(window.limit, share)
            window.grow()
            if window.limit >= window.most or shared.opened:
                self.open()  # (another process of the node opened the key)
            else:
                if window.alone and not window.halved and \
                        window.limit >= _RECORD_STEP * window.recorded:
                    self._record(window)
                window.wake()

    def open(self) -> None:
        """End the slow start: every waiter goes, and the node's processes
        that start after this one skip it."""
        window = self.window
        if window is None:
            return
        self.window = None
        window.wake()
        with self.shared.locked() as state:
            if not state.throttled:
                state.opened = True

    def throttled(self, retry_after: float | None, sent: float | None = None) -> None:
        """Record a throttled attempt: counted towards the node's debt (pacing
        on once it reaches :data:`aioflux._core.rate.controller.PACING_SWITCH_DEBT`), or,
        paced, towards a cut.

        A throttled attempt does not grow the slow start's window.

        Args:
            retry_after: the seconds the server asked to wait, if it did.
            sent: when the attempt was sent (``time.perf_counter()``): the
                answer to a request sent before the last cut is no reason
                for another.
        """
        meter = self._meter
        clock = time.perf_counter()
        meter.refuse(clock)
        window = self.window
        if window is not None:
            window.halve()
        now = time.monotonic()
        with self.shared.locked() as state:
            measured, thin = meter.rate(clock, self._together(state, now))
            first = not state.throttled
            if first:
                if not count_unpaced_throttle(
                        state, now, None if sent is None else now - (clock - sent)):
                    return  # a throttle owed: its retry's backoff is enough for now
                start(state, now, measured, retry_after, self._ceiling, thin)
                changed = True
            else:
                if state.epoch != self._epoch:
                    add_joining_measure(state, now, measured, self._ceiling)
                changed = throttle(state, now, self._doubling, retry_after, self._ceiling,
                                   None if sent is None else now - (clock - sent))
            self._epoch = state.epoch
            rate = state.rate
        self.stats.rates[self.label] = rate
        if changed:
            log.info("%s throttled: %s %.1f requests/s", self.label,
                     "pacing at" if first else "rate cut to", rate)
