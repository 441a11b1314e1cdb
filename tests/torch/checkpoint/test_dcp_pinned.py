"""A DCP load reads each data file at one version: a file replaced while
it is loaded fails the load with a typed ``PreconditionFailed`` naming it,
never hands DCP items of two versions.

The checkpoints here are torch's own writer's: they carry no items' crc32c
(``.metadata.crc32c``) that would catch a replaced file, and a partial load
never tiles a file for the whole-file check either, so nothing but the
pinned version stands between the load and a silent mix.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemWriter

from aioflux import PreconditionFailed
from aioflux._core.concurrency.portal import call
from aioflux.local import LocalStore
from aioflux.torch.dcp import DcpReader
from tests.torch.conftest import Where

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _state(fill: float) -> dict[str, torch.Tensor]:
    return {key: torch.full((100, 50), fill + k) for k, key in enumerate("abc")}


def _torch_checkpoint(folder: Path, fill: float, *, per_item: bool = False) -> dict[str, bytes]:
    """The files torch's FileSystemWriter writes for ``_state(fill)``."""
    dcp.save(_state(fill), storage_writer=FileSystemWriter(
        str(folder), single_file_per_rank=not per_item))
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _put_all(where: Where, sub: str, files: dict[str, bytes]) -> None:
    for name, body in files.items():
        where.put(f"{sub}/{name}", body, foreign=True)  # as torch wrote them: no crc32c


def _replace(where: Where, name: str, body: bytes) -> None:
    """Store ``body`` as ``name``, a new version of it."""
    before = call(where.store.stat(where.bucket, where.base + name))
    where.put(name, body, foreign=True)
    if where.scheme == "file":
        # A file's version is its modification time: one well past the old
        # one, whatever the clock's granularity.
        path = f"/{where.bucket}/{where.base}{name}"
        os.utime(path, ns=(before.generation + 10**9, before.generation + 10**9))
    after = call(where.store.stat(where.bucket, where.base + name))
    assert after.generation != before.generation


class _ReplaceAfterFirst(DefaultLoadPlanner):
    """Replaces a data file once DCP has loaded its first tensor."""

    def __init__(self, replace: Any) -> None:
        super().__init__()
        self.replace = replace
        self.loaded: list[str] = []

    def commit_tensor(self, read_item: Any, tensor: torch.Tensor) -> None:
        super().commit_tensor(read_item, tensor)
        self.loaded.append(read_item.dest_index.fqn)
        if len(self.loaded) == 1:
            self.replace()


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_a_data_file_replaced_during_a_load_is_a_precondition_failure(
        where: Where, tmp_path: Path) -> None:
    # One data file holds a, b and c; the load wants a and b (a partial
    # load: its ranges never tile the file). The file is replaced once a is
    # loaded: b's ranged read, unpinned, took the new version's bytes, and
    # the load returned a of one save and b of another.
    _put_all(where, "ck", _torch_checkpoint(tmp_path / "v1", 1.0))
    newer = _torch_checkpoint(tmp_path / "v2", 10.0)
    (data,) = [n for n in newer if n.endswith(".distcp")]
    assert ".metadata.crc32c" not in where.names("ck")
    planner = _ReplaceAfterFirst(lambda: _replace(where, f"ck/{data}", newer[data]))
    target = {"a": torch.zeros(100, 50), "b": torch.zeros(100, 50)}
    # Nothing read ahead: b's read starts after the replacement.
    reader = DcpReader(where.url("ck"), client=where.client, bytes_ahead=1)
    with pytest.raises(BaseException, match=f"{data}.*changed during the load") as info:
        dcp.load(target, storage_reader=reader, planner=planner)
    assert PreconditionFailed.__name__ in repr(info.value)
    assert planner.loaded == ["a"]
    # Loaded again, the load reads the new version throughout.
    target = {"a": torch.zeros(100, 50), "b": torch.zeros(100, 50)}
    dcp.load(target, storage_reader=DcpReader(where.url("ck"), client=where.client))
    assert torch.equal(target["a"], _state(10.0)["a"])
    assert torch.equal(target["b"], _state(10.0)["b"])


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_reads_ahead_of_a_data_file_and_its_open_read_one_version(
        where: Where, tmp_path: Path) -> None:
    # One data file per item: b's and c's files are read ahead while a
    # loads, each pinned to the version a stat found then. Replaced after
    # a is loaded, a file whose reads ahead all landed loads its old
    # version whole; one with a read still to come fails. Never a mix.
    _put_all(where, "ck", _torch_checkpoint(tmp_path / "v1", 1.0, per_item=True))
    newer = _torch_checkpoint(tmp_path / "v2", 10.0, per_item=True)
    files = sorted(n for n in newer if n.endswith(".distcp"))
    assert len(files) == 3

    reader = DcpReader(where.url("ck"), client=where.client)
    pinned: list[int] = []

    def replace_all() -> None:
        # The replacement waits for the stats the load has begun (a's open,
        # b's and c's reads ahead): a stat still running could find the new
        # version, and its file load that one whole, which is not this case.
        stats = list(reader._pinned._stats.values())
        for stat in stats:
            stat.result()
        pinned.append(len(stats))
        for name in files:
            _replace(where, f"ck/{name}", newer[name])

    planner = _ReplaceAfterFirst(replace_all)
    target = {key: torch.zeros(100, 50) for key in "abc"}
    try:
        dcp.load(target, storage_reader=reader, planner=planner)
    except BaseException as exc:  # DCP may wrap it
        assert PreconditionFailed.__name__ in repr(exc) and "changed during the load" in repr(exc)
        return
    # Every item read ahead before the replacement: the old save, whole.
    assert pinned == [3]
    for key in "abc":
        assert torch.equal(target[key], _state(1.0)[key]), key


def test_a_load_stats_each_data_file_once_and_reads_its_items_from_the_file_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The pin costs nothing: the one stat per data file is the one opening
    # it took before, and a local file's items are read through the file
    # that opening holds, at that version (no ranged fetch through the store).
    root = tmp_path / "ck"
    _torch_checkpoint(root, 1.0, per_item=True)
    stats: collections.Counter[str] = collections.Counter()
    fetches: list[tuple[str, int | None]] = []
    stat, fetch = LocalStore.stat, LocalStore.fetch

    async def counted_stat(store: LocalStore, bucket: str, name: str) -> Any:
        stats[name.rpartition("/")[2]] += 1
        return await stat(store, bucket, name)

    async def counted_fetch(store: LocalStore, bucket: str, name: str, **kw: Any) -> Any:
        fetches.append((name.rpartition("/")[2], kw.get("generation")))
        return await fetch(store, bucket, name, **kw)

    monkeypatch.setattr(LocalStore, "stat", counted_stat)
    monkeypatch.setattr(LocalStore, "fetch", counted_fetch)
    target = {key: torch.zeros(100, 50) for key in "abc"}
    dcp.load(target, storage_reader=DcpReader(str(root)))
    assert all(torch.equal(target[key], _state(1.0)[key]) for key in "abc")
    files = sorted(p.name for p in root.glob("*.distcp"))
    assert {name: stats[name] for name in files} == dict.fromkeys(files, 1)
    assert [name for name, _ in fetches if name.endswith(".distcp")] == []
