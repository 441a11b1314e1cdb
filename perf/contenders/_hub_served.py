"""The manifest's Parquet files on a fake Hub, for the parquet contenders.

Mirrored from the emulator once per machine (``_http_served``'s mirror,
untimed), pushed into the dataset repo ``perf/parquet`` of a fake Hub
(``_hub_server.py``, a process of its own on the project's interpreter,
``PERF_PROJECT_PYTHON``), the Hub's origin and its CDN each behind
``perf/shaper.py`` (the harness's ``PERF_PROFILE``: 20 ms, 100 MB/s a
connection), the Hub's redirects naming the shaped CDN. ``HF_ENDPOINT``
is set to the shaped Hub for the block, as a user points
``huggingface_hub``, HF ``datasets`` and aioflux's ``hf://`` at a mirror.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _contender import Manifest

# A peer's environment has no PYTHONPATH: the repository goes last on the
# path, for the shaper and the mirror (standard library only on this side).
_HERE = Path(__file__).resolve().parent
if str(_HERE.parent.parent) not in sys.path:
    sys.path.append(str(_HERE.parent.parent))

from _http_served import _mirror  # noqa: E402

from perf.shaper import shaped  # noqa: E402

__all__ = ["REPO", "Hub", "served_hub"]

REPO = "perf/parquet"


@dataclass
class Hub:
    """A running fake Hub: ``endpoint`` (shaped), ``files`` (the repo's paths)."""

    endpoint: str
    files: list[str]
    _proc: subprocess.Popen[str]

    def _ask(self, word: str) -> str:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{word}\n")
        self._proc.stdin.flush()
        return self._proc.stdout.readline()

    def cdn_bytes(self) -> int:
        """The file bytes the CDN has answered with so far."""
        return int(self._ask("bytes").split()[1])

    def requests(self) -> list[list[str]]:
        """Every request either origin received, ``[origin, method, path, range]``."""
        found: list[list[str]] = json.loads(self._ask("requests"))
        return found


@contextlib.contextmanager
def served_hub(manifest: Manifest, prefix: str) -> Iterator[Hub]:
    """The manifest's objects under ``prefix`` as ``data/NAME`` in the
    dataset repo :data:`REPO` of a shaped fake Hub; ``HF_ENDPOINT`` set."""
    names = [(n, s) for n, s in manifest.objects if n.startswith(prefix)]
    mirrored = _mirror(manifest, names)
    profile = os.environ.get("PERF_PROFILE", "gcs-like")
    python = os.environ.get("PERF_PROJECT_PYTHON") or sys.executable
    with tempfile.TemporaryDirectory(prefix="aioflux-perf-hub-") as tmp:
        root = Path(tmp)
        (root / "data").mkdir()
        for name, _ in names:  # links: the server reads them once, at its start
            os.symlink(mirrored / name, root / "data" / Path(name).name)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_HERE.parent.parent), env.get("PYTHONPATH")) if p
        )
        proc = subprocess.Popen(
            [python, str(_HERE / "_hub_server.py"), str(root), REPO],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            line = proc.stdout.readline().split()
            if not line or line[0] != "hub":
                raise RuntimeError(f"the fake Hub did not start: {line}")
            with (
                shaped(line[1], profile, python=python) as hub,
                shaped(line[2], profile, python=python) as cdn,
            ):
                proc.stdin.write(f"cdn {cdn}\n")
                proc.stdin.flush()
                proc.stdout.readline()
                before = os.environ.get("HF_ENDPOINT")
                os.environ["HF_ENDPOINT"] = hub
                try:
                    yield Hub(hub, [f"data/{Path(n).name}" for n, _ in names], proc)
                finally:
                    if before is None:
                        os.environ.pop("HF_ENDPOINT", None)
                    else:
                        os.environ["HF_ENDPOINT"] = before
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
