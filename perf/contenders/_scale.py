"""What the ``scale`` scenario's contenders share (standard library only).

The data set: ``total`` lines of ``line`` bytes (digits, then a newline),
in ``shards`` shards of nearly equal counts, the same bytes every run, so
aioflux's lines shards, MosaicML's MDS shards and LitData's chunks all
hold the same samples. The measurements every contender makes alike:
memory of this process (``VmHWM`` / ``VmRSS``), of its spawned DataLoader
workers (read from ``/proc`` by this process, which needs no help from
the library under test) and of a fresh interpreter that only imported
what a worker imports (the import baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["data_root", "drive", "import_baseline_mib", "line_bytes", "made_before", "shard_counts",
           "shard_lines", "status_mib", "worker_peaks_mib"]

MIB = 2**20


def data_arguments() -> argparse.ArgumentParser:
    """The data set every contender makes and reads: ``--total`` lines of
    ``--line`` bytes in ``--shards`` shards."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--total", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--line", type=int, default=9)
    return parser


def shard_counts(total: int, shards: int) -> list[int]:
    """Lines per shard: ``total`` split into ``shards`` counts differing by at most one."""
    if total < 0 or shards < 1:
        raise ValueError(f"shard_counts: total {total}, shards {shards}")
    base, extra = divmod(total, shards)
    return [base + (1 if k < extra else 0) for k in range(shards)]


def line_bytes(index: int, line: int) -> bytes:
    """Sample ``index``: its number in decimal, zero-padded to ``line - 1`` digits, and a newline.

    Numbers wider than the line keep their last digits (the line's size is the contract).
    """
    if line < 2:
        raise ValueError(f"line_bytes: a line of {line} bytes holds no digit")
    digits = line - 1
    return b"%0*d\n" % (digits, index % 10**digits)


def shard_lines(start: int, count: int, line: int) -> Iterator[bytes]:
    """The lines ``start`` .. ``start + count - 1``, in blocks of at most 65,536 (joined)."""
    line_bytes(start, line)  # checks the size
    digits, block = line - 1, 65_536
    wrap = 10**digits
    for lo in range(start, start + count, block):
        hi = min(start + count, lo + block)
        # line_bytes inlined: a call a line was most of 1e8 lines' generation time.
        yield b"".join([b"%0*d\n" % (digits, i % wrap) for i in range(lo, hi)])


def data_root() -> str:
    """Where generated data sets live between rounds (``$AIOFLUX_PERF_SCALE_DIR``)."""
    return os.environ.get("AIOFLUX_PERF_SCALE_DIR", "/tmp/aioflux-perf-scale")


def made_before(marker: Path) -> dict[str, float]:
    """What making a kept data set took (its ``done.json``): the data sets
    are made once, keyed by their parameters, and reused by later runs."""
    made: dict[str, float] = json.loads(marker.read_text())
    return made


def status_mib(field: str, pid: int | str = "self") -> float | None:
    """``field`` (``VmHWM``, ``VmRSS``) of ``/proc/PID/status`` in MiB; None if gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for row in fh:
                if row.startswith(field + ":"):
                    return int(row.split()[1]) / 1024
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        # The parent pid is the second field after the command's closing parenthesis.
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid == pid and b"spawn_main" in cmdline:
            out.append(int(entry))
    return out


def worker_peaks_mib() -> list[float]:
    """Peak RSS (``VmHWM``) of every spawned worker of this process, in MiB.

    Spawned multiprocessing children run ``spawn_main``; the resource
    tracker does not, and is left out.
    """
    peaks = [status_mib("VmHWM", pid) for pid in _children(os.getpid())]
    return sorted((p for p in peaks if p is not None), reverse=True)


def import_baseline_mib(imports: str, python: str = sys.executable) -> float:
    """Peak RSS of a fresh interpreter that ran ``imports`` (what a spawned worker imports)."""
    code = (f"{imports}\n"
            "for row in open('/proc/self/status'):\n"
            "    if row.startswith('VmHWM:'): print(int(row.split()[1]) / 1024)\n")
    done = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def drive(loader: Any, next_epoch: Callable[[], None], batches: int = 50) -> dict[str, Any]:
    """``batches`` batches, ``next_epoch()``, a new iterator's first batch and ``batches - 1`` more.

    Returns the items seen, both first batches' seconds (``first_batch_s``,
    ``epoch_first_s``), whether the epochs' first batches differ, and the
    spawned workers' peak RSS read before the iterator goes away.
    """
    it = iter(loader)
    started = time.perf_counter()
    first0 = next(it)
    first_s = time.perf_counter() - started
    items = len(first0)
    for _ in range(batches - 1):
        items += len(next(it))
    next_epoch()
    started = time.perf_counter()
    it = iter(loader)
    first1 = next(it)
    epoch_first_s = time.perf_counter() - started
    items += len(first1)
    for _ in range(batches - 1):
        items += len(next(it))
    return {"items": items, "first_batch_s": round(first_s, 3),
            "epoch_first_s": round(epoch_first_s, 3), "epoch_differs": first0 != first1,
            "workers_peak_mib": [round(w, 1) for w in worker_peaks_mib()],
            "load1": round(os.getloadavg()[0], 2)}
