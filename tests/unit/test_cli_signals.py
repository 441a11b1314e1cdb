"""SIGTERM takes Ctrl-C's path in the CLI, also where SIGINT is ignored."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from aioflux import cli


def test_sigterm_with_sigint_ignored_cancels_the_loop_s_tasks_from_the_loop() -> None:
    # A background job of a script ignores SIGINT, so asyncio.run installs
    # no handler of its own. KeyboardInterrupt raised wherever the signal
    # landed (midway through a transport's callback) could leave a multipart
    # upload open: the tasks are cancelled from the loop instead.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    seen: list[str] = []

    async def command() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    try:
        with cli._sigterm_as_interrupt() as terminated:
            with pytest.raises(asyncio.CancelledError):
                asyncio.run(command())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert terminated.is_set() and seen == ["cancelled"]
