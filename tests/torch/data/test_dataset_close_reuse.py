"""A dataset closed and used again, cycle after cycle (``close()`` between
epochs or evaluations): each use builds a new store, and the closed ones
are let go, not kept by a finalizer each until the dataset dies. One left
unclosed is still closed when the dataset is collected.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from aioflux.local import LocalStore
from aioflux.torch import ObjectIterableDataset, ObjectMapDataset
from aioflux.torch.data import _source

CYCLES = 20


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"obj-{i}").write_bytes(b"x" * (i + 1))
    return data


@pytest.fixture
def closed_later(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The stores a dataset's finalizer closes (the closing itself kept)."""
    closed: list[object] = []
    close_later = _source._close_later

    def record(store: LocalStore, pid: int) -> None:
        closed.append(store)
        close_later(store, pid)

    monkeypatch.setattr(_source, "_close_later", record)
    return closed


def test_closed_stores_are_let_go_across_close_and_reuse(folder: Path) -> None:
    ds = ObjectMapDataset.from_prefix(str(folder))
    stores: list[weakref.ref[object]] = []
    for _ in range(CYCLES):
        assert ds[0] == b"x"
        stores.append(weakref.ref(ds._source.downloader.client))
        ds.close()
    gc.collect()
    # The dataset lives on; of its closed stores at most the last may too
    # (the map dataset remembers whether its store reads files in place).
    assert [r for r in stores[:-1] if r() is not None] == []


def test_an_unclosed_dataset_closes_only_its_current_store_when_collected(
        folder: Path, closed_later: list[object]) -> None:
    ds = ObjectIterableDataset.from_prefix(str(folder))
    for _ in range(CYCLES):
        assert sorted(ds) == [b"x", b"xx", b"xxx"]
        ds.close()
    assert sorted(ds) == [b"x", b"xx", b"xxx"]
    current = ds._source.downloader.client
    del ds
    gc.collect()
    assert closed_later == [current]
