"""Tables rendered from results data: one run's section, and the summaries.

Ratios are taken round by round: in round r, ``mine``'s speed over
``other``'s is ``other.wall[r] / mine.wall[r]`` (both ran minutes apart at
most, interleaved), and a pair is reported as the median of those per-round
ratios with their min-max. A target passes on the median; the spread is
printed beside it, so a verdict carried by one lucky round shows.

``python -m perf report`` rewrites the parts of ``perf/RESULTS.md``,
``README.md`` (a short headline table: the pairs ``HEADLINE`` names) and
``docs/performance.md`` (aioflux against every other client, as a table and
as charts: the SVG files of ``perf/charts.py`` in
``docs/images/performance/``) between the markers below from
``perf/results.jsonl``; each
pair comes from the newest recorded run that measured both of its
contenders in at least ``MIN_ROUNDS`` rounds (a later ``--only`` run of two
contenders updates their pair and leaves the others' figures in place; a
pair with fewer rounds is refused, shown nowhere). ``--check`` fails if they
differ.

A ratio written by hand in the README or the docs pages (two decimals and
an x, the tables' own format, outside their markers) is refused by
``--check`` (``unbacked_claims``): a figure there comes from a run, through
a generated table, or is not given.

Each table states the network model its rows ran under (``NETWORK``); a row
from a run before the host cap is marked per-connection-only, one on a
server no shaper stood in front of, unshaped. Each row names the commit
its run measured.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.charts import Bar, chart_markdown, render_chart, shared_scale
from perf.gpu_table import GPU_MARKERS, render_gpu_tables
from perf.results import RESULTS_JSONL, Run, group_runs, load

__all__ = [
    "CHARTS_FOLDER",
    "CHARTS_MARKERS",
    "Figure",
    "DOCS_PERFORMANCE",
    "HEADLINE",
    "GPU_MARKERS",
    "HOME_CORES",
    "MIN_ROUNDS",
    "NETWORK",
    "README",
    "RESULTS_MD",
    "Pair",
    "cpu_per_unit",
    "current_figures",
    "current_pairs",
    "figures_of",
    "min_rounds",
    "network",
    "pairs",
    "peer_pairs",
    "ratio_stats",
    "regenerate",
    "render_charts",
    "render_headline",
    "render_peers",
    "render_run",
    "render_summary",
    "section",
    "unbacked_claims",
]

PERF_DIR = Path(__file__).resolve().parent
RESULTS_MD = PERF_DIR / "RESULTS.md"
README = PERF_DIR.parent / "README.md"
DOCS_PERFORMANCE = PERF_DIR.parent / "docs" / "performance.md"

SUMMARY_MARKERS = ("<!-- perf:summary:start (python -m perf report) -->",
                   "<!-- perf:summary:end -->")
README_MARKERS = ("<!-- perf:table:start (python -m perf report) -->", "<!-- perf:table:end -->")
PEERS_MARKERS = ("<!-- perf:peers:start (python -m perf report) -->", "<!-- perf:peers:end -->")
CHARTS_MARKERS = ("<!-- perf:charts:start (python -m perf report) -->",
                  "<!-- perf:charts:end -->")
#: fewer paired rounds than this and a pair is not shown anywhere
MIN_ROUNDS = 3
#: the network model, stated above every table
NETWORK = (
    "Network model: 20 ms to first byte, 100 MB/s per connection and 800 MB/s for the "
    "host (its NIC: every body at once, each way), in aioflux's emulator and, through "
    "`perf/shaper.py`, in front of Azurite and nginx. A client reading one stream gets "
    "100 MB/s and one reading many at most 800 MB/s, so bandwidth alone bounds a ratio "
    "of parallel reads over a one-stream peer at 8x. Rows marked (per-connection only) "
    "ran before the host cap, when N parallel streams got N x 100 MB/s; rows marked "
    "(unshaped) ran on a server with no shaper in front."
)
# The README's few rows, in this order: (scenario, aioflux contender, other).
# Every other pair and every figure goal is on the performance page.
HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("read_small", "aioflux", "aiohttp-bare"),
    ("read_small", "aioflux", "obstore-get128"),
    ("read_small", "aioflux", "gcs-threads16"),
    ("read_small", "aioflux", "gcs-threads128"),
    ("ckpt_load", "aioflux", "dataflux"),
    # each peer at its default and at its best (its knob: coalescing off;
    # DataLoader workers)
    ("ranged", "aioflux-ranged", "obstore-ranges"),
    ("ranged", "aioflux-ranged", "obstore-gather"),
    ("loader_small", "aioflux-map-w0", "litdata-raw-w0"),
    ("loader_small", "aioflux-map-w2", "litdata-raw-w2"),
    # cold (the index built on the way) beside warm (index prebuilt)
    ("http_shards", "aioflux-cold-w0", "webdataset-w0"),
    ("http_shards", "aioflux-warm-w0", "webdataset-w0"),
    ("http_shards", "aioflux-cold-w2", "webdataset-w2"),
    ("http_shards", "aioflux-warm-w2", "webdataset-w2"),
    # a first epoch filling the disk cache beside the next, reading it
    ("cache_epochs", "aioflux-cache-cold", "aioflux-nocache"),
    ("cache_epochs", "aioflux-cache-warm", "aioflux-nocache"),
)
# The charts' folder, relative to docs/performance.md: files the site copies
# as they are, so its build draws nothing and fetches nothing.
CHARTS_FOLDER = "images/performance"

_GIB = 2**30


def _cpu(sample: dict[str, Any]) -> float | None:
    user, system = sample.get("cpu_user_s"), sample.get("cpu_sys_s")
    if user is None or system is None:
        return None
    return float(user) + float(system)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio_stats(
    mine: Sequence[dict[str, Any]], other: Sequence[dict[str, Any]]
) -> tuple[float, float, float, int] | None:
    """Median, min and max of per-round ``other.wall / mine.wall``, and the rounds used.

    Rounds are paired by number; a round either side lacks is left out.
    """
    walls = {int(s["round"]): float(s["wall_s"]) for s in other if s.get("wall_s")}
    ratios = [walls[int(s["round"])] / float(s["wall_s"])
              for s in mine if s.get("wall_s") and int(s["round"]) in walls]
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios), len(ratios)


def _unit(run: Run) -> str:
    """"item" for many small objects, "GiB" for a few large ones."""
    base = run.ok(run.info["baseline"]) or next(
        (run.ok(n) for n in run.order if run.ok(n)), [])
    items = _median([float(s["items"]) for s in base if s.get("items") is not None])
    return "item" if items is not None and items >= 100 else "GiB"


def cpu_per_unit(samples: Sequence[dict[str, Any]], unit: str) -> float | None:
    """Median CPU per item (ms) or per GiB (s) over the rounds that report CPU."""
    per = []
    for s in samples:
        cpu = _cpu(s)
        if cpu is None:
            continue
        if unit == "item" and s.get("items"):
            per.append(cpu * 1000 / float(s["items"]))
        elif unit == "GiB" and s.get("bytes"):
            per.append(cpu / (float(s["bytes"]) / _GIB))
    return _median(per)


def _fmt_unit(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} ms/item" if unit == "item" else f"{value:.2f} s/GiB"


#: scenarios on ``file://`` alone, where no network model applies
LOCAL_SCENARIOS = frozenset({"ckpt_file", "scale", "workers"})


def network(run: Run) -> str:
    """The network the run's rows measured: ``NIC``, ``per-connection only``,
    ``unshaped``, or ``local`` (no network at all)."""
    if run.info["scenario"] in LOCAL_SCENARIOS:
        return "local"
    profile = str(run.info.get("profile", ""))
    if "per host" in profile:
        return "NIC"
    return "per-connection only" if "per connection" in profile else "unshaped"


#: the development machine's cores: a run on another machine (a GPU node's
#: 16) is a section of its own, named with its cores, so that neither
#: machine's newest run stands in for the other's
HOME_CORES = 2


def section(run: Run) -> str:
    """The scenario, and the machine's cores where they are not ``HOME_CORES``."""
    cores = run.info.get("machine", {}).get("nproc")
    name = str(run.info["scenario"])
    return name if cores in (None, HOME_CORES) else f"{name} on {cores} cores"


