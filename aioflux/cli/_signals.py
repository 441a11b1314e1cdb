"""SIGTERM takes Ctrl-C's path while a command runs, so a ``timeout``,
Kubernetes or CI cancellation aborts uploads and removes temporary files
as Ctrl-C does, instead of leaving them behind."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

__all__ = ["run_command", "sigterm_as_interrupt"]

_T = TypeVar("_T")

# The task of the command that asyncio.run runs now (main thread only).
_commands: list[asyncio.Task[Any]] = []


def run_command(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)``, with its task known to SIGTERM's handler.

    Args:
        main: the command's coroutine.

    Returns:
        What ``main`` returned.
    """

    async def tracked() -> _T:
        task = asyncio.current_task()
        assert task is not None
        _commands.append(task)
        try:
            return await main
        finally:
            _commands.remove(task)

    return asyncio.run(tracked())


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[threading.Event]:
    """Have SIGTERM take Ctrl-C's path while a command runs.

    Inside ``asyncio.run`` the SIGINT handler is asyncio's, which cancels the
    command's task; elsewhere it raises KeyboardInterrupt, which a blocking
    portal call turns into a cancellation. Where SIGINT is ignored (a
    background job of a script), asyncio installed no handler: the task of
    :func:`run_command` is cancelled from the loop, and outside one
    KeyboardInterrupt is raised directly.

    Yields:
        An event set once SIGTERM arrived (exit 143 rather than 130).
    """
    received = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield received  # only the main thread may set signal handlers
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        received.set()
        on_sigint = signal.getsignal(signal.SIGINT)
        if callable(on_sigint):
            on_sigint(signal.SIGINT, frame)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise KeyboardInterrupt from None
        if not _commands:
            raise KeyboardInterrupt
        # Raised here, KeyboardInterrupt would land wherever the loop was
        # (midway through a transport's callback) and could leave a
        # multipart upload open. Only the command's own task is cancelled,
        # as asyncio's Ctrl-C does: cancelling every task would also cancel
        # the ones a command shields (the request creating a multipart
        # upload, whose id abort() needs), and the upload would stay open.
        loop.call_soon_threadsafe(_commands[-1].cancel)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)
