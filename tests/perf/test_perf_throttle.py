"""The throttle scenario's pure parts: the targets' figures from worker times
and the emulator's counters, the start-together protocol, and the plan (no
benchmark runs here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from aioflux._core.auth import AnonymousAuth
from aioflux._core.rate.controller import RateState, count_unpaced_throttle, start
from aioflux._core.rate.shared_table import SharedRate, Table
from aioflux._core.settings.config import ClientConfig
from aioflux._net.throttle import gate_key
from aioflux._net.transport import Transport
from perf.harness import Options
from perf.scenarios import az_throttle, throttle
from tests.servers.capping_proxy import CappingProxy

_HELPERS = Path(__file__).resolve().parents[2] / "perf" / "contenders" / "_throttle.py"


def _helpers() -> ModuleType:
    # Contender helpers are a sibling module of the scripts, not a package member.
    spec = importlib.util.spec_from_file_location("_throttle", _HELPERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_figures_from_spans_and_counters() -> None:
    fig = _helpers().summarize([(10.0, 18.0), (10.5, 20.0)], failures=0,
                               kinds={"reads": (2000, 100)}, cap=100.0)
    # Wall from the first start to the last end: 10 s; 1,900 admitted.
    assert fig["wall_s"] == 10.0
    assert fig["goodput_of_cap"] == 1.9
    assert fig["throttled_pct"] == 5.0
    assert fig["slowest_fastest"] == 1.25  # 10 s / 8 s, both from the common start
    assert fig["failures"] == 0


def test_each_kind_is_figured_against_its_own_cap() -> None:
    # Reads and writes are capped apart: the goodput is the busiest kind's
    # (not both kinds' sum, past the cap), the throttled share the worst
    # kind's (not thinned out by the other's requests).
    fig = _helpers().summarize([(0.0, 10.0)], failures=0,
                               kinds={"reads": (500, 0), "writes": (1100, 100)}, cap=100.0)
    assert fig["goodput_of_cap"] == 1.0
    assert fig["throttled_pct"] == round(100 * 100 / 1100, 2)
    assert (fig["requests"], fig["throttled"]) == (1600, 100)


def test_figures_without_requests_or_times() -> None:
    helpers = _helpers()
    fig = helpers.summarize([(1.0, 2.0)], failures=1, kinds={"reads": (0, 0), "writes": (0, 0)},
                            cap=200.0)
    assert fig["throttled_pct"] == 0.0 and fig["goodput_of_cap"] == 0.0
    with pytest.raises(ValueError, match="no worker times"):
        helpers.summarize([], failures=0, kinds={"reads": (1, 0)}, cap=1.0)


def test_workers_start_together_and_a_failure_is_reported(tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(_HELPERS.parent)!r})\n"
        "from _throttle import worker_main\n"
        "i = int(sys.argv[-1])\n"
        "import os, time\n"
        f"mark = {str(tmp_path / 'released-1')!r}\n"
        "def work():\n"
        "    if i == 1:\n"
        "        open(mark, 'w').close()\n"
        "        raise OSError('boom')\n"
        "    # Worker 0 finishes only once worker 1 runs: both were released\n"
        "    # while the other was still at work.\n"
        "    for _ in range(3000):\n"
        "        if os.path.exists(mark):\n"
        "            return 3, 30\n"
        "        time.sleep(0.01)\n"
        "    raise TimeoutError('worker 1 never released')\n"
        "worker_main(work)\n")
    lines = _helpers().gather([sys.executable, str(script)], 2)
    assert [line["items"] for line in lines] == [3, 0]
    assert lines[0]["error"] is None and lines[1]["error"] == "OSError: boom"


def test_a_worker_that_dies_before_ready_is_an_error(tmp_path: Path) -> None:
    script = tmp_path / "dead.py"
    script.write_text("raise SystemExit('no client')\n")
    with pytest.raises(RuntimeError, match="no client"):
        _helpers().gather([sys.executable, str(script)], 1)


def test_plan_caps_the_emulator_and_sets_the_targets_on_aioflux() -> None:
    p = throttle.plan(Options(params={"procs": "4,16"}))
    assert tuple(p.emulator_args) == ("--qps", "200")
    assert not p.warm_read and not p.ratios
    names = [c.name for c in p.contenders]
    for n in (4, 16):
        assert {f"aioflux-p{n}", f"aioflux-off-p{n}", f"aioflux-dl-w{n}", f"aioflux-s3-p{n}",
                f"gcsfs-p{n}", f"s3fs-p{n}", f"botocore-adaptive-p{n}",
                f"botocore-adaptive-t{n}"} <= set(names)
    # 16 folders of 400 for the whole-folder rows, 16 of 100 for the short job.
    assert sum(s.count for s in p.objects) == 16 * 400 + 16 * 100
    goals = {(lim.contender, lim.key): (lim.op, lim.bound) for lim in p.limits}
    assert goals[("aioflux-p16", "goodput_of_cap")] == (">=", 0.9)
    assert goals[("aioflux-dl-w4", "slowest_fastest")] == ("<=", 1.3)
    # The small bursts: 10% throttled allowed at 0.05 s, 5% at 0.1 s.
    assert goals[("aioflux-p16-burst0.05", "throttled_pct")] == ("<=", 10.0)
    assert goals[("aioflux-p16-short-burst0.1", "throttled_pct")] == ("<=", 5.0)
    # The proxy's rows: served 0.85 of the cap within 3 s of the first throttle.
    assert goals[("aioflux-p4-burst1", "served_3s_of_cap")] == (">=", 0.85)
    bursts = {f"aioflux-p{n}-burst{b}" for n in (4, 16) for b in ("0.05", "0.1", "1")}
    short = {f"aioflux-p16-short-burst{b}" for b in ("0.05", "0.1", "1")}
    assert {c for c, _ in goals} == {"aioflux-p4", "aioflux-dl-w4", "aioflux-s3-p4",
                                     "aioflux-p16", "aioflux-dl-w16", "aioflux-s3-p16",
                                     *bursts, *short}


def test_the_azure_plan_caps_azurite_through_the_proxy_and_sets_the_targets() -> None:
    p = az_throttle.plan(Options(params={"procs": "4,16"}))
    assert p.azurite and not p.emulator_args and not p.warm_read and not p.ratios
    args = p.contenders[0].args
    assert args[args.index("--cap") + 1] == "100"  # under what Azurite serves uncapped here
    rows = {c.name: c.args for c in p.contenders}
    assert set(rows) == {"aioflux-az-p4", "aioflux-az-off-p4", "aioflux-az-p16",
                         "aioflux-az-off-p16"}
    assert ("--client", "aioflux-az") == rows["aioflux-az-p16"][:2]
    assert rows["aioflux-az-off-p4"][-2:] == ("--rate", "off")
    assert sum(s.count for s in p.objects) == 16 * 400
    goals = {(lim.contender, lim.key): (lim.op, lim.bound) for lim in p.limits}
    assert goals[("aioflux-az-p16", "throttled_pct")] == ("<=", 5.0)
    assert {c for c, _ in goals} == {"aioflux-az-p4", "aioflux-az-p16"}


async def test_each_row_starts_from_a_fresh_node_rate_state(tmp_path: Path) -> None:
    # The rows share the emulator and bucket: a row run after another found
    # the node already paced at the rate the other left (dl-w16 measured
    # 5.8-9.5% throttled alone, under 5% after p16). Each row forgets it.
    endpoint = "http://127.0.0.1:9/"
    transport = Transport(ClientConfig(), AnonymousAuth(), endpoint=endpoint)
    try:
        keys = [gate_key(transport.endpoint, "b", write) for write in (False, True)]
    finally:
        await transport.aclose()
    table = Table(str(tmp_path))
    for key in keys:  # the slots the clients' gates use, as a run leaves them
        with SharedRate(key, table).locked() as state:
            start(state, 1.0, 300.0)
            state.opened = True
            state.throttled = False
            count_unpaced_throttle(state, 2.0)
    _helpers().fresh_rate(endpoint, "b", table)
    for key in keys:
        shared = SharedRate(key, table)
        assert not shared.paced and not shared.owed and not shared.opened
        with shared.locked() as state:
            assert state == RateState(epoch=1)


def test_the_proxy_tells_what_it_served_after_its_first_refusal() -> None:
    # Its clock set, never waited: the bucket of 100/s holding 10 admits
    # its burst, refuses the 11th (the first refusal, at 0.5 s), then
    # admits 100/s of requests sent every 5 ms.
    proxy = CappingProxy("http://127.0.0.1:9", 100.0, "gcs", burst=10.0)
    now = [0.5]
    proxy._loop.time = lambda: now[0]  # type: ignore[method-assign]
    try:
        assert [proxy._admit() for _ in range(11)] == [True] * 10 + [False]
        assert proxy.served_after_throttle(2.0, 3.0) is None  # not that far yet
        for _ in range(800):
            now[0] += 0.005
            proxy._admit()
        assert proxy.served_after_throttle(2.0, 3.0) == pytest.approx(100.0, rel=0.05)
        assert proxy.served_after_throttle(2.0, 5.0) is None  # the clients ended before
    finally:
        proxy._loop.close()
