"""A shard dataset's shard list in columns (issue 49): the bytes a shard it
holds and pickles into a spawn worker, bounded by counts, and DataLoader
workers (fork and spawn) reading through the list their parent made."""

from __future__ import annotations

import gc
import gzip
import multiprocessing.context
import multiprocessing.popen_spawn_posix
import os
import pickle
import tracemalloc
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch.utils.data

from aioflux._core.concurrency.portal import call
from aioflux._core.memory import shared_columns
from aioflux._core.memory.object_index import ObjectIndex
from aioflux._core.records.types import ObjectInfo
from aioflux._engines.shards._manifest import MANIFEST_NAME, Entry, encode_manifest
from aioflux.local import LocalStore
from aioflux.torch import Order, ShardDataset, ShardMapDataset, ShardReads
from tests.torch._forkserver import forkserver

SHARDS = 10_000


def listed_like_gcs(root: Path, shards: int) -> list[ObjectInfo]:
    """Records as a GCS listing gives them: crc32c, MD5, ``updated``,
    metageneration and content type besides name, size and generation."""
    bucket, folder = root.parts[1], "/".join(root.parts[2:]) + "/"
    return [ObjectInfo(bucket, f"{folder}train-{n:06d}.tar", 400_000_000 + n,
                       1_700_000_000_000_000 + n, crc32c=(n * 2654435761) % (1 << 32),
                       md5=f"{n:022d}==", metageneration=1,
                       content_type="application/x-tar",
                       updated=f"2024-01-02T03:04:{n % 60:02d}.{n % 999_999:06d}Z",
                       scheme="file")
            for n in range(shards)]


def manifest_of(root: Path, infos: list[ObjectInfo]) -> None:
    """A manifest counting every shard (1,000 samples each): the dataset is
    made from it with one read, no shard is opened."""
    folder = "/".join(root.parts[2:]) + "/"
    entries = [Entry(name=info.name[len(folder):], size=info.size, crc32c=info.crc32c,
                     version=info.generation, format="tar", compression=None, samples=1000,
                     data_size=info.size) for info in infos]
    call(LocalStore().write(root.parts[1], folder + MANIFEST_NAME, encode_manifest(entries)))


def pickled_for_spawn(obj: Any) -> int:
    """The bytes ForkingPickler makes of ``obj`` when a spawn starts a worker."""
    class Popen:
        DupFd = multiprocessing.popen_spawn_posix._DupFd

        def duplicate_for_child(self, fd: int) -> int:
            return fd

    multiprocessing.context.set_spawning_popen(Popen())  # type: ignore[arg-type]
    try:
        return len(ForkingPickler.dumps(obj))
    finally:
        multiprocessing.context.set_spawning_popen(None)


def test_a_shard_costs_under_64_bytes_held_and_16_pickled_for_spawn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A list of records held ~470 bytes a shard (of a GCS listing) in every
    # process and pickled ~100 into each spawn worker: 470 MB a process at
    # 1e6 shards. Now its columns (the name past the folder, 16 bytes of
    # numbers and 9 of counts) in memory the node's processes share (from
    # 1 MiB on, 50,000 shards; from 128 KiB here, for fewer).
    monkeypatch.setattr(shared_columns, "SHARE_MIN", 1 << 17)
    infos = listed_like_gcs(tmp_path, SHARDS)
    manifest_of(tmp_path, infos)
    gc.collect()
    tracemalloc.start()  # the caller's records were made before: not counted
    try:
        ds = ShardDataset(infos, reads=ShardReads(index_dir=tmp_path / "idx"))
        del infos
        gc.collect()
        heap = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    shards = ds._shards.shard_list
    assert ds.total_samples == 1000 * SHARDS and len(ds._shards.indexes) == 0
    # The columns are memory files (mappings tracemalloc does not see).
    assert shards.infos.shared and shards.nbytes() > shared_columns.SHARE_MIN
    mapped = sum(len(block) for block in (shards.infos._block, shards._block) if block.shared)
    held = heap + mapped
    assert held <= 64 * SHARDS, held / SHARDS
    assert pickled_for_spawn(ds) <= 16 * SHARDS, pickled_for_spawn(ds) / SHARDS
    # A record is built when asked for, equal to what the reads use.
    assert ds._shards.infos[7] == ObjectInfo(
        tmp_path.parts[1], "/".join(tmp_path.parts[2:]) + "/train-000007.tar", 400_000_007,
        1_700_000_000_000_007, crc32c=(7 * 2654435761) % (1 << 32), scheme="file")
    # Any other pickle (another node) carries the bytes, and the same list.
    other = pickle.loads(pickle.dumps(ds))
    assert other._shards.fingerprint() == ds._shards.fingerprint()
    assert other.counts == ds.counts
    first = np.arange(1000) * 9_999
    assert (other._order(3).at(first) == ds._order(3).at(first)).all()


def test_a_pickled_dataset_does_not_grow_with_its_shards(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both blocks shared (from 1 MiB on; 64 KiB here, for fewer shards): a
    # spawn worker gets two descriptors.
    monkeypatch.setattr(shared_columns, "SHARE_MIN", 1 << 16)
    sizes = {}
    for count in (10_000, 20_000):
        root = tmp_path / str(count)
        infos = listed_like_gcs(root, count)
        manifest_of(root, infos)
        ds = ShardMapDataset(infos, reads=ShardReads(index_dir=tmp_path / "idx"))
        del infos
        assert ds._shards.shard_list.shared
        sizes[count] = pickled_for_spawn(ds)
    assert abs(sizes[10_000] - sizes[20_000]) <= 64 and sizes[20_000] < 8 * 1024, sizes


def shared_in_worker(_: int) -> None:
    """A worker's dataset reads the shard list its parent made, not a copy."""
    info = torch.utils.data.get_worker_info()
    assert info is not None
    shards = info.dataset._shards.shard_list  # type: ignore[attr-defined]
    assert isinstance(shards.infos, ObjectIndex) and shards.shared
    for fd in (shards.infos._block.fd, shards._block.fd):
        link = os.readlink(f"/proc/self/fd/{fd}")
        if link != "/memfd:aioflux-index (deleted)":
            raise AssertionError(f"the worker's shard list is {link}")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads Linux's /proc")
@pytest.mark.timeout(240)
@pytest.mark.parametrize("context", ["fork", "forkserver"])  # forkserver: pickled, as spawn
def test_workers_read_through_the_shared_shard_list(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    context: str) -> None:
    monkeypatch.setattr(shared_columns, "SHARE_MIN", 0)  # shared however small
    root = tmp_path / "root"
    root.mkdir()
    for n in range(4):  # the third compressed whole
        body = "".join(f'{{"i": {n * 10 + i}}}\n' for i in range(3 + n)).encode()
        name = f"p{n}.jsonl" + (".gz" if n == 2 else "")
        (root / name).write_bytes(gzip.compress(body) if n == 2 else body)
    ds = ShardDataset.from_prefix(f"file://{root}", format="lines", decode="json",
                                  order=Order(batch_size=2),
                                  reads=ShardReads(index_dir=tmp_path / "idx"))
    assert ds._shards.shard_list.shared
    assert ds._shards.compressed.tolist() == [False, False, True, False]
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2, collate_fn=list,
                                         multiprocessing_context=(
                                             forkserver() if context == "forkserver" else context),
                                         worker_init_fn=shared_in_worker)
    got = sorted(row["i"] for batch in loader for row in batch)
    assert got == sorted(n * 10 + i for n in range(4) for i in range(3 + n))
