"""The perf report's verdicts: each target compares the contenders it names."""

from __future__ import annotations

from perf.harness import Contender, Outcome, Plan, Target
from perf.report import _targets


def _outcome(name: str, *seconds: float) -> Outcome:
    return Outcome(Contender(name, "x.py", None, ()), [{"seconds": s} for s in seconds])


def test_targets_pair_the_named_contenders_and_default_to_the_baseline() -> None:
    outcomes = [_outcome("ours-w0", 1.0, 1.2, 1.1), _outcome("ours-w2", 3.0),
                _outcome("peer-w0", 10.0), _outcome("peer-w2", 12.0), _outcome("gone")]
    plan = Plan(name="s", description="d", bucket="bkt", objects=[],
                contenders=[o.contender for o in outcomes], baseline="ours-w0",
                targets=[Target("peer-w0", 8.0), Target("peer-w2", 8.0, "ours-w2"),
                         Target("gone", 1.0), Target("peer-w0", 1.0, "missing")])
    assert _targets(plan, outcomes) == [
        "- ours-w0 >= 8.0x peer-w0: 9.09x, PASS",  # median 1.1 s
        "- ours-w2 >= 8.0x peer-w2: 4.00x, MISS",
        "- ours-w0 >= 1.0x gone: not measured",
        "- missing >= 1.0x peer-w0: not measured",
    ]
