"""Where a hung test's forked children stand, before pytest-timeout ends it.

pytest-timeout prints the stacks of this process only; a test waiting on a
fork DataLoader or DCP worker then shows nothing but the wait. Every
process forked from this one inherits a faulthandler on SIGUSR1, and a
little before a test's timeout the children still running are sent it:
their stacks land in the test's captured stderr.

Only forks of this process are signalled (they share its command line):
spawned workers and the servers the tests start would die of SIGUSR1.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

_DUMP = signal.SIGUSR1
# Seconds before pytest-timeout's deadline: time for the dumps to be written.
_AHEAD = 10.0


def pytest_configure(config: pytest.Config) -> None:
    faulthandler.register(_DUMP, all_threads=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    timer = None
    limit = _timeout_of(item)
    if limit > 2 * _AHEAD:
        timer = threading.Timer(limit - _AHEAD, dump_forked_children)
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    try:
        return float(item.config.getini("timeout") or 0)
    except ValueError:
        return 0.0


def dump_forked_children() -> None:
    """Send every process forked from this one (and still running) SIGUSR1:
    each writes its threads' stacks to the test's captured stderr."""
    me = os.getpid()
    mine = _cmdline(me)
    for pid in _descendants(me):
        if _cmdline(pid) == mine:
            print(f"hang report: the stacks of forked child {pid} follow", file=sys.stderr,
                  flush=True)
            try:
                os.kill(pid, _DUMP)
            except OSError:
                pass  # it ended meanwhile


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # The parent pid follows the command name, which may hold
                # spaces and parentheses: read after the last ")".
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found: list[int] = []
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
