"""Hedged reads: a second GET for a read that is slow to answer.

A store's tail latency comes from a few requests that wait long before
their first byte (a busy front end, a slow disk). Sending the same GET
again after a delay and taking whichever answers first cuts that tail for
a few extra requests ("The Tail at Scale", Dean and Barroso; LitData's
``hedge_delay``).

**What "slow" means here.** ``ObjectStore.fetch`` returns once the checked
body is complete: the protocol does not report when a response head
arrived, so a read is hedged when it has not *completed* after the delay.
For the reads that are hedged (the planner's whole-object reads, below its
``ranged_threshold`` of 32 MiB) the body is a small part of the time:
100 KiB at 100 MB/s per connection is 1 ms after a 20 ms first byte
(perf/scenarios/hedge_tail.py), so "not complete after d" is "no first byte
after d - size/bandwidth". ``"auto"`` learns d from the same whole-read
latencies, so the body time is inside it. Ranged chunks are never hedged:
a 16 MiB chunk's time is its body, which a second GET would only repeat.
Nor are composed batches (objects up to 32 KiB when compose is on): their
GET reads a temporary composite, one of several steps.

**Cost.** A :class:`HedgeBudget` (a token bucket) keeps duplicates within a
ratio of reads (default 5%), bursts of at most :data:`HEDGE_BURST`. Both GETs
go through the store, so through its semaphore: a duplicate waits for a
permit like any request.

**Queueing is not slowness.** A read waiting for one of the store's
permits is not slow to answer, and its duplicate would only queue behind
it. So the first GETs pass a gate of their own that leaves the budget's
share of the store's permits (``ceil(max_concurrency x budget)``, at most
half) to duplicates, and a read's clock (its delay, its latency sample)
starts when it passes the gate. In the hedge_tail contender (ObjectMapDataset,
batch 32, 128 permits; 400 x 100 KiB, GCS-like profile, 1% tail) the
dataset keeps 5 batches ahead: timed from the call, 196 of 400 reads
looked slow, the budget went on queueing and the p99 batch stayed at 1.6 s.

**The loser** is cancelled and awaited before the read returns, even when
the read is cancelled again meanwhile, so no GET of a read that returned
still holds a permit or a socket: a lean-pool connection cancelled
mid-exchange is aborted, never returned to the pool mid-body; an aiohttp
response is released by its context manager. Both
answers are checked alike (the same ``read`` call), so the winner's bytes
are what an unhedged read returns.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from .._core.concurrency.window import LoopSemaphore
from .._core.metrics import LatencyHistogram

__all__ = [
    "AUTO_FLOOR",
    "AUTO_MIN_SAMPLES",
    "AUTO_RECHECK",
    "AUTO_QUANTILE",
    "DEFAULT_HEDGE_BUDGET",
    "HEDGE_BURST",
    "HedgeAfter",
    "HedgeBudget",
    "HedgeStats",
    "Hedger",
    "check_hedge",
]

T = TypeVar("T")
HedgeAfter = float | Literal["auto"] | None

# Duplicates per read, at most: hedging at the p95 ("The Tail at Scale")
# costs ~5% more requests.
DEFAULT_HEDGE_BUDGET = 0.05
# Most duplicates sent back to back after a calm spell: a store that slows
# down as a whole gets at most this many extra requests at once.
HEDGE_BURST = 10.0
# "auto" hedges a read slower than this quantile of the reads seen so far...
AUTO_QUANTILE = 0.95
# ...once this many have completed (a p95 of fewer is a guess)...
AUTO_MIN_SAMPLES = 20
# ...and never sooner than this: on a local disk (~0.1 ms a read) a second
# read buys nothing, and under GCS's ~20 ms to first byte (the emulator's
# GCS-like profile) anything sooner duplicates reads that are on time.
AUTO_FLOOR = 0.010
# A read started before "auto" had an estimate looks again this often.
AUTO_RECHECK = 0.05


def check_hedge(owner: str, after: object, budget: object) -> None:
    """Check ``hedge_after`` and ``hedge_budget`` settings.

    Args:
        owner: who holds them, for the message.
        after: seconds > 0, ``"auto"`` or None.
        budget: duplicates per read, in [0, 1].

    Raises:
        ValueError: a value out of range or of the wrong type.
    """
    if after is not None and after != "auto" and (
            isinstance(after, bool) or not isinstance(after, (int, float))
            or not math.isfinite(after) or after <= 0):
        raise ValueError(f"{owner}.hedge_after must be seconds > 0, 'auto' or None, "
                         f"got {after!r}")
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) \
            or not 0.0 <= budget <= 1.0:
        raise ValueError(f"{owner}.hedge_budget must be a ratio in [0, 1], got {budget!r}")


class HedgeBudget:
    """A token bucket: every read earns ``ratio`` of a duplicate, up to ``burst``.

    Whatever the pattern, duplicates never exceed ``ratio`` times the reads
    counted, and at most ``burst`` go out back to back.

    Args:
        ratio: duplicates per read (0.05: at most 5% extra requests).
        burst: most tokens saved up.
    """

    __slots__ = ("burst", "ratio", "tokens")

    def __init__(self, ratio: float = DEFAULT_HEDGE_BUDGET, burst: float = HEDGE_BURST) -> None:
        self.ratio = ratio
        self.burst = burst
        self.tokens = 0.0

    def earn(self) -> None:
        """Count one read."""
        self.tokens = min(self.burst, self.tokens + self.ratio)

    def take(self) -> bool:
        """Spend a token for one duplicate, if there is one.

        Returns:
            Whether the duplicate may be sent.
        """
        # The tolerance absorbs float sums: 20 x 0.05 is 0.9999999999999999.
        if self.tokens >= 1.0 - 1e-9:
            self.tokens = max(0.0, self.tokens - 1.0)
            return True
        return False


@dataclass
class HedgeStats:
    """What hedging did.

    Attributes:
        reads: reads that went through the hedger.
        sent: duplicates sent.
        won: duplicates that answered first (the first GET was cancelled).
        denied: reads past the delay that found the budget empty (each
            asks again after twice as long, then four times...).
        latency: each read's latency, from its first GET passing the gate
            to the answer used (what "auto" estimates from).
    """

    reads: int = 0
    sent: int = 0
    won: int = 0
    denied: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)


class Hedger:
    """Runs reads, sending a duplicate for one that is slow (see the module doc).

    Args:
        after: seconds before a duplicate; ``"auto"``: the
            :data:`AUTO_QUANTILE` of the read latencies seen so far, at least
            :data:`AUTO_FLOOR`, once :data:`AUTO_MIN_SAMPLES` completed;
            None: never.
        budget: duplicates per read, at most (see :class:`HedgeBudget`).
        stats: where to count (default: a new :class:`HedgeStats`).
        max_concurrency: the store's permits (``config.max_concurrency``);
            first GETs take at most this less the duplicates' share. None:
            no gate (reads are timed from the call).

    Raises:
        ValueError: ``after`` or ``budget`` out of range.
    """

    def __init__(self, after: HedgeAfter, budget: float = DEFAULT_HEDGE_BUDGET,
                 stats: HedgeStats | None = None, *,
                 max_concurrency: int | None = None) -> None:
        check_hedge("Hedger", after, budget)
        self.after = after
        self.budget = HedgeBudget(budget)
        self.stats = stats or HedgeStats()
        self.first_permits: int | None = None
        if max_concurrency is not None:
            spare = min(math.ceil(max_concurrency * budget), max_concurrency // 2)
            self.first_permits = max(1, max_concurrency - spare)
        self._gate = None if self.first_permits is None else LoopSemaphore(self.first_permits)

    def delay(self) -> float | None:
        """Seconds after which a read now starting gets a duplicate, or None."""
        if self.after is None:
            return None
        if self.after != "auto":
            return float(self.after)
        latency = self.stats.latency
        if latency.count < AUTO_MIN_SAMPLES:
            return None
        return max(AUTO_FLOOR, latency.percentile(AUTO_QUANTILE))

    async def run(self, read: Callable[[], Awaitable[T]]) -> T:
        """``read()``, with a duplicate ``read()`` if the first is slow.

        Args:
            read: starts one complete, checked read (called once or twice).

        Returns:
            The first successful answer.

        Raises:
            StorageError: both reads failed (the first one's error), or the
                only one did.
        """
        self.stats.reads += 1
        self.budget.earn()
        if self._gate is None:
            return await self._run(read)
        async with self._gate.get():
            return await self._run(read)

    async def _run(self, read: Callable[[], Awaitable[T]]) -> T:
        stats = self.stats
        started = time.perf_counter()
        if self.after is None:
            result = await read()
            stats.latency.record(time.perf_counter() - started)
            return result
        first: asyncio.Future[T] = asyncio.ensure_future(read())
        second: asyncio.Future[T] | None = None
        try:
            denied = False
            while True:
                # Asked again while waiting: a read that started before
                # "auto" had its estimate is hedged once there is one (the
                # first wave of a dataset is a whole window of reads).
                delay = self.delay()
                elapsed = time.perf_counter() - started
                if delay is None:
                    wait = AUTO_RECHECK
                elif elapsed < delay:
                    wait = delay - elapsed
                elif self.budget.take():
                    stats.sent += 1
                    second = asyncio.ensure_future(read())
                    break
                else:
                    if not denied:
                        stats.denied += 1
                        denied = True
                    # Out of tokens now; reads keep earning them. Asked
                    # again at twice the time waited, the few reads held
                    # back for seconds get the tokens that a crowd of
                    # slightly late ones spent first.
                    wait = elapsed
                done, _ = await asyncio.wait((first,), timeout=wait)
                if done:
                    break
            result, winner = await _first_success(first, second)
        finally:
            await _cancel(first, second)
        stats.latency.record(time.perf_counter() - started)
        if winner is second:
            stats.won += 1
        return result


async def _first_success(first: asyncio.Future[T],
                         second: asyncio.Future[T] | None) -> tuple[T, asyncio.Future[T]]:
    """The first of the reads to succeed; if both fail, the first one's error."""
    pending = {first} if second is None else {first, second}
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        # Both done in the same turn: the first GET wins (no duplicate won).
        for task in (first, second):
            if task in done and not task.cancelled() and task.exception() is None:
                return task.result(), task
    return first.result(), first  # raises the first read's error


async def _cancel(*tasks: asyncio.Future[T] | None) -> None:
    """Cancel the reads still running and wait until they let go of their
    permits and connections (a cancelled lean exchange aborts its socket),
    however often the caller is cancelled meanwhile; then re-raise that."""
    running = [t for t in tasks if t is not None and not t.done()]
    for task in running:
        task.cancel()
    interrupted: asyncio.CancelledError | None = None
    while running:
        # Not a shield: a shielded wait ends at the caller's second cancel
        # while a read still unwinds (one opening a connection takes a few
        # turns of the loop), and the hedged read returned with its permit
        # and socket still held.
        try:
            await asyncio.wait(running)
        except asyncio.CancelledError as exc:
            interrupted = exc
        running = [t for t in running if not t.done()]
    for maybe in tasks:
        if maybe is not None and maybe.done() and not maybe.cancelled():
            maybe.exception()  # retrieved: a losing failure is not "never retrieved"
    if interrupted is not None:
        raise interrupted
