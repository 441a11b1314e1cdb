"""perf's results data and the tables generated from it (no benchmark runs here)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from perf import charts, report, results
from perf.harness import Options, on_loan
from perf.scenarios import (
    az_ckpt_load,
    az_ckpt_save,
    az_loader,
    az_read,
    dcp_save,
    fsspec,
    listing,
    loader_tiny,
    read_small,
    s3_loader,
)


def _sample(run: str, contender: str, rnd: int, wall: float | None, *, items: int = 1000,
            nbytes: int = 1000 * 102400, cpu: tuple[float, float] = (0.5, 0.1),
            error: str | None = None) -> dict[str, Any]:
    result = None if wall is None else {
        "seconds": wall, "bytes": nbytes, "items": items, "cpu_user_s": cpu[0],
        "cpu_sys_s": cpu[1], "peak_rss_mb": 80.0, "rss_start_mb": 60.0, "loop": "uvloop",
        "emulator_cpu_s": 0.4, "process_cpu_s": 1.0}
    return results.sample_record(run_id=run, scenario="read_small", contender=contender,
                                 round_no=rnd, result=result, error=error,
                                 machine={"nproc": 2}, git="abc")


def _rounds(run: str, contender: str, wall: float) -> list[dict[str, Any]]:
    """The report's fewest rounds, each at ``wall`` seconds."""
    return [_sample(run, contender, rnd, wall) for rnd in range(1, report.MIN_ROUNDS + 1)]


NIC = "gcs-like (20 ms to first byte, 100 MB/s per connection, 800 MB/s per host)"


def _run(run: str, targets: list[tuple[str, str, float]], names: list[str],
         profile: str = NIC, cores: int = 2, min_rounds: int | None = None) -> dict[str, Any]:
    return results.run_record(
        run_id=run, stamp=dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.timezone.utc),
        scenario="read_small", description="1,000 x 100 KiB", params={"count": "1000"},
        quick=False, rounds=3, baseline="ours", targets=targets,
        contenders=[{"name": n, "note": f"{n} note", "venv": None, "versions": {},
                     "skipped": None} for n in names],
        notes=["a note"], emulator="aioflux", profile=profile, warm_up="warm-up: none",
        load=(1.0, 1.5), machine={"nproc": cores, "cpu": "x", "system": "Linux",
                                  "python": "3.11"},
        git="abc", min_rounds=min_rounds)


def test_ratio_is_the_median_of_per_round_ratios_with_its_spread() -> None:
    # Medians of the walls would give 2.0 / 1.0 = 2.0x; the rounds say otherwise.
    mine = [_sample("r", "ours", 1, 1.0), _sample("r", "ours", 2, 1.0),
            _sample("r", "ours", 3, 4.0)]
    other = [_sample("r", "peer", 1, 1.2), _sample("r", "peer", 2, 2.0),
             _sample("r", "peer", 3, 2.0)]
    assert report.ratio_stats(mine, other) == (1.2, 0.5, 2.0, 3)


def test_rounds_missing_on_either_side_are_left_out() -> None:
    mine = [_sample("r", "ours", 1, 1.0), _sample("r", "ours", 2, None, error="exit 1")]
    other = [_sample("r", "peer", 1, 3.0), _sample("r", "peer", 2, 3.0),
             _sample("r", "peer", 3, 3.0)]
    assert report.ratio_stats(mine, other) == (3.0, 3.0, 3.0, 1)
    assert report.ratio_stats(mine[1:], other) is None


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    results.append(path, records)


def test_a_target_passes_on_the_median_and_prints_the_spread(tmp_path: Path) -> None:
    # Per-round ratios 0.9, 1.1, 1.2: the median passes >= 1.0 though one round missed.
    walls = {"ours": [1.0, 1.0, 1.0], "peer": [0.9, 1.1, 1.2], "slow": [1.5, 1.6, 1.4]}
    records = [_run("r1", [("ours", "peer", 1.0), ("ours", "slow", 2.0)], list(walls))]
    records += [_sample("r1", name, i + 1, w, cpu=(0.3 if name == "ours" else 0.6, 0.1))
                for name, ws in walls.items() for i, w in enumerate(ws)]
    path = tmp_path / "results.jsonl"
    _write(path, records)
    run = results.group_runs(results.load(path))[0]
    section = report.render_run(run)
    assert "- ours >= 1x peer: 1.10x (0.90-1.20), PASS" in section
    assert "- ours >= 2x slow: 1.50x (1.40-1.60), MISS" in section
    # CPU per item: (0.3 + 0.1) s over 1000 items, beside the wall time.
    assert "| ours | 1.00 | 102.4 | 1000 | 1.00x | 0.40 | 0.40 ms/item |" in section
    summary = report.render_summary(report.pairs(run))
    assert "| ours | peer | 1.10x (0.90-1.20) | >= 1x PASS | 0.40 ms/item / 0.70 ms/item |" in (
        summary)


