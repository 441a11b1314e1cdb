"""Lightning CheckpointIO plugins with Trainer.fit on a tiny model."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

from aioflux import Client, NotFound  # noqa: E402
from aioflux.local._store import TEMP_MARK  # noqa: E402
from aioflux.torch.lightning import AsyncGcsCheckpointIO, GcsCheckpointIO  # noqa: E402
from tests.torch.conftest import Where  # noqa: E402


class Tiny(pl.LightningModule):  # type: ignore[misc,name-defined]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        g = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(32, 8, generator=g),
                                              torch.randn(32, 2, generator=g))
        return torch.utils.data.DataLoader(data, batch_size=8)


def _trainer(io: object, max_epochs: int) -> pl.Trainer:  # type: ignore[name-defined]
    return pl.Trainer(max_epochs=max_epochs, plugins=[io], accelerator="cpu", devices=1,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("cls", [GcsCheckpointIO, AsyncGcsCheckpointIO])
def test_fit_save_resume_remove(where: Where, cls: type) -> None:
    url = where.url("pl/epoch1.ckpt")
    model = Tiny()
    trainer = _trainer(cls(where.client), max_epochs=1)
    trainer.fit(model)
    trainer.save_checkpoint(url)
    trainer.strategy.checkpoint_io.teardown()
    assert where.names() == ["pl/epoch1.ckpt"]

    io = cls(where.client)
    ckpt = io.load_checkpoint(url, map_location="cpu")
    assert ckpt["global_step"] == 4
    for k, v in model.state_dict().items():
        assert torch.equal(ckpt["state_dict"][k], v)

    resumed = Tiny()
    trainer2 = _trainer(cls(where.client), max_epochs=2)
    trainer2.fit(resumed, ckpt_path=url)
    assert trainer2.global_step == 8  # resumed at step 4, trained one more epoch
    io.remove_checkpoint(url)
    assert where.names() == []
    io.remove_checkpoint(url)  # missing is fine
    with pytest.raises(NotFound, match=re.escape(url)):
        io.load_checkpoint(url)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("cls", [GcsCheckpointIO, AsyncGcsCheckpointIO])
def test_a_failed_save_publishes_nothing(where: Where, cls: type) -> None:
    io = cls(where.client)
    state = {"w": torch.ones(3), "f": lambda: 0}  # does not pickle
    url = where.url("bad.ckpt")
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
        io.save_checkpoint(state, url)  # the async one returns at once...
        io.teardown()  # ...and raises the save's own error here
    assert not [n for n in where.names() if n.startswith("bad") or TEMP_MARK in n]


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_async_error_surfaces_at_next_save_and_teardown(sync_client: Client) -> None:
    io = AsyncGcsCheckpointIO(sync_client)
    state = {"w": torch.ones(3)}
    io.save_checkpoint(state, "gs://no-such-bucket-aioflux/x.ckpt")  # returns at once
    with pytest.raises(NotFound):  # the original exception type
        io.save_checkpoint(state, "gs://no-such-bucket-aioflux/y.ckpt")
    io.save_checkpoint(state, "gs://no-such-bucket-aioflux/z.ckpt")
    with pytest.raises(NotFound):
        io.teardown()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("cls", [GcsCheckpointIO, AsyncGcsCheckpointIO])
def test_a_file_url_root_dir_saves_and_resumes(tmp_path: Path, cls: type) -> None:
    # Lightning passes a local default_root_dir through os.path.normpath:
    # "file:///x" reached the plugins as "file:/x", refused as a scheme typo.
    root = f"file://{tmp_path}/run"
    trainer = pl.Trainer(default_root_dir=root, max_epochs=1, plugins=[cls()],
                         accelerator="cpu", devices=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny())
    trainer.strategy.checkpoint_io.teardown()
    saved = sorted((tmp_path / "run" / "checkpoints").iterdir())
    assert [p.name for p in saved] == ["epoch=0-step=4.ckpt"]
    again = pl.Trainer(default_root_dir=root, max_epochs=2, plugins=[cls()],
                       accelerator="cpu", devices=1, logger=False,
                       enable_progress_bar=False, enable_model_summary=False)
    again.fit(Tiny(), ckpt_path=f"{root}/checkpoints/epoch=0-step=4.ckpt")
    assert again.global_step == 8
    again.strategy.checkpoint_io.teardown()
