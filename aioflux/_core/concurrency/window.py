"""Bounded concurrency: the in-flight window every pipeline uses.

``window`` (async) and ``window_sync`` (a blocking caller driving futures on
the portal) start one job per input item, keep at most ``limit`` running
(``window`` also at most ``max_bytes`` held: running, or done and not yet
yielded), and yield ``(item, result)`` in input order or as jobs complete.
The input is read lazily, only when the window has room, so a listing can
feed it while it downloads. On exit (an error, or the consumer stopping early) the jobs
still running are cancelled and waited for, so nothing outlives the loop.
``gather_bounded`` runs a finite batch the same way and returns the list;
``shared_task`` starts one step that several callers await.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import queue
import threading
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
)
from typing import Any, TypeVar

__all__ = ["LoopSemaphore", "gather_bounded", "shared_task", "window", "window_sync"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

# How long a blocking window waits for cancelled jobs before it returns.
_CANCEL_WAIT = 30.0

#: An ordered window with a byte bound holds up to this many times its
#: ``limit`` started and not yet yielded: the jobs behind a slow first one
#: keep ``limit`` running until it is this far behind (their results wait
#: in memory, within the byte bound). Under a 1% tail of 0.5-2 s (perf
#: emulator, 4,000 x 100 KiB, 128 in flight) an ordered stream's epoch
#: takes 4.3 s at 16x, 12 s at 4x.
REORDER = 16


async def _items(source: Iterable[K] | AsyncIterable[K]) -> AsyncGenerator[K, None]:
    if isinstance(source, AsyncIterable):
        async for item in source:
            yield item
    else:
        for item in source:
            yield item


async def window(source: Iterable[K] | AsyncIterable[K], job: Callable[[K], Awaitable[V]], *,
                 limit: int, ordered: bool = True,
                 weight: Callable[[K], int] | None = None,
                 max_bytes: int | None = None, nbytes: Callable[[K], int] | None = None,
                 measure: Callable[[V], int] | None = None) -> AsyncGenerator[tuple[K, V], None]:
    """Run ``job(item)`` for every item, at most ``limit`` at once.

    Ordered, with a byte bound, a job that ends frees its place in
    ``limit`` at once, not when it is yielded, so the jobs after a slow one
    go on: up to :data:`REORDER` times ``limit`` started and not yet
    yielded, within ``max_bytes``.

    Args:
        source: the items (sync or async iterable, read as room frees up).
        job: starts the work for one item.
        limit: jobs in flight, or their total ``weight``.
        ordered: yield in input order; else as jobs complete.
        weight: what one item counts against ``limit`` (default 1; a
            composed batch counts its sources).
        max_bytes: most bytes the items hold together, from their job's
            start until they are yielded (``None``: no byte bound). One job
            always runs, however heavy or large.
        nbytes: an item's bytes while its job runs (given with ``max_bytes``).
        measure: a result's bytes, which its item counts instead once its
            job is done: an item whose size was unknown or wrong counts as
            what it turned out to be.

    Yields:
        ``(item, result)`` pairs.

    Raises:
        ValueError: ``max_bytes`` without ``nbytes`` or the reverse, or
            ``measure`` without them.
        Exception: the first failed job's error, as soon as it fails (the
            others are cancelled), also in order.
    """
    if (max_bytes is None) != (nbytes is None) or (measure is not None and nbytes is None):
        raise ValueError("window: max_bytes and nbytes go together, measure with them")
    # In flight, in input order; unordered, the jobs done and not yet
    # yielded wait in ``finished``, in the order they completed, put there
    # by their done callback: asyncio.wait on every pending job for each
    # result cost O(limit) an item (7 s of CPU for 50,000 trivial jobs at 128).
    pending: deque[tuple[K, asyncio.Future[V]]] = deque()
    running: dict[asyncio.Future[V], K] = {}
    finished: deque[asyncio.Future[V]] = deque()
    arrival: asyncio.Future[None] | None = None  # a wait for any job's end, if any
    loop = asyncio.get_running_loop()
    load = 0  # the weight of the jobs that count against ``limit``
    # Without a byte bound ``held`` and ``size`` stay 0 and never stop an item.
    held = 0
    byte_limit = 0 if max_bytes is None else max_bytes
    # Ordered with a byte bound, ``load`` counts the jobs still running and
    # ``queued`` every job not yet yielded, which the bytes and ``most``
    # bound; otherwise a job counts in ``load`` until it is yielded.
    early = ordered and max_bytes is not None
    queued = 0
    most = REORDER * limit if early else limit

    async def measured(item: K, size: int, gauge: Callable[[V], int]) -> V:
        nonlocal held
        result = await job(item)
        held += gauge(result) - size
        return result

    # The first job to fail, for an ordered window waiting on a job before
    # it: the failure ends the window at once, not once that job is done
    # (a stalled read held every error and every other read behind it).
    failed: asyncio.Future[asyncio.Future[V]] = asyncio.get_running_loop().create_future()

    def watch(future: asyncio.Future[V]) -> None:
        if not failed.done() and not future.cancelled() and future.exception() is not None:
            failed.set_result(future)

    def arrived() -> None:
        if arrival is not None and not arrival.done():
            arrival.set_result(None)

    def done(future: asyncio.Future[V]) -> None:
        finished.append(future)
        arrived()

    def ended(cost: int) -> Callable[[asyncio.Future[V]], None]:
        def end(future: asyncio.Future[V]) -> None:
            nonlocal load
            load -= cost
            watch(future)
            arrived()
        return end

    async def any_end() -> None:
        """Wait for a job to end; raise the first failure (a failed job ends too)."""
        nonlocal arrival
        arrival = loop.create_future()
        try:
            await arrival
        finally:
            arrival = None
        if failed.done():
            failed.result().result()  # raises; the finally cancels the rest

    async def take() -> tuple[K, V]:
        nonlocal load, held, arrival, queued
        if not ordered:
            while not finished:
                arrival = loop.create_future()
                try:
                    await arrival
                finally:
                    arrival = None
            future = finished.popleft()
            item = running.pop(future)
        else:
            if not pending[0][1].done():
                either: list[asyncio.Future[Any]] = [pending[0][1], failed]
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if failed.done():
                    failed.result().result()  # raises; the finally cancels the rest
            item, future = pending.popleft()
        cost = 1 if weight is None else weight(item)
        if early:
            queued -= cost  # its place in ``load`` went when it ended
        else:
            load -= cost
        if nbytes is None:
            return item, await future
        if measure is None:
            held -= nbytes(item)
            return item, await future
        result = await future
        held -= measure(result)
        return item, result

    items = _items(source)
    try:
        async for item in items:
            cost = 1 if weight is None else weight(item)
            size = 0 if nbytes is None else nbytes(item)
            while pending or running:
                if held + size > byte_limit or queued + cost > most:
                    yield await take()  # room only as the first is yielded
                elif load + cost <= limit:
                    break
                elif early and not pending[0][1].done():
                    await any_end()  # a place frees as any job ends
                else:
                    yield await take()
            started = asyncio.ensure_future(
                job(item) if measure is None else measured(item, size, measure))
            if early:
                started.add_done_callback(ended(cost))
                pending.append((item, started))
                queued += cost
            elif ordered:
                started.add_done_callback(watch)
                pending.append((item, started))
            else:
                running[started] = item
                started.add_done_callback(done)
            load += cost
            held += size
        while pending or running:
            yield await take()
    finally:
        await items.aclose()
        left = [f for _, f in pending] + list(running)
        for future in left:
            future.cancel()
        await asyncio.gather(*left, return_exceptions=True)


def window_sync(source: Iterable[K], submit: Callable[[K], concurrent.futures.Future[V]], *,
                limit: int, ordered: bool = True, max_bytes: int | None = None,
                measure: Callable[[V], int] | None = None) -> Iterator[tuple[K, V]]:
    """The blocking twin of :func:`window`: ``source`` is iterated in the
    caller's thread (it may block, e.g. a sync listing), ``submit`` starts a
    job elsewhere (on the portal) and returns its future.

    Ordered, with a byte bound, a job that ends frees its place in
    ``limit`` at once, as in :func:`window`: up to :data:`REORDER` times
    ``limit`` started and not yet yielded, the results done and waiting
    within ``max_bytes``.

    Args:
        source: the items.
        submit: starts the work for one item.
        limit: jobs in flight.
        ordered: yield in input order; else as jobs complete.
        max_bytes: ordered, most bytes of results done and not yet yielded
            (an item's size is not known before its job ends; ``None``: no
            byte bound). Unordered, results are yielded as they come.
        measure: a result's bytes (given with ``max_bytes``).

    Yields:
        ``(item, result)`` pairs.

    Raises:
        ValueError: ``max_bytes`` without ``measure`` or the reverse.
        Exception: the first failed job's error, as soon as it fails (the
            others are cancelled), also in order.
    """
    if (max_bytes is None) != (measure is None):
        raise ValueError("window_sync: max_bytes and measure go together")
    pending: deque[tuple[K, concurrent.futures.Future[V]]] = deque()
    # Unordered, as in window: done jobs queue up in the order they
    # completed (their callbacks run on the portal's thread), instead of a
    # wait on every pending future for each result.
    running: dict[concurrent.futures.Future[V], K] = {}
    finished: queue.SimpleQueue[concurrent.futures.Future[V]] = queue.SimpleQueue()
    # The first job to fail, as in window: in order too, it ends the loop at once.
    failed: concurrent.futures.Future[concurrent.futures.Future[V]] = concurrent.futures.Future()
    # Ordered with a byte bound: the jobs still running, and the bytes of
    # those done and not yet yielded, counted by the jobs' callbacks (on
    # the portal's thread) under ``changed``, which tells the caller.
    early = ordered and max_bytes is not None
    changed = threading.Condition()
    state = {"running": 0, "held": 0}

    def watch(future: concurrent.futures.Future[V]) -> None:
        if not future.cancelled() and future.exception() is not None:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                failed.set_result(future)

    def ended(future: concurrent.futures.Future[V]) -> None:
        watch(future)
        with changed:
            state["running"] -= 1
            if measure is not None and not future.cancelled() and future.exception() is None:
                state["held"] += measure(future.result())
            changed.notify_all()

    def take() -> tuple[K, V]:
        if not ordered:
            future = finished.get()
            return running.pop(future), future.result()
        if not pending[0][1].done():
            either: list[concurrent.futures.Future[Any]] = [pending[0][1], failed]
            concurrent.futures.wait(either, return_when=concurrent.futures.FIRST_COMPLETED)
            if failed.done():
                failed.result().result()  # raises; the finally cancels the rest
        item, future = pending.popleft()
        result = future.result()
        if measure is not None:
            with changed:
                state["held"] -= measure(result)
        return item, result

    def full() -> bool:
        """Ordered with a byte bound: room only as the first job is yielded."""
        return len(pending) >= REORDER * limit or state["held"] > (max_bytes or 0)

    def any_end() -> None:
        """Wait until a job ends (the first one, or any, or one fails)."""
        with changed:
            while state["running"] >= limit and not pending[0][1].done() and \
                    not failed.done():
                changed.wait()
        if failed.done():
            failed.result().result()  # raises; the finally cancels the rest

    try:
        for item in source:
            if early:
                with changed:
                    state["running"] += 1
            started = submit(item)
            if early:
                started.add_done_callback(ended)
                pending.append((item, started))
                while pending:
                    with changed:
                        blocked = full()
                        if not blocked and state["running"] < limit:
                            break
                    if blocked or pending[0][1].done():
                        yield take()
                    else:
                        any_end()
                continue
            if ordered:
                started.add_done_callback(watch)
                pending.append((item, started))
            else:
                running[started] = item
                started.add_done_callback(finished.put)
            while len(pending) + len(running) >= limit:
                yield take()
        while pending or running:
            yield take()
    finally:
        left = [f for _, f in pending] + list(running)
        for future in left:
            future.cancel()
        # A cancelled portal future wakes wait() once its task has stopped,
        # so no read runs on after the caller left; but the tasks need their
        # loop to stop, so never wait on an event loop thread (the collector
        # may finalize this generator on the portal's).
        if asyncio._get_running_loop() is None:
            concurrent.futures.wait(left, timeout=_CANCEL_WAIT)


async def gather_bounded(aws: Iterable[Awaitable[T]], limit: int | None = None) -> list[T]:
    """``asyncio.gather`` with at most ``limit`` awaitables running at once.

    Args:
        aws: the awaitables (coroutines are started lazily, as room frees up).
        limit: most in flight; ``None`` runs them all at once.

    Returns:
        Their results, in input order.

    Raises:
        Exception: the first failure (the others are cancelled).
    """
    jobs = list(aws)
    out: list[Any] = [None] * len(jobs)
    if not jobs:
        return out
    # ``limit`` workers, each awaiting the next job as soon as its last one
    # ended, its result put in place: through a window in input order each
    # slot would wait for the oldest job, one slow job holding every slot
    # after it, and through any window a freed slot waits a few turns of
    # the loop for its next job (a fifth slower than a semaphore, fsspec's
    # cat of 2,000 small objects).
    order = iter(range(len(jobs)))

    async def work() -> None:
        for i in order:
            out[i] = await jobs[i]

    workers = [asyncio.ensure_future(work()) for _ in range(min(limit or len(jobs), len(jobs)))]
    try:
        done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
        for worker in done:
            worker.result()  # the first failure: the finally cancels the rest
        return out
    finally:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for aw in jobs:  # never started (an earlier job failed): no "never awaited"
            if inspect.iscoroutine(aw) and inspect.getcoroutinestate(aw) == "CORO_CREATED":
                aw.close()


def shared_task(coro: Awaitable[T]) -> asyncio.Future[T]:
    """A task for one step several callers await (an upload's creation,
    awaited by each of its parts).

    Its error reaches every caller that awaits it; when all of them were
    cancelled (a writer aborting), it is retrieved here, not logged as
    "Task exception was never retrieved".

    Args:
        coro: the step.

    Returns:
        The task.
    """
    task = asyncio.ensure_future(coro)
    task.add_done_callback(_retrieve)
    return task


def _retrieve(future: asyncio.Future[T]) -> None:
    if not future.cancelled():
        future.exception()


class LoopSemaphore:
    """A semaphore of ``permits`` for whichever event loop asks.

    An ``asyncio.Semaphore`` serves one loop, while an engine may be used
    from another (a dataset's store is rebuilt per process and loop): the
    running loop gets a fresh semaphore when it is not the last one's.

    Args:
        permits: the semaphore's value.
    """

    def __init__(self, permits: int) -> None:
        self.permits = permits
        self._current: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def get(self) -> asyncio.Semaphore:
        """The running loop's semaphore."""
        loop = asyncio.get_running_loop()
        if self._current is None or self._current[0] is not loop:
            self._current = (loop, asyncio.Semaphore(self.permits))
        return self._current[1]
