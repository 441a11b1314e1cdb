"""The scale scenario's pure parts: its data set's lines, its plan, its figure goals
in the results and the tables (no benchmark runs here)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from perf import report, results
from perf.harness import Limit, Options, not_recorded
from perf.scenarios import scale

_SCALE = Path(__file__).resolve().parents[2] / "perf" / "contenders" / "_scale.py"


def _scale_helpers() -> ModuleType:
    # Contender helpers are a sibling module of the scripts, not a package member.
    spec = importlib.util.spec_from_file_location("_scale", _SCALE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shard_counts_split_evenly_and_sum_to_the_total() -> None:
    helpers = _scale_helpers()
    assert helpers.shard_counts(10, 3) == [4, 3, 3]
    assert helpers.shard_counts(100_000_000, 100) == [1_000_000] * 100
    assert helpers.shard_counts(0, 2) == [0, 0]
    with pytest.raises(ValueError, match="shards 0"):
        helpers.shard_counts(5, 0)


def test_lines_have_the_line_size_and_cover_the_shard_in_order() -> None:
    helpers = _scale_helpers()
    assert helpers.line_bytes(7, 9) == b"00000007\n"
    assert helpers.line_bytes(123_456_789, 9) == b"23456789\n"  # wider: the last digits
    with pytest.raises(ValueError, match="1 bytes"):
        helpers.line_bytes(0, 1)
    blocks = list(helpers.shard_lines(65_530, 70_000, 9))
    assert [len(b) for b in blocks] == [65_536 * 9, (70_000 - 65_536) * 9]
    joined = b"".join(blocks)
    assert joined[:9] == b"00065530\n" and joined[-9:] == b"00135529\n"


def test_status_mib_reads_this_process_and_none_for_a_gone_one() -> None:
    helpers = _scale_helpers()
    assert helpers.status_mib("VmRSS") > 0
    assert helpers.status_mib("VmRSS", 2**31 - 1) is None
    assert helpers.worker_peaks_mib() == []  # this process spawned no worker
    assert os.getpid() > 0


def test_size_labels() -> None:
    assert scale.size_label(10_000_000) == "1e7"
    assert scale.size_label(1_000_000_000) == "1e9"
    assert scale.size_label(3_000) == "3000"
    assert scale.size_label(1) == "1"


def test_the_plan_sets_every_target_of_the_issue() -> None:
    plan = scale.plan(Options(params={"totals": "10000000,100000000"}))
    names = [c.name for c in plan.contenders]
    assert names == ["aioflux-1e7", "streaming-1e7", "litdata-1e7", "aioflux-1e8",
                     "streaming-1e8", "litdata-1e8", "aioflux-order-1e9",
                     "aioflux-objects-1e6"]
    goals = {(lim.contender, lim.key): (lim.op, lim.bound) for lim in plan.limits}
    assert goals[("aioflux-1e8", "seconds")] == ("<=", 5.0)
    assert goals[("aioflux-1e8", "main_growth_mib")] == ("<=", 256.0)
    assert goals[("aioflux-1e8", "worker_mib")] == ("<=", 256.0)
    assert goals[("aioflux-1e8", "epoch_first_s")] == ("<=", 2.0)
    assert goals[("aioflux-1e8", "state_bytes")] == ("<=", 65536.0)
    assert goals[("aioflux-order-1e9", "one_us")] == ("<=", 20.0)
    assert goals[("aioflux-order-1e9", "rank_positions_per_s")] == (">=", 1e6)
    assert goals[("aioflux-objects-1e6", "node_over_target")] == ("<=", 1.0)
    assert plan.objects == [] and plan.baseline == "aioflux-1e7"
    fewer = scale.plan(Options(params={"totals": "10000000,100000000",
                                       "peer_totals": "10000000"}))
    assert [c.name for c in fewer.contenders][:4] == ["aioflux-1e7", "streaming-1e7",
                                                      "litdata-1e7", "aioflux-1e8"]
    without = scale.plan(Options(params={"peers": "0"}))
    assert [c.venv for c in without.contenders] == [None, None, None]


def test_a_limit_needs_a_comparison() -> None:
    with pytest.raises(ValueError, match="op must be"):
        Limit("a", "seconds", "<", 1.0)


def _records(values: dict[str, list[float | None]], *, quick: bool = False,
             run: str = "r1") -> list[dict[str, Any]]:
    records = [results.run_record(
        run_id=run, stamp=dt.datetime(2026, 11, 25, 23, 0, tzinfo=dt.timezone.utc),
        scenario="scale", description="scale", params={}, quick=quick, rounds=3,
        baseline="aioflux-1e7", targets=[],
        contenders=[{"name": "aioflux-1e7", "note": "", "venv": None, "versions": {},
                     "skipped": None}],
        notes=[], emulator="aioflux", profile="gcs-like", warm_up="none", load=(1.0, 1.0),
        machine={"nproc": 2, "cpu": "x", "system": "Linux", "python": "3.11"}, git="abc",
        limits=[["aioflux-1e7", "seconds", "<=", 5.0, "s", "construction"],
                ["aioflux-1e7", "rate", ">=", 1e6, "positions/s", "rate"],
                ["aioflux-1e7", "absent", "<=", 1.0, "B", "absent"]],
        figures=[["state_bytes", "state B"]])]
    for rnd in range(3):
        result = {"seconds": values["seconds"][rnd], "bytes": 0, "items": 1,
                  "cpu_user_s": 0.1, "cpu_sys_s": 0.0, "peak_rss_mb": 1.0,
                  "rss_start_mb": 1.0, "rate": values["rate"][rnd], "state_bytes": 184,
                  "load1": 4.0}
        records.append(results.sample_record(
            run_id=run, scenario="scale", contender="aioflux-1e7", round_no=rnd + 1,
            result=result, error=None, machine={"nproc": 2}, git="abc"))
    return records


def test_figure_goals_pass_on_the_median_and_show_in_every_table(tmp_path: Path) -> None:
    records = _records({"seconds": [1.0, 9.0, 2.0], "rate": [2e6, 5e5, 9e5]})
    path = tmp_path / "results.jsonl"
    results.append(path, records)
    runs = results.group_runs(results.load(path))
    figures = report.current_figures(runs)
    by_key = {f.key: f for f in figures}
    assert by_key["seconds"].median == 2.0 and by_key["seconds"].verdict() == "PASS"
    assert by_key["rate"].median == 9e5 and by_key["rate"].verdict() == "MISS"
    assert by_key["absent"].verdict() == "not measured"
    section = report.render_run(runs[0])
    assert "- aioflux-1e7 construction: 2 s (load 4.0), <= 5 s PASS" in section
    assert "- aioflux-1e7 rate: 900,000 positions/s (load 4.0), >= 1.00 M positions/s MISS" \
        in section
    assert "| aioflux-1e7 | 184 | 4.0 |" in section
    page = report.render_peers(report.current_pairs(runs), figures)
    assert "| scale @abc | aioflux-1e7 | construction | 2 s (load 4.0) | <= 5 s PASS | - |" in page
    assert "| scale @abc | aioflux-1e7 | absent | - | <= 1 B not measured | - |" in page
    # The README's short table carries no figure goals.
    assert "| scale " not in report.render_headline(report.current_pairs(runs))


def test_a_figure_goal_relative_to_another_contender_takes_its_median(tmp_path: Path) -> None:
    # read_cpu's "every path <= 1.15x the floor + crc32c", workers' "16 <= 1.2x 2":
    # the bound is the other's median of the same figure in the same run.
    contenders = {"floor": [0.60, 0.70, 0.65], "path": [0.70, 0.80, 0.74],
                  "slow": [0.80, 0.90, 0.85]}
    records = [results.run_record(
        run_id="r1", stamp=dt.datetime(2026, 11, 28, 13, 0, tzinfo=dt.timezone.utc),
        scenario="read_cpu", description="read_cpu", params={}, quick=False, rounds=3,
        baseline="floor", targets=[],
        contenders=[{"name": n, "note": "", "venv": None, "versions": {}, "skipped": None}
                    for n in [*contenders, "absent"]],
        notes=[], emulator="aioflux", profile="none", warm_up="none", load=(1.0, 1.0),
        machine={"nproc": 2, "cpu": "x", "system": "Linux", "python": "3.11"}, git="abc",
        limits=[["path", "cpu", "<=", 1.15, "s/GiB", "CPU a GiB", "floor"],
                ["slow", "cpu", "<=", 1.15, "s/GiB", "CPU a GiB", "floor"],
                ["path", "cpu", "<=", 1.15, "s/GiB", "CPU a GiB", "absent"]],
        ratios=False)]
    for name, values in contenders.items():
        for rnd, value in enumerate(values):
            records.append(results.sample_record(
                run_id="r1", scenario="read_cpu", contender=name, round_no=rnd + 1,
                result={"seconds": 1.0, "bytes": 1, "items": 1, "cpu": value},
                error=None, machine={"nproc": 2}, git="abc"))
    path = tmp_path / "results.jsonl"
    results.append(path, records)
    runs = results.group_runs(results.load(path))
    figures = report.current_figures(runs)
    by = {(f.contender, f.of): f for f in figures}
    assert by["path", "floor"].limit == pytest.approx(1.15 * 0.65)
    assert by["path", "floor"].verdict() == "PASS"  # 0.74 <= 0.7475
    assert by["slow", "floor"].verdict() == "MISS"  # 0.85 > 0.7475
    assert by["path", "absent"].verdict() == "not measured"
    section = report.render_run(runs[0])
    bound = "<= 1.15x floor (0.65 s/GiB, so 0.747 s/GiB)"
    assert f"- path CPU a GiB: 0.74 s/GiB, {bound} PASS" in section
    assert f"- slow CPU a GiB: 0.85 s/GiB, {bound} MISS" in section
    assert "- path CPU a GiB: 0.74 s/GiB, <= 1.15x absent (-) not measured" in section


def test_a_quick_run_never_replaces_the_figures_and_other_runs_read_as_before(
        tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    results.append(path, _records({"seconds": [1.0, 1.0, 1.0], "rate": [2e6] * 3}))
    results.append(path, _records({"seconds": [9.0] * 3, "rate": [1.0] * 3}, quick=True,
                                  run="r2"))
    figures = report.current_figures(results.group_runs(results.load(path)))
    assert {f.run.info["run"] for f in figures} == {"r1"}
    plain = _records({"seconds": [1.0] * 3, "rate": [1.0] * 3})[0]
    del plain["limits"], plain["figures"]
    assert report.figures_of(results.Run(plain)) == []


def test_a_figure_of_fewer_rounds_is_refused_like_a_pair(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    results.append(path, _records({"seconds": [1.0] * 3, "rate": [2e6] * 3}))
    # A newer run of one round: its figures are shown nowhere, the older stand.
    results.append(path, _records({"seconds": [9.0] * 3, "rate": [1.0] * 3}, run="r2")[:2])
    figures = report.current_figures(results.group_runs(results.load(path)))
    assert {f.key: f.run.info["run"] for f in figures} == {
        "seconds": "r1", "rate": "r1", "absent": "r2"}


def test_a_run_whose_plan_lowers_the_rounds_is_shown_from_one(tmp_path: Path) -> None:
    # gpu_node: one run a device loan; its plan says 1, its rows show min = max.
    path = tmp_path / "results.jsonl"
    once = _records({"seconds": [1.0] * 3, "rate": [2e6] * 3})[:2]
    once[0]["min_rounds"] = 1
    results.append(path, once)
    figures = report.current_figures(results.group_runs(results.load(path)))
    assert {f.key for f in figures if f.median is not None} == {"seconds", "rate"}
    assert report.min_rounds(results.group_runs(once)[0]) == 1
    del once[0]["min_rounds"]
    assert report.min_rounds(results.group_runs(once)[0]) == report.MIN_ROUNDS
    record = results.run_record(
        run_id="r", stamp=dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc), scenario="s",
        description="", params={}, quick=False, rounds=1, baseline="a", targets=[],
        contenders=[], notes=[], emulator="aioflux", profile="", warm_up="", load=(0, 0),
        machine={}, git="abc", min_rounds=1)
    assert record["min_rounds"] == 1


def test_a_gpu_node_run_without_cuda_is_printed_not_recorded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its DataLoader rows run on the CPU there: recorded, they would stand in
    # the tables for a GPU node's.
    from perf.scenarios import gpu_node

    plan = gpu_node.plan(Options(quick=True))
    assert plan.min_rounds == 1
    monkeypatch.setattr(gpu_node, "_cuda", lambda: "no CUDA device here (a GPU-node row)")
    plan = gpu_node.plan(Options(quick=True))
    assert not_recorded(plan, True) == "no CUDA device here (a GPU-node row)"
    assert not_recorded(plan, False) == "quick run or --no-record"
    monkeypatch.setattr(gpu_node, "_cuda", lambda: None)
    assert not_recorded(gpu_node.plan(Options()), True) is None
    assert not_recorded(scale.plan(Options()), True) is None


def test_a_run_without_ratios_pairs_nothing_and_draws_no_chart(tmp_path: Path) -> None:
    records = _records({"seconds": [1.0] * 3, "rate": [2e6] * 3})
    records[0]["contenders"].append({"name": "peer", "note": "", "venv": None,
                                     "versions": {}, "skipped": None})
    records += [results.sample_record(
        run_id="r1", scenario="scale", contender="peer", round_no=r, machine={"nproc": 2},
        git="abc", error=None, result={"seconds": 2.0, "bytes": 0, "items": 1})
        for r in (1, 2, 3)]
    paired = results.group_runs(records)[0]
    assert [(p.mine, p.other) for p in report.pairs(paired)] == [("aioflux-1e7", "peer")]
    records[0]["ratios"] = False
    unpaired = results.group_runs(records)[0]
    assert report.pairs(unpaired) == []
    assert report.render_charts(report.current_pairs([unpaired])) == {}
    assert scale.plan(Options()).ratios is False
    assert report._fmt_figure(3114.0, "B") == "3,114 B"
