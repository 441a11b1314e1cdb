"""The sync portal: blocking calls, futures, fork and spawn."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType, SimpleNamespace

import pytest

from aioflux import BridgeError
from aioflux._core.concurrency import portal as portal_module
from aioflux._core.concurrency import window as window_module
from aioflux._core.concurrency.portal import Portal, call, get_portal, submit
from aioflux._core.concurrency.window import window_sync

# What the tests below wait for is an event; this only bounds how long a
# wait may take before the event counts as never coming (a hang), far
# beyond what any step takes on a loaded machine.
HANG = 30.0


async def _where() -> tuple[int, int]:
    await asyncio.sleep(0)
    return os.getpid(), threading.get_ident()


def test_call_runs_on_loop_thread() -> None:
    pid, ident = call(_where())
    assert pid == os.getpid()
    assert ident != threading.get_ident()
    assert ident == get_portal()._thread.ident


def test_submit_returns_future_with_original_exception() -> None:
    async def boom() -> None:
        raise KeyError("original")

    future = submit(boom())
    with pytest.raises(KeyError, match="original"):
        future.result(timeout=HANG)


def test_calling_from_loop_thread_raises_instead_of_deadlocking() -> None:
    async def nested() -> None:
        call(_where())

    with pytest.raises(BridgeError, match="own event loop thread"):
        call(nested())


def test_shutdown_cancels_pending_and_refuses_new_work() -> None:
    portal = Portal()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    future = portal.submit(forever())
    assert started.wait(HANG)
    portal.shutdown()
    assert future.cancelled()
    with pytest.raises(BridgeError, match="shut down"):
        portal.submit(_where())


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt])
def test_a_coroutine_raising_system_exit_leaves_the_portal_running(
        error: type[BaseException]) -> None:
    # asyncio lets SystemExit and KeyboardInterrupt out of run_forever: the
    # loop thread ended with it, and every later call of the process waited
    # for good, with no error.
    portal = Portal()
    try:
        async def leave() -> None:
            await asyncio.sleep(0)
            raise error()

        raised: list[BaseException] = []

        def call_it() -> None:
            try:
                portal.call(leave())
            except BaseException as exc:
                raised.append(exc)

        caller = threading.Thread(target=call_it)
        caller.start()
        caller.join(HANG)
        assert not caller.is_alive() and [type(e) for e in raised] == [error]
        # The caller got it, as from a plain call; the loop goes on.
        assert portal.submit(_where()).result(timeout=HANG)[0] == os.getpid()
        assert portal._thread.is_alive()
    finally:
        portal.shutdown()
    assert not portal._thread.is_alive()


def _child_call(queue: mp.Queue) -> None:  # type: ignore[type-arg]
    pid, _ = call(_where())
    queue.put(pid)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_portal_works_in_child_processes(method: str) -> None:
    call(_where())  # make sure the parent has a running portal first
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_call, args=(queue,))
    proc.start()
    child_pid = queue.get(timeout=60)
    proc.join(60)
    assert proc.exitcode == 0
    assert child_pid == proc.pid != os.getpid()


def _run_to_exit(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a new interpreter, run to its exit (its hooks included)."""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out


def test_unclosed_clients_are_closed_quietly_at_exit() -> None:
    script = (
        "from aioflux import Client\n"
        "from aioflux.testing import running_emulator\n"
        "with running_emulator() as emu:\n"
        "    emu.create_bucket('quiet')\n"
        "    client = Client(endpoint=emu.endpoint)\n"
        "    client.write('quiet', 'o', b'x')\n"
        "    keep = client  # never closed: the portal closes it at exit\n"
        "print('ok')\n"
    )
    out = _run_to_exit(script)
    assert out.stdout.strip() == "ok"
    assert "Unclosed" not in out.stderr


def test_an_iterator_left_unfinished_at_exit_ends_quietly() -> None:
    # Collected after the portal shut down (interpreter exit), stopping its
    # pump raised BridgeError in the collector: "Exception ignored in:
    # <generator object iterate ...>".
    script = (
        "from aioflux._core.concurrency.portal import iterate\n"
        "async def numbers():\n"
        "    for i in range(1000):\n"
        "        yield i\n"
        "it = iterate(numbers(), batch=4)\n"
        "print(next(it))  # left unfinished in a global\n"
    )
    out = _run_to_exit(script)
    assert out.stdout.strip() == "0"
    assert "Exception ignored" not in out.stderr and "BridgeError" not in out.stderr, out.stderr


