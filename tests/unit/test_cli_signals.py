"""SIGTERM takes Ctrl-C's path in the CLI, also where SIGINT is ignored."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from aioflux.cli._signals import run_command, sigterm_as_interrupt


def _terminated_with_sigint_ignored(command: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``command`` as the CLI does, SIGINT ignored (as in a background
    job of a script, where asyncio.run installs no handler of its own); it
    sends itself SIGTERM and must end cancelled."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt() as terminated:
            with pytest.raises(asyncio.CancelledError):
                run_command(command())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert terminated.is_set()


def test_sigterm_with_sigint_ignored_cancels_the_command_from_the_loop() -> None:
    # KeyboardInterrupt raised wherever the signal landed (midway through a
    # transport's callback) could leave a multipart upload open: the
    # command is cancelled from the loop instead.
    seen: list[str] = []

    async def command() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    _terminated_with_sigint_ignored(command)
    assert seen == ["cancelled"]


def test_sigterm_with_sigint_ignored_leaves_the_tasks_a_command_shields() -> None:
    # As Ctrl-C does, only the command's task is cancelled. A task it
    # shields (the request creating a multipart upload, whose id the abort
    # needs) runs on: cancelling every task lost that id, and the upload
    # stayed open.
    seen: list[str] = []

    async def command() -> None:
        answered = asyncio.Event()

        async def create_upload() -> str:
            await answered.wait()
            return "upload id"

        creating = asyncio.ensure_future(create_upload())
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.shield(creating)
        except asyncio.CancelledError:
            answered.set()
            seen.append(await creating)
            raise

    _terminated_with_sigint_ignored(command)
    assert seen == ["upload id"]
