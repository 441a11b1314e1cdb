"""Faults in the calls a file lock makes, for the lock takers' tests
(the local store's, the disk cache's): every ``os.stat`` of one path
answered by the test, counted, and a spin turned into a failure."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["SPIN", "descriptors", "failing", "stat_of"]

# More calls on one lock file than any bounded lock takes: a spin fails the
# test instead of hanging it.
SPIN = 10_000


def descriptors() -> int:
    """This process's open descriptors."""
    return len(os.listdir("/proc/self/fd"))


def stat_of(path: Path, monkeypatch: pytest.MonkeyPatch,
            answer: Callable[[int], os.stat_result]) -> list[int]:
    """Route every ``os.stat`` of ``path`` through ``answer(call number)``;
    the returned list counts the calls."""
    stat = os.stat
    calls = [0]

    def patched(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if isinstance(p, (str, os.PathLike)) and os.fspath(p) == str(path):
            calls[0] += 1
            if calls[0] > SPIN:
                raise AssertionError(f"{calls[0]} stats of {path}: a lock spins on it")
            return answer(calls[0])
        return stat(p, *args, **kwargs)

    monkeypatch.setattr(os, "stat", patched)
    return calls


def failing(code: int, path: Path) -> Callable[[int], os.stat_result]:
    """An ``answer`` for :func:`stat_of` that fails with ``code``."""
    def fail(_: int) -> os.stat_result:
        raise OSError(code, os.strerror(code), str(path))
    return fail
