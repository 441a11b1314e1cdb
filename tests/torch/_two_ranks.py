"""A 2-process gloo job for the ``listing=`` tests: the parent's side starts
both ranks and collects what each recorded; the ranks' side runs the
scenarios of a worker module and records each one's outcome.

Each rank writes, per scenario, what its scenario returned (or the
traceback it crashed with) to ``OUT/<rank>.json``.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB_GUARD = 100.0  # seconds: a hang guard for the whole job, never the assertion

Ranks = tuple[dict[str, Any], dict[str, Any]]


def run_job(module: str, base: Path, root: Path) -> Ranks:
    """Run ``python -m module RANK 2 INIT ROOT OUT`` as ranks 0 and 1; what each recorded."""
    out = base / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    procs = [subprocess.Popen(
        [sys.executable, "-m", module, str(rank), "2", str(base / "init"), str(root), str(out)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in (0, 1)]
    deadline = time.monotonic() + JOB_GUARD
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
            proc.communicate()
        pytest.fail(f"the 2-rank job still ran after {JOB_GUARD:g} s (a collective hung)")
    for rank, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{log}"
    found: Ranks = (json.loads((out / "0.json").read_text()),
                    json.loads((out / "1.json").read_text()))
    for rank, seen in enumerate(found):
        crashes = {k: v["crash"] for k, v in seen.items() if "crash" in v}
        assert not crashes, f"rank {rank}: {crashes}"
    return found


def rank_main(argv: list[str], guard: float,
              scenarios: Callable[[int, Path, Path], dict[str, Callable[[], Any]]]) -> None:
    """A rank's body: join the gloo group, run every scenario, record each outcome.

    Args:
        argv: RANK WORLD INIT_FILE ROOT OUT.
        guard: the collectives' timeout (seconds): a hang guard.
        scenarios: the scenarios of this rank, by name, given rank, root and out.
    """
    import torch.distributed as dist

    rank, world, init, root, out = int(argv[0]), int(argv[1]), argv[2], argv[3], argv[4]
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=guard))
    results: dict[str, Any] = {}
    try:
        for name, run in scenarios(rank, Path(root), Path(out)).items():
            try:
                results[name] = run()
            except Exception:
                results[name] = {"crash": traceback.format_exc()}
        dist.barrier()
    finally:
        Path(out, f"{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()
