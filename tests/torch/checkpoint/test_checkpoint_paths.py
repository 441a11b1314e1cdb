"""Checkpoint roots and URLs as a user types them: ``pathlib.Path`` works as a
path string does, and a URL missing its ``//`` is refused before anything is
written (it once became a local directory named ``gs:``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from aioflux import InvalidURL
from aioflux.torch import Checkpoint, CheckpointManager
from tests.torch.conftest import Where


def test_a_path_root(tmp_path: Path) -> None:
    root = tmp_path / "runs" / "exp"
    with CheckpointManager(root, keep_last=1) as mgr:
        assert mgr.root == f"file://{root}/"
        mgr.save({"w": torch.arange(4)}, 1)
        assert torch.equal(mgr.load()["w"], torch.arange(4))
    assert CheckpointManager(str(root)).latest().step == 1  # type: ignore[union-attr]


def test_checkpoint_takes_paths(tmp_path: Path) -> None:
    target = tmp_path / "model.pt"
    info = Checkpoint().save({"w": torch.ones(3)}, target)
    assert target.stat().st_size == info.size
    assert torch.equal(Checkpoint().load(target)["w"], torch.ones(3))


@pytest.mark.parametrize(("root", "fix"), [
    ("gs:/my-bucket/run1", "did you mean gs://my-bucket/run1?"),
    ("s3:/my-bucket/run1", "did you mean s3://my-bucket/run1?"),
    ("gs:my-bucket", "did you mean gs://my-bucket?"),
    (Path("gs://my-bucket") / "run1", "did you mean gs://my-bucket/run1?"),
])
def test_a_url_without_its_slashes_is_refused_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: str | Path, fix: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidURL, match="lacks the '//'") as info:
        CheckpointManager(root)
    assert fix in str(info.value)
    with pytest.raises(InvalidURL, match="lacks the '//'"):
        Checkpoint().save({"w": torch.ones(1)}, f"{root}/model.pt")
    assert list(tmp_path.iterdir()) == []


def test_a_save_to_a_folder_name_is_refused_and_writes_nothing(where: Where) -> None:
    # On GCS and S3 it made an object "ckpts/" that listings skip.
    url = where.url("ckpts/")
    for save in (lambda: Checkpoint(where.client).save({"w": torch.ones(1)}, url),
                 lambda: Checkpoint(where.client).writer(url, compression="zstd")):
        with pytest.raises(InvalidURL, match=re.escape(f"write {url}: the name ends in '/'")):
            save()
    assert where.names() == []