def test_large_objects_report_cpu_per_gib_and_failed_rounds_are_named(tmp_path: Path) -> None:
    records = [_run("r1", [], ["ours", "peer"])]
    records += [_sample("r1", "ours", 1, 2.0, items=4, nbytes=2 * 2**30, cpu=(1.0, 0.5)),
                _sample("r1", "peer", 1, None, error="exit 1: boom")]
    path = tmp_path / "results.jsonl"
    _write(path, records)
    section = report.render_run(results.group_runs(results.load(path))[0])
    assert "0.75 s/GiB" in section
    assert "| peer (!) |" in section and "failed, see notes" in section
    assert "- peer round 1: exit 1: boom" in section


def test_sample_waits_and_untimed_conversions_are_in_the_notes(tmp_path: Path) -> None:
    records = [_run("r1", [], ["ours", "peer"])]
    for rnd in (1, 2):
        ours = _sample("r1", "ours", rnd, 1.0)
        ours["extra"].update(read_p50_ms=21.5 + rnd, read_p99_ms=30.0 + rnd)
        peer = _sample("r1", "peer", rnd, 2.0)
        if rnd == 1:  # only the round that found the data set unconverted converts it
            peer["extra"]["convert_s"] = 41.26
        records += [ours, peer]
    path = tmp_path / "results.jsonl"
    _write(path, records)
    section = report.render_run(results.group_runs(results.load(path))[0])
    assert "- ours sample wait p50/p99 ms per round: 22.5/31.0; 23.5/32.0" in section
    assert "- peer round 1 converted the data set first (untimed): 41.3 s" in section
    assert "round 2 converted" not in section and "peer sample wait" not in section


def test_each_pair_comes_from_the_newest_run_that_measured_it(tmp_path: Path) -> None:
    old = [_run("r1", [], ["ours", "peer", "other"]), *_rounds("r1", "ours", 1.0),
           *_rounds("r1", "peer", 5.0), *_rounds("r1", "other", 7.0)]
    # A later run of two contenders only (--only ours,peer).
    new = [_run("r2", [], ["ours", "peer"]), *_rounds("r2", "ours", 1.0),
           *_rounds("r2", "peer", 2.0)]
    path = tmp_path / "results.jsonl"
    _write(path, old + new)
    md, readme, page = tmp_path / "RESULTS.md", tmp_path / "README.md", tmp_path / "perf.md"
    md.write_text("intro\n" + "\n".join(report.SUMMARY_MARKERS) + "\nappendix\n")
    readme.write_text("# x\n" + "\n".join(report.README_MARKERS) + "\nrest\n")
    page.write_text("# y\n" + "\n".join(report.CHARTS_MARKERS) + "\n"
                    + "\n".join(report.PEERS_MARKERS) + "\n"
                    + "\n".join(report.GPU_MARKERS) + "\nmore\n")
    charts = tmp_path / report.CHARTS_FOLDER
    charts.mkdir(parents=True)
    (charts / "gone.svg").write_text("<svg/>")  # a scenario no longer charted
    chart = charts / "read_small.svg"
    kw: dict[str, Any] = {"records_path": path, "results_md": md, "readme": readme,
                          "docs_page": page}
    assert report.regenerate(check=True, **kw) == [md, readme, page, chart, charts / "gone.svg"]
    assert not chart.exists() and (charts / "gone.svg").exists()  # --check writes nothing
    assert report.regenerate(**kw) == [md, readme, page, chart, charts / "gone.svg"]
    assert report.regenerate(check=True, **kw) == []
    assert sorted(p.name for p in charts.iterdir()) == ["read_small.svg"]
    assert f"]({report.CHARTS_FOLDER}/read_small.svg)" in page.read_text()
    assert "ours vs peer" in chart.read_text() and "2.00x (2.00-2.00)" in chart.read_text()
    assert "5.00x" not in chart.read_text()
    text = page.read_text()
    row = "| read_small @abc | ours | peer | 2.00x (2.00-2.00) |  | 0.60 ms/item / 0.60 ms/item |"
    assert row in text
    assert "| read_small @abc | ours | other | 7.00x (7.00-7.00) |  |" in text
    assert text.count(report.NETWORK) == 1  # the model, stated above the table
    assert "5.00x" not in text and "No GPU run has been recorded yet." in text
    assert text.endswith("<!-- perf:gpu:end -->\nmore\n")
    # No targets: the README's headline table is its header alone.
    assert "| read_small" not in readme.read_text() and report.NETWORK in readme.read_text()
    assert readme.read_text().endswith(
        "|---|---|---|---:|---|---:|\n<!-- perf:table:end -->\nrest\n")
    assert "run r1" in md.read_text() and "run r2" in md.read_text()
    assert md.read_text().startswith("intro\n") and md.read_text().endswith("appendix\n")


