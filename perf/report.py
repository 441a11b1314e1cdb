"""Turn a run's outcomes into the markdown section RESULTS.md collects."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from perf import emulator, peers
from perf.harness import Outcome, Plan, machine

__all__ = ["render", "write_results"]

_HEADER = """# aioflux performance results

Appended by `python -m perf run SCENARIO`, newest last. Each section is
one run: every contender ran against the same emulator and data set,
interleaved round by round. Compare ratios within a section; absolute
times on a shared 2-core machine are not meaningful.
"""


def _pick_baseline(plan: Plan, outcomes: Sequence[Outcome]) -> Outcome | None:
    by_name = {o.contender.name: o for o in outcomes if o.samples}
    if plan.baseline in by_name:
        return by_name[plan.baseline]
    return next(iter(by_name.values()), None)


def _row(out: Outcome, base: Outcome | None) -> str:
    name = out.contender.name + (" (!)" if out.errors else "")
    if not out.samples:
        why = "skipped, see notes" if out.skipped else "failed, see notes"
        return f"| {name} | - | - | - | - | - | - | - | {why} |"
    secs = out.median("seconds")
    mbps = out.median("bytes") / secs / 1e6
    ips = out.median("items") / secs
    ratio = f"{secs / base.median('seconds'):.2f}x" if base else "-"
    peak = out.median("peak_rss_mb")
    growth = statistics_growth(out)
    spread = ", ".join(f"{float(s['seconds']):.2f}" for s in out.samples)
    cells = [
        name,
        f"{secs:.2f}",
        f"{mbps:.1f}",
        f"{ips:.0f}",
        ratio,
        f"{peak:.0f}",
        f"{growth:.0f}",
        f"{out.median('emulator_cpu_s'):.1f}",
    ]
    return "| " + " | ".join([*cells, spread]) + " |"


def statistics_growth(out: Outcome) -> float:
    """Median of (peak RSS - RSS when the timed region started)."""
    deltas = sorted(
        float(s["peak_rss_mb"]) - float(s.get("rss_start_mb", 0.0)) for s in out.samples
    )
    mid = len(deltas) // 2
    return deltas[mid] if len(deltas) % 2 else (deltas[mid - 1] + deltas[mid]) / 2


def _targets(plan: Plan, outcomes: Sequence[Outcome]) -> list[str]:
    lines = []
    by_name = {o.contender.name: o for o in outcomes}
    for target in plan.targets:
        name = target.mine or plan.baseline
        mine, other = by_name.get(name), by_name.get(target.other)
        goal = f"{name} >= {target.at_least}x {target.other}"
        if mine is None or not mine.samples or other is None or not other.samples:
            lines.append(f"- {goal}: not measured")
            continue
        ratio = other.median("seconds") / mine.median("seconds")
        verdict = "PASS" if ratio >= target.at_least else "MISS"
        lines.append(f"- {goal}: {ratio:.2f}x, {verdict}")
    return lines


def render(
    plan: Plan,
    outcomes: Sequence[Outcome],
    *,
    emu: emulator.Emulator,
    rounds: int,
    quick: bool,
    stamp: dt.datetime,
    load: tuple[float, float],
) -> str:
    """The markdown section for one run."""
    base = _pick_baseline(plan, outcomes)
    base_name = base.contender.name if base else plan.baseline
    order = ", ".join(o.contender.name for o in outcomes if o.skipped is None)
    out = [
        f"## {stamp:%Y-%m-%d %H:%M} UTC: {plan.name}{' (quick)' if quick else ''}",
        "",
        plan.description,
        "",
        f"- emulator: {emu.kind}, profile {emu.profile}; a separate process on the same cores",
        f"- rounds: {rounds}, interleaved in the order {order}; table shows medians",
        _warm_up_line(plan),
        f"- machine: {machine()}; 1-min load average {load[0]:.1f} before the rounds, "
        f"{load[1]:.1f} after (above nproc means other work competed)",
        (
            "- absolute times are not meaningful on a shared 2-core machine (the emulator "
            "shares the cores); the ratios within this section are the figure"
        ),
        "",
        f"| contender | median s | MB/s | items/s | {base_name} speed ÷ this "
        "| peak RSS MiB | RSS growth MiB | emulator CPU s | rounds (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *(_row(o, base) for o in outcomes),
        "",
    ]
    if base is not None and base.contender.name != plan.baseline:
        out += [f"Baseline {plan.baseline} did not run; ratios are against {base_name}.", ""]
    if plan.targets:
        out += ["Targets:", *_targets(plan, outcomes), ""]
    notes = [f"- {n}" for n in plan.notes]
    notes += [f"- {o.contender.name}: {o.contender.note}" for o in outcomes if o.contender.note]
    for env_name in sorted(
        {o.contender.venv for o in outcomes if o.contender.venv and o.skipped is None}
    ):
        found = peers.versions(env_name)
        notes.append(f"- venv {env_name}: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    for o in outcomes:
        loops = sorted({str(s["loop"]) for s in o.samples if "loop" in s})
        if loops:  # what actually ran, not what was asked for
            notes.append(f"- {o.contender.name} event loop: {', '.join(loops)}")
    notes += [f"- {o.contender.name} skipped: {o.skipped}" for o in outcomes if o.skipped]
    notes += [f"- {o.contender.name} error: {e}" for o in outcomes for e in o.errors]
    notes.append(
        "- MB/s is 10^6 bytes per second of the median time; RSS is in MiB and includes the "
        "interpreter and its imports; 'RSS growth' is peak minus RSS at the "
        "start of the timed region; 'emulator CPU s' is the emulator process's CPU time "
        "while the contender's process ran (they share the same cores)"
    )
    out += ["Notes:", *notes, ""]
    return "\n".join(out)


def write_results(path: Path, section: str) -> None:
    """Append ``section`` to ``path``, creating it with a header."""
    if not path.exists():
        path.write_text(_HEADER)
    with path.open("a") as fh:
        fh.write("\n" + section)


def _warm_up_line(plan: Plan) -> str:
    steps = []
    if plan.warm_read:
        steps.append("the harness reads every object once, untimed, before round 1")
    if plan.warm_rounds:
        steps.append(f"{plan.warm_rounds} untimed round(s) of every contender ran first "
                     "(the emulator's caches and memory reach a steady state)")
    first = "; ".join(steps) if steps else "none"
    return (f"- warm-up: {first}; each contender times only its work (imports and client "
            "construction excluded, connection setup included)")