def _scenario_cell(run: Run) -> str:
    """The section, its commit and, off the NIC model, the network it had."""
    net = network(run)
    mark = "" if net in ("NIC", "local") else f" ({net})"
    return f"{section(run)}{mark} @{str(run.info['git'])[:7]}"


def _other_cell(pair: Pair) -> str:
    """The peer, and the degraded path it ran if its plan named one."""
    info = next((c for c in pair.run.info["contenders"] if c["name"] == pair.other), {})
    caveat = info.get("caveat")
    return f"{pair.other} ({caveat})" if caveat else pair.other


def _fmt_ratio(stats: tuple[float, float, float, int] | None) -> str:
    if stats is None:
        return "-"
    med, lo, hi, _ = stats
    return f"{med:.2f}x ({lo:.2f}-{hi:.2f})"


@dataclass(frozen=True)
class Pair:
    """``mine`` against ``other`` in one run, with a target if one is set."""

    run: Run
    mine: str
    other: str
    at_least: float | None

    @property
    def stats(self) -> tuple[float, float, float, int] | None:
        return ratio_stats(self.run.ok(self.mine), self.run.ok(self.other))

    def verdict(self) -> str:
        if self.at_least is None:
            return ""
        stats = self.stats
        if stats is None:
            return "not measured"
        return "PASS" if stats[0] >= self.at_least else "MISS"


