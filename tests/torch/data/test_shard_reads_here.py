"""``file://`` shards in memory (tmpfs, or the page cache) are read in the
iterating thread, their files kept open across runs (issue 61, item 4):
a DataLoader worker of N pays per run what a run costs, not an event
loop's hand-offs; each shard is opened once a pass; a file replaced or
written while it is held is a typed error, never its old bytes."""

from __future__ import annotations

import os
import tarfile
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from aioflux import ChecksumMismatch, NotFound
from aioflux._core.concurrency import share
from aioflux._core.concurrency.portal import get_portal
from aioflux.local import LocalStore, _held
from aioflux.torch import Order, ShardDataset, ShardReads
from tests.torch._shards_util import tar_shard

SHARDS, PER_SHARD, UNIT, JPG = 4, 64, 32, 16 * 1024


def _shards(folder: Path, shards: int = SHARDS) -> None:
    for s in range(shards):
        samples = [(f"s{s}-{i:04d}", {"jpg": bytes([(s * 7 + i) % 256]) * JPG, "cls": b"7"})
                   for i in range(PER_SHARD)]
        (folder / f"shard-{s}.tar").write_bytes(tar_shard(samples, fmt=tarfile.USTAR_FORMAT))


def _dataset(folder: Path) -> ShardDataset:
    return ShardDataset.from_prefix(f"file://{folder}/",
                                    reads=ShardReads(samples_per_read=UNIT,
                                                     index_dir=str(folder.parent / "index")))


def _local(tmp_path: Path) -> tuple[ShardDataset, LocalStore]:
    """A dataset over :data:`SHARDS` shards in ``tmp_path/data``, and its store."""
    data = tmp_path / "data"
    data.mkdir()
    _shards(data)
    ds = _dataset(data)
    store = ds._shards.source.downloader.client
    assert isinstance(store, LocalStore)
    return ds, store


@pytest.fixture(autouse=True)
def _alone_after() -> Iterator[None]:
    # A faked worker shares this process's pools as a DataLoader worker does.
    yield
    share.set_sharers(1)


