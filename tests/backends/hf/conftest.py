"""The fake Hub (``aioflux.testing.FakeHub``) for tests/backends/hf, and an
environment in which nothing reaches the real Hub or the user's token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aioflux.testing import FakeHub

TOKEN = "hf_fake_token"


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    """A fresh Hub: LFS from 64 bytes, tree pages of 3 entries."""
    with FakeHub(lfs_threshold=64, tree_page_size=3, tokens=(TOKEN,)) as served:
        yield served


@pytest.fixture(autouse=True)
def hub_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No token, offline flag or endpoint from the machine; a home of
    its own for huggingface_hub (its token file, its cache)."""
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_TOKEN_PATH", str(home / "token"))
    return home
