"""Run a function in a forked child of the test process, as a DataLoader
worker runs: the test fails if the child raises or hangs."""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable

import pytest


def in_fork(child: Callable[[], None], timeout: float = 20.0) -> None:
    """Run ``child`` in a forked process; fail if it raises or hangs."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child reports by its exit code)
        code = 1
        try:
            child()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, "the child failed (see stderr)"
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child still ran after {timeout:g} s")
