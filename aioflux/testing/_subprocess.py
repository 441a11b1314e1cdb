"""The emulator in a child process, for demos and benchmarks.

A separate process keeps the emulator off the caller's interpreter lock, so
its cost does not show up as client time.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["emulator_process"]


@contextmanager
def emulator_process(*flags: str) -> Iterator[str]:
    """Run ``python -m aioflux.testing --port 0 FLAGS...`` until the block ends.

    Args:
        *flags: emulator flags, e.g. ``"--profile", "gcs-like", "--bucket", "b"``.

    Yields:
        The emulator's endpoint URL.

    Raises:
        RuntimeError: the emulator did not start.
    """
    proc = subprocess.Popen([sys.executable, "-m", "aioflux.testing", "--port", "0", *flags],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"the aioflux emulator did not start (exit {proc.poll()})")
        yield line.split()[-1]
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
