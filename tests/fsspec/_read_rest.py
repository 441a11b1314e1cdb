"""What a spawned process does with a read file it was handed, in a module
of its own: the process imports it (and aioflux) only, not the tests."""

from __future__ import annotations

import os
from typing import Any

from aioflux._core.concurrency.portal import call


def read_rest(f: Any) -> tuple[int, bytes, int]:
    """``(position, the rest of the file, this process's pid)``; then the
    file and its filesystem's connections are closed."""
    try:
        return f.tell(), f.read(), os.getpid()
    finally:
        f.close()
        call(f.fs.store.aclose())