def _as_worker(monkeypatch: pytest.MonkeyPatch, worker: int, workers: int) -> None:
    info = types.SimpleNamespace(id=worker, num_workers=workers, seed=0, dataset=None)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths of the files the held-file reads opened, in order."""
    opened: list[str] = []
    held = _held._Held

    class Counted(held):  # type: ignore[misc,valid-type]
        def __init__(self, bucket: str, name: str, here: Any, generation: Any) -> None:
            super().__init__(bucket, name, here, generation)
            opened.append(name)

    monkeypatch.setattr(_held, "_Held", Counted)
    return opened


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_a_worker_reads_its_runs_in_its_thread_its_bytes_a_share(tmp_path: Path,
                                                                 workers: int) -> None:
    ds, store = _local(tmp_path)
    units = SHARDS * PER_SHARD // UNIT
    seen: dict[str, bytes] = {}
    handed_off = 0
    call = get_portal().call

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal handed_off
        handed_off += 1
        return call(*args, **kwargs)

    for worker in range(workers):
        before = store.stats.bytes_received, store.stats.requests, store.waits
        with pytest.MonkeyPatch.context() as mp:
            _as_worker(mp, worker, workers)
            mp.setattr(get_portal(), "call", counted)
            ds.set_epoch(0)  # each worker's pass is of the same epoch, as in a DataLoader
            mine = list(ds)
        assert len(mine) == SHARDS * PER_SHARD // workers
        for sample in mine:
            assert sample["__key__"] not in seen
            seen[sample["__key__"]] = sample["jpg"]
        # A read unit holds ~UNIT / workers of its samples; the runs read
        # together are one read a shard (at most one a unit, at least one a
        # shard), done here: none handed to a thread or the loop.
        assert SHARDS <= store.stats.requests - before[1] <= units
        assert store.waits == before[2]
        assert handed_off == 0
        # Its own samples' bytes (and their tar headers): 1/workers of the shards'.
        read = store.stats.bytes_received - before[0]
        assert len(mine) * JPG < read < len(mine) * (JPG + 2048)
    assert len(seen) == SHARDS * PER_SHARD
    for key, jpg in seen.items():
        s, i = (int(part) for part in key[1:].split("-"))
        assert jpg == bytes([(s * 7 + i) % 256]) * JPG


@pytest.mark.parametrize("workers", [1, 8])
def test_runs_read_together_are_one_read_a_shard(tmp_path: Path, workers: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker of 8 reads 4 samples of each unit: its 8 runs (~70 KB each)
    # are read ahead together, one read (one check the file is unchanged,
    # one count) a shard. A worker alone reads ~540 KB a run: one a read.
    ds, store = _local(tmp_path)
    stats: list[str] = []
    stat = os.stat
    monkeypatch.setattr(_held.os, "stat", lambda path, *a, **kw: (
        stats.append(os.path.basename(path)), stat(path, *a, **kw))[1])
    _as_worker(monkeypatch, 0, workers)
    before = store.stats.requests
    assert len(list(ds)) == SHARDS * PER_SHARD // workers
    reads = store.stats.requests - before
    assert reads == (SHARDS if workers == 8 else SHARDS * PER_SHARD // UNIT)
    assert len(stats) == reads


def test_reads_ahead_stay_within_prefetch_bytes(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # With room for two of a worker of 8's runs, at most two are read
    # ahead: a read's ranges never add up to more.
    from aioflux._engines.shards import _spans_here

    data = tmp_path / "data"
    data.mkdir()
    _shards(data)
    ds = ShardDataset.from_prefix(f"file://{data}/", reads=ShardReads(
        samples_per_read=UNIT, prefetch_bytes=150_000, index_dir=str(tmp_path / "index")))
    run_bytes = 4 * (JPG + 3 * tarfile.BLOCKSIZE)  # 4 samples: 2 headers, jpg, cls
    taken: list[int] = []
    groups = _spans_here._groups

    def counted(plans: Any, budget: int) -> Any:
        for group in groups(plans, budget):
            taken.append(sum(planned.nbytes for planned in group))
            yield group

    monkeypatch.setattr(_spans_here, "_groups", counted)
    _as_worker(monkeypatch, 0, 8)
    assert len(list(ds)) == SHARDS * PER_SHARD // 8
    assert taken and max(taken) == 2 * run_bytes and sum(taken) == 8 * run_bytes


@pytest.mark.parametrize("workers", [1, 4])
def test_a_flipped_byte_in_a_sample_read_alone_is_a_checksum_mismatch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    # A worker of 4 reads each of its samples alone (3 samples lie between
    # two of its own), a worker alone reads a unit in one piece: each way a
    # flipped byte under the same version is the sample's ChecksumMismatch.
    data = tmp_path / "data"
    data.mkdir()
    _shards(data, shards=1)
    path = data / "shard-0.tar"
    ds = ShardDataset.from_prefix(f"file://{data}/", order=Order(shuffle=False),
                                  reads=ShardReads(samples_per_read=UNIT,
                                                   index_dir=str(tmp_path / "index")))
    st = path.stat()
    body = bytearray(path.read_bytes())
    body[body.index(b"s0-0008.jpg") + 3 * tarfile.BLOCKSIZE] ^= 1  # sample 8's jpg
    with open(path, "r+b") as fh:
        fh.write(bytes(body))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and time: same version
    _as_worker(monkeypatch, 0, workers)
    with pytest.raises(ChecksumMismatch,
                       match=r"shard-0\.tar: sample 8 at byte \d+ does not match"):
        list(ds)


def test_each_shard_is_opened_once_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         opens: list[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _shards(data)
    ds = _dataset(data)
    _as_worker(monkeypatch, 1, 4)
    assert len(list(ds)) == SHARDS * PER_SHARD // 4
    assert sorted(opens) == sorted({name for name in opens})  # none twice
    assert len(opens) == SHARDS


@pytest.mark.parametrize("change", ["replaced", "written", "truncated"])
def test_a_shard_changed_while_held_is_a_typed_error(tmp_path: Path, change: str) -> None:
    # One shard, two read units: its file is held open after the first, and
    # changed before the second. Replaced by a file of the same size and
    # modification time (another inode), written in place, or cut short
    # (the second unit's read comes back short): each way NotFound
    # naming the shard, not the bytes it had.
    data = tmp_path / "data"
    data.mkdir()
    _shards(data, shards=1)
    path = data / "shard-0.tar"
    ds = _dataset(data)
    it = iter(ds)
    first = next(it)
    assert first["__url__"].endswith("shard-0.tar")
    st = path.stat()
    body = bytearray(path.read_bytes())
    body[-1] ^= 1  # in the archive's end: no sample differs, the file does
    if change == "replaced":
        fresh = data / "fresh"
        fresh.write_bytes(body)
        os.utime(fresh, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(fresh, path)
    elif change == "written":
        with open(path, "r+b") as fh:
            fh.write(bytes(body))
    else:
        os.truncate(path, tarfile.BLOCKSIZE)  # every sample's bytes gone
    with pytest.raises(NotFound, match=r"shard-0\.tar.*changed or was deleted since "
                                       r"it was indexed") as caught:
        for _ in range(PER_SHARD):
            next(it)
    assert caught.value.name.endswith("shard-0.tar")
    assert caught.value.operation == "read"


def test_a_shard_deleted_while_held_is_not_found(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _shards(data, shards=1)
    ds = _dataset(data)
    it = iter(ds)
    next(it)
    (data / "shard-0.tar").unlink()
    with pytest.raises(NotFound, match=r"shard-0\.tar"):
        for _ in range(PER_SHARD):
            next(it)


def test_a_read_that_could_wait_goes_to_a_thread(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A file whose bytes may not be in memory (NFS, a disk): each run is
    # read by the store's threads, through the portal, with the same checks.
    ds, store = _local(tmp_path)
    monkeypatch.setattr(store._placement, "of", lambda path: ("thread", -1))
    handed_off = 0
    call = get_portal().call

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal handed_off
        handed_off += 1
        return call(*args, **kwargs)

    monkeypatch.setattr(get_portal(), "call", counted)
    _as_worker(monkeypatch, 0, 2)
    before = store.stats.requests
    mine = list(ds)
    assert len(mine) == SHARDS * PER_SHARD // 2
    assert handed_off == store.stats.requests - before
    assert SHARDS <= handed_off <= SHARDS * PER_SHARD // UNIT
    for sample in mine:
        s, i = (int(part) for part in sample["__key__"][1:].split("-"))
        assert sample["jpg"] == bytes([(s * 7 + i) % 256]) * JPG


class _Threads(torch.utils.data.IterableDataset[tuple[int, int, list[str]]]):
    """A worker's samples, the reads that had to wait, and its threads at the end."""

    def __init__(self, ds: ShardDataset) -> None:
        self.ds = ds

    def __iter__(self) -> Iterator[tuple[int, int, list[str]]]:
        samples = sum(1 for _ in self.ds)
        store = self.ds._shards.source.downloader.client
        assert isinstance(store, LocalStore)
        yield samples, store.waits, sorted(t.name for t in threading.enumerate())


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_a_worker_reading_files_in_memory_runs_one_thread(tmp_path: Path) -> None:
    # As a plain tarfile loop: no event loop's thread, no pool, unless a
    # read has to wait (bytes not in the page cache).
    data = tmp_path / "data"
    data.mkdir()
    _shards(data)
    loader = torch.utils.data.DataLoader(_Threads(_dataset(data)), batch_size=None,
                                         num_workers=2, multiprocessing_context="fork")
    records = list(loader)
    assert sum(samples for samples, _, _ in records) == SHARDS * PER_SHARD
    for _, waits, names in records:
        if not waits:
            assert names == ["MainThread"]


def test_the_shards_kept_for_the_reads_ahead_are_bounded(tmp_path: Path) -> None:
    # Records and indexes of the last shards read are kept for their
    # samples, never more than _RECENT of them past the index LRU's budget.
    from aioflux.torch.data import _shard_source

    data = tmp_path / "data"
    data.mkdir()
    for s in range(_shard_source._RECENT + 8):
        (data / f"part-{s:03d}.jsonl").write_bytes(b'{"a": %d}\n' % s)
    source = ShardDataset.from_prefix(f"file://{data}/",
                                      reads=ShardReads(index_dir=str(tmp_path / "i")))._shards
    for k in range(len(source.infos)):
        info, index = source.shard(k)
        assert info.name.endswith(f"part-{k:03d}.jsonl") and len(index) == 1
        assert 0 < len(source._recent) <= _shard_source._RECENT
    assert source.shard(len(source.infos) - 1)[0] is source.shard(len(source.infos) - 1)[0]
