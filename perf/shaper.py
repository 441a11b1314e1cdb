"""The emulator's network in front of a server that has none.

Azurite (the ``az_*`` scenarios) and nginx (``http_shards``) have no
latency or bandwidth profile: a client reading them over loopback sees
neither the 20 ms to first byte nor the caps of one stream and of the
host's NIC that aioflux's emulator gives the other scenarios. The shaper
is :class:`aioflux.testing.FaultProxy` with the profile's knobs and no
cuts, run as a process of its own on the project's interpreter (its CPU
is the network's, not a contender's):

    python -m perf.shaper UPSTREAM [--profile gcs-like]

prints ``perf shaper listening on http://127.0.0.1:PORT`` and relays
until it is terminated. :func:`shaped` runs it for a block.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PROFILE_NOTES", "shaped"]

_READY = "perf shaper listening on "
_REPO = Path(__file__).resolve().parent.parent
#: what each profile means, for the notes beside the tables
PROFILE_NOTES = {
    "gcs-like": "20 ms to first byte, 100 MB/s per connection, 800 MB/s per host",
    "none": "unshaped",
}


@contextlib.contextmanager
def shaped(upstream: str, profile: str = "gcs-like", *,
           python: str | None = None) -> Iterator[str]:
    """The endpoint of a shaper in front of ``upstream`` (``http://HOST:PORT``),
    for the block; ``upstream`` itself for the profile ``none``.

    Args:
        upstream: the server.
        profile: ``gcs-like`` or ``none``.
        python: the project's interpreter (default: this one; a contender
            in a peer's environment passes ``$PERF_PROJECT_PYTHON``).

    Raises:
        RuntimeError: the shaper did not start.
    """
    if profile == "none":
        yield upstream
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [python or sys.executable, "-m", "perf.shaper", upstream, "--profile", profile],
        stdout=subprocess.PIPE, text=True, env=env, cwd=_REPO)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith(_READY):
            raise RuntimeError(f"perf shaper did not start (exit {proc.wait()}): {line!r}")
        yield line[len(_READY):].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def main(argv: list[str] | None = None) -> None:
    from aioflux.testing import GCS_LIKE_PROFILE, FaultProxy

    parser = argparse.ArgumentParser(prog="python -m perf.shaper")
    parser.add_argument("upstream", help="http://HOST:PORT of the server to shape")
    parser.add_argument("--profile", choices=("gcs-like",), default="gcs-like")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FaultProxy(args.upstream, profile=GCS_LIKE_PROFILE) as proxy:
        print(f"{_READY}{proxy.endpoint}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