def test_a_target_left_out_of_a_newer_run_keeps_its_last_measurement(tmp_path: Path) -> None:
    targets = [("ours", "peer", 3.0), ("ours", "bare", 0.85)]
    old = [_run("r1", targets, ["ours", "peer", "bare"]), *_rounds("r1", "ours", 1.0),
           *_rounds("r1", "peer", 5.0), *_rounds("r1", "bare", 0.9)]
    # A later run without the (slow) peer: its target is still the older measurement.
    new = [_run("r2", targets, ["ours", "bare"]), *_rounds("r2", "ours", 1.0),
           *_rounds("r2", "bare", 0.8)]
    path = tmp_path / "results.jsonl"
    _write(path, old + new)
    chosen = report.current_pairs(results.group_runs(results.load(path)))
    found = {(p.mine, p.other): p.run.info["run"] for p in chosen}
    assert found[("ours", "peer")] == "r1" and found[("ours", "bare")] == "r2"
    summary = report.render_summary(chosen)
    assert "5.00x" in summary and "not measured" not in summary


def test_the_tables_leave_untargeted_aioflux_variants_out(tmp_path: Path) -> None:
    names = ["ours", "aioflux-nolean", "aioflux-w2", "peer", "aioflux-cold"]
    targets = [("aioflux-w2", "peer", 1.0), ("ours", "peer", 2.0), ("ours", "aioflux-cold", 3.0)]
    records = [_run("r1", targets, names)]
    records += [s for n in names for s in _rounds("r1", n, 1.0)]
    path = tmp_path / "results.jsonl"
    _write(path, records)
    chosen = report.current_pairs(results.group_runs(results.load(path)))
    peers = report.render_peers(chosen)
    assert "@abc | aioflux-w2 | peer |" in peers and "@abc | ours | peer |" in peers
    assert "| ours | aioflux-cold |" in peers  # a target, though of two aioflux variants
    assert "aioflux-nolean" not in peers
    assert "| ours | aioflux-nolean |" in report.render_summary(chosen)
    # The README's headline: the pairs it names, in its order, and no other.
    headline = report.render_headline(chosen, rows=[("read_small", "ours", "aioflux-cold"),
                                                    ("read_small", "ours", "peer"),
                                                    ("read_small", "ours", "unmeasured")])
    cpu = "0.60 ms/item / 0.60 ms/item"
    assert headline.splitlines()[4:] == [
        f"| read_small @abc | ours | aioflux-cold | 1.00x (1.00-1.00) | >= 3x MISS | {cpu} |",
        f"| read_small @abc | ours | peer | 1.00x (1.00-1.00) | >= 2x MISS | {cpu} |"]


def test_a_pair_of_fewer_rounds_is_refused_and_the_network_is_named(tmp_path: Path) -> None:
    # An older run of 3 rounds before the host cap, a newer one of 2 on the
    # NIC model: the newer is refused (too few rounds to show a spread), the
    # older is shown, marked as measured with no host cap.
    old = [_run("r1", [("ours", "peer", 2.0)], ["ours", "peer"],
                profile="gcs-like (20 ms to first byte, 100 MB/s per connection)"),
           *_rounds("r1", "ours", 1.0), *_rounds("r1", "peer", 9.0)]
    new = [_run("r2", [("ours", "peer", 2.0)], ["ours", "peer"]),
           *(_sample("r2", n, rnd, wall) for n, wall in (("ours", 1.0), ("peer", 3.0))
             for rnd in (1, 2))]
    path = tmp_path / "results.jsonl"
    _write(path, old + new)
    runs = results.group_runs(results.load(path))
    chosen = report.current_pairs(runs)
    assert [(p.run.info["run"], p.stats) for p in chosen] == [("r1", (9.0, 9.0, 9.0, 3))]
    assert "| read_small (per-connection only) @abc | ours | peer | 9.00x" in (
        report.render_peers(chosen))
    assert [report.network(run) for run in runs] == ["per-connection only", "NIC"]
    # The README's headline shows the NIC model's pairs alone.
    headline = report.render_headline(chosen, rows=[("read_small", "ours", "peer")])
    assert "| read_small" not in headline
    assert "(network: NIC)" in report.render_run(runs[1])


