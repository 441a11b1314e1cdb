"""What every contender script shares: the manifest in, one JSON line out.

Contender scripts run under a peer's own interpreter, where the ``perf``
package is not importable; they import this module as a sibling (the
script's directory is ``sys.path[0]``). Standard library only.

Protocol: ``python SCRIPT MANIFEST [scenario args...]``. The manifest is
JSON with ``endpoint``, ``s3_endpoint`` (the emulator's S3 face over the same
store, or null), ``azure`` (Azurite's connection string in the ``az_*``
scenarios, else null), ``bucket`` and ``objects`` (``[[name, size], ...]``).
The script does its imports and client construction untimed, times only
the work, and prints exactly one line of JSON as its last stdout line:
``{"seconds", "bytes", "items", "cpu_user_s", "cpu_sys_s", "peak_rss_mb",
"rss_start_mb", ...}``.

CPU is ``getrusage`` over the timed region: this process (all its threads)
plus the children it reaped during it (DataLoader workers are joined when
their iterator ends). CPU per unit of work does not move with the shared
machine's load the way wall time does.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["Manifest", "Stopwatch", "load", "object_gets", "report", "rss_mb", "run"]


@dataclass(frozen=True)
class Manifest:
    endpoint: str
    bucket: str
    objects: list[tuple[str, int]]
    s3_endpoint: str | None = None
    azure: str | None = None

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.objects]

    @property
    def s3(self) -> str:
        """The S3 face's endpoint; exits if the emulator has none."""
        if not self.s3_endpoint:
            raise SystemExit("this scenario needs the aioflux emulator's S3 face "
                             "(fake-gcs-server has none)")
        return self.s3_endpoint


def load() -> tuple[Manifest, list[str]]:
    """The manifest named by ``argv[1]`` and the remaining arguments."""
    with open(sys.argv[1]) as fh:
        data = json.load(fh)
    manifest = Manifest(
        data["endpoint"], data["bucket"], [(str(n), int(s)) for n, s in data["objects"]],
        data.get("s3_endpoint"), data.get("azure"),
    )
    return manifest, sys.argv[2:]


def object_gets(endpoint: str) -> int | None:
    """The object reads aioflux's emulator has served so far (media GETs, and
    composes of small ones); None from another server.

    Read from its counters endpoint, not a GCS route, by every process alike.
    """
    import urllib.request

    try:
        with urllib.request.urlopen(f"{endpoint}/_aioflux_stats", timeout=10) as resp:
            stats = json.load(resp)
    except (OSError, ValueError):
        return None
    return int(stats.get("get_media", 0)) + int(stats.get("compose", 0))


def rss_mb() -> float:
    """Current resident set size in MB (MiB, as ru_maxrss reports)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _reset_peak_rss() -> bool:
    # ru_maxrss survives exec, so a contender would inherit the harness's
    # peak; writing 5 to clear_refs resets this process's VmHWM (Linux >= 4.0).
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def _vm_hwm_mb() -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _peak_rss_mb() -> float:
    # Children count too: a peer that fans out into processes must not look
    # lighter than it is (ru_maxrss is KiB on Linux).
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    own = _vm_hwm_mb()
    if own is None:
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return max(own, kids)


def _cpu() -> tuple[float, float]:
    """User and system CPU seconds of this process and its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + kids.ru_utime, own.ru_stime + kids.ru_stime


class Stopwatch:
    """Times the measured region, its CPU, and notes RSS when it starts."""

    def __init__(self) -> None:
        self.rss_start_mb = 0.0
        self._t0 = 0.0
        self._cpu0 = (0.0, 0.0)
        self.seconds = 0.0
        self.cpu_user_s = 0.0
        self.cpu_sys_s = 0.0

    def __enter__(self) -> Stopwatch:
        _reset_peak_rss()
        self.rss_start_mb = rss_mb()
        self._cpu0 = _cpu()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        user, system = _cpu()
        self.cpu_user_s = user - self._cpu0[0]
        self.cpu_sys_s = system - self._cpu0[1]


def report(watch: Stopwatch, *, nbytes: int, items: int, **extra: object) -> None:
    """Print the one JSON result line."""
    line = {
        "seconds": watch.seconds,
        "bytes": nbytes,
        "items": items,
        "cpu_user_s": round(watch.cpu_user_s, 3),
        "cpu_sys_s": round(watch.cpu_sys_s, 3),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        "rss_start_mb": round(watch.rss_start_mb, 1),
        **extra,
    }
    print(json.dumps(line), flush=True)


def run(main: Coroutine[Any, Any, T], loop: str = "uvloop") -> tuple[T, str]:
    """Run ``main`` on uvloop when asked for and importable, else asyncio.

    Returns:
        ``main``'s result and the name of the loop that ran it.
    """
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    name = "asyncio"
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            factory, name = uvloop.new_event_loop, "uvloop"
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main), name
    if factory is not None:  # 3.10 has no loop_factory; a policy does the same
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return asyncio.run(main), name
