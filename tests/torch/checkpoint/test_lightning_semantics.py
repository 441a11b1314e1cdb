"""The Lightning plugins keep TorchCheckpointIO's contract: where tensors
load, which options are refused, what a remove deletes, what a script's last
background save does, and ModelCheckpoint's save_top_k flow."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.serialization

pl = pytest.importorskip("lightning.pytorch")

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402

from aioflux import InvalidArgument  # noqa: E402
from aioflux.torch.lightning import AsyncGcsCheckpointIO, GcsCheckpointIO  # noqa: E402
from tests.torch.conftest import HeldBack, Where, a_fork_worker_ends  # noqa: E402

PLUGINS = [GcsCheckpointIO, AsyncGcsCheckpointIO]


@contextlib.contextmanager
def _saved_on_cuda() -> Iterator[None]:
    """torch.save records every storage as saved from ``cuda:0`` (this
    machine has no GPU), as a checkpoint written by a GPU job is."""
    registry = torch.serialization._package_registry  # type: ignore[attr-defined]
    tagger = (0, lambda storage: "cuda:0", lambda storage, location: None)
    registry.insert(0, tagger)
    try:
        yield
    finally:
        registry.remove(tagger)


@pytest.mark.parametrize("cls", PLUGINS)
def test_load_puts_tensors_in_host_memory_as_torch_checkpoint_io(
        cls: type[GcsCheckpointIO], tmp_path: Path) -> None:
    path = tmp_path / "gpu.ckpt"
    with _saved_on_cuda():
        torch.save({"state_dict": {"w": torch.ones(3)}}, path)
    # Strategy.load_checkpoint passes no map_location: TorchCheckpointIO
    # loads to the CPU; before, this raised "Attempting to deserialize object
    # on a CUDA device" here (and loaded every rank's copy onto cuda:0 on GPUs).
    expected = TorchCheckpointIO().load_checkpoint(path)
    got = cls().load_checkpoint(str(path))
    assert got["state_dict"]["w"].device == expected["state_dict"]["w"].device
    assert got["state_dict"]["w"].device == torch.device("cpu")
    assert torch.equal(got["state_dict"]["w"], torch.ones(3))


@pytest.mark.parametrize("cls", PLUGINS)
def test_storage_options_are_refused_not_dropped(cls: type[GcsCheckpointIO],
                                                 tmp_path: Path) -> None:
    io = cls()
    path = tmp_path / "x.ckpt"
    with pytest.raises(InvalidArgument, match="storage_options"):
        io.save_checkpoint({"w": torch.ones(1)}, path, storage_options={"metadata": {"a": "b"}})
    io.teardown()
    assert not path.exists()
    io.save_checkpoint({"w": torch.ones(1)}, path, storage_options=None)
    io.teardown()
    assert path.exists()


@pytest.mark.parametrize("cls", PLUGINS)
def test_remove_deletes_the_checkpoint_file_or_folder_and_nothing_beside(
        where: Where, cls: type[GcsCheckpointIO]) -> None:
    io = cls(where.client)
    for name in ("epoch=1.ckpt", "epoch=10.ckpt", "epoch=1.ckpt.bak", "epoch=1.ckptx/a"):
        where.put("ck/" + name, b"keep " + name.encode())
    # A sharded checkpoint is a folder (DeepSpeed, FSDP): TorchCheckpointIO
    # removes it whole; before, this was a silent no-op and save_top_k kept
    # every one of them.
    for name in ("meta.pt", "__0_0.distcp", "sub/__1_0.distcp"):
        where.put("ck/sharded=1.ckpt/" + name, b"shard")
    where.put("ck/sharded=10.ckpt/meta.pt", b"keep")
    io.remove_checkpoint(where.url("ck/epoch=1.ckpt"))
    io.remove_checkpoint(where.url("ck/sharded=1.ckpt"))
    io.remove_checkpoint(where.url("ck/missing.ckpt"))  # missing is fine
    assert where.names() == ["ck/epoch=1.ckpt.bak", "ck/epoch=1.ckptx/a", "ck/epoch=10.ckpt",
                             "ck/sharded=10.ckpt/meta.pt"]
    io.teardown()


@pytest.mark.parametrize("cls", PLUGINS)
def test_removing_a_folder_checkpoint_on_disk_leaves_no_empty_directories(
        tmp_path: Path, cls: type[GcsCheckpointIO]) -> None:
    # A strategy makes its folder with os.makedirs: its files went, and the
    # empty tree stayed (LocalStore removes only directories it made).
    io = cls()
    (tmp_path / "epoch=1.ckpt" / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "epoch=1.ckpt" / "__0_0.distcp").write_bytes(b"shard")
    (tmp_path / "epoch=1.ckpt" / "sub" / "__1_0.distcp").write_bytes(b"shard")
    (tmp_path / "epoch=10.ckpt" / "empty").mkdir(parents=True)  # a prefix sibling's
    io.save_checkpoint({"w": torch.ones(1)}, tmp_path / "epoch=2.ckpt")
    io.remove_checkpoint(tmp_path / "epoch=1.ckpt")
    io.remove_checkpoint(tmp_path / "epoch=2.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch=10.ckpt"]
    assert (tmp_path / "epoch=10.ckpt" / "empty").is_dir()
    io.teardown()


_SAVE_THEN_END = textwrap.dedent("""
    import sys, torch
    from aioflux.torch.lightning import AsyncGcsCheckpointIO

    io = AsyncGcsCheckpointIO()
    # As trainer.save_checkpoint(path) after fit() (whose teardown already ran).
    io.save_checkpoint({"w": torch.arange(4_000_000, dtype=torch.float32)}, sys.argv[1])
    # No teardown: the script just ends.
