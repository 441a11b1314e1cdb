"""Checks that say whether a contender can run right now, and why not."""

from __future__ import annotations

import subprocess
import sys

from perf import emulator

__all__ = ["project_imports"]


def project_imports(statement: str) -> str | None:
    """None if ``statement`` runs in the project's python, else the error.

    Used for aioflux contenders while the client is still being written:
    the run goes on without them and the results say so.
    """
    done = subprocess.run(
        [sys.executable, "-c", statement],
        check=False,
        capture_output=True,
        text=True,
        env=emulator.project_env(),
        cwd=emulator.REPO_ROOT,
    )
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or ["failed"])[-1]
    return f"`{statement}` failed: {last}"
