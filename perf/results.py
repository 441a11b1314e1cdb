"""Results as data: one JSON line per timed round, in ``perf/results.jsonl``.

Every recorded run appends one ``run`` line (what ran: scenario, its
description and parameters, baseline, targets, each contender's note and
peer versions, emulator, machine, git revision, load) and one ``sample``
line per contender per round (wall and CPU seconds, RSS, bytes, items, the
emulator's CPU). ``python -m perf report`` renders the tables in
``RESULTS.md``, ``README.md`` and ``docs/performance.md`` from these lines alone, so a table can
always be traced back to the rounds behind it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "RESULTS_JSONL",
    "Run",
    "append",
    "git_revision",
    "group_runs",
    "load",
    "machine_info",
    "run_record",
    "sample_record",
]

PERF_DIR = Path(__file__).resolve().parent
RESULTS_JSONL = PERF_DIR / "results.jsonl"

# Keys of a contender's JSON line that have their own field in a sample
# record; everything else it printed goes under "extra".
_CORE = ("seconds", "bytes", "items", "cpu_user_s", "cpu_sys_s", "peak_rss_mb", "rss_start_mb",
         "emulator_cpu_s", "process_cpu_s")


def git_revision(repo: Path = PERF_DIR.parent) -> str:
    """``HEAD``'s commit, with ``+dirty`` when aioflux/ or perf/ have edits."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "aioflux", "perf"],
                               cwd=repo, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    # A recorded run rewrites these two itself; they are not the code measured.
    edits = [ln for ln in dirty.splitlines()
             if not ln.endswith(("perf/results.jsonl", "perf/RESULTS.md"))]
    return head + ("+dirty" if edits else "")


def machine_info() -> dict[str, Any]:
    """Where the numbers came from."""
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "system": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }


def run_record(
    *,
    run_id: str,
    stamp: dt.datetime,
    scenario: str,
    description: str,
    params: dict[str, str],
    quick: bool,
    rounds: int,
    baseline: str,
    targets: Sequence[tuple[str, str, float]],
    contenders: Sequence[dict[str, Any]],
    notes: Sequence[str],
    emulator: str,
    profile: str,
    warm_up: str,
    load: tuple[float, float],
    machine: dict[str, Any],
    git: str,
    limits: Sequence[Sequence[Any]] = (),
    figures: Sequence[Sequence[str]] = (),
    ratios: bool = True,
    min_rounds: int | None = None,
) -> dict[str, Any]:
    """The ``run`` line: everything about a run except its rounds.

    ``targets`` are ``(mine, other, at_least)``; ``contenders`` are dicts
    with ``name``, ``note``, ``venv``, ``versions`` and ``skipped``;
    ``limits`` are ``(contender, key, op, bound, unit, label)``, and
    ``of`` after them for a bound relative to another contender's figure;
    ``figures`` ``(key, heading)`` (both left out of the line when empty,
    so the runs of scenarios without them read as before); ``ratios``
    False (written only then) keeps the baseline's wall time unpaired;
    ``min_rounds`` (written only when set) lowers the rounds the report
    needs to show the run's pairs and figures.
    """
    extra: dict[str, Any] = {}
    if limits:
        extra["limits"] = [list(lim) for lim in limits]
    if figures:
        extra["figures"] = [list(f) for f in figures]
    if not ratios:
        extra["ratios"] = False
    if min_rounds is not None:
        extra["min_rounds"] = min_rounds
    return {**extra,
        "kind": "run",
        "run": run_id,
        "stamp": stamp.isoformat(timespec="seconds"),
        "scenario": scenario,
        "description": description,
        "params": dict(params),
        "quick": quick,
        "rounds": rounds,
        "baseline": baseline,
        "targets": [list(t) for t in targets],
        "contenders": list(contenders),
        "notes": list(notes),
        "emulator": emulator,
        "profile": profile,
        "warm_up": warm_up,
        "load": [round(load[0], 2), round(load[1], 2)],
        "machine": machine,
        "git": git,
    }


def sample_record(
    *,
    run_id: str,
    scenario: str,
    contender: str,
    round_no: int,
    result: dict[str, Any] | None,
    error: str | None,
    machine: dict[str, Any],
    git: str,
) -> dict[str, Any]:
    """One contender's round: its JSON line's figures, or the error it hit.

    A round whose result was wrong (item or byte count) keeps its figures
    and its error, so a fast-but-wrong result stays visible.
    """
    line: dict[str, Any] = {"kind": "sample", "run": run_id, "scenario": scenario,
                            "contender": contender, "round": round_no, "error": error}
    src = result or {}
    line["wall_s"] = _num(src.get("seconds"))
    line["cpu_user_s"] = _num(src.get("cpu_user_s"))
    line["cpu_sys_s"] = _num(src.get("cpu_sys_s"))
    line["process_cpu_s"] = _num(src.get("process_cpu_s"))
    line["emulator_cpu_s"] = _num(src.get("emulator_cpu_s"))
    line["peak_rss_mb"] = _num(src.get("peak_rss_mb"))
    line["rss_start_mb"] = _num(src.get("rss_start_mb"))
    line["bytes"] = src.get("bytes")
    line["items"] = src.get("items")
    line["extra"] = {k: v for k, v in src.items() if k not in _CORE}
    line["machine"] = machine
    line["git"] = git
    return line


def _num(value: Any) -> float | None:
    return None if value is None else round(float(value), 4)


def append(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append ``records`` as JSON lines (keys sorted, so diffs stay small)."""
    with path.open("a") as fh:
        for rec in records:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")


def load(path: Path = RESULTS_JSONL) -> list[dict[str, Any]]:
    """Every record in ``path`` (none if it does not exist).

    Raises:
        ValueError: a line is not a JSON object (names the line).
    """
    if not path.exists():
        return []
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if not isinstance(rec, dict) or rec.get("kind") not in ("run", "sample"):
            raise ValueError(f"{path}:{number}: not a run or sample record")
        out.append(rec)
    return out


@dataclass
class Run:
    """A ``run`` line and its ``sample`` lines, grouped by contender."""

    info: dict[str, Any]
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def order(self) -> list[str]:
        return [c["name"] for c in self.info["contenders"]]

    def ok(self, contender: str) -> list[dict[str, Any]]:
        """Rounds with figures (wrong-count rounds included: they ran)."""
        return [s for s in self.samples.get(contender, []) if s.get("wall_s") is not None]


def group_runs(records: Sequence[dict[str, Any]]) -> list[Run]:
    """Runs in file order, each with its samples.

    Raises:
        ValueError: a sample names a run that has no ``run`` line.
    """
    runs: dict[str, Run] = {}
    for rec in records:
        if rec["kind"] == "run":
            runs[rec["run"]] = Run(rec)
    for rec in records:
        if rec["kind"] == "sample":
            if rec["run"] not in runs:
                raise ValueError(f"sample of unknown run {rec['run']!r}")
            runs[rec["run"]].samples.setdefault(rec["contender"], []).append(rec)
    return list(runs.values())
