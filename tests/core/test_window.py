"""The in-flight window: a failed job ends the window at once, in order or not."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
import time

import pytest

from aioflux._core.concurrency.window import REORDER, gather_bounded, window, window_sync


class Jobs:
    """Job 1 fails at once; the others stall (a read that hangs) for
    ``stall`` seconds: the 30 s the tests allow is a guard against waiting
    that out, which no busy machine comes near otherwise."""

    def __init__(self, stall: float = 60.0) -> None:
        self.stall = stall
        self.cancelled: list[int] = []

    async def run(self, item: int) -> int:
        if item == 1:
            raise ValueError("job 1 failed")
        try:
            await asyncio.sleep(self.stall)
        except asyncio.CancelledError:
            self.cancelled.append(item)
            raise
        return item


async def test_gather_bounded_raises_the_first_failure_without_waiting_for_the_jobs_before_it(
        ) -> None:
    # The failure waited for the job before it: a download_many whose first
    # object stalled held every other error (and every other read) until
    # that read ended, a read timeout later.
    jobs = Jobs()
    with pytest.raises(ValueError, match="job 1 failed"):
        await asyncio.wait_for(gather_bounded([jobs.run(0), jobs.run(1), jobs.run(2)]), 30)
    assert sorted(jobs.cancelled) == [0, 2]


@pytest.mark.parametrize(("ordered", "max_bytes"), [(True, None), (False, None), (True, 1 << 20)])
async def test_an_ordered_window_raises_a_later_jobs_failure_at_once(
        ordered: bool, max_bytes: int | None) -> None:
    jobs = Jobs()
    bound = {} if max_bytes is None else {"max_bytes": max_bytes, "nbytes": lambda _: 1}

    async def drain() -> list[int]:
        return [r async for _, r in window(range(4), jobs.run, limit=3, ordered=ordered,
                                           **bound)]

    with pytest.raises(ValueError, match="job 1 failed"):
        await asyncio.wait_for(drain(), 30)
    assert sorted(jobs.cancelled) == [0, 2]
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_an_ordered_window_still_yields_in_order() -> None:
    async def job(item: int) -> int:
        await asyncio.sleep(0.001 * (5 - item))
        return item * 10

    got = [pair async for pair in window(range(6), job, limit=4, ordered=True)]
    assert got == [(i, i * 10) for i in range(6)]
    assert await gather_bounded([job(i) for i in range(6)], 2) == [i * 10 for i in range(6)]


async def test_gather_bounded_frees_a_slot_as_any_job_ends_not_the_oldest() -> None:
    # Job 0 ends only once every other job has: at 2 in flight, the others
    # must run through the one slot job 0 leaves (in input order, every
    # slot waited for job 0, and this never ended).
    others_done = asyncio.Event()
    ended: list[int] = []

    async def job(item: int) -> int:
        if item == 0:
            await others_done.wait()
        else:
            await asyncio.sleep(0)
            ended.append(item)
            if len(ended) == 5:
                others_done.set()
        return item * 10

    got = await asyncio.wait_for(gather_bounded([job(i) for i in range(6)], 2), 30)
    assert got == [i * 10 for i in range(6)]
    assert ended == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("max_bytes", [None, 1 << 20])
async def test_an_ordered_window_with_a_byte_bound_runs_on_past_a_slow_first_job(
        max_bytes: int | None) -> None:
    # Job 0 ends only once it is released; the others end at once. With a
    # byte bound, a job's place in ``limit`` frees as it ends, so the ones
    # behind job 0 keep 2 running until REORDER x limit are started and
    # not yielded; without one, every place waits for job 0, as before.
    release = asyncio.Event()
    started: list[int] = []
    count = REORDER * 2 + 10

    async def job(item: int) -> bytes:
        started.append(item)
        if item == 0:
            await release.wait()
        else:
            await asyncio.sleep(0)
        return bytes(10)

    async def drain() -> list[int]:
        got = []
        bound = {} if max_bytes is None else {"max_bytes": max_bytes, "nbytes": lambda _: 10}
        async for item, data in window(range(count), job, limit=2, ordered=True, **bound):
            assert data == bytes(10)
            got.append(item)
        return got

    task = asyncio.ensure_future(drain())
    for _ in range(10 * count):
        await asyncio.sleep(0)
    ahead = REORDER * 2 if max_bytes is not None else 2
    assert started == list(range(ahead))
    release.set()
    assert await asyncio.wait_for(task, 30) == list(range(count))


async def test_an_ordered_windows_byte_bound_holds_the_results_behind_a_slow_first_job(
        ) -> None:
    # 100 bytes a job, 350 bytes allowed: job 0 and the 2 ended behind it
    # hold 300, so the fourth waits for job 0 to be yielded, however many
    # places ``limit`` has free.
    release = asyncio.Event()
    started: list[int] = []

    async def job(item: int) -> bytes:
        started.append(item)
        if item == 0:
            await release.wait()
        return bytes(100)

    async def drain() -> list[int]:
        return [item async for item, _ in window(range(6), job, limit=8, ordered=True,
                                                 max_bytes=350, nbytes=lambda _: 100,
                                                 measure=len)]

    task = asyncio.ensure_future(drain())
    for _ in range(100):
        await asyncio.sleep(0)
    assert started == [0, 1, 2]
    release.set()
    assert await asyncio.wait_for(task, 30) == list(range(6))


def test_window_sync_raises_a_later_jobs_failure_at_once() -> None:
    # load_files' loop: a blocking caller over futures of a loop thread.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    jobs = Jobs()

    def submit(item: int) -> concurrent.futures.Future[int]:
        return asyncio.run_coroutine_threadsafe(jobs.run(item), loop)

    try:
        started = time.monotonic()
        with pytest.raises(ValueError, match="job 1 failed"):
            list(window_sync(range(4), submit, limit=3))
        # It waited for the head (a 60 s stall) before; now only for the
        # jobs cancelled (30 s: a guard for a busy machine, not a pace).
        assert time.monotonic() - started < 30
        assert sorted(jobs.cancelled) == [0, 2]
        assert list(window_sync(range(5), lambda i: asyncio.run_coroutine_threadsafe(
            asyncio.sleep(0.001 * (5 - i), i), loop), limit=3)) == [(i, i) for i in range(5)]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


class LoopThread:
    """An event loop on a thread of its own, as the portal's."""

    def __enter__(self) -> asyncio.AbstractEventLoop:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        return self.loop

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.mark.parametrize("max_bytes", [None, 10_000])
def test_an_ordered_window_sync_with_a_byte_bound_runs_on_past_a_slow_first_job(
        max_bytes: int | None) -> None:
    # load_files' loop. Job 0 ends only once released, the others at once:
    # with a byte bound the ones behind it keep 2 running until REORDER x 2
    # are started and not yielded; without one, 2 in all, as before.
    count = REORDER * 2 + 10
    ahead = REORDER * 2 if max_bytes is not None else 2
    started: list[int] = []
    reached, release = threading.Event(), threading.Event()

    async def job(item: int) -> bytes:
        started.append(item)
        if len(started) == ahead:
            reached.set()
        if item == 0:
            await asyncio.to_thread(release.wait, 30)
        return bytes(10)

    with LoopThread() as loop:
        bound = {} if max_bytes is None else {"max_bytes": max_bytes, "measure": len}
        got: list[int] = []
        consumer = threading.Thread(target=lambda: got.extend(
            item for item, _ in window_sync(
                range(count), lambda i: asyncio.run_coroutine_threadsafe(job(i), loop),
                limit=2, **bound)))
        consumer.start()
        assert reached.wait(30)
        assert started == list(range(ahead)) and got == []
        release.set()
        consumer.join(30)
    assert got == list(range(count))