def pairs(run: Run) -> list[Pair]:
    """The run's targets, then the baseline against every other contender
    (unless the run's wall times are not to be paired: ``"ratios": false``)."""
    out = [Pair(run, mine, other, None if at is None else float(at))
           for mine, other, at in run.info["targets"]]
    if run.info.get("ratios") is False:
        return out
    seen = {(p.mine, p.other) for p in out}
    base = run.info["baseline"]
    out += [Pair(run, base, name, None) for name in run.order
            if name != base and (base, name) not in seen]
    return out


def min_rounds(run: Run) -> int:
    """The rounds a pair or figure of ``run`` needs to be shown: ``MIN_ROUNDS``,
    or fewer where its plan says (gpu_node: one run a device loan)."""
    return int(run.info.get("min_rounds", MIN_ROUNDS))


def current_pairs(runs: Sequence[Run]) -> list[Pair]:
    """Per scenario (by name), each pair from the newest run that measured it.

    Within a scenario, pairs keep the order of the newest run they appear in;
    quick runs are never current.
    """
    newest: dict[tuple[str, str, str], Pair] = {}
    for run in reversed(runs):  # file order is time order
        if run.info.get("quick"):
            continue
        for pair in pairs(run):
            key = (section(run), pair.mine, pair.other)
            stats = pair.stats
            if stats is not None and stats[3] < min_rounds(run):
                continue  # refused: too few rounds to show a spread
            if stats is None and pair.at_least is None:
                continue
            # A measured pair wins over a newer run that left it out (a run
            # of some contenders only).
            if key not in newest or (newest[key].stats is None and pair.stats is not None):
                newest[key] = pair
    chosen = [p for p in newest.values() if p.stats is not None]
    # Targets nobody measured still show, as "not measured", once.
    chosen += [p for key, p in newest.items() if p.stats is None
               and not any(section(q.run) == key[0] and (q.mine, q.other) == key[1:]
                           for q in chosen)]
    order = {id(run): i for i, run in enumerate(runs)}
    return sorted(chosen, key=lambda p: (section(p.run), -order[id(p.run)]))


