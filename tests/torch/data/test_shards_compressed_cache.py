"""Compressed shards with a disk cache: each is decompressed once per machine.

Without a cache every DataLoader worker (and rank) decompresses every gzip
or zstd shard it gets samples of, which is nearly all of them. With one,
the first process to want a shard decompresses it into the cache's read
units and the others wait for their units (aioflux._engines.shards._compressed).
The shards here are far below the cursor's 4 MiB block, so one media GET
is one pass over a shard.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import fcntl
import os
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from aioflux import NotFound, PreconditionFailed
from aioflux._core.concurrency.portal import get_portal
from aioflux._engines.shards import _compressed
from aioflux._engines.shards._compressed import _claim_of
from aioflux.torch import Order, ShardDataset, ShardMapDataset, ShardReads
from tests.torch._shards_util import gz, jsonl, zst
from tests.torch.conftest import Where

SHARDS = {"a.jsonl.gz": (0, 250), "b.jsonl.zst": (250, 450), "c.jsonl.gz": (450, 600)}


def seed(where: Where) -> list[dict[str, Any]]:
    rows = [{"id": i, "text": f"row {i} " + "y" * (i % 40)} for i in range(600)]
    for name, (lo, hi) in SHARDS.items():
        data = jsonl(rows[lo:hi])
        where.put(name, gz(data) if name.endswith(".gz") else zst(data))
    return rows


# Small read units: a few shards make many cache entries.
EIGHT_A_READ = ShardReads(samples_per_read=8)


def lines(where: Where, tmp_path: Path, cls: Any = ShardDataset, *,
          reads: ShardReads = EIGHT_A_READ, **kw: Any) -> Any:
    options: dict[str, Any] = {"cache_dir": tmp_path / "cache", "cache_limit": 1 << 30, **kw}
    settings = where.settings(cache_dir=options.pop("cache_dir"),
                              cache_limit=options.pop("cache_limit"))
    return cls.from_prefix(where.root, format="lines", decode="json",
                           reads=dataclasses.replace(reads, index_dir=tmp_path / "idx"),
                           settings=settings, **options)


def media_gets(where: Where) -> int:
    assert where.emulator is not None
    return where.emulator.stats["get_media"]


def held_claims(tmp_path: Path) -> list[str]:
    """The cache's lock files some process holds, once this process's fills
    are done (a fill goes on after the unit it was started for)."""

    async def settle() -> None:
        while _compressed._filling:
            await asyncio.gather(*_compressed._filling, return_exceptions=True)

    get_portal().call(settle())
    held = []
    locks = tmp_path / "cache" / "locks"
    for name in os.listdir(locks):
        fd = os.open(locks / name, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append(name)
        finally:
            os.close(fd)
    return held


def check(rows: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
    assert sorted(r["id"] for r in got) == list(range(len(rows)))
    assert all(r == rows[r["id"]] for r in got)


def epoch(ds: ShardDataset, workers: int) -> list[dict[str, Any]]:
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers,
                                         multiprocessing_context="fork" if workers else None,
                                         collate_fn=list)
    return [r for batch in loader for r in batch]


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_dataloader_workers_decompress_each_shard_once_into_the_cache(where: Where,
                                                                      tmp_path: Path) -> None:
    rows = seed(where)
    plain = lines(where, tmp_path, order=Order(batch_size=4, shuffle_window=64), cache_dir=None,
                  cache_limit=None)
    before = media_gets(where)
    check(rows, epoch(plain, 2))
    # Without a cache: each of the 2 workers passes over the shards it gets samples of.
    assert media_gets(where) - before > len(SHARDS)

    ds = lines(where, tmp_path, order=Order(batch_size=4, shuffle_window=64))
    before = media_gets(where)
    check(rows, epoch(ds, 2))
    assert media_gets(where) - before == len(SHARDS)  # one pass over each, for all workers
    ds.set_epoch(1)
    before = media_gets(where)
    check(rows, epoch(ds, 2))
    assert media_gets(where) - before == 0  # later epochs: every unit from disk
    assert not held_claims(tmp_path)


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_the_map_style_sibling_reads_compressed_samples_from_the_cache(where: Where,
                                                                       tmp_path: Path) -> None:
    rows = seed(where)
    ds = lines(where, tmp_path, ShardMapDataset)
    before = media_gets(where)
    picks = [599, 3, 250, 449, 17, 451, 300, 0]
    assert [r["id"] for r in ds.__getitems__(picks)] == picks
    assert [ds[i]["id"] for i in (598, 1, 260)] == [598, 1, 260]
    assert media_gets(where) - before == len(SHARDS)
    other = lines(where, tmp_path, ShardMapDataset)  # another worker or rank
    assert [r for r in other.__getitems__(list(range(600)))] == rows
    assert media_gets(where) - before == len(SHARDS)


def test_a_claim_held_elsewhere_is_waited_for_then_read_around(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    rows = seed(where)
    ds = lines(where, tmp_path, order=Order(shuffle=False), reads=ShardReads(samples_per_read=50))
    cache = ds._shards.disk_cache
    assert cache is not None
    info, index = ds._shards.infos[0], ds._shards.index(0)
    claim = _claim_of(info, index)
    fd = asyncio.run(cache.claim(claim))  # as a process decompressing a.jsonl.gz would
    assert fd is not None
    try:
        cache.wait_limit = 0.05  # then hung: read around it after this long
        check(rows, list(ds))
        assert cache.stats.stored == 4 + 3  # the units of b and c, none of a
    finally:
        cache.release(claim, fd)
    check(rows, list(ds))  # a's claim is free: a is decompressed into the cache now
    assert cache.stats.stored == 4 + 3 + 5
    assert not held_claims(tmp_path)


def test_a_shard_over_a_quarter_of_the_cache_is_read_by_a_cursor(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    rows = seed(where)
    ds = lines(where, tmp_path, cache_limit=16384)  # each shard's data is over 4 KiB
    assert all(ds._shards.index(k).data_size * 4 > 16384 for k in range(len(ds.shards)))
    check(rows, list(ds))
    cache = ds._shards.disk_cache
    assert cache is not None and cache.stats.stored == 0


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_a_shard_changed_since_indexing_fails_and_frees_its_claim(where: Where,
                                                                 tmp_path: Path) -> None:
    seed(where)
    ds = lines(where, tmp_path, order=Order(shuffle=False))
    where.put("a.jsonl.gz", gz(jsonl([{"id": -1}])))  # rewritten: another version
    for _ in range(2):  # the claim was released: the second pass fails too, at once
        with pytest.raises((PreconditionFailed, NotFound), match=r"a\.jsonl\.gz"):
            list(ds)
        assert not held_claims(tmp_path)


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_a_cache_disk_that_cannot_be_written_costs_one_extra_pass(
        where: Where, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux._engines.cache import _files

    rows = seed(where)
    ds = lines(where, tmp_path, order=Order(shuffle=False))

    def full(*args: object, **kwargs: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_files, "write_entry", full)
    before = media_gets(where)
    check(rows, list(ds))
    # A fill that stored nothing, then this process's cursor: two passes a
    # shard, not one whole-shard fill for each of its 75 units.
    assert media_gets(where) - before <= 2 * len(SHARDS)
    cache = ds._shards.disk_cache
    assert cache is not None and cache.stats.errors > 0 and cache.stats.stored == 0


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_a_cache_whose_locks_cannot_be_made_is_read_around_at_once(
        where: Where, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A read-only (or full) cache disk: no claim can be made. Taken for one
    # held by another process, every unit waited wait_limit (10 minutes).
    from aioflux._engines.cache import _files

    rows = seed(where)
    ds = lines(where, tmp_path, order=Order(shuffle=False))

    def read_only(*args: object, **kwargs: object) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(_files, "try_lock", read_only)
    cache = ds._shards.disk_cache
    assert cache is not None
    cache.wait_limit = 3600.0  # the test's timeout ends a wait long before this
    before = media_gets(where)
    check(rows, list(ds))
    assert media_gets(where) - before == len(SHARDS)  # one cursor pass a shard
    assert cache.stats.errors > 0 and cache.stats.stored == 0


@pytest.mark.parametrize("where", ["gs"], indirect=True)
def test_units_evicted_before_they_are_read_cost_a_pass_not_a_wrong_sample(
        where: Where, tmp_path: Path) -> None:
    # Each shard fits in a quarter of the cache, all eight do not: units are
    # evicted, some before they are read, and their shards filled again.
    rows = [{"id": i, "text": "z" * (i % 30)} for i in range(800)]
    for s in range(8):
        where.put(f"s{s}.jsonl.gz", gz(jsonl(rows[s * 100:(s + 1) * 100])))
    probe = lines(where, tmp_path / "probe")
    sizes = [probe._shards.index(k).data_size for k in range(len(probe.shards))]
    limit = 4 * max(sizes) + 1024
    assert sum(sizes) > limit
    ds = lines(where, tmp_path, cache_limit=limit, reads=ShardReads(samples_per_read=4))
    for epoch in range(3):
        ds.set_epoch(epoch)
        before = media_gets(where)
        check(rows, list(ds))
        cache = ds._shards.disk_cache
        assert cache is not None and cache.stats.evictions > 0
        # A fill and a cursor pass a shard at most, then a cursor pass.
        assert media_gets(where) - before <= (2 if epoch == 0 else 1) * 8, epoch
