"""SIGTERM takes Ctrl-C's path in the CLI, also where SIGINT is ignored; Ctrl-C
while the CLI starts is one line and exit 130."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
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


# Ctrl-C during start-up: the command's script is run as the shell runs it,
# with Ctrl-C raised in the process itself (signal.raise_signal: its handler
# runs before the call returns) the moment one module's import begins: no
# timing decides where it lands.
_INTERRUPT_AT = """
import os, runpy, signal, sys

at, mark, script = sys.argv[1:4]
# As an interactive shell starts a command: Ctrl-C not ignored, even where
# this test's own runner was started in the background (which ignores it).
signal.signal(signal.SIGINT, signal.default_int_handler)

class InterruptAt:
    def find_spec(self, name, path=None, target=None):
        if name == at:
            sys.meta_path.remove(self)
            with open(mark, "w") as f:
                f.write(name)
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptAt())
sys.argv = sys.argv[3:]
if script == "-m":
    sys.argv[0] = "aioflux"
    runpy.run_module("aioflux", run_name="__main__", alter_sys=True)
else:
    runpy.run_path(script, run_name="__main__")
"""


def _script() -> list[str]:
    """The installed ``aioflux`` console script, else ``-m aioflux``."""
    script = Path(sys.executable).with_name("aioflux")
    return [str(script)] if script.is_file() else ["-m"]


@pytest.mark.parametrize("module", [
    "aioflux.cli._main",  # the first import main makes
    "argparse",
    "aioflux.cli._objects",  # the command's module, while the parser is built
    "aiohttp",  # deep in the stores the command imports
    "aioflux.cli._signals",
])
def test_ctrl_c_while_the_cli_starts_is_one_line_and_exit_130(module: str,
                                                              tmp_path: Path) -> None:
    # It was a 20-30 line KeyboardInterrupt traceback of the import it cut.
    mark = tmp_path / "interrupted"
    result = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_AT, module, str(mark), *_script(),
         "ls", "gs://bkt/", "--endpoint", "http://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120, check=False)
    assert mark.read_text() == module  # the import began, and Ctrl-C came then
    assert (result.returncode, result.stdout, result.stderr) == (130, "",
                                                                "aioflux: interrupted\n")