def test_iterate_yields_in_order_and_propagates_errors() -> None:
    from aioflux._core.concurrency.portal import iterate

    async def numbers(n: int, fail_at: int | None = None):  # type: ignore[no-untyped-def]
        for i in range(n):
            if i == fail_at:
                raise KeyError("boom")
            await asyncio.sleep(0)
            yield i

    assert list(iterate(numbers(200), batch=16)) == list(range(200))
    got = []
    with pytest.raises(KeyError, match="boom"):
        for item in iterate(numbers(50, fail_at=30), batch=8):
            got.append(item)
    assert got == list(range(30))


def test_iterate_early_exit_closes_the_async_generator() -> None:
    from aioflux._core.concurrency.portal import iterate

    closed = threading.Event()

    async def endless():  # type: ignore[no-untyped-def]
        try:
            i = 0
            while True:
                await asyncio.sleep(0)
                yield i
                i += 1
        finally:
            closed.set()

    for item in iterate(endless(), batch=4):
        if item == 10:
            break
    assert closed.wait(HANG)


def test_an_iterator_collected_on_the_loop_thread_closes_without_blocking() -> None:
    # The garbage collector may finalize an abandoned sync iterator on any
    # thread, the portal's own included, which cannot wait on itself.
    from aioflux._core.concurrency.portal import get_portal, iterate

    closed = threading.Event()

    async def endless():  # type: ignore[no-untyped-def]
        try:
            while True:
                await asyncio.sleep(0)
                yield 1
        finally:
            closed.set()

    it = iterate(endless(), batch=4)
    assert next(it) == 1

    async def close_here() -> None:
        it.close()  # as a collection on this thread would

    get_portal().call(close_here())
    assert closed.wait(HANG)


class _Raised(Exception):
    """What a signal handler raises in the waiting thread (a timeout, say)."""


def _waiting_for_a_result(ident: int) -> bool:
    """Whether the thread ``ident`` is blocked in a ``Future.result`` (the
    wait of a blocking call)."""
    frame = sys._current_frames().get(ident)
    while frame is not None:
        if frame.f_code is concurrent.futures.Future.result.__code__:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _signal_raises(error: type[BaseException], started: threading.Event) -> Iterator[None]:
    """A real signal, once ``started`` is set and this (the main) thread
    waits for the call's result, whose handler raises ``error`` here (once).
    SIGUSR1, as pytest-timeout's timer uses SIGALRM.

    A signal that lands while this thread is still on its way into the
    wait's lock only marks the handler due, and the lock's wait then goes
    on until the call ends by itself: the signal is sent again until its
    handler has run.
    """
    main = threading.get_ident()
    handled = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not handled.is_set():
            handled.set()
            raise error()

    def send() -> None:
        if not started.wait(HANG):
            return
        deadline = time.monotonic() + HANG
        while not _waiting_for_a_result(main) and time.monotonic() < deadline:
            time.sleep(0.001)
        while time.monotonic() < deadline:
            signal.pthread_kill(main, signal.SIGUSR1)
            if handled.wait(0.01):
                return

    previous = signal.signal(signal.SIGUSR1, on_signal)
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        yield
    finally:
        sender.join(HANG)
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("error", [_Raised, SystemExit, KeyboardInterrupt])
def test_an_exception_raised_in_the_waiting_thread_stops_the_call_first(
        error: type[BaseException]) -> None:
    # A signal handler's exception (a SIGALRM timeout, sys.exit on SIGTERM,
    # Ctrl-C) ends a blocking call: by the time the caller sees it, the
    # coroutine was cancelled and has unwound, cleanup included (a write
    # must not publish after the caller was told it failed).
    started, cancelled, unwound = threading.Event(), threading.Event(), threading.Event()

    async def slow_with_cleanup() -> None:
        started.set()
        try:
            await asyncio.sleep(HANG)  # ends by itself only if not cancelled
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finally:
            await asyncio.sleep(0.2)  # as a writer aborting its upload
            unwound.set()

    with _signal_raises(error, started):
        with pytest.raises(error):
            get_portal().call(slow_with_cleanup())
    # Cancelled, not waited out, and unwound before the caller saw the error.
    assert cancelled.is_set()
    assert unwound.is_set()


