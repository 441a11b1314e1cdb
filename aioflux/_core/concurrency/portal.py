"""The sync-to-async portal: one background event-loop thread per process.

``call(coro)`` blocks for the result, ``submit(coro)`` returns a
``concurrent.futures.Future``. ``call`` from the portal's own loop thread
raises instead of deadlocking; ``submit`` there only schedules (a finalizer's
fire-and-forget close), so code that would wait on its future asks
``refuse_loop_thread`` first. A coroutine that raises ``SystemExit`` or
``KeyboardInterrupt`` raises it in its caller; the loop goes on. After
``fork`` the child starts a new portal lazily (threads do not survive
fork); under ``spawn`` each process builds its own on first use. At
interpreter exit the loop is stopped: a call still waiting then in a
daemon thread is left waiting, as Python leaves every daemon thread at
exit, not woken into a traceback printed while the interpreter shuts down.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..errors import BridgeError
from .share import default_executor_threads

__all__ = ["Portal", "call", "close_at_shutdown", "close_soon", "get_portal", "iterate",
           "running_portal", "submit"]

T = TypeVar("T")

_OWN_THREAD = ("aioflux sync API called from its own event loop thread; "
               "use the async API (AsyncClient) there instead")

# How long an interrupted ``call`` waits for its cancelled coroutine to unwind:
# cancellation crosses nested tasks in a few loop iterations, and a writer's
# abort (one request) fits too; a cleanup that hangs longer carries on in
# the background rather than holding up the interrupt.
_CANCEL_WAIT = 5.0


class _Closable(Protocol):
    async def aclose(self) -> None: ...


def _settle(outcome: concurrent.futures.Future[T], task: asyncio.Task[T]) -> None:
    if task.cancelled():
        outcome.cancel()
        # Wakes concurrent.futures.wait, which cancel() alone does not.
        outcome.set_running_or_notify_cancel()
    elif (error := task.exception()) is not None:
        outcome.set_exception(error)
    else:
        outcome.set_result(task.result())


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop is not available on Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Portal:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self._loop = _new_loop()
        # asyncio.to_thread's pool, sized to this process's share of the
        # machine (a DataLoader worker's), not min(32, cpus + 4) in each.
        self._loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
            default_executor_threads(), thread_name_prefix="aioflux-blocking"))
        self._pid = os.getpid()
        self._closed = False
        self._exiting = False  # shut down by the interpreter's exit
        # Connections opened on this loop (clients nobody closed explicitly,
        # such as a process-wide default) are closed at shutdown, quietly.
        self._closables: weakref.WeakSet[_Closable] = weakref.WeakSet()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,),
                                        name="aioflux-loop", daemon=True)
        self._thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(started.set)
        while True:
            try:
                self._loop.run_forever()
            except (SystemExit, KeyboardInterrupt):
                # Raised by a coroutine (sys.exit() in the work of a call):
                # asyncio lets these out of run_forever, which ended the
                # loop thread and left every later call of the process
                # waiting for good. The task that raised carries it to its
                # caller (its done callback runs as the loop goes on).
                continue
            if self._closed:
                return  # stopped by shutdown()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The portal's event loop."""
        return self._loop

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on the portal's loop thread."""
        return threading.get_ident() == self._thread.ident

    def refuse_loop_thread(self, op: str = "") -> None:
        """Refuse to block the caller when it is the loop thread itself.

        For sync code that submits work and then waits for it (a reader's
        blocks, a writer's parts, ``load_files``): on the loop thread (code
        the loop runs, such as an ``Auth`` or an async callback, calling the
        sync API) the wait would hold up the only thread that can do the
        work, and never end.

        Args:
            op: what was attempted, for the message (``"read gs://b/o"``).

        Raises:
            BridgeError: the caller runs on the portal's loop thread.
        """
        if self.in_loop_thread():
            raise BridgeError(f"{op + ': ' if op else ''}{_OWN_THREAD}")

    def _refuse_if_closed(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self._closed:
            coro.close()
            raise BridgeError("the aioflux event loop is shut down")
        if self._pid != os.getpid():
            # A copy in a forked child (held by an object made before the
            # fork): its loop thread did not survive, so the work would
            # wait forever for a loop that never runs.
            coro.close()
            raise BridgeError(f"this object's aioflux event loop belongs to process "
                              f"{self._pid}, not to this forked child: make it anew here")

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop.

        Args:
            coro: the coroutine.

        Returns:
            A future with its result or exception.

        Raises:
            BridgeError: the portal is shut down, or was copied into a
                forked child.
        """
        self._refuse_if_closed(coro)
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T], *, settled: bool = False) -> T:
        """Run ``coro`` on the loop and wait for it.

        Args:
            coro: the coroutine.
            settled: on an exception in the waiting thread, wait for the
                cancelled coroutine to unwind however long it takes (it
                writes into memory the caller frees on return).

        Returns:
            Its result.

        Raises:
            BridgeError: called from the loop thread itself (would deadlock),
                or the portal is shut down (before or during the call) or
                was copied into a forked child.
            Exception: whatever the coroutine raised. An exception raised in
                the waiting thread instead (KeyboardInterrupt, or one from a
                signal handler) cancels the coroutine, waits up to
                ``_CANCEL_WAIT`` seconds (``settled``: until it has) for it to
                unwind, and propagates.
        """
        if self.in_loop_thread():
            coro.close()
            raise BridgeError(_OWN_THREAD)
        self._refuse_if_closed(coro)
        # Not run_coroutine_threadsafe: cancelling its future marks the future
        # done at once, while the task unwinds later; ``outcome`` is settled
        # only when the task has finished.
        outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
        started: list[asyncio.Task[T]] = []

        def start() -> None:
            task = self._loop.create_task(coro)
            started.append(task)
            task.add_done_callback(functools.partial(_settle, outcome))

        def cancel() -> None:
            # Runs after ``start``: callbacks run in the order they were scheduled.
            started[0].cancel()

        self._loop.call_soon_threadsafe(start)
        try:
            return outcome.result()
        except concurrent.futures.CancelledError:
            if not self._closed:
                raise
            self._wait_out_exit()
            # Cancelled by shutdown(): said as a call after it is.
            raise BridgeError("the aioflux event loop is shut down") from None
        except BaseException:
            # Ctrl-C, or any exception a signal handler raised in this thread
            # (a SIGALRM timeout, sys.exit on SIGTERM): the caller gives up, so
            # the work stops, and it has stopped (a write will not publish
            # later) by the time the caller regains control, unless it takes
            # longer than _CANCEL_WAIT to unwind.
            if not outcome.done():
                self._loop.call_soon_threadsafe(cancel)
                if not settled:
                    concurrent.futures.wait([outcome], timeout=_CANCEL_WAIT)
                # A second Ctrl-C must not leave a coroutine writing into
                # freed memory: the unwind takes a turn of the loop.
                while settled and not outcome.done():
                    with contextlib.suppress(BaseException):
                        concurrent.futures.wait([outcome])
            raise

    def _wait_out_exit(self) -> None:
        """In a daemon thread at interpreter exit, never return: Python
        stops such a thread silently wherever it is (a socket read, a
        sleep), and a call it was in must not wake it into a traceback the
        exiting interpreter prints. Non-daemon threads are joined before
        the exit hooks run, so none is waiting here then."""
        if self._exiting and threading.current_thread().daemon:
            threading.Event().wait()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel pending tasks, stop the loop and join the thread.

        Args:
            timeout: seconds to wait for tasks to finish cancelling.
        """
        if self._closed or self._pid != os.getpid():
            return
        self._closed = True

        async def cancel_all() -> None:
            await asyncio.gather(*(c.aclose() for c in list(self._closables)),
                                 return_exceptions=True)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive() and not self.in_loop_thread():
            try:
                asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(timeout)
            except (concurrent.futures.TimeoutError, RuntimeError):
                pass  # exiting anyway: a stuck task must not hang interpreter exit
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)