def test_a_run_on_other_cores_is_a_section_of_its_own(tmp_path: Path) -> None:
    # A GPU node's one round (run with --loan), then a newer run on the
    # development machine: neither stands in for the other, and the node's
    # rows name its cores.
    node = [_run("r1", [("ours", "peer", 1.0)], ["ours", "peer"], cores=16, min_rounds=1),
            _sample("r1", "ours", 1, 1.0), _sample("r1", "peer", 1, 3.0)]
    home = [_run("r2", [("ours", "peer", 1.0)], ["ours", "peer"]),
            *_rounds("r2", "ours", 1.0), *_rounds("r2", "peer", 2.0)]
    path = tmp_path / "results.jsonl"
    _write(path, node + home)
    runs = results.group_runs(results.load(path))
    chosen = report.current_pairs(runs)
    assert [(report.section(p.run), p.stats) for p in chosen] == [
        ("read_small", (2.0, 2.0, 2.0, 3)), ("read_small on 16 cores", (3.0, 3.0, 3.0, 1))]
    table = report.render_peers(chosen)
    assert "| read_small on 16 cores @abc | ours | peer | 3.00x (3.00-3.00) | >= 1x PASS" in table
    assert "| read_small @abc | ours | peer | 2.00x (2.00-2.00) | >= 1x PASS" in table
    # The README's headline is the development machine's.
    headline = report.render_headline(chosen, rows=[("read_small", "ours", "peer")])
    assert "2.00x" in headline and "3.00x" not in headline
    svg = report.render_charts(chosen)["read_small"]
    assert "ours on 16 cores vs peer" in svg and "ours vs peer" in svg


def test_a_loan_run_shows_the_rounds_it_had() -> None:
    plan = read_small.plan(Options(quick=True))
    assert plan.min_rounds is None  # the report's MIN_ROUNDS
    assert on_loan(plan, 1).min_rounds == 1
    assert on_loan(plan, 5).min_rounds == 5
    gpu = dataclasses.replace(plan, min_rounds=1)
    assert on_loan(gpu, 3).min_rounds == 1


def test_a_sample_of_an_unknown_run_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_sample("nope", "ours", 1, 1.0)) + "\n")
    with pytest.raises(ValueError, match="unknown run 'nope'"):
        results.group_runs(results.load(path))


def test_generated_tables_are_current_with_the_results_data() -> None:
    # `python -m perf report` regenerates them after a recorded run.
    assert report.regenerate(check=True) == [], "run `python -m perf report`"


def test_an_fsspec_run_on_another_data_set_has_contenders_of_its_own() -> None:
    # The report keeps one figure per contender name: a run of 64 small
    # Parquet files had stood in for the 256 MiB Parquet row.
    own = fsspec.plan(Options(params={"op": "parquet"}))
    other = fsspec.plan(Options(params={"op": "parquet", "files": "64", "rows": "32768"}))
    assert own.baseline == "aioflux-gs-parquet"
    assert [c.name for c in other.contenders] == [
        f"{fs}-parquet-files64-rows32768" for fs in ("aioflux-gs", "gcsfs", "aioflux-s3", "s3fs")]
    assert not {c.name for c in own.contenders} & {c.name for c in other.contenders}
    assert {t.mine for t in other.targets} == {other.baseline,
                                               "aioflux-s3-parquet-files64-rows32768"}


