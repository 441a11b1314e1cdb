"""A map dataset reads a batch in its own thread where its store offers
``ReadsHere`` (small reads that may end in the calling thread), whatever the
store's class: a store of another package wrapping the local one does too,
and a store without it has every object downloaded."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from aioflux._core.storage.protocol import ReadsHere
from aioflux.local import LocalStore
from aioflux.local._inline import Placement
from aioflux.testing import MemoryStore
from aioflux.torch import ObjectMapDataset
from aioflux.torch.data import _map_dataset


class Wrapping:
    """A store of another package over the local one: no ``LocalStore``,
    every attribute its inner store's, the small reads counted."""

    def __init__(self, inner: LocalStore) -> None:
        self._inner = inner
        self.small_reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _read_small_many(self, bucket: str, names: Sequence[str],
                         listed: Sequence[tuple[int, int | None, int | None]] | None = None
                         ) -> list[bytes | None]:
        self.small_reads += len(names)
        return self._inner._read_small_many(bucket, names, listed)


def _dataset(tmp_path: Path) -> tuple[ObjectMapDataset[bytes], list[bytes]]:
    (tmp_path / "d").mkdir()
    bodies = [b"first", b"second one", b"third"]
    for i, body in enumerate(bodies):
        (tmp_path / "d" / f"{i}").write_bytes(body)
    return ObjectMapDataset.from_prefix(str(tmp_path / "d"), transform=bytes), bodies


def test_a_store_offering_reads_here_is_read_in_the_callers_thread(tmp_path: Path) -> None:
    ds, bodies = _dataset(tmp_path)
    local = ds._source.downloader.client
    assert isinstance(local, LocalStore) and isinstance(local, ReadsHere)
    # Whatever filesystem holds tmp_path, the store takes it for memory.
    local._placement = Placement({os.stat(tmp_path).st_dev: "tmpfs"})
    wrapped = Wrapping(local)
    assert not isinstance(wrapped, LocalStore) and isinstance(wrapped, ReadsHere)
    ds._source.downloader.client = wrapped  # type: ignore[assignment]
    assert ds._read_here([0, 1, 2]) == bodies
    assert wrapped.small_reads == 3


def test_a_store_without_reads_here_downloads_every_object(tmp_path: Path) -> None:
    ds, _ = _dataset(tmp_path)
    assert not isinstance(MemoryStore(), ReadsHere)
    ds._source.downloader.client = MemoryStore()
    assert ds._read_here([0, 1, 2]) is None  # left to the planner


def test_a_batch_read_here_starts_no_loop(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A DataLoader worker whose files are all in memory runs one thread, as
    # a plain open() loop does: the portal (the loop's thread) is asked for
    # only by a batch that is downloaded.
    ds, bodies = _dataset(tmp_path)
    local = ds._source.downloader.client
    assert isinstance(local, LocalStore)
    local._placement = Placement({os.stat(tmp_path).st_dev: "tmpfs"})
    asked: list[int] = []

    def portal() -> Any:
        asked.append(1)
        raise AssertionError("a batch read here asked for the portal")

    monkeypatch.setattr(_map_dataset, "get_portal", portal)
    assert ds.__getitems__([0, 1, 2]) == bodies
    assert ds.__getitems__([2, 0]) == [bodies[2], bodies[0]]
    assert asked == []
