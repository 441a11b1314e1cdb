"""CheckpointManager semantics a user relies on: an existing step is not
silently replaced, retention is by step (the order ``latest()`` uses), and
the resume pattern works from a fresh manager. On the emulator and the local
filesystem, with the loaded tensors and the stored objects checked."""

from __future__ import annotations

import pytest
import torch

from aioflux import Conflict, InvalidArgument, WriterOptions
from aioflux.torch import CheckpointManager
from tests.torch.conftest import Where

PART = 5 * 1024 * 1024


def _state(step: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(20_000, generator=g), "step": step}


def _step_dirs(where: Where, root: str) -> list[str]:
    return sorted({n.split("/")[1] for n in where.names(root) if "/step-" in n})


def test_saving_an_existing_step_is_a_conflict_unless_overwrite(where: Where) -> None:
    with CheckpointManager(where.url("c"), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        first = mgr.save(_state(1), 5)
        with pytest.raises(Conflict, match="step 5 already has a checkpoint"):
            mgr.save(_state(2), 5)
        future = mgr.save_async(_state(2), 5)
        with pytest.raises(Conflict, match="overwrite=True"):
            future.result(timeout=60)
        # The refused saves wrote nothing: the stored state is the first one.
        assert mgr.latest() == first
        assert torch.equal(mgr.load()["w"], _state(1)["w"])  # type: ignore[arg-type]
        replaced = mgr.save(_state(2), 5, overwrite=True)
        assert replaced.step == 5 and mgr.load()["step"] == 2
        assert [r.ok for r in mgr.history()] == [True, False, False, True]


def test_a_second_save_async_of_the_same_step_is_refused_at_once(where: Where) -> None:
    with CheckpointManager(where.url("a"), client=where.client,
                           writer=WriterOptions(part_size=PART),
                           max_pending=2) as mgr:
        first = mgr.save_async(_state(1), 7)
        with pytest.raises(Conflict, match="already being saved"):
            mgr.save_async(_state(2), 7)
        assert first.result(timeout=60).step == 7
    assert torch.equal(mgr.load()["w"], _state(1)["w"])  # type: ignore[arg-type]


def test_retention_is_by_step_not_by_save_order(where: Where) -> None:
    with CheckpointManager(where.url("r"), keep_last=2, client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        for step in (100, 350, 400):
            mgr.save(_state(step), step)
        assert [c.step for c in mgr.list()] == [350, 400]
        with pytest.raises(Conflict, match="step 400 already"):
            mgr.save(_state(1), 400)
        # Step 10 after 400: outside the two highest steps, so retention would
        # delete it at once; refused before anything is written.
        with pytest.raises(InvalidArgument, match=r"step 10 is below .*350, 400"):
            mgr.save(_state(10), 10)
        assert _step_dirs(where, "r") == ["step-000000000350",
                                                        "step-000000000400"]
        mgr.save(_state(375), 375)  # inside the window: kept, and 350 goes
        assert [c.step for c in mgr.list()] == [375, 400]
        assert mgr.latest().step == 400  # type: ignore[union-attr]
    # Without keep_last nothing is deleted, and latest() is still the highest step.
    with CheckpointManager(where.url("r"), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        mgr.save(_state(10), 10)
        assert [c.step for c in mgr.list()] == [10, 375, 400]
        assert mgr.latest().step == 400  # type: ignore[union-attr]


def test_resume_pattern_from_a_fresh_manager(where: Where) -> None:
    root = where.url("resume")
    with CheckpointManager(root, client=where.client, writer=WriterOptions(part_size=PART)) as mgr:
        assert mgr.latest() is None  # a fresh run starts at step 0
        mgr.save_async(_state(30), 30)
        # close() (the with block) waits for the background save.
    restarted = CheckpointManager(root, client=where.client, writer=WriterOptions(part_size=PART))
    latest = restarted.latest()
    assert latest is not None and latest.step == 30
    state = restarted.load()
    assert state["step"] == 30 and torch.equal(state["w"], _state(30)["w"])  # type: ignore[arg-type]
    restarted.close()