def test_a_loader_tiny_run_with_parameters_has_contenders_of_its_own() -> None:
    # The compose threshold's runs (--param size=, concurrency=) must not
    # stand in for the default run's rows, which carry dataflux at its default
    # and at its best (DataLoader workers, its only knob here).
    own = loader_tiny.plan(Options())
    other = loader_tiny.plan(Options(params={"size": "32768", "concurrency": "128"}))
    assert [c.name for c in own.contenders] == [
        "aioflux-direct", "aioflux-composed", "aioflux-default", "dataflux-map-w0",
        "dataflux-map-w2"]
    # The library's defaults (no threshold or concurrency given) face the peer.
    default = next(c for c in own.contenders if c.name == "aioflux-default")
    assert "--compose-threshold" not in default.args and "--concurrency" not in default.args
    assert {(t.mine, t.other) for t in own.targets} == {
        ("aioflux-default", "dataflux-map-w0"), ("aioflux-default", "dataflux-map-w2")}
    assert other.baseline == "aioflux-direct-concurrency128-size32768"
    assert not {c.name for c in own.contenders} & {c.name for c in other.contenders}


def test_the_peers_best_setting_runs_beside_their_default() -> None:
    # Same requests in flight as aioflux where the peer has a knob.
    read = {c.name: c.args for c in az_read.plan(Options()).contenders}
    assert "--batch-size" not in read["adlfs"]
    assert read["adlfs-batch64"][-2:] == ("--batch-size", "64")
    lists = {c.name: c.args for c in listing.plan(Options()).contenders}
    assert "--processes" not in lists["dataflux-fast-list"]
    assert lists["dataflux-fast-list-p16"][-2:] == ("--processes", "16")
    # The Azure SDK's transfers at aioflux's 32 reads / 16 blocks in flight,
    # DCP's fsspec writer with as many threads as aioflux's parts in flight.
    for plan, peer, best, knob in (
        (az_ckpt_load.plan(Options()), "azure-blob-aio", "c32", ("--max-concurrency", "32")),
        (az_ckpt_save.plan(Options()), "azure-blob-aio", "c16", ("--max-concurrency", "16")),
        (dcp_save.plan(Options()), "fsspec-gcsfs", "t16", ("--threads", "16")),
        (az_loader.plan(Options()), "adlfs-map", "batch64", ("--batch-size", "64")),
    ):
        args = {c.name: c.args for c in plan.contenders}
        assert knob[0] not in args[peer]
        assert args[f"{peer}-{best}"][-2:] == knob
    # s3torchconnector's map dataset: one object a worker, so more workers.
    loader = {c.name: c.args for c in s3_loader.plan(Options()).contenders}
    assert "--workers" not in loader["s3tc-map-w0"]
    for w in ("2", "8", "16"):
        assert ("--workers", w) == loader[f"s3tc-map-w{w}"][2:4]
        assert ("--workers", w) == loader[f"s3tc-iter-w{w}"][2:4]
    reads = {c.name: c.args for c in read_small.plan(Options()).contenders}
    assert reads["dataflux-threads16"] == ("--threads", "16")
    assert reads["dataflux-threads128"] == ("--threads", "128")


SVG = "{http://www.w3.org/2000/svg}"


def _bars(svg: str) -> list[ET.Element]:
    return [e for e in ET.fromstring(svg).iter(f"{SVG}rect") if e.get("fill") != "#ffffff"]


def test_a_chart_draws_each_pair_on_the_shared_log_scale() -> None:
    bars = [charts.Bar("ours", "peer", 4.0, 2.0, 8.0, 2.0, "PASS"),
            charts.Bar("ours", "slow <&>", 0.5, 0.5, 1.0, 1.0, "MISS"),
            charts.Bar("ours", "plain", 2.0, 2.0, 2.0, None, ""),
            charts.Bar("ours", "absent", None, None, None, 3.0, "not measured")]
    scale = charts.shared_scale(bars)
    assert scale == (0.5, 8.0)
    svg = charts.render_chart("read_small", bars, scale)
    root = ET.fromstring(svg)  # well-formed: names are escaped
    texts = [e.text for e in root.iter(f"{SVG}text")]
    assert "ours vs slow <&>" in texts and "not measured" in texts
    assert "4.00x (2.00-8.00), target >= 2x PASS" in texts
    assert ["0.5x", "1x", "2x", "4x", "8x"] == [t for t in texts if t and t.endswith("x")
                                                and " " not in t]
    # log scale over 0.5x..8x (four doublings): 1x a quarter in, 4x three quarters.
    plot = charts.WIDTH - charts.LEFT - charts.RIGHT

    def x(fraction: float) -> float:
        return charts.LEFT + plot * fraction

    passed, missed, plain = _bars(svg)  # no bar for the pair not measured
    assert float(passed.get("x")) == pytest.approx(x(0.25), abs=0.1)
    assert float(passed.get("x")) + float(passed.get("width")) == pytest.approx(x(0.75), abs=0.1)
    assert float(missed.get("x")) == pytest.approx(x(0.0), abs=0.1)  # 0.5x: left of 1x
    assert float(missed.get("width")) == pytest.approx(x(0.25) - x(0.0), abs=0.1)
    assert (passed.get("fill"), missed.get("fill"), plain.get("fill")) == (
        charts.COLORS["PASS"], charts.COLORS["MISS"], charts.COLORS[""])
    # Targets at 2x and 1x (the pair not measured draws none); whiskers min-max.
    targets = [float(e.get("x1")) for e in root.iter(f"{SVG}line")
               if e.get("stroke-width") == "2"]
    assert targets == [pytest.approx(x(0.5), abs=0.1), pytest.approx(x(0.25), abs=0.1)]
    assert len([e for e in root.iter(f"{SVG}path")]) == 3
    assert charts.render_chart("read_small", bars, scale) == svg  # same data, same text