def _waiting(thread: threading.Thread) -> bool:
    """Whether ``thread`` is blocked in a wait of ``threading``'s (a lock's)."""
    frame = sys._current_frames().get(thread.ident or 0)
    return frame is not None and frame.f_code.co_name == "wait" and \
        frame.f_globals.get("__name__") == "threading"


def test_an_ordered_window_sync_s_byte_bound_holds_the_results_behind_a_slow_first_job(
        ) -> None:
    # 100 bytes a result, 250 allowed, 2 running: jobs 1-3 end behind the
    # held job 0 and hold 300, so the window waits for job 0 to be yielded
    # before it submits job 4.
    submitted: list[int] = []
    release = threading.Event()

    async def job(item: int) -> bytes:
        if item == 0:
            await asyncio.to_thread(release.wait, 30)
        return bytes(100)

    def submit(item: int) -> concurrent.futures.Future[bytes]:
        submitted.append(item)
        return asyncio.run_coroutine_threadsafe(job(item), loop)

    with LoopThread() as loop:
        got: list[int] = []
        consumer = threading.Thread(target=lambda: got.extend(
            item for item, _ in window_sync(range(8), submit, limit=2, max_bytes=250,
                                            measure=len)))
        consumer.start()
        deadline = time.monotonic() + 30  # a guard against a hang, not a pace
        while not (len(submitted) >= 4 and _waiting(consumer)) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert submitted == [0, 1, 2, 3]
        release.set()
        consumer.join(30)
    assert got == list(range(8))


def test_an_ordered_window_sync_with_a_byte_bound_raises_a_later_failure_at_once() -> None:
    jobs = Jobs()
    with LoopThread() as loop:
        with pytest.raises(ValueError, match="job 1 failed"):
            list(window_sync(range(4), lambda i: asyncio.run_coroutine_threadsafe(
                jobs.run(i), loop), limit=3, max_bytes=1 << 20, measure=lambda _: 1))
    assert 0 in jobs.cancelled


class _Counted(asyncio.Future[int]):
    """A job's future that counts who waits on it."""

    callbacks = 0

    def add_done_callback(self, fn, *, context=None):  # type: ignore[no-untyped-def,override]
        _Counted.callbacks += 1
        super().add_done_callback(fn, context=context)


async def test_an_unordered_window_does_constant_work_a_result() -> None:
    # It waited on every pending job for each result (asyncio.wait adds and
    # removes a callback on each): O(limit) an item, 7 s of CPU for 50,000
    # trivial jobs at 128. Now each job's future is watched once.
    loop = asyncio.get_running_loop()
    _Counted.callbacks = 0
    count, limit = 400, 64
    futures: dict[int, _Counted] = {}

    def job(item: int) -> _Counted:
        future = _Counted(loop=loop)
        loop.call_soon(future.set_result, item)
        futures[item] = future
        return future

    got = [item async for item, _ in window(range(count), job, limit=limit, ordered=False)]
    assert sorted(got) == list(range(count))
    assert _Counted.callbacks <= 2 * count  # was ~ count * limit / 2


def test_an_unordered_window_sync_waits_once_a_result(monkeypatch: pytest.MonkeyPatch) -> None:
    # As above, for the blocking twin: it called concurrent.futures.wait on
    # every pending future for each result.
    waits = 0
    real_wait = concurrent.futures.wait

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal waits
        waits += 1
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "wait", counted)
    pool = concurrent.futures.ThreadPoolExecutor(4)
    try:
        got = [item for item, _ in window_sync(range(300), lambda i: pool.submit(abs, i),
                                                limit=16, ordered=False)]
    finally:
        pool.shutdown()
    assert sorted(got) == list(range(300))
    assert waits <= 1  # the finally's wait for jobs cancelled (none here); was ~300