def _figure_values(run: Run, contender: str, key: str) -> list[float]:
    out = []
    for s in run.ok(contender):
        value = s.get("wall_s") if key == "seconds" else s.get("extra", {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(float(value))
    return out


@dataclass(frozen=True)
class Figure:
    """A run's goal on one figure of one contender (a plan's ``Limit``)."""

    run: Run
    contender: str
    key: str
    op: str
    bound: float
    unit: str
    label: str
    of: str = ""  # the bound is ``bound`` times this contender's median

    @property
    def median(self) -> float | None:
        return _median(_figure_values(self.run, self.contender, self.key))

    @property
    def limit(self) -> float | None:
        """The bound in the figure's unit (None where ``of`` was not measured)."""
        if not self.of:
            return self.bound
        base = _median(_figure_values(self.run, self.of, self.key))
        return None if base is None else self.bound * base

    def verdict(self) -> str:
        value, limit = self.median, self.limit
        if value is None or limit is None:
            return "not measured"
        ok = value <= limit if self.op == "<=" else value >= limit
        return "PASS" if ok else "MISS"

    def load(self) -> float | None:
        """Median 1-minute load average the contender saw (time figures move with it)."""
        return _median(_figure_values(self.run, self.contender, "load1"))


def figures_of(run: Run) -> list[Figure]:
    """The run's figure goals, in the plan's order."""
    return [Figure(run, str(c), str(k), str(op), float(b), str(u), str(label or k),
                   *(str(o) for o in of))
            for c, k, op, b, u, label, *of in run.info.get("limits", [])]


def current_figures(runs: Sequence[Run]) -> list[Figure]:
    """Per (scenario, contender, figure), the newest non-quick run that measured it
    in at least ``MIN_ROUNDS`` rounds (or, if none measured it, the newest that
    set it, shown as not measured); fewer rounds are refused, like a pair's."""
    newest: dict[tuple[str, str, str, str], Figure] = {}
    for run in reversed(runs):
        if run.info.get("quick"):
            continue
        for fig in figures_of(run):
            measured = len(_figure_values(run, fig.contender, fig.key))
            if 0 < measured < min_rounds(run):
                continue
            key = (section(run), fig.contender, fig.key, fig.of)
            if key not in newest or (newest[key].verdict() == "not measured"
                                     and fig.verdict() != "not measured"):
                newest[key] = fig
    return sorted(newest.values(), key=lambda f: section(f.run))


def _fmt_figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1e6:
        text = f"{value / 1e6:.2f} M "
    elif abs(value) >= 1e3:
        text = f"{value:,.0f} "
    else:
        text = f"{value:.3g} "
    return (text + unit).strip()


def _figure_cells(fig: Figure) -> tuple[str, str]:
    load = fig.load()
    value = _fmt_figure(fig.median, fig.unit)
    if load is not None and fig.unit in ("s", "us", "M positions/s", "positions/s"):
        value += f" (load {load:.1f})"
    if fig.of:
        # The reference's own figure, then the limit it sets: "(16 us)"
        # alone read as the reference's figure.
        limit = fig.limit
        said = "-" if limit is None else \
            f"{_fmt_figure(limit / fig.bound, fig.unit)}, so {_fmt_figure(limit, fig.unit)}"
        bound = f"{fig.bound:g}x {fig.of} ({said})"
    else:
        bound = _fmt_figure(fig.bound, fig.unit)
    return value, f"{fig.op} {bound} {fig.verdict()}"


def _figure_row(fig: Figure, scenario: str) -> str:
    value, target = _figure_cells(fig)
    return f"| {scenario} | {fig.contender} | {fig.label} | {value} | {target} | - |"


def _runs_of(chosen: Sequence[Pair], figures: Sequence[Figure] = ()) -> list[Run]:
    seen: dict[int, Run] = {}
    for pair in chosen:
        seen.setdefault(id(pair.run), pair.run)
    for fig in figures:
        seen.setdefault(id(fig.run), fig.run)
    return list(seen.values())


def _target_cell(pair: Pair) -> str:
    if pair.at_least is None:
        return ""
    return f">= {pair.at_least:g}x {pair.verdict()}"


def render_summary(chosen: Sequence[Pair], figures: Sequence[Figure] = ()) -> str:
    """The summary table: every current pair, then every current figure goal."""
    lines = [
        NETWORK,
        "",
        "| scenario (run) | aioflux contender | vs | speed ratio, median of rounds (min-max) "
        "| target | CPU per unit: ours / theirs |",
        "|---|---|---|---:|---|---:|",
    ]
    for pair in chosen:
        run = pair.run
        unit = _unit(run)
        ours = _fmt_unit(cpu_per_unit(run.ok(pair.mine), unit), unit)
        theirs = _fmt_unit(cpu_per_unit(run.ok(pair.other), unit), unit)
        lines.append(
            f"| {_scenario_cell(run)} ({run.info['stamp'][:16].replace('T', ' ')}) "
            f"| {pair.mine} | {_other_cell(pair)} | {_fmt_ratio(pair.stats)} "
            f"| {_target_cell(pair)} | {ours} / {theirs} |"
        )
    lines += [_figure_row(fig, f"{_scenario_cell(fig.run)} "
                               f"({fig.run.info['stamp'][:16].replace('T', ' ')})")
              for fig in figures]
    return "\n".join(lines)


def _peer_table(chosen: Sequence[Pair], figures: Sequence[Figure] = ()) -> str:
    lines = [
        NETWORK,
        "",
        "| scenario @commit | aioflux | vs | ratio (aioflux speed / theirs), median (min-max) "
        "| target | CPU per unit: aioflux / theirs |",
        "|---|---|---|---:|---|---:|",
    ]
    for pair in chosen:
        unit = _unit(pair.run)
        ours = _fmt_unit(cpu_per_unit(pair.run.ok(pair.mine), unit), unit)
        theirs = _fmt_unit(cpu_per_unit(pair.run.ok(pair.other), unit), unit)
        lines.append(f"| {_scenario_cell(pair.run)} | {pair.mine} | {_other_cell(pair)} "
                     f"| {_fmt_ratio(pair.stats)} | {_target_cell(pair)} | {ours} / {theirs} |")
    lines += [_figure_row(fig, _scenario_cell(fig.run)) for fig in figures]
    return "\n".join(lines)


def peer_pairs(chosen: Sequence[Pair]) -> list[Pair]:
    """The docs' pairs: the plans' targets (with a goal or not: a cold state
    beside a warm one), and aioflux against every other client.

    Other pairs of two aioflux configurations (lean reads off, 2 workers,
    ...) are left to RESULTS.md.
    """
    return [p for p in chosen if not (p.at_least is None and p.other.startswith("aioflux"))
            or [p.mine, p.other, None] in p.run.info["targets"]]


def render_peers(chosen: Sequence[Pair], figures: Sequence[Figure] = ()) -> str:
    """The docs' performance table (``peer_pairs``, then the figure goals)."""
    return _peer_table(peer_pairs(chosen), figures)


def render_charts(chosen: Sequence[Pair]) -> dict[str, str]:
    """The docs' charts of ``peer_pairs``: scenario -> SVG text, in the table's order."""
    by_scenario: dict[str, list[Bar]] = {}
    for pair in peer_pairs(chosen):
        stats = pair.stats
        scenario = str(pair.run.info["scenario"])
        machine = section(pair.run)[len(scenario):]  # " on 16 cores", or nothing
        by_scenario.setdefault(scenario, []).append(Bar(
            mine=pair.mine + machine, other=pair.other,
            median=None if stats is None else stats[0],
            low=None if stats is None else stats[1],
            high=None if stats is None else stats[2],
            target=pair.at_least, verdict=pair.verdict() if stats is not None else ""))
    scale = shared_scale([bar for bars in by_scenario.values() for bar in bars])
    return {name: render_chart(name, bars, scale) for name, bars in by_scenario.items()}


def render_headline(chosen: Sequence[Pair],
                    rows: Sequence[tuple[str, str, str]] = HEADLINE) -> str:
    """The README's table: the pairs ``rows`` names, in its order.

    A named pair nobody measured, or measured only on another network than
    the NIC model, is left out; the figure goals and the other pairs are on
    the performance page (``render_peers``), older networks marked.
    """
    by_key = {(section(p.run), p.mine, p.other): p for p in chosen
              if network(p.run) in ("NIC", "local")}
    return _peer_table([by_key[key] for key in rows if key in by_key])


def _growth(samples: Sequence[dict[str, Any]]) -> float | None:
    return _median([float(s["peak_rss_mb"]) - float(s.get("rss_start_mb") or 0.0)
                    for s in samples if s.get("peak_rss_mb") is not None])


def _col(samples: Sequence[dict[str, Any]], key: str, fmt: str) -> str:
    value = _median([float(s[key]) for s in samples if s.get(key) is not None])
    return "-" if value is None else format(value, fmt)


def _row(run: Run, name: str, unit: str) -> str:
    samples = run.ok(name)
    errors = [s for s in run.samples.get(name, []) if s.get("error")]
    info = next(c for c in run.info["contenders"] if c["name"] == name)
    label = name + (" (!)" if errors else "")
    if not samples:
        why = "skipped, see notes" if info.get("skipped") else "failed, see notes"
        return f"| {label} | " + " | ".join(["-"] * 10) + f" | {why} |"
    wall = _median([float(s["wall_s"]) for s in samples]) or 0.0
    nbytes = _median([float(s["bytes"] or 0) for s in samples]) or 0.0
    items = _median([float(s["items"] or 0) for s in samples]) or 0.0
    base = run.info["baseline"]
    vs_base = "1.00x" if name == base else _fmt_ratio(ratio_stats(run.ok(base), samples))
    cpus = [c for c in (_cpu(s) for s in samples) if c is not None]
    cells = [
        label,
        f"{wall:.2f}",
        f"{nbytes / wall / 1e6:.1f}" if wall else "-",
        f"{items / wall:.0f}" if wall else "-",
        vs_base,
        "-" if not cpus else f"{statistics.median(cpus):.2f}",
        _fmt_unit(cpu_per_unit(samples, unit), unit),
        _col(samples, "process_cpu_s", ".2f"),
        _col(samples, "peak_rss_mb", ".0f"),
        "-" if _growth(samples) is None else f"{_growth(samples):.0f}",
        _col(samples, "emulator_cpu_s", ".2f"),
        ", ".join(f"{float(s['wall_s']):.2f}" for s in samples),
    ]
    return "| " + " | ".join(cells) + " |"


def _run_figures(run: Run) -> list[str]:
    """The run's figures table (medians of rounds) and its figure goals."""
    out: list[str] = []
    shown = run.info.get("figures", [])
    if shown:
        out += ["Figures (median of rounds; 1-min load average the contender saw):", "",
                "| contender | " + " | ".join(str(h) for _, h in shown) + " | load |",
                "|---|" + "---:|" * (len(shown) + 1)]
        for name in run.order:
            cells = [_fmt_figure(_median(_figure_values(run, name, str(k))), "")
                     for k, _ in shown]
            load = _median(_figure_values(run, name, "load1"))
            out.append(f"| {name} | " + " | ".join(cells)
                       + f" | {'-' if load is None else format(load, '.1f')} |")
        out.append("")
    goals = figures_of(run)
    if goals:
        out.append("Figure targets (pass on the median of rounds):")
        for fig in goals:
            value, target = _figure_cells(fig)
            out.append(f"- {fig.contender} {fig.label}: {value}, {target}")
        out.append("")
    return out


def render_run(run: Run) -> str:
    """One run's section: context, the contenders' table, targets, notes."""
    info = run.info
    base = info["baseline"]
    unit = _unit(run)
    load = info["load"]
    machine = info["machine"]
    params = ", ".join(f"{k}={v}" for k, v in sorted(info["params"].items())) or "defaults"
    out = [
        f"### {info['scenario']}{' (quick)' if info.get('quick') else ''}: run {info['run']}",
        "",
        info["description"],
        "",
        f"- emulator: {info['emulator']}, profile {info['profile']} (network: {network(run)})"
        f"; parameters: {params}",
        f"- rounds: {info['rounds']}, interleaved in the order {', '.join(run.order)}",
        f"- {info['warm_up']}",
        f"- machine: {machine['nproc']} CPUs ({machine['cpu']}), {machine['system']}, "
        f"{machine['python']}; git {info['git'][:12]}{'+dirty' if 'dirty' in info['git'] else ''}"
        f"; 1-min load {load[0]:.1f} before the rounds, {load[1]:.1f} after",
        "",
        f"| contender | median s | MB/s | items/s | {base} speed ÷ this, median (min-max) "
        f"| CPU s | CPU per {unit} | process CPU s | peak RSS MiB | RSS growth MiB "
        "| emulator CPU s | rounds (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *(_row(run, name, unit) for name in run.order),
        "",
    ]
    targets = [p for p in pairs(run) if p.at_least is not None]
    if targets:
        out.append("Targets (pass on the median of per-round ratios):")
        out += [f"- {p.mine} >= {p.at_least:g}x {p.other}: {_fmt_ratio(p.stats)}, {p.verdict()}"
                for p in targets]
        out.append("")
    out += _run_figures(run)
    notes = [f"- {n}" for n in info["notes"]]
    for c in info["contenders"]:
        if c.get("note"):
            notes.append(f"- {c['name']}: {c['note']}")
    venvs: dict[str, dict[str, str]] = {}
    for c in info["contenders"]:
        if c.get("venv") and not c.get("skipped"):
            venvs[c["venv"]] = c.get("versions") or {}
    for venv in sorted(venvs):
        notes.append(f"- venv {venv}: " + ", ".join(f"{k} {v}" for k, v in venvs[venv].items()))
    for c in info["contenders"]:
        loops = sorted({str(s["extra"]["loop"]) for s in run.ok(c["name"])
                        if "loop" in s.get("extra", {})})
        if loops:
            notes.append(f"- {c['name']} event loop: {', '.join(loops)}")
        latency = [s["extra"] for s in run.ok(c["name"]) if "batch_p99_ms" in s.get("extra", {})]
        if latency:  # contenders that report dataset.stats (perf/scenarios/hedge_tail.py)
            notes.append(f"- {c['name']} batch latency p50/p95/p99 ms per round: " + "; ".join(
                f"{e['batch_p50_ms']}/{e['batch_p95_ms']}/{e['batch_p99_ms']} (hedges sent "
                f"{e.get('hedges_sent', 0)}, won {e.get('hedges_won', 0)})" for e in latency))
        gets = [s["extra"] for s in run.ok(c["name"]) if "object_gets" in s.get("extra", {})]
        if gets:  # contenders that count the emulator's reads (perf/scenarios/cache_epochs.py)
            notes.append(f"- {c['name']} object GETs during the timed epoch per round: "
                         + ", ".join(str(e["object_gets"]) for e in gets))
        reads = [s["extra"] for s in run.ok(c["name"]) if "read_p99_ms" in s.get("extra", {})]
        if reads:  # single-sample reads (perf/scenarios/shards_random.py)
            notes.append(f"- {c['name']} sample wait p50/p99 ms per round: " + "; ".join(
                f"{e['read_p50_ms']}/{e['read_p99_ms']}" for e in reads))
        converted = [s for s in run.ok(c["name"]) if "convert_s" in s.get("extra", {})]
        for s in converted:  # an untimed conversion before the epoch (shards_litdata.py)
            notes.append(f"- {c['name']} round {s['round']} converted the data set first "
                         f"(untimed): {float(s['extra']['convert_s']):.1f} s")
        if c.get("skipped"):
            notes.append(f"- {c['name']} skipped: {c['skipped']}")
        notes += [f"- {c['name']} round {s['round']}: {s['error']}"
                  for s in run.samples.get(c["name"], []) if s.get("error")]
    out += ["Notes:", *notes, ""]
    return "\n".join(out)


_HAND_RATIO = re.compile(r"\b\d+\.\d\dx\b")
_ALL_MARKERS = (SUMMARY_MARKERS, README_MARKERS, PEERS_MARKERS, CHARTS_MARKERS, GPU_MARKERS)


def unbacked_claims(paths: Sequence[Path] | None = None) -> list[str]:
    """``path:line: text`` of each ratio written by hand (``1.15x``) outside
    the generated parts of ``paths`` (default: README.md and every page
    under docs/)."""
    if paths is None:
        paths = [README, *sorted((README.parent / "docs").rglob("*.md"))]
    found = []
    for path in paths:
        generated = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(line.startswith(start) for start, _ in _ALL_MARKERS):
                generated = True
            elif any(line.startswith(end) for _, end in _ALL_MARKERS):
                generated = False
            elif not generated and _HAND_RATIO.search(line):
                found.append(f"{path}:{number}: {line.strip()}")
    return found


def _replace_between(text: str, markers: tuple[str, str], body: str, path: Path) -> str:
    start, end = markers
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{path} lacks the markers {start!r} ... {end!r}")
    return text[: i + len(start)] + "\n" + body + "\n" + text[j:]


def generated(records_path: Path = RESULTS_JSONL) -> tuple[str, str, str]:
    """What belongs between the markers of RESULTS.md, README.md and docs/performance.md."""
    runs = group_runs(load(records_path))
    chosen = current_pairs(runs)
    figures = current_figures(runs)
    summary = "\n".join([
        "## Current figures",
        "",
        "Generated by `python -m perf report` from `perf/results.jsonl`: each pair "
        "from the newest recorded run that measured both sides (the run's start, UTC, "
        "is beside the scenario). Ratios are the median of per-round ratios "
        "(min-max across rounds); CPU is user+system of the contender's process "
        "(and its reaped children) over the timed region.",
        "",
        render_summary(chosen, figures),
        "",
        "## The runs behind these figures",
        "",
        *(render_run(run) for run in _runs_of(chosen, figures)),
    ])
    return summary, render_headline(chosen), render_peers(chosen, figures)


def regenerate(*, check: bool = False, records_path: Path = RESULTS_JSONL,
               results_md: Path = RESULTS_MD, readme: Path = README,
               docs_page: Path = DOCS_PERFORMANCE) -> list[Path]:
    """Rewrite (or with ``check``, only compare) the generated parts.

    The charts go to ``CHARTS_FOLDER`` beside ``docs_page``; an SVG there of a
    scenario no longer charted is removed.

    Returns:
        The files whose generated part was (or, with ``check``, would be)
        changed, created or removed.
    """
    summary, headline, peers = generated(records_path)
    runs = group_runs(load(records_path))
    charts = render_charts(current_pairs(runs))
    stale = []
    for path, parts in ((results_md, [(SUMMARY_MARKERS, summary)]),
                        (readme, [(README_MARKERS, headline)]),
                        (docs_page, [(PEERS_MARKERS, peers),
                                     (CHARTS_MARKERS, chart_markdown(list(charts),
                                                                     CHARTS_FOLDER)),
                                     (GPU_MARKERS, render_gpu_tables(runs))])):
        text = path.read_text()
        new = text
        for markers, body in parts:
            new = _replace_between(new, markers, body, path)
        if new != text:
            stale.append(path)
            if not check:
                path.write_text(new)
    folder = docs_page.parent / CHARTS_FOLDER
    for name, svg in charts.items():
        path = folder / f"{name}.svg"
        if not path.is_file() or path.read_text() != svg:
            stale.append(path)
            if not check:
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text(svg)
    for path in sorted(folder.glob("*.svg")):
        if path.stem not in charts:
            stale.append(path)
            if not check:
                path.unlink()
    return stale