def test_the_shared_scale_holds_every_ratio_and_1x() -> None:
    assert charts.shared_scale([charts.Bar("a", "b", 3.0, 2.5, 3.5, 5.0, "MISS")]) == (1.0, 8.0)
    assert charts.shared_scale([charts.Bar("a", "b", 0.3, 0.2, 0.4, None, "")]) == (0.125, 1.0)
    assert charts.shared_scale([charts.Bar("a", "b", 1.0, 1.0, 1.0, None, "")]) == (1.0, 2.0)
    assert charts.ticks(0.5, 128.0) == [0.5, 1, 2, 4, 8, 16, 32, 64, 128]
    assert charts.ticks(1 / 64, 1024.0)[:3] == [1 / 64, 1 / 16, 1 / 4]  # 16 doublings: every other


def test_the_page_embeds_a_chart_of_every_charted_scenario() -> None:
    page = report.DOCS_PERFORMANCE.read_text()
    drawn = report.render_charts(report.current_pairs(results.group_runs(results.load())))
    assert len(drawn) >= 10
    for name in drawn:
        assert f"]({report.CHARTS_FOLDER}/{name}.svg)" in page
        assert (report.DOCS_PERFORMANCE.parent / report.CHARTS_FOLDER / f"{name}.svg").is_file()


def test_a_peer_that_ran_a_degraded_path_says_so_beside_its_row(tmp_path: Path) -> None:
    record = _run("r1", [("ours", "msc", 1.5)], ["ours", "msc"])
    record["contenders"][1]["caveat"] = "its Python provider"
    path = tmp_path / "results.jsonl"
    _write(path, [record, *_rounds("r1", "ours", 1.0), *_rounds("r1", "msc", 2.0)])
    chosen = report.current_pairs(results.group_runs(results.load(path)))
    assert "| read_small @abc | ours | msc (its Python provider) | 2.00x" in (
        report.render_peers(chosen))
    assert "| ours | msc (its Python provider) | 2.00x" in report.render_summary(chosen)


def test_a_ratio_written_by_hand_outside_the_tables_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    page.write_text("\n".join([
        "Composed reads are 1.15x faster.",  # refused: no run behind it
        "The target is 1.5x the name.",  # not the tables' format: a factor, not a figure
        report.PEERS_MARKERS[0],
        "| read_small | ours | peer | 2.00x (2.00-2.00) |",  # generated: fine
        report.PEERS_MARKERS[1],
    ]) + "\n")
    assert report.unbacked_claims([page]) == [
        f"{page}:1: Composed reads are 1.15x faster."]
    # The repository's own README and docs pages have none.
    assert report.unbacked_claims() == []


def test_a_run_scratch_folder_outlives_its_rounds_and_not_the_run() -> None:
    from perf.emulator import project_env
    from perf.harness import SCRATCH_ENV, run_scratch

    before = os.environ.get(SCRATCH_ENV)
    write = ("import os, pathlib; d = pathlib.Path(os.environ['PERF_SCRATCH']) / 'round-1'; "
             "d.mkdir(); (d / 'cache.bin').write_bytes(b'x' * 4096)")
    with run_scratch("probe") as folder:
        # A contender (a process of its own, in the harness's environment)
        # keeps its files there after it exits, for the run's length.
        subprocess.run([sys.executable, "-c", write], env=project_env(), check=True)
        assert (folder / "round-1" / "cache.bin").stat().st_size == 4096
    assert not folder.exists()
    assert os.environ.get(SCRATCH_ENV) == before


