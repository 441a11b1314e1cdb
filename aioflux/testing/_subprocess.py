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

# How long the emulator gets to stop on SIGTERM before it is killed.
STOP_WAIT = 10.0


@contextmanager
def emulator_process(*flags: str) -> Iterator[str]:
    """Run ``python -m aioflux.testing --port 0 FLAGS...`` until the block ends.

    Args:
        *flags: emulator flags, e.g. ``"--profile", "gcs-like", "--bucket", "b"``.

    Yields:
        The emulator's endpoint URL.

    Raises:
        ChildProcessError: the emulator did not start (an OSError: the
            command line reports it in one line, as a local failure).
    """
    proc = subprocess.Popen([sys.executable, "-m", "aioflux.testing", "--port", "0", *flags],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:  # its stdout closed: it exited (its error is on stderr)
            raise ChildProcessError(f"the aioflux emulator did not start (exit status "
                                    f"{proc.wait()})")
        if "listening on" not in line:
            raise ChildProcessError(f"the aioflux emulator did not start: it printed "
                                    f"{line.strip()!r}")
        yield line.split()[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            # Not left running (nor the waiting caller's error replaced).
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
