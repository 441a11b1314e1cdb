"""A step whose manifest vouches for nothing whole (its state deleted or cut
after the save, or the manifest torn, by a partial copy of the root, say) is
no checkpoint: latest() and list() skip it, so a run resumed from the one
before comes back to that step, and its save must land there rather than end
the run with "step N already has a checkpoint"."""

from __future__ import annotations

import pytest
import torch

from aioflux import ChecksumMismatch, Conflict, WriterOptions
from aioflux._core.concurrency.portal import call
from aioflux.torch import CheckpointManager
from tests.torch.conftest import Where

PART = 5 * 1024 * 1024


def _state(step: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(50_000, generator=g), "step": step}


def _damage(where: Where, root: str, step: int, how: str) -> None:
    folder = f"{root}/step-{step:012d}/"
    if how == "torn-manifest":
        where.put(folder + "manifest.json", b'{"format": "aioflux-checkpoint/1", "st')
    elif how == "state-cut":
        where.put(folder + "state.pt", b"PK\x03\x04 the first bytes only")
    else:  # state-deleted: the folder's state.pt goes, the manifest stays
        call(where.store.delete(where.bucket, where.base + folder + "state.pt"))


@pytest.mark.parametrize("how", ["torn-manifest", "state-cut", "state-deleted"])
def test_a_resumed_run_saves_over_an_incomplete_checkpoint_of_its_step(
        where: Where, how: str) -> None:
    root = f"inc-{how}"
    with CheckpointManager(where.url(root), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        mgr.save(_state(1), 1)
        mgr.save(_state(2), 2)
    _damage(where, root, 2, how)
    with CheckpointManager(where.url(root), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        latest = mgr.latest()
        assert latest is not None and latest.step == 1  # the run resumes from 1
        saved = mgr.save(_state(2) | {"again": True}, 2)
        assert [c.step for c in mgr.list()] == [1, 2]
        loaded = mgr.load()
        assert loaded["again"] is True and torch.equal(loaded["w"], _state(2)["w"])  # type: ignore[arg-type]
        # A complete one is still refused without overwrite.
        with pytest.raises(Conflict, match="step 2 already has a checkpoint"):
            mgr.save(_state(2), 2)
    # Nothing of the damaged checkpoint is left beside the new one.
    leaves = sorted(n.split("/", 2)[2] for n in where.names(f"{root}/step-000000000002/"))
    assert leaves == sorted(["manifest.json", *saved.objects])


def test_an_incomplete_higher_step_does_not_push_a_resumed_save_out_of_the_window(
        where: Where) -> None:
    # keep_last=1: 4 complete, 6's state lost. Resumed from 4, the run saves
    # 5: only complete steps make the window, so 5 is not "below" 6.
    root = "inc-window"
    with CheckpointManager(where.url(root), client=where.client) as mgr:
        mgr.save(_state(4), 4)
        mgr.save(_state(6), 6)
    _damage(where, root, 6, "state-cut")
    with CheckpointManager(where.url(root), client=where.client, keep_last=1) as mgr:
        assert mgr.latest().step == 4  # type: ignore[union-attr]
        mgr.save(_state(5), 5)
        assert [c.step for c in mgr.list()] == [5]
        mgr.save(_state(6), 6)
        assert [c.step for c in mgr.list()] == [6]
        assert torch.equal(mgr.load()["w"], _state(6)["w"])  # type: ignore[arg-type]
    assert where.names(f"{root}/step-000000000004/") == []
    assert where.names(f"{root}/step-000000000005/") == []


def test_a_checkpoint_changed_after_its_save_is_an_error_not_the_step_before(
        where: Where) -> None:
    # One bit of step 2's state flipped, its size kept: latest() and load()
    # skipped the step as incomplete and loaded step 1 without a word, where
    # the docs promise a ChecksumMismatch naming the object.
    root = "changed"
    with CheckpointManager(where.url(root), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        mgr.save(_state(1), 1)
        mgr.save(_state(2), 2)
        name = f"{root}/step-{2:012d}/state.pt"
        data = bytearray(call(where.store.read(where.bucket, where.base + name)))
        data[-40] ^= 1
        where.put(name, bytes(data))
        stored = call(where.store.stat(where.bucket, where.base + name))
        named = r"changed/step-000000000002/state\.pt"
        if stored.crc32c is not None:  # the listing shows the change
            with pytest.raises(ChecksumMismatch, match=rf"latest checkpoint .*{named}.*"
                                                       r"changed or damaged"):
                mgr.latest()
        with pytest.raises(ChecksumMismatch, match=named):
            mgr.load()
        with pytest.raises(ChecksumMismatch, match=named):
            mgr.load(step=2)
        assert torch.equal(mgr.load(step=1)["w"], _state(1)["w"])  # type: ignore[arg-type]
        assert [c.step for c in mgr.list()] == [1]