_lock = threading.Lock()
_portal: Portal | None = None


def get_portal() -> Portal:
    """The process's portal, started on first use (and anew after fork).

    Returns:
        The Portal.
    """
    global _portal
    portal = _portal
    if portal is None or portal._pid != os.getpid():
        with _lock:
            if _portal is None or _portal._pid != os.getpid():
                _portal = Portal()
            portal = _portal
    return portal


def running_portal() -> Portal | None:
    """This process's portal if it runs, else None (none started yet, shut
    down at exit, or a forked child's copy of its parent's); starts none.

    Returns:
        The Portal, or None.
    """
    portal = _portal
    # ``_closed`` before ``os``: at interpreter exit, after the portal shut
    # down, module globals may already be None (a finalizer asking).
    if portal is None or portal._closed or portal._pid != os.getpid():
        return None
    return portal


def call(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the process's portal and wait (see :meth:`Portal.call`)."""
    return get_portal().call(coro)


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the process's portal (see :meth:`Portal.submit`)."""
    return get_portal().submit(coro)


def close_at_shutdown(loop: asyncio.AbstractEventLoop, closable: _Closable) -> None:
    """Have the portal ``aclose()`` ``closable`` at shutdown if ``loop`` is its loop.

    Args:
        loop: the loop the resource lives on.
        closable: anything with ``async aclose()`` (held weakly).
    """
    portal = _portal
    if portal is not None and portal.loop is loop and portal._pid == os.getpid():
        portal._closables.add(closable)


# Closes close_soon started: a task only the loop references may be collected mid-way.
_closing: set[asyncio.Task[None]] = set()


def close_soon(closable: _Closable) -> None:
    """Have this process's portal ``aclose()`` ``closable`` now, from any
    thread (a finalizer's too), if the portal runs; else leave it (at exit
    the portal closes what it holds, and a forked child's is not its own).

    Args:
        closable: anything with ``async aclose()``.
    """
    portal = running_portal()
    if portal is None:
        return

    def start() -> None:
        task = portal.loop.create_task(closable.aclose())
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    try:
        portal.loop.call_soon_threadsafe(start)
    except RuntimeError:
        pass  # the loop closed meanwhile: exiting


_END = object()


@dataclass
class _Failure:
    error: BaseException


class _Handoff:
    """The pump's queue: at most ``most`` items and, with ``nbytes``, at most
    ``max_bytes`` of them queued or handed over by the last hop (the caller
    works through those until it asks again); one item always passes,
    however large."""

    def __init__(self, most: int, nbytes: Callable[[Any], int] | None,
                 max_bytes: int) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue(most)
        self.nbytes = nbytes
        self.max_bytes = max_bytes
        self.held = 0
        self.handed = 0
        self.room = asyncio.Event()

    async def put(self, item: Any) -> None:
        if self.nbytes is not None:
            size = self.nbytes(item)
            while self.held and self.held + size > self.max_bytes:
                self.room.clear()
                await self.room.wait()
            self.held += size
        await self.queue.put(item)

    async def take(self, most: int) -> list[Any]:
        # Asked again: the caller is through with the last hop's items.
        self.held -= self.handed
        self.handed = 0
        self.room.set()
        items = [await self.queue.get()]
        while len(items) < most and not self.queue.empty():
            items.append(self.queue.get_nowait())
        if self.nbytes is not None:
            self.handed = sum(self.nbytes(item) for item in items
                              if item is not _END and not isinstance(item, _Failure))
        return items


async def _pump(agen: AsyncIterator[T], handoff: _Handoff) -> None:
    try:
        async for item in agen:
            await handoff.put(item)
        await handoff.queue.put(_END)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        await handoff.queue.put(_Failure(exc))
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            await aclose()


async def _start_pump(agen: AsyncIterator[T], batch: int, nbytes: Callable[[T], int] | None,
                      max_bytes: int) -> tuple[_Handoff, asyncio.Task[None]]:
    handoff = _Handoff(batch, nbytes, max_bytes)
    return handoff, asyncio.create_task(_pump(agen, handoff))


async def _stop_pump(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def iterate(agen: AsyncIterator[T], *, batch: int = 64,
            nbytes: Callable[[T], int] | None = None, max_bytes: int = 0) -> Iterator[T]:
    """Consume an async iterator from sync code, a batch of ready items per hop.

    A task on the portal loop pumps ``agen`` into a queue of ``batch`` items;
    each hop to the loop takes the first item it waits for plus every item
    already waiting, so a fast stream costs one thread hand-off per batch,
    not per item. Leaving the loop early cancels the pump, which closes
    ``agen`` (its ``finally`` blocks run on the loop).

    Args:
        agen: the async iterator (created for, and consumed on, the portal loop).
        batch: most items per hop, and the queue's size.
        nbytes: an item's bytes: the items queued and those of the hop the
            caller is working through then hold at most ``max_bytes`` (one
            item always passes). Items pumped ahead of a slow caller are
            memory no bound of ``agen`` counts: 64 downloaded objects of
            256 MiB are 16 GiB.
        max_bytes: see ``nbytes``.

    Yields:
        The items in order.

    Raises:
        Exception: whatever ``agen`` raised, with its original type.
    """
    portal = get_portal()
    handoff, task = portal.call(_start_pump(agen, batch, nbytes, max_bytes))
    try:
        while True:
            for item in portal.call(handoff.take(batch)):
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item
    finally:
        # ``_closed`` first: collected at interpreter exit, after the exit
        # hook shut the portal down, module globals (``os``) may be None.
        if portal._closed or portal._pid != os.getpid():
            # Nothing to stop: a copy collected in a forked child (the pump
            # is the parent's), or one collected after the portal shut down
            # (an iterator left unfinished at interpreter exit), whose loop
            # and pump are gone; stopping it raised BridgeError there.
            pass
        elif portal.in_loop_thread():
            # Collected by the garbage collector on the loop's own thread,
            # which cannot wait on itself: cancelling still closes ``agen``.
            task.cancel()
        else:
            portal.call(_stop_pump(task))


def _after_fork_in_child() -> None:
    global _portal, _lock
    # The loop thread did not survive the fork and the lock may be held.
    _portal = None
    _lock = threading.Lock()


def _shutdown_at_exit() -> None:
    if _portal is not None:
        _portal._exiting = True
        _portal.shutdown()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_shutdown_at_exit)
