"""Datasets with ``cache_dir=``: later epochs from local disk, bytes checked.

Request counts come from the emulator's counters: a second epoch served
from the cache sends no request at all (the dataset listed once, at
construction).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from aioflux import DownloadOptions, InvalidArgument
from aioflux._engines.cache import info
from aioflux.testing import Emulator, EmulatorProfile
from aioflux.torch import DatasetSettings, ObjectIterableDataset, ObjectMapDataset, Order
from tests.torch._forkserver import forkserver
from tests.torch.conftest import Where

NO_COMPOSE = DownloadOptions(disable_compose=True)


def seed(emulator: Emulator, bucket: str, count: int, size: int) -> dict[str, bytes]:
    data = {f"d/{i:04d}": os.urandom(size) for i in range(count)}
    for name, body in data.items():
        emulator.store.put(bucket, name, body)
    return data


def to_bytes(data: bytes | bytearray) -> bytes:
    return bytes(data)


def identity(batch: list[bytes]) -> list[bytes]:
    return batch


def epoch(ds: Any, **loader: Any) -> list[bytes]:
    """Every sample of one epoch through a DataLoader."""
    if isinstance(ds, ObjectMapDataset):
        loader.setdefault("batch_size", 16)
    out: list[bytes] = []
    for batch in torch.utils.data.DataLoader(ds, collate_fn=identity, **loader):
        out.extend(batch)
    return out


def requests(emulator: Emulator) -> Counter[str]:
    return Counter(emulator.stats)


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_second_epoch_served_from_cache_sends_no_request(
        emulator: Emulator, bucket: str, tmp_path: Path, kind: str) -> None:
    # 2 KiB objects: the first epoch's misses are composed (the planner
    # still plans them), the second epoch reads them from disk.
    data = seed(emulator, bucket, 48, 2048)
    cls = ObjectMapDataset if kind == "map" else ObjectIterableDataset
    ds = cls.from_prefix(f"gs://{bucket}/d/", transform=to_bytes,
                         settings=DatasetSettings(endpoint=emulator.endpoint,
                                                  cache_dir=tmp_path / "cache"))
    before = requests(emulator)
    first = epoch(ds)
    fetched = requests(emulator) - before
    assert sorted(first) == sorted(data.values())
    assert fetched["compose"] > 0 and fetched["get_media"] > 0
    stats = ds._source.cache.stats
    assert (stats.misses, stats.stored, stats.hits) == (48, 48, 0)

    before = requests(emulator)
    second = epoch(ds)
    assert requests(emulator) - before == Counter()  # not one request
    assert sorted(second) == sorted(data.values())
    assert (stats.hits, stats.bytes, stats.corrupt) == (48, 48 * 2048, 0)
    found = info(str(tmp_path / "cache"))
    assert found.entries == 48 and found.temporaries == 0


def test_two_dataloader_workers_share_the_cache(emulator: Emulator, bucket: str,
                                                tmp_path: Path) -> None:
    data = seed(emulator, bucket, 40, 4096)
    settings = DatasetSettings(endpoint=emulator.endpoint, cache_dir=tmp_path / "cache",
                               cache_limit=10 << 20, download_options=NO_COMPOSE)
    ds = ObjectMapDataset.from_prefix(f"gs://{bucket}/d/", transform=to_bytes, settings=settings)
    # forkserver: new worker processes that get the dataset by pickle, as
    # spawn's, without importing torch anew in each.
    for ctx in ("fork", forkserver()):
        before = requests(emulator)
        got = epoch(ds, num_workers=2, multiprocessing_context=ctx, shuffle=True)
        assert sorted(got) == sorted(data.values())
        # First epoch (fork): each object fetched exactly once; second
        # (new worker processes): none.
        assert (requests(emulator) - before)["get_media"] == (40 if ctx == "fork" else 0)
    assert info(str(tmp_path / "cache")).entries == 40


def test_changed_object_is_refetched(emulator: Emulator, bucket: str, tmp_path: Path) -> None:
    data = seed(emulator, bucket, 8, 1024)
    settings = DatasetSettings(endpoint=emulator.endpoint, cache_dir=tmp_path / "cache",
                               download_options=NO_COMPOSE)
    ds = ObjectMapDataset.from_prefix(f"gs://{bucket}/d/", transform=to_bytes, settings=settings)
    assert [ds[i] for i in range(8)] == list(data.values())
    new = os.urandom(1024)  # same size: only the generation tells them apart
    emulator.store.put(bucket, "d/0003", new)
    relisted = ObjectMapDataset.from_prefix(f"gs://{bucket}/d/", transform=to_bytes,
                                            settings=settings)
    before = requests(emulator)
    got = [relisted[i] for i in range(8)]
    assert got[3] == new and got[:3] + got[4:] == [data[f"d/{i:04d}"] for i in (0, 1, 2, 4, 5,
                                                                                 6, 7)]
    assert (requests(emulator) - before)["get_media"] == 1
    stats = relisted._source.cache.stats
    # A new key (the generation), not a corrupt entry found under the old one.
    assert (stats.hits, stats.misses, stats.corrupt) == (7, 1, 0)


def test_corrupt_entry_is_dropped_refetched_and_counted(emulator: Emulator, bucket: str,
                                                        tmp_path: Path) -> None:
    data = seed(emulator, bucket, 6, 4096)
    settings = DatasetSettings(endpoint=emulator.endpoint, cache_dir=tmp_path / "cache",
                               download_options=NO_COMPOSE)
    ds = ObjectMapDataset.from_prefix(f"gs://{bucket}/d/", transform=to_bytes, settings=settings)
    epoch(ds)
    cache = ds._source.cache
    digest, _ = cache.key(ds.objects[2])
    path = Path(cache.layout.entry(digest))
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0x01  # one bit of the object's bytes
    path.write_bytes(raw)
    before = requests(emulator)
    assert epoch(ds) == list(data.values())
    assert (requests(emulator) - before)["get_media"] == 1
    assert (cache.stats.corrupt, cache.stats.hits) == (1, 5)
    # Rewritten whole: the next epoch is all hits again.
    before = requests(emulator)
    assert epoch(ds) == list(data.values())
    assert (requests(emulator) - before)["get_media"] == 0 and cache.stats.corrupt == 1


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_cache_smaller_than_an_epoch(emulator: Emulator, bucket: str, tmp_path: Path,
                                     kind: str) -> None:
    data = seed(emulator, bucket, 60, 8192)
    limit = 20 * 8192  # a third of the epoch
    cls = ObjectMapDataset if kind == "map" else ObjectIterableDataset
    ds = cls.from_prefix(f"gs://{bucket}/d/", transform=to_bytes,
                         settings=DatasetSettings(endpoint=emulator.endpoint,
                                                  cache_dir=tmp_path / "cache", cache_limit=limit))
    for _ in range(3):
        got = epoch(ds)
        assert len(got) == 60 and sorted(got) == sorted(data.values())  # each exactly once
        found = info(str(tmp_path / "cache"))
        assert 0 < found.bytes <= limit and found.limit == limit
    assert ds._source.cache.stats.evictions > 0


def test_file_dataset_cache(where: Where, tmp_path: Path) -> None:
    data = {f"d/{i:02d}": os.urandom(3000) for i in range(12)}
    for name, body in data.items():
        where.put(name, body, foreign=name.endswith("5"))  # no recorded crc32c: still cached
    ds = ObjectIterableDataset.from_prefix(where.url("d/"), transform=to_bytes,
                                           order=Order(shuffle=False),
                                           settings=where.settings(cache_dir=tmp_path / "cache"))
    assert epoch(ds) == list(data.values())
    assert epoch(ds) == list(data.values())
    stats = ds._source.cache.stats
    assert (stats.misses, stats.hits) == (12, 12)


def test_cache_arguments_are_checked(emulator: Emulator, bucket: str, tmp_path: Path) -> None:
    seed(emulator, bucket, 1, 10)
    with pytest.raises(InvalidArgument, match="cache_limit needs a cache_dir"):
        ObjectMapDataset.from_prefix(f"gs://{bucket}/d/",
                                     settings=DatasetSettings(endpoint=emulator.endpoint,
                                                              cache_limit=100))
    with pytest.raises(InvalidArgument, match="ObjectIterableDataset: cache_limit"):
        ObjectIterableDataset([], settings=DatasetSettings(cache_dir=tmp_path, cache_limit=0))
    with pytest.raises(InvalidArgument, match="ObjectMapDataset: cache_dir must be a directory"):
        ObjectMapDataset([], settings=DatasetSettings(cache_dir=3))  # type: ignore[arg-type]


def test_leaving_an_epoch_early_strands_no_lock(emulator: Emulator, bucket: str,
                                                tmp_path: Path) -> None:
    data = seed(emulator, bucket, 200, 4096)
    ds = ObjectIterableDataset.from_prefix(f"gs://{bucket}/d/",
                                           settings=DatasetSettings(endpoint=emulator.endpoint,
                                                                    cache_dir=tmp_path / "cache"),
                                           transform=to_bytes, order=Order(shuffle=False),
                                           prefetch=64)
    emulator.profile = EmulatorProfile(ttfb=0.05)  # reads still in flight when we leave
    try:
        it = iter(ds)
        assert [next(it) for _ in range(3)] == [data[f"d/{i:04d}"] for i in range(3)]
        it.close()  # cancels the reads in flight, holding entry locks
    finally:
        emulator.profile = EmulatorProfile()
    locks = tmp_path / "cache" / "locks"
    deadline = time.monotonic() + 10
    while os.listdir(locks) and time.monotonic() < deadline:
        time.sleep(0.01)  # entries being written when cancelled finish, then unlock
    assert os.listdir(locks) == []
    # Nothing left locked: a new reader fills the rest without waiting.
    fresh = ObjectIterableDataset(ds.objects,
                                  settings=DatasetSettings(endpoint=emulator.endpoint,
                                                           cache_dir=tmp_path / "cache"),
                                  transform=to_bytes, order=Order(shuffle=False))
    assert list(fresh) == list(data.values())
    assert fresh._source.cache.stats.waits == 0


def test_an_object_replaced_after_its_listing_is_never_cached_as_the_listed_version(
        tmp_path: Path) -> None:
    # Files another tool wrote have no recorded crc32c (nor has an S3
    # listing): only the version read can tell the listed bytes from newer
    # ones of the same size. The newer ones were stored under the listed
    # version, and every later epoch of the dataset got them from disk, long
    # after the file had changed again.
    root = tmp_path / "data"
    root.mkdir()
    for i in range(4):
        (root / f"{i}.bin").write_bytes(bytes([i]) * 100)
    ds = ObjectMapDataset.from_prefix(str(root), transform=to_bytes,
                                      settings=DatasetSettings(cache_dir=tmp_path / "cache"))
    assert ds.objects[1].crc32c is None
    cache = ds._source.cache
    assert cache is not None

    def rewrite(body: bytes) -> None:
        before = (root / "1.bin").stat().st_mtime_ns
        while (root / "1.bin").stat().st_mtime_ns == before:  # a new version: a new mtime
            (root / "1.bin").write_bytes(body)

    rewrite(b"v2" * 50)  # the same size, after the listing
    assert [ds[i] for i in range(4)] == [bytes([0]) * 100, b"v2" * 50, bytes([2]) * 100,
                                         bytes([3]) * 100]  # what is there now, as uncached
    assert (cache.stats.misses, cache.stats.stored) == (4, 3)  # not under the listed version
    rewrite(b"v3" * 50)
    assert ds[1] == b"v3" * 50 and cache.stats.hits == 0
    relisted = ObjectMapDataset.from_prefix(str(root), transform=to_bytes,
                                            settings=DatasetSettings(cache_dir=tmp_path / "cache"))
    assert [relisted[i] for i in range(4)] == [ds[0], b"v3" * 50, ds[2], ds[3]]
    assert relisted._source.cache.stats.stored == 1  # the version listed now is cached
    assert relisted[1] == b"v3" * 50 and relisted._source.cache.stats.hits == 4
