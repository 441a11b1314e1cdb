"""What the throttle contenders share: N worker processes started together,
their times gathered, and the figures the issue's targets name.

Standard library only (peers' interpreters import it as a sibling). The
parent starts every worker, waits until each has built its client and
printed ``ready``, then releases them all at once (one line on stdin), so
that no worker's imports or set-up sit inside another's timed region. Each
worker prints one JSON line: ``start``/``end`` (``time.monotonic()``, one
clock for the whole machine on Linux), ``items``, ``bytes``, ``error``.

Every aioflux row and round starts from a fresh node rate state for the
scenario's bucket (:func:`fresh_rate`): the rows share the emulator and
bucket, so a row run after another would otherwise start already paced,
at the rate the earlier one found, and look better than a first contact
with the cap is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["counted", "emulator_counts", "fresh_rate", "gather", "summarize", "worker_main"]


def summarize(spans: Sequence[tuple[float, float]], *, failures: int,
              kinds: Mapping[str, tuple[int, int]], cap: float) -> dict[str, float | int]:
    """The targets' figures from per-worker ``(start, end)`` times and the
    emulator's counters over the timed region, per kind of request.

    The emulator caps reads and writes apart, each at ``cap`` (as GCS and
    S3 limit them apart): a kind's figures are against its own cap, and
    the run's are those of the kind that did worst, so that the reads a
    batch of writes brings along neither lift the goodput past the cap
    nor thin out the writes' throttles.

    ``goodput_of_cap``: the requests the server admitted per second of the
    whole run (first start to last end), over the cap, of the busiest
    kind. ``throttled_pct``: refused requests as a share of all, of the
    kind with the largest share. ``slowest_fastest``: the longest worker
    time over the shortest (each from the common start).

    Args:
        spans: each worker's start and end.
        failures: failed workers.
        kinds: per kind (``"reads"``, ``"writes"``), requests and throttled.
        cap: requests/s of each kind.
    """
    if not spans:
        raise ValueError("no worker times")
    t0 = min(s for s, _ in spans)
    wall = max(e for _, e in spans) - t0
    times = [e - t0 for _, e in spans]
    admitted = max((max(0, sent - refused) for sent, refused in kinds.values()), default=0)
    refused_share = max((refused / sent for sent, refused in kinds.values() if sent), default=0.0)
    return {
        "wall_s": round(wall, 3),
        "goodput_of_cap": round(admitted / wall / cap, 3) if wall > 0 else 0.0,
        "throttled_pct": round(100.0 * refused_share, 2),
        "failures": failures,
        "slowest_fastest": round(max(times) / min(times), 3) if min(times) > 0 else float("inf"),
        "requests": sum(sent for sent, _ in kinds.values()),
        "throttled": sum(refused for _, refused in kinds.values()),
    }


def emulator_counts(endpoint: str) -> dict[str, tuple[int, int]]:
    """Per kind (``reads``, ``writes``), the object requests aioflux's emulator
    served so far (both faces) and those its cap throttled."""
    import urllib.request

    with urllib.request.urlopen(f"{endpoint}/_aioflux_stats", timeout=30) as resp:
        stats = json.load(resp)
    return {kind: (int(stats.get(kind, 0)), int(stats.get(f"throttled_{kind}", 0)))
            for kind in ("reads", "writes")}


def counted(before: Mapping[str, tuple[int, int]],
            after: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """What :func:`emulator_counts` counted between two readings."""
    return {kind: (after[kind][0] - before[kind][0], after[kind][1] - before[kind][1])
            for kind in after}


def fresh_rate(endpoint: str, bucket: str, table: Any = None) -> None:
    """Forget the node's rate state of ``bucket`` on ``endpoint`` (reads and
    writes), as a node that never met its cap: not paced, no debt, the slow
    start's window closed. aioflux rows only (imports aioflux); untimed,
    before any worker starts.

    Args:
        endpoint: the API root the clients are given.
        bucket: the bucket.
        table: a :class:`aioflux._core.rate.shared_table.Table` (default: the
            process's, on the machine's shared file).
    """
    from dataclasses import fields

    from aioflux._core.rate.controller import RateState
    from aioflux._core.rate.shared_table import SharedRate, shared_rate
    from aioflux._net.throttle import gate_key

    for write in (False, True):
        key = gate_key(endpoint.rstrip("/"), bucket, write)
        with (shared_rate(key) if table is None else SharedRate(key, table)).locked() as state:
            # The epoch goes on counting: a gate compares it to the one it saw.
            fresh = RateState(epoch=state.epoch)
            for field in fields(RateState):
                setattr(state, field.name, getattr(fresh, field.name))


def gather(argv: Sequence[str], procs: int) -> list[dict[str, Any]]:
    """Run ``procs`` workers (``argv + ['--worker', i]``), start them together,
    and return their result lines (a worker that died reports its stderr tail)."""
    children = [subprocess.Popen([*argv, "--worker", str(i)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(procs)]
    for child in children:
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "ready":
            # Stop every worker (and close their pipes) before saying why.
            for other in children:
                other.kill()
            _, stderr = child.communicate()
            for other in children:
                other.communicate()
            raise RuntimeError(f"worker not ready: {line!r} {stderr[-2000:]}")
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    out = []
    for child in children:
        stdout, stderr = child.communicate()
        lines = stdout.strip().splitlines()
        if child.returncode != 0 or not lines:
            out.append({"start": None, "end": None, "items": 0, "bytes": 0,
                        "error": f"exit {child.returncode}: {stderr[-500:]}"})
        else:
            out.append(json.loads(lines[-1]))
    return out


def worker_main(work: Any) -> None:
    """In a worker: say ready, wait for the go line, run ``work()`` (returns
    items, bytes) and print the result line. An exception is a failure."""
    import time

    print("ready", flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    error = None
    items = nbytes = 0
    try:
        items, nbytes = work()
    except Exception as exc:  # a failed worker is a figure, not a crash
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    end = time.monotonic()
    print(json.dumps({"start": start, "end": end, "items": items, "bytes": nbytes,
                      "error": error}), flush=True)