def test_the_gpu_node_table_shows_the_bucket_load_once_measured() -> None:
    from perf.gpu_table import render_gpu_tables

    names = ["aioflux-load-bucket", "aioflux-load-bucket-unstaged"]
    head = results.run_record(
        run_id="20261129T100000-gpu_node",
        stamp=dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.timezone.utc),
        scenario="gpu_node", description="a GPU node", params={}, quick=False, rounds=1,
        baseline=names[0], targets=[],
        contenders=[{"name": n, "note": "", "venv": None, "versions": {}, "skipped": None}
                    for n in names],
        notes=[], emulator="aioflux", profile=NIC, warm_up="none", load=(1.0, 1.0),
        machine={"nproc": 16, "cpu": "x", "system": "Linux", "python": "CPython 3.12.3"},
        git="abcdef0", ratios=False, min_rounds=1)
    samples = [results.sample_record(
        run_id="20261129T100000-gpu_node", scenario="gpu_node", contender=n, round_no=1,
        result={"seconds": w, "bytes": 1 << 30, "items": 1}, error=None,
        machine={"nproc": 16}, git="abcdef0") for n, w in zip(names, (1.25, 1.5), strict=True)]
    text = render_gpu_tables(results.group_runs([head, *samples]))
    assert "from a bucket, 1 GiB (torch's: its own copies to the device) | 1.25 s | 1.50 s " \
           "|  | 20261129T100000 @abcdef0 |" in text


def test_the_gpu_node_table_shows_the_newest_run_beside_torch_and_the_references() -> None:
    from perf.gpu_table import render_gpu_tables

    names = ["ref-d2h-fresh", "aioflux-async-first", "aioflux-save", "torch-save",
             "loader-aioflux-w8", "loader-plain-w8", "loader-noio-w8"]
    head = results.run_record(
        run_id="20261128T170000-gpu_node",
        stamp=dt.datetime(2026, 11, 28, 17, 0, tzinfo=dt.timezone.utc),
        scenario="gpu_node", description="a GPU node", params={}, quick=False, rounds=1,
        baseline="ref-d2h-fresh", targets=[],
        contenders=[{"name": n, "note": "", "venv": None, "versions": {}, "skipped": None}
                    for n in names],
        notes=[], emulator="aioflux", profile=NIC, warm_up="none", load=(1.0, 1.0),
        machine={"nproc": 16, "cpu": "x", "system": "Linux", "python": "CPython 3.12.3"},
        git="abcdef0", ratios=False, min_rounds=1)
    walls = {"ref-d2h-fresh": 2.78, "aioflux-async-first": 2.5, "aioflux-save": 5.5,
             "torch-save": 6.25, "loader-aioflux-w8": 0.8, "loader-plain-w8": 0.9,
             "loader-noio-w8": 0.7}
    extra = {"aioflux-async-first": {"done_s": 7.0},
             **{n: {"samples_per_s": 32768 / w} for n, w in walls.items() if "loader" in n}}
    samples = [results.sample_record(
        run_id="20261128T170000-gpu_node", scenario="gpu_node", contender=n, round_no=1,
        result={"seconds": w, "bytes": 4 << 30, "items": 1, **extra.get(n, {})}, error=None,
        machine={"nproc": 16}, git="abcdef0") for n, w in walls.items()]
    text = render_gpu_tables(results.group_runs([head, *samples]))
    assert "| `save_async` blocking, first save | 2.50 s (done 7.00 s) | - " \
           "| fresh `.to(\"cpu\")` 2.78 s | 20261128T170000 @abcdef0 |" in text
    assert "| save | 5.50 s | 6.25 s |  | 20261128T170000 @abcdef0 |" in text
    assert "| 8 | 41.0k | 36.4k | 46.8k | 20261128T170000 @abcdef0 |" in text
    assert "| DCP save | - | - |  | - |" in text  # a row no run measured
    assert "disk" not in text  # the disk's rows show once a run measured them
    assert "bucket" not in text  # likewise the load from a bucket
    assert render_gpu_tables([]).endswith("No GPU run has been recorded yet.")
