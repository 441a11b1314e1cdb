"""A DataLoader worker is one of ``num_workers`` processes on the machine: its
thread pools take its share of the machine, and it reads its own samples,
not the read unit's others' (issue 61, perf scenario ``workers``)."""

from __future__ import annotations

import asyncio
import collections
import math
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from aioflux._core.concurrency import share
from aioflux._core.concurrency.portal import get_portal
from aioflux.local import LocalStore
from aioflux.local._store import MAX_THREADS
from aioflux.torch import ShardDataset, ShardReads
from tests.torch._shards_util import tar_shard

# More workers than this machine's cores is the case at hand: torch warns.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

WORKERS = 4
SHARDS, PER_SHARD, JPG = 4, 64, 16 * 1024


def _blocking_threads() -> int:
    """Threads of the portal's ``asyncio.to_thread`` pool, counted with all
    of them held busy: 64 calls are handed to it at once, each holding its
    thread, so the pool starts every thread it may and no more."""
    release = threading.Event()

    async def fill() -> int:
        jobs = [asyncio.ensure_future(asyncio.to_thread(release.wait, 60)) for _ in range(64)]
        try:
            await asyncio.sleep(0)  # every call handed to the pool
            return sum(t.name.startswith("aioflux-blocking") for t in threading.enumerate())
        finally:
            release.set()
            await asyncio.gather(*jobs)

    return get_portal().call(fill())


class _Probe(torch.utils.data.IterableDataset[dict[str, Any]]):
    """Reads a worker's share of ``ds`` and yields one record of the worker:
    its pools' sizes, its threads, its bytes read and yielded."""

    def __init__(self, ds: ShardDataset) -> None:
        self.ds = ds

    def __iter__(self) -> Iterator[dict[str, Any]]:
        samples = nbytes = 0
        for sample in self.ds:
            samples += 1
            nbytes += len(sample["jpg"]) + len(sample["cls"])
        store = self.ds._shards.source.downloader.client
        assert isinstance(store, LocalStore)
        yield {"samples": samples, "bytes": nbytes, "read": store.stats.bytes_received,
               "sharers": share.sharers(), "local": store._executor()._max_workers,
               "blocking": _blocking_threads(),
               "threads": sorted(t.name for t in threading.enumerate())}


def _dataset(tmp_path: Path) -> ShardDataset:
    for s in range(SHARDS):
        samples = [(f"s{s}-{i:04d}", {"jpg": bytes([i % 256]) * JPG, "cls": b"7"})
                   for i in range(PER_SHARD)]
        (tmp_path / f"shard-{s}.tar").write_bytes(tar_shard(samples, fmt=tarfile.USTAR_FORMAT))
    return ShardDataset.from_prefix(f"file://{tmp_path}/",
                                    reads=ShardReads(samples_per_read=32,
                                                     index_dir=str(tmp_path / "index")))


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_worker_s_pools_are_its_share_of_the_machine(tmp_path: Path, context: str) -> None:
    ds = _dataset(tmp_path)
    loader = torch.utils.data.DataLoader(_Probe(ds), batch_size=None, num_workers=WORKERS,
                                         multiprocessing_context=context)
    records = list(loader)
    assert len(records) == WORKERS
    assert sum(r["samples"] for r in records) == SHARDS * PER_SHARD
    # A share of each pool, at most two threads a CPU of the worker's share.
    cpus = math.ceil(2 * share.cpus() / WORKERS)
    local = max(2, min(math.ceil(MAX_THREADS / WORKERS), cpus))  # 32 in a process alone
    blocking = max(2, min(math.ceil(min(32, share.cpus() + 4) / WORKERS), cpus))
    for r in records:
        assert r["sharers"] == WORKERS
        assert r["local"] == local
        assert r["blocking"] == blocking
        # The worker's own thread, the portal's, and the two pools at most
        # (a spawned worker also has OpenBLAS's cpus - 1, started by
        # numpy's import, before any of aioflux's code runs).
        assert len(r["threads"]) <= 2 + local + blocking, r["threads"]


def test_a_process_alone_keeps_the_whole_pools() -> None:
    assert share.sharers() == 1
    assert LocalStore()._executor()._max_workers == MAX_THREADS
    assert share.pool_threads(16) == 16
    assert _blocking_threads() == min(32, share.cpus() + 4)


def test_pool_threads_divide_a_pool_among_the_processes() -> None:
    cpus = share.cpus()
    try:
        share.set_sharers(16)
        assert share.pool_threads(32) == max(2, min(2, math.ceil(2 * cpus / 16)))
        assert share.pool_threads(6) == 2  # never below two
        assert share.pool_threads(1) == 1  # nor above the whole
        share.set_sharers(3)
        assert share.pool_threads(32) == max(2, min(11, math.ceil(2 * cpus / 3)))
        assert share.pool_threads(4) == 2
    finally:
        share.set_sharers(1)
    assert share.pool_threads(32) == 32
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="count must be an int >= 1"):
            share.set_sharers(bad)  # type: ignore[arg-type]


def test_each_worker_reads_its_own_samples_not_the_read_unit_s(tmp_path: Path) -> None:
    # batch_size 1 over 4 workers: each takes every 4th sample of a read
    # unit of 32. One read of each unit's span would read every sample
    # about 4 times over; the 3 samples between two of a worker's (24 KiB)
    # are left out of its reads.
    ds = _dataset(tmp_path)
    loader = torch.utils.data.DataLoader(_Probe(ds), batch_size=None, num_workers=WORKERS,
                                         multiprocessing_context="fork")
    records = list(loader)
    assert sum(r["samples"] for r in records) == SHARDS * PER_SHARD
    data = sum((tmp_path / f"shard-{s}.tar").stat().st_size for s in range(SHARDS))
    # Each sample's region (its members and their headers) read once, by
    # its worker: the shards' bytes less their ends, and no more.
    read = sum(r["read"] for r in records)
    assert sum(r["bytes"] for r in records) < read <= data


def test_a_run_s_pieces_are_cut_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker of N reads a run every samples_per_read / N samples: what a
    # run costs is paid N times as often a sample. Its pieces were cut three
    # times (as the window took it, for its read, as the window let it go).
    from aioflux._engines.shards import _spans, _spans_here

    cut: collections.Counter[tuple[int, ...]] = collections.Counter()
    pieces = _spans._pieces

    def counted(index: Any, samples: Any, gap: int) -> Any:
        cut[tuple(samples)] += 1
        return pieces(index, samples, gap)

    # Files in memory are read in the caller's thread (_spans_here), others by the window.
    monkeypatch.setattr(_spans, "_pieces", counted)
    monkeypatch.setattr(_spans_here, "_pieces", counted)
    ds = _dataset(tmp_path)
    assert sum(1 for _ in ds) == SHARDS * PER_SHARD
    assert sum(cut.values()) == SHARDS * PER_SHARD // 32  # one run a read unit, alone
    assert set(cut.values()) == {1}
