"""AsyncGcsCheckpointIO's remove_checkpoint and the save in flight:
ModelCheckpoint removes the checkpoint leaving its ``save_top_k`` right
after it saves the new one, so a remove that waited for that save made
every "background" save blocking. Only a remove of what the save writes
must wait for it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

pytest.importorskip("lightning.pytorch")

from aioflux import StorageError
from aioflux.torch.lightning import AsyncGcsCheckpointIO, GcsCheckpointIO
from tests.torch.conftest import Where


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_removing_another_checkpoint_leaves_the_save_in_flight_running(
        where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    io = AsyncGcsCheckpointIO(where.client)
    io.save_checkpoint({"w": torch.ones(3)}, where.url("ck/epoch=1.ckpt"))
    io.teardown()
    removed = threading.Event()
    save = GcsCheckpointIO.save_checkpoint

    def held(self: GcsCheckpointIO, checkpoint: dict[str, Any], path: Any,
             storage_options: Any = None) -> None:
        # This save lands only once the remove returned: a remove waiting
        # for it waited until this gave up (a hang guard, not a timing).
        assert removed.wait(30), "the remove waited for the save in flight"
        save(self, checkpoint, path, storage_options)

    monkeypatch.setattr(GcsCheckpointIO, "save_checkpoint", held)
    io.save_checkpoint({"w": torch.full((3,), 2.0)}, where.url("ck/epoch=2.ckpt"))
    io.remove_checkpoint(where.url("ck/epoch=1.ckpt"))
    removed.set()
    io.teardown()
    assert where.names() == ["ck/epoch=2.ckpt"]
    assert torch.equal(io.load_checkpoint(where.url("ck/epoch=2.ckpt"))["w"],
                       torch.full((3,), 2.0))


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
@pytest.mark.parametrize("removed", ["ck/epoch=3.ckpt", "ck"])
def test_removing_the_checkpoint_being_saved_waits_for_its_save(
        where: Where, monkeypatch: pytest.MonkeyPatch, removed: str) -> None:
    # The save's own failure can only be seen by waiting for it: a remove
    # of the checkpoint it writes (or of the folder holding it) raises it.
    io = AsyncGcsCheckpointIO(where.client)
    io.save_checkpoint({"w": torch.ones(3)}, where.url("ck/epoch=3.ckpt"))
    io.remove_checkpoint(where.url(removed))
    assert where.names() == []  # removed after it landed, not before

    def failing(self: GcsCheckpointIO, checkpoint: dict[str, Any], path: Any,
                storage_options: Any = None) -> None:
        raise StorageError(f"save {path} failed", operation="save", name=str(path))

    monkeypatch.setattr(GcsCheckpointIO, "save_checkpoint", failing)
    io.save_checkpoint({"w": torch.ones(3)}, where.url("ck/epoch=3.ckpt"))
    with pytest.raises(StorageError, match=r"epoch=3\.ckpt failed"):
        io.remove_checkpoint(where.url(removed))
    io.teardown()  # raised once: nothing left to raise


@pytest.mark.parametrize("where", ["file"], indirect=True)
@pytest.mark.parametrize("outcome", ["lands", "fails"])
def test_the_checkpoint_a_save_replaces_stays_until_that_save_landed(
        where: Where, monkeypatch: pytest.MonkeyPatch, outcome: str) -> None:
    # ModelCheckpoint(save_top_k=1) saves epoch=2 and at once removes
    # epoch=1. Removed while epoch=2 still uploaded, a preempted machine (or
    # an upload that failed) left no checkpoint at all: epoch=1 must stay
    # until epoch=2 is complete, and stay for good if it never is.
    io = AsyncGcsCheckpointIO(where.client)
    io.save_checkpoint({"w": torch.ones(3)}, where.url("ck/epoch=1.ckpt"))
    io.teardown()
    release = threading.Event()
    save = GcsCheckpointIO.save_checkpoint

    def held(self: GcsCheckpointIO, checkpoint: dict[str, Any], path: Any,
             storage_options: Any = None) -> None:
        assert release.wait(30), "the remove waited for the save in flight"
        if outcome == "fails":
            raise StorageError(f"save {path} failed", operation="save", name=str(path))
        save(self, checkpoint, path, storage_options)

    monkeypatch.setattr(GcsCheckpointIO, "save_checkpoint", held)
    io.save_checkpoint({"w": torch.full((3,), 2.0)}, where.url("ck/epoch=2.ckpt"))
    try:
        io.remove_checkpoint(where.url("ck/epoch=1.ckpt"))  # returns at once
        assert where.names() == ["ck/epoch=1.ckpt"]  # a kill now leaves epoch=1
    finally:
        release.set()
    if outcome == "fails":
        with pytest.raises(StorageError, match=r"epoch=2\.ckpt failed"):
            io.teardown()
        assert where.names() == ["ck/epoch=1.ckpt"]
        assert torch.equal(io.load_checkpoint(where.url("ck/epoch=1.ckpt"))["w"], torch.ones(3))
    else:
        io.teardown()
        assert where.names() == ["ck/epoch=2.ckpt"]