""")


def test_a_background_save_in_flight_when_the_script_ends_lands(tmp_path: Path) -> None:
    path = tmp_path / "final.ckpt"
    done = subprocess.run([sys.executable, "-c", _SAVE_THEN_END, str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # Before: the local store's thread pool refused work at exit, and the
    # checkpoint was silently lost.
    loaded = torch.load(path, weights_only=True)
    assert torch.equal(loaded["w"], torch.arange(4_000_000, dtype=torch.float32))
    assert "failed" not in done.stderr


def test_a_fork_worker_ends_at_once_while_the_parent_saves(tmp_path: Path) -> None:
    # As CheckpointManager's (test_checkpoint_faults.py): the worker ran the
    # parent's exit hook as it ended and waited for the parent's save.
    io = AsyncGcsCheckpointIO()
    HeldBack.release.clear()
    try:
        io.save_checkpoint({"w": torch.ones(4), "held": HeldBack()}, tmp_path / "x.ckpt")
        a_fork_worker_ends()
    finally:
        HeldBack.release.set()
    io.teardown()
    assert torch.load(tmp_path / "x.ckpt", weights_only=True)["held"] == {"held": 7}


def test_a_background_save_that_fails_when_the_script_ends_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    done = subprocess.run([sys.executable, "-c", _SAVE_THEN_END, str(blocker / "x.ckpt")],
                          capture_output=True, text=True, timeout=120)
    assert f"background save to {blocker / 'x.ckpt'} failed" in done.stderr


class _Scored(pl.LightningModule):  # type: ignore[misc,name-defined]
    # Lower is better: epochs 1 and 10 are the best two.
    SCORES = (5.0, 0.1, 4.0, 3.0, 6.0, 7.0, 8.0, 2.5, 9.0, 9.5, 0.05, 9.9)

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_epoch_end(self) -> None:
        self.log("score", self.SCORES[self.current_epoch])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        g = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(8, 4, generator=g),
                                              torch.randn(8, 1, generator=g))
        return torch.utils.data.DataLoader(data, batch_size=4)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("cls", PLUGINS)
def test_model_checkpoint_save_top_k_keeps_what_torch_checkpoint_io_keeps(
        cls: type[GcsCheckpointIO], tmp_path: Path) -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)
    callback = ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", monitor="score", mode="min",
                               save_top_k=2, save_last=True)
    trainer = pl.Trainer(max_epochs=len(_Scored.SCORES), plugins=[cls()], callbacks=[callback],
                         accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(_Scored())
    # epoch=1 and epoch=10 share a prefix: removing the others kept both.
    assert sorted(os.listdir(tmp_path)) == ["epoch=1.ckpt", "epoch=10.ckpt", "last.ckpt"]
    assert Path(callback.best_model_path).name == "epoch=10.ckpt"
    best = cls().load_checkpoint(tmp_path / "epoch=1.ckpt")
    assert best["epoch"] == 1
