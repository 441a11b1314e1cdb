"""Scenarios: each module defines ``plan(options) -> harness.Plan``.

A scenario names the objects to seed and the contenders (name, venv or
None for the project's python, script, args); the harness does the rest.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import cast

from perf.harness import Options, Plan

__all__ = ["load", "names"]


def names() -> list[str]:
    """Every scenario module in this package."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load(name: str) -> Callable[[Options], Plan]:
    """The ``plan`` function of scenario ``name``.

    Raises:
        KeyError: there is no such scenario.
    """
    if name not in names():
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(names())}")
    module = importlib.import_module(f"{__name__}.{name}")
    return cast(Callable[[Options], Plan], module.plan)
