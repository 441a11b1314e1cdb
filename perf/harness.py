"""The shared machinery: emulator, seed, interleaved rounds, medians, report.

A run is laid out so that only ratios measured within it are compared:

1. start one emulator and seed the scenario's objects into it (plain aiohttp);
2. read everything once, untimed, so no contender pays for a cold emulator;
3. for each round, run every contender once, in the scenario's order
   (A B C A B C ...), each as its own subprocess that prints one JSON line;
   drift on a shared machine then hits every contender alike;
4. record one JSON line per contender per round in ``perf/results.jsonl``
   (``perf/results.py``), with the contender's own CPU over its timed work;
5. print the run's table (``perf/report.py``: medians, and ratios as the
   median of per-round ratios with their spread) and regenerate the tables
   in ``perf/RESULTS.md``, ``README.md`` and ``docs/performance.md`` from the data.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf import emulator, peers, results
from perf.seed import Seeded, read_all, seed
from perf.seed_azure import read_all_azure, seed_azure

__all__ = ["Contender", "Limit", "Options", "Outcome", "Plan", "Target", "not_recorded", "on_loan",
           "run"]

PERF_DIR = Path(__file__).resolve().parent
CONTENDERS_DIR = PERF_DIR / "contenders"
RUNS_DIR = PERF_DIR / ".runs"


@dataclass(frozen=True)
class Contender:
    """One way of doing the scenario's work.

    Attributes:
        name: the table row.
        script: a file in ``perf/contenders`` run as
            ``python SCRIPT MANIFEST *args`` (see ``_contender.py``).
        venv: a key of ``peers.PEERS``, or None for the project's python
            with the repository importable.
        args: scenario arguments for the script.
        note: how this contender is configured, for the results notes.
        caveat: a degraded path it ran that the tables name beside its row
            (MSC's Python provider), in a few words.
        available: returns None when the contender can run, or why not.
    """

    name: str
    script: str
    venv: str | None = None
    args: tuple[str, ...] = ()
    note: str = ""
    available: Callable[[], str | None] | None = None
    caveat: str = ""

    def python(self) -> str:
        return sys.executable if self.venv is None else str(peers.python_for(self.venv))


@dataclass(frozen=True)
class Target:
    """A goal: ``mine``'s throughput / ``other``'s throughput >= ``at_least``.

    ``mine`` defaults to the plan's baseline; naming it pairs like with like
    (a 2-worker loader against the peer's 2-worker loader). ``at_least``
    None reports the pair's ratio with no goal (a figure beside the goals,
    e.g. a first epoch that also builds what later ones reuse).
    """

    other: str
    at_least: float | None
    mine: str | None = None


@dataclass(frozen=True)
class Limit:
    """A goal on one figure of one contender: its median over the rounds
    ``<=`` (or ``>=``) ``bound``.

    ``key`` is a key of the contender's JSON line (``"seconds"`` for its wall
    time); ``label`` names the figure in the tables, ``unit`` its unit.
    ``of`` names another contender of the plan: the bound is then ``bound``
    times that contender's median of the same figure in the same run (a
    CPU cost against a floor measured beside it, 16 workers against 2).
    """

    contender: str
    key: str
    op: str
    bound: float
    unit: str = ""
    label: str = ""
    of: str = ""

    def __post_init__(self) -> None:
        if self.op not in ("<=", ">="):
            raise ValueError(f"Limit {self.key}: op must be '<=' or '>=', not {self.op!r}")


@dataclass(frozen=True)
class Options:
    """What the command line chose for a scenario."""

    quick: bool = False
    params: dict[str, str] = field(default_factory=dict)

    def get(self, key: str, default: int) -> int:
        return int(self.params.get(key, default))


@dataclass(frozen=True)
class Plan:
    """Everything a scenario module's ``plan(options)`` returns.

    Attributes:
        name: scenario name (the RESULTS.md heading).
        description: one line on what is measured.
        bucket: the bucket to create and seed (3-63 characters).
        objects: what to seed before the first round.
        contenders: run in this order within every round.
        baseline: the contender the ratios are taken against.
        targets: goals checked and reported after the table.
        notes: how peers were configured, what was bypassed, caveats.
        timeout_s: a contender taking longer than this has failed.
        emulator_args: extra aioflux emulator flags (faults, QPS caps).
        expect_items: every contender must report this many items (None:
            not checked); a contender that reports otherwise is flagged.
        expect_bytes: likewise for bytes.
        warm_read: read every seeded object once, untimed, before round 1.
        warm_rounds: untimed rounds of every contender before the timed
            ones. For uploads: a fresh emulator faults in the memory of the
            first objects it stores (~3-5 s of its kernel time per GiB on the
            2-core VM), a cost a real server never puts on the client's cores.
        seed_concurrency: parallel uploads while seeding.
        limits: goals on single figures of a contender (``Limit``), checked
            on the median of the rounds and reported beside the ratio targets.
        figures: ``(key, heading)`` of the contenders' JSON lines shown as
            a table of medians in the run's section (memory, start-up).
        ratios: pair the baseline's wall time with every other contender's
            (the summary's and the docs' ratios, the charts). False for a
            scenario of figures whose wall times measure different things.
        min_rounds: the rounds a pair or figure of this scenario needs to be
            shown (None: the report's ``MIN_ROUNDS``); gpu_node's 1: a
            device loan runs it once, and its rows say so (min = max).
        unrecorded: returns None where a run may be recorded, or why it is
            only printed (gpu_node without CUDA: its DataLoader rows would
            stand in the tables for a GPU node's).
        azurite: run on Azurite instead of aioflux's emulator (the ``az_*``
            scenarios): ``bucket`` is the container, seeded with
            azure-storage-blob, and contenders get its connection string
            (``AZURE_STORAGE_CONNECTION_STRING`` and the manifest's ``azure``).
    """

    name: str
    description: str
    bucket: str
    objects: Sequence[Seeded]
    contenders: Sequence[Contender]
    baseline: str
    targets: Sequence[Target] = ()
    notes: Sequence[str] = ()
    timeout_s: float = 600.0
    emulator_args: Sequence[str] = ()
    expect_items: int | None = None
    expect_bytes: int | None = None
    warm_read: bool = True
    warm_rounds: int = 0
    seed_concurrency: int = 64
    azurite: bool = False
    limits: Sequence[Limit] = ()
    figures: Sequence[tuple[str, str]] = ()
    ratios: bool = True
    min_rounds: int | None = None
    unrecorded: Callable[[], str | None] | None = None


def on_loan(plan: Plan, rounds: int) -> Plan:
    """``plan`` as a lent machine runs it (``--loan``): once, in ``rounds``
    rounds, which its pairs and figures are then shown with."""
    return dataclasses.replace(plan, min_rounds=min(rounds, plan.min_rounds or rounds))


@dataclass
class Outcome:
    """One contender's results over all rounds."""

    contender: Contender
    samples: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None
    # (round, result or None, error or None) for every timed round, in order.
    rounds: list[tuple[int, dict[str, Any] | None, str | None]] = field(default_factory=list)

    def median(self, key: str) -> float:
        return statistics.median(float(s[key]) for s in self.samples)


def _env(emu: emulator.Emulator, contender: Contender) -> dict[str, str]:
    env = emulator.project_env() if contender.venv is None else dict(os.environ)
    if contender.venv is not None:
        env.pop("PYTHONPATH", None)  # peers see only their own environment
    # Every client (ours and the peers') goes to the emulator, unauthenticated.
    if emu.azure is not None:
        env["AZURE_STORAGE_CONNECTION_STRING"] = emu.azure
    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY",
                 "AZURE_STORAGE_SAS_TOKEN"):
        env.pop(name, None)
    env["STORAGE_EMULATOR_HOST"] = emu.endpoint
    env["GOOGLE_CLOUD_PROJECT"] = "perf"
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    if emu.s3_endpoint is not None:
        # S3 clients find the emulator's S3 face through their own settings
        # (the manifest's s3_endpoint); these dummy credentials keep every
        # credential chain off the network (the emulator verifies no signature).
        env.update(AWS_ACCESS_KEY_ID="perf", AWS_SECRET_ACCESS_KEY="perf",
                   AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                     "AWS_ENDPOINT_URL_S3"):
            env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    # What a contender that starts its own server (nginx) shapes it with
    # (perf/shaper.py, on the project's interpreter).
    env["PERF_PROJECT_PYTHON"] = sys.executable
    env["PERF_PROFILE"] = emu.shape
    return env


def _run_one(
    contender: Contender, manifest: Path, env: dict[str, str], timeout_s: float, log: Path
) -> dict[str, Any]:
    cmd = [
        contender.python(),
        str(CONTENDERS_DIR / contender.script),
        str(manifest),
        *contender.args,
    ]
    with log.open("a") as err:
        err.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n")
        err.flush()
        # The emulator, the only other child, is reaped after the last round,
        # so the children's CPU grows here by the contender's process alone
        # (imports and set-up included, unlike its own timed figure).
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            cmd,
            check=False,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            timeout=timeout_s,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        last = (log.read_text().strip().splitlines() or [""])[-1][:300]
        raise RuntimeError(f"exit {done.returncode}: {last} (full output in {log})")
    result = json.loads(lines[-1])
    if not isinstance(result, dict) or "seconds" not in result:
        raise RuntimeError(f"bad result line {lines[-1]!r}")
    result["process_cpu_s"] = round(
        after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3)
    return result


#: the environment variable naming a run's scratch folder (:func:`run_scratch`)
SCRATCH_ENV = "PERF_SCRATCH"


@contextmanager
def run_scratch(name: str) -> Iterator[Path]:
    """A folder the contenders keep files in until the run ends (its path
    in :data:`SCRATCH_ENV`), then removed.

    Deleted at each round's end, a round's files would hand the next
    round's writes the filesystem's cost of freeing them (ext4 mounted with
    ``discard``); kept until the run ends, no round pays for another's.
    """
    folder = Path(tempfile.mkdtemp(prefix=f"aioflux-perf-{name}-"))
    before = os.environ.get(SCRATCH_ENV)
    os.environ[SCRATCH_ENV] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(SCRATCH_ENV, None)
        else:
            os.environ[SCRATCH_ENV] = before
        shutil.rmtree(folder, ignore_errors=True)


def _prune_runs(keep: int) -> None:
    # Run directories are only for debugging the latest runs; names sort by time.
    for old in sorted(p for p in RUNS_DIR.iterdir() if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _check_available(contender: Contender) -> str | None:
    if contender.venv is not None:
        try:
            peers.python_for(contender.venv)
        except RuntimeError as exc:
            return str(exc)
    return contender.available() if contender.available else None


def _wrong(plan: Plan, sample: dict[str, Any]) -> str | None:
    """Why ``sample`` did not do the scenario's work, if it did not."""
    for key, want in (("items", plan.expect_items), ("bytes", plan.expect_bytes)):
        if want is not None and sample.get(key) != want:
            return f"reported {sample.get(key)} {key}, expected {want}"
    return None


def _one_round(
    plan: Plan, out: Outcome, rnd: int, manifest: Path, emu: emulator.Emulator, run_dir: Path,
    *, warm_up: bool = False,
) -> None:
    name = out.contender.name
    if warm_up:
        try:
            _run_one(out.contender, manifest, _env(emu, out.contender), plan.timeout_s,
                     run_dir / f"{name}.warm-up.log")
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            print(f"[perf] warm-up {name}: FAILED {exc}", flush=True)  # the timed rounds tell
        else:
            print(f"[perf] warm-up {name}: done (untimed)", flush=True)
        return
    log = run_dir / f"{name}.log"
    cpu_before = emulator.cpu_seconds(emu.pid)
    try:
        sample = _run_one(out.contender, manifest, _env(emu, out.contender), plan.timeout_s, log)
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        out.errors.append(f"round {rnd}: {exc}")
        out.rounds.append((rnd, None, str(exc)))
        print(f"[perf] round {rnd} {name}: FAILED {exc}", flush=True)
        return
    wrong = _wrong(plan, sample)
    if wrong:
        # Kept in the table (marked) so a fast-but-wrong result stays visible.
        out.errors.append(f"round {rnd}: {wrong}")
        print(f"[perf] round {rnd} {name}: WRONG RESULT {wrong}", flush=True)
    # Includes the contender's start-up, when the emulator is idle anyway.
    sample["emulator_cpu_s"] = emulator.cpu_seconds(emu.pid) - cpu_before
    out.samples.append(sample)
    out.rounds.append((rnd, sample, wrong))
    cpu = float(sample.get("cpu_user_s", 0.0)) + float(sample.get("cpu_sys_s", 0.0))
    print(
        f"[perf] round {rnd} {name}: {float(sample['seconds']):.2f}s "
        f"CPU {cpu:.2f}s peak {sample['peak_rss_mb']} MiB",
        flush=True,
    )


def run(
    plan: Plan,
    *,
    rounds: int,
    emulator_kind: str = "auto",
    profile: str = "gcs-like",
    record: bool = True,
    quick: bool = False,
    params: dict[str, str] | None = None,
) -> list[Outcome]:
    """Run ``plan`` for ``rounds`` interleaved rounds; print and record results."""
    stamp = dt.datetime.now(dt.timezone.utc)
    run_dir = RUNS_DIR / f"{stamp:%Y%m%dT%H%M%S}-{plan.name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    _prune_runs(keep=20)
    outcomes = [Outcome(c) for c in plan.contenders]
    for out in outcomes:
        out.skipped = _check_available(out.contender)
        if out.skipped:
            print(f"[perf] skipping {out.contender.name}: {out.skipped}", flush=True)
    active = [o for o in outcomes if o.skipped is None]

    server = emulator.azurite(profile) if plan.azurite else emulator.start(
        [plan.bucket],
        kind=emulator_kind,
        profile=profile,
        extra_args=plan.emulator_args,
        log_dir=run_dir,
    )
    with server as emu, run_scratch(plan.name):
        print(f"[perf] emulator {emu.kind} at {emu.endpoint}, profile {emu.profile}", flush=True)
        if emu.azure is not None:
            seed_azure(emu.azure, plan.bucket, plan.objects,
                       concurrency=min(plan.seed_concurrency, 32))
            if plan.warm_read:
                read_all_azure(emu.azure, plan.bucket, plan.objects)
        else:
            seed(emu.endpoint, plan.bucket, plan.objects, concurrency=plan.seed_concurrency)
            if plan.warm_read:
                read_all(emu.endpoint, plan.bucket, plan.objects)
        manifest = run_dir / "manifest.json"
        objects = [[n, size] for s in plan.objects
                   for n, size in zip(s.names(), s.sizes(), strict=True)]
        manifest.write_text(
            json.dumps({"endpoint": emu.endpoint, "s3_endpoint": emu.s3_endpoint,
                        "azure": emu.azure, "bucket": plan.bucket, "objects": objects})
        )
        # Other work on the machine skews every contender; the 1-minute load
        # average around the rounds says how much to trust this run.
        for rnd in range(plan.warm_rounds):
            for out in active:
                _one_round(plan, out, rnd, manifest, emu, run_dir, warm_up=True)
        load_before = os.getloadavg()[0]
        for rnd in range(1, rounds + 1):
            for out in active:
                _one_round(plan, out, rnd, manifest, emu, run_dir)
        load = (load_before, os.getloadavg()[0])

    records = _records(plan, outcomes, emu=emu, rounds=rounds, quick=quick, stamp=stamp,
                       load=load, params=params or {}, run_id=run_dir.name)
    # Imported here: perf.report is only needed once the rounds are done.
    from perf.report import regenerate, render_run

    print(render_run(results.group_runs(records)[0]))
    why = not_recorded(plan, record)
    if why is None:
        results.append(results.RESULTS_JSONL, records)
        print(f"[perf] appended to {results.RESULTS_JSONL}", flush=True)
        for path in regenerate():
            print(f"[perf] regenerated the tables in {path}", flush=True)
    else:
        print(f"[perf] not recorded ({why})", flush=True)
    return outcomes


def not_recorded(plan: Plan, record: bool) -> str | None:
    """Why a run of ``plan`` is only printed, or None to record it."""
    if not record:
        return "quick run or --no-record"
    return plan.unrecorded() if plan.unrecorded is not None else None


def _warm_up_line(plan: Plan) -> str:
    steps = []
    if plan.warm_read:
        steps.append("the harness reads every object once, untimed, before round 1")
    if plan.warm_rounds:
        steps.append(f"{plan.warm_rounds} untimed round(s) of every contender ran first")
    first = "; ".join(steps) if steps else "none"
    return (f"warm-up: {first}; each contender times only its work (imports and client "
            "construction excluded, connection setup included)")


def _records(
    plan: Plan, outcomes: Sequence[Outcome], *, emu: emulator.Emulator, rounds: int,
    quick: bool, stamp: dt.datetime, load: tuple[float, float], params: dict[str, str],
    run_id: str,
) -> list[dict[str, Any]]:
    """The run's ``run`` line and one ``sample`` line per contender per round."""
    info = results.machine_info()
    git = results.git_revision()
    contenders = [
        {"name": o.contender.name, "note": o.contender.note, "caveat": o.contender.caveat,
         "venv": o.contender.venv,
         "versions": peers.versions(o.contender.venv) if o.contender.venv else {},
         "skipped": o.skipped}
        for o in outcomes
    ]
    targets = [(t.mine or plan.baseline, t.other, t.at_least) for t in plan.targets]
    out = [results.run_record(
        run_id=run_id, stamp=stamp, scenario=plan.name, description=plan.description,
        params=params, quick=quick, rounds=rounds, baseline=plan.baseline, targets=targets,
        contenders=contenders, notes=plan.notes, emulator=emu.kind, profile=emu.profile,
        warm_up=_warm_up_line(plan), load=load, machine=info, git=git,
        limits=[[lim.contender, lim.key, lim.op, lim.bound, lim.unit, lim.label,
                 *([lim.of] if lim.of else [])] for lim in plan.limits],
        figures=[list(f) for f in plan.figures], ratios=plan.ratios,
        min_rounds=plan.min_rounds,
    )]
    for o in outcomes:
        for rnd, sample, error in o.rounds:
            out.append(results.sample_record(
                run_id=run_id, scenario=plan.name, contender=o.contender.name, round_no=rnd,
                result=sample, error=error, machine=info, git=git))
    return out