@pytest.mark.parametrize("settled", [False, True])
def test_an_interrupted_call_waits_for_its_cleanup_only_so_long_unless_settled(
        settled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cleanup that hangs must not hold up the interrupt: the caller gets
    # its exception after the bound, the cleanup carries on on the loop.
    # Settled (a reader's GETs write into the caller's buffer), the call
    # returns only once the cleanup is done, past the bound.
    monkeypatch.setattr(portal_module, "_CANCEL_WAIT", 0.3)
    started, released, unwound = threading.Event(), threading.Event(), threading.Event()

    async def stuck_cleanup() -> None:
        started.set()
        try:
            await asyncio.sleep(HANG)
        finally:
            if settled:
                await asyncio.sleep(1.5)  # past the bound, then done by itself
            else:
                # Stuck until the test lets it go once the call has returned
                # (or HANG passes: a call that waited for it returns then).
                await asyncio.to_thread(released.wait, HANG)
            unwound.set()

    with _signal_raises(_Raised, started):
        with pytest.raises(_Raised):
            get_portal().call(stuck_cleanup(), settled=settled)
    assert unwound.is_set() == settled
    released.set()
    assert unwound.wait(HANG)  # not settled: it carried on on the loop


def test_leaving_a_blocking_window_early_waits_for_the_jobs_it_cancels() -> None:
    # load_files: a loop that breaks out must not leave reads running on.
    stopped: list[int] = []

    async def job(item: int) -> int:
        if item == 0:
            return item
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.2)
            stopped.append(item)
        return item

    portal = get_portal()
    results = window_sync(range(6), lambda i: portal.submit(job(i)), limit=4)
    assert next(results) == (0, 0)
    results.close()
    assert sorted(stopped) == [1, 2, 3]


def test_a_blocking_window_closed_on_the_loop_thread_does_not_wait_on_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its jobs need the loop to unwind: waiting for them there would stall
    # the loop (and every other transfer) for the whole wait. The window's
    # waits are recorded; one on the loop thread returns at once (so a
    # regression fails here instead of stalling the portal for 30 s).
    waits_on_the_loop: list[float | None] = []

    class Futures:
        """concurrent.futures as the window module sees it."""

        def __getattr__(self, name: str) -> object:
            return getattr(concurrent.futures, name)

        def wait(self, fs: Iterable[concurrent.futures.Future[int]],
                 timeout: float | None = None,
                 return_when: str = concurrent.futures.ALL_COMPLETED) -> object:
            if asyncio._get_running_loop() is not None:
                waits_on_the_loop.append(timeout)
                timeout = 0
            return concurrent.futures.wait(fs, timeout, return_when)

    monkeypatch.setattr(window_module, "concurrent", SimpleNamespace(futures=Futures()))
    cancelled: list[int] = []

    async def job(item: int) -> int:
        try:
            await asyncio.sleep(0 if item == 0 else HANG)
        except asyncio.CancelledError:
            cancelled.append(item)
            raise
        return item

    portal = get_portal()
    results = window_sync(range(6), lambda i: portal.submit(job(i)), limit=4)
    assert next(results) == (0, 0)

    async def close_here() -> None:
        results.close()  # as a collection on this thread would

    portal.call(close_here())
    assert waits_on_the_loop == []
    # The jobs it left were cancelled all the same, and unwound on the loop.
    deadline = time.monotonic() + HANG
    while sorted(cancelled) != [1, 2, 3]:
        assert time.monotonic() < deadline, cancelled
        time.sleep(0.01)


def _pumps() -> set[asyncio.Task[None]]:
    async def find() -> set[asyncio.Task[None]]:
        return {t for t in asyncio.all_tasks()
                if getattr(t.get_coro(), "__name__", "") == "_pump"}

    return get_portal().call(find())


def test_list_files_collected_on_the_loop_thread_cancels_its_listing(tmp_path: Path) -> None:
    import aioflux

    # More names than the iterator queues ahead (1000) plus one hop takes:
    # the listing is still running when the iterator is dropped.
    for i in range(3000):
        (tmp_path / f"f{i:04d}").touch()
    before = _pumps()
    it = aioflux.list_files(tmp_path)
    assert next(it).startswith("file://")
    assert len(_pumps() - before) == 1

    async def close_here() -> None:
        it.close()  # as the garbage collector does on this thread

    get_portal().call(close_here())
    deadline = time.monotonic() + HANG
    while _pumps() - before:
        assert time.monotonic() < deadline, "the listing was never cancelled"
        time.sleep(0.02)
