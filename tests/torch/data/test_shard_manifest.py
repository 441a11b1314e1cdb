"""Counts up front, per-sample indexes on demand, the manifest, small pickles.

On local files; every store request a dataset makes is counted by
wrapping ``LocalStore._run`` (the door of every LocalStore operation done
in a thread) and ``LocalStore._read_held`` (of reads done in the caller's).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import mmap
import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from aioflux import ObjectInfo, ShardFormatError
from aioflux._core.concurrency.portal import call
from aioflux._engines.shards import FORMATS, _build, decode_index, encode_index, stream_index
from aioflux._engines.shards._index import IndexCache
from aioflux._engines.shards._manifest import (
    MANIFEST_NAME,
    Entry,
    Table,
    decode_manifest,
    encode_manifest,
)
from aioflux.local import LocalStore
from aioflux.torch import Order, ShardDataset, ShardMapDataset, ShardReads, ShardWriter

LINES = [5, 7, 3, 6, 4]


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """LocalStore operations made, by kind (read, list, stat, write...)."""
    seen: Counter[str] = Counter()
    run = LocalStore._run

    async def counted(self: LocalStore, op: str, bucket: str, name: str, work: Any,
                      *args: Any, **kwargs: Any) -> Any:
        seen[op] += 1
        return await run(self, op, bucket, name, work, *args, **kwargs)

    monkeypatch.setattr(LocalStore, "_run", counted)
    held = LocalStore._read_held

    def counted_held(self: LocalStore, bucket: str, name: str, work: Any, received: Any) -> Any:
        seen["read"] += 1
        return held(self, bucket, name, work, received)

    monkeypatch.setattr(LocalStore, "_read_held", counted_held)
    return seen


def write(root: Path, counts: list[int] = LINES, **kwargs: Any) -> list[str]:
    """Lines shards of ``counts`` lines each, by ShardWriter (sidecars and manifest)."""
    with ShardWriter(f"file://{root}/part-%03d.jsonl", format="lines", **kwargs) as w:
        for shard, count in enumerate(counts):
            for i in range(count):
                w.write({"shard": shard, "i": i})
            w._finish()  # one shard per count, whatever max_count says
    return w.shards


def rows(counts: list[int] = LINES) -> list[dict[str, int]]:
    return [{"shard": s, "i": i} for s, n in enumerate(counts) for i in range(n)]


def put(path: Path, body: bytes) -> ObjectInfo:
    return call(LocalStore().write(path.parts[1], "/".join(path.parts[2:]), body))


def manifest(root: Path) -> dict[str, Entry]:
    return decode_manifest((root / MANIFEST_NAME).read_bytes(), str(root))


def dataset(root: Path, cls: Any = ShardDataset, **kwargs: Any) -> Any:
    settings: dict[str, Any] = {"format": "lines", "decode": "json",
                                "reads": ShardReads(cache_indexes=False), **kwargs}
    if cls is ShardDataset:
        settings.setdefault("order", Order(shuffle=False))
    return cls.from_prefix(f"file://{root}", **settings)


def test_the_writer_s_manifest_counts_every_shard_with_one_read(
        tmp_path: Path, requests: Counter[str]) -> None:
    write(tmp_path)
    assert {name: e.samples for name, e in manifest(tmp_path).items()} == \
        {f"part-{n:03d}.jsonl": c for n, c in enumerate(LINES)}
    requests.clear()
    ds = dataset(tmp_path)
    # One listing and one GET: no sidecar read, no stat, no pass over a shard.
    assert requests["read"] == 1 and requests["stat"] <= 1, requests  # the listing's stat
    assert ds.counts == LINES and ds.total_samples == sum(LINES)
    assert len(ds._shards.indexes) == 0  # no per-sample data until a shard is read
    assert list(ds) == rows()
    # Each shard's index came once, from its sidecar, as it was read.
    assert ds._shards.indexes.loads == len(LINES)
    assert requests["read"] == 1 + len(LINES) + len(LINES)  # sidecars, then the reads


def test_a_shard_changed_since_the_manifest_is_counted_again(tmp_path: Path) -> None:
    write(tmp_path)
    # part-001 rewritten by another tool: the manifest entry and the sidecar are of
    # the old file (another size, another version) and both are left out.
    put(tmp_path / "part-001.jsonl", b"".join(
        json.dumps({"shard": 1, "i": i}).encode() + b"\n" for i in range(9)))
    ds = dataset(tmp_path)
    assert ds.counts == [5, 9, 3, 6, 4]
    assert list(ds) == rows([5, 9, 3, 6, 4])


def test_a_manifest_that_lies_about_a_count_is_refused_when_the_shard_is_read(
        tmp_path: Path) -> None:
    write(tmp_path)
    entries = manifest(tmp_path)
    # Of the very object (size and version match) but with another count: the
    # dataset takes the count, and the index read with the shard refuses it
    # rather than cut the shard by other boundaries.
    lie = entries["part-002.jsonl"]
    entries["part-002.jsonl"] = dataclasses.replace(lie, samples=lie.samples + 1)
    put(tmp_path / MANIFEST_NAME, encode_manifest(entries.values()))
    ds = dataset(tmp_path, cls=ShardMapDataset)
    assert ds.counts == [5, 7, 4, 6, 4]
    assert ds[0] == {"shard": 0, "i": 0}  # other shards read as they are
    with pytest.raises(ShardFormatError, match=r"part-002\.jsonl: 3 samples, but the "
                                               r"dataset was made with 4"):
        ds[5 + 7]


def test_a_manifest_written_by_hand_is_taken_and_a_damaged_one_refused(
        tmp_path: Path, requests: Counter[str]) -> None:
    for n, count in enumerate(LINES):
        put(tmp_path / f"p{n}.jsonl", b"".join(b'{"x": %d}\n' % i for i in range(count)))
    store = LocalStore()
    lines = [json.dumps({"kind": "aioflux-shard-manifest", "version": 1})]
    for n, count in enumerate(LINES):
        info = call(store.stat(tmp_path.parts[1], "/".join((*tmp_path.parts[2:], f"p{n}.jsonl"))))
        # Another tool's entry: no crc32c (a local file has none), the version,
        # no data_size (then the size).
        lines.append(json.dumps({"name": f"p{n}.jsonl", "size": info.size, "crc32c": None,
                                 "version": info.generation, "format": "lines",
                                 "compression": None, "samples": count}))
    put(tmp_path / MANIFEST_NAME, ("\n".join(lines) + "\n").encode())
    requests.clear()
    ds = dataset(tmp_path, reads=ShardReads(cache_indexes=False, sidecars=True))
    assert ds.counts == LINES and requests["read"] == 1
    assert [r["x"] for r in ds][:5] == list(range(5))
    for bad, message in ((b"{}\n", "not an aioflux shard manifest"),
                         (b'{"kind": "aioflux-shard-manifest", "version": 2}\n', "version 2"),
                         (lines[0].encode() + b'\n{"name": "p0.jsonl", "size": -1}\n',
                          "line 2")):
        with pytest.raises(ShardFormatError, match=message):
            decode_manifest(bad, "m")


def test_without_a_manifest_counts_go_to_the_cache_and_a_later_run_reads_nothing(
        tmp_path: Path, requests: Counter[str]) -> None:
    root = tmp_path / "shards"
    write(root, index=False)  # no sidecars, no manifest
    assert not (root / MANIFEST_NAME).exists()
    first = dataset(root, reads=ShardReads(index_dir=tmp_path / "idx"))
    assert first.counts == LINES and len(first._shards.indexes) == 0
    requests.clear()
    again = dataset(root, reads=ShardReads(index_dir=tmp_path / "idx"))
    assert again.counts == LINES
    assert requests["read"] == 0, requests  # not even the manifest is looked for
    assert list(again) == rows()
    # The indexes came back from the cache, memory-mapped (views of the file).
    index = again._shards.index(0)
    assert isinstance(index.offsets, memoryview) and isinstance(index.offsets.obj, mmap.mmap)


def test_publish_indexes_writes_sidecars_and_the_manifest(tmp_path: Path,
                                                          requests: Counter[str]) -> None:
    root = tmp_path / "shards"
    write(root, index=False)
    ds = dataset(root, reads=ShardReads(cache_indexes=False, publish_indexes=True))
    assert ds.counts == LINES
    assert sorted(manifest(root)) == [f"part-{n:03d}.jsonl" for n in range(len(LINES))]
    assert all((root / f"part-{n:03d}.jsonl.idx").exists() for n in range(len(LINES)))
    requests.clear()
    # Another machine (an empty index cache) counts every shard from the manifest.
    again = dataset(root, reads=ShardReads(index_dir=tmp_path / "elsewhere"))
    assert again.counts == LINES and requests["read"] == 1


def test_indexes_are_held_within_a_byte_budget(tmp_path: Path) -> None:
    counts = [40] * 6
    write(tmp_path, counts)
    ds = dataset(tmp_path, order=Order(shuffle_window=8),
                 reads=ShardReads(cache_indexes=False, samples_per_read=4))
    ds._shards.index_bytes = 40 * 20  # one shard's columns
    held: list[tuple[int, int]] = []
    seen = []
    for sample in ds:
        held.append((ds._shards.indexes.nbytes, len(ds._shards.indexes)))
        seen.append(json.dumps(sample, sort_keys=True))
    assert sorted(seen) == sorted(json.dumps(r, sort_keys=True) for r in rows(counts))
    # Every shard's index was loaded, one at a time: each load past the
    # budget evicted the one before (without the budget, all 6 stay).
    assert ds._shards.indexes.loads >= len(counts)
    assert max(held) == (40 * 20, 1), max(held)


def test_the_cache_format_is_versioned_and_sidecars_keep_version_1(tmp_path: Path) -> None:
    write(tmp_path, [3])
    store = LocalStore()
    info = call(store.stat(tmp_path.parts[1], "/".join((*tmp_path.parts[2:], "part-000.jsonl"))))
    index = stream_index(store, info, FORMATS["lines"])
    assert (tmp_path / "part-000.jsonl.idx").read_bytes() == encode_index(index)
    assert encode_index(index).startswith(b"AIOFLUX-SHARD-INDEX 1\n")
    two = encode_index(index, version=2)
    assert two.startswith(b"AIOFLUX-SHARD-INDEX 2\n")
    assert two.index(b"\n", 22) % 8 == 7  # the columns start on an 8-byte boundary
    back = decode_index(two, "x")
    assert (list(back.offsets), list(back.lengths), list(back.crcs)) == \
        (list(index.offsets), list(index.lengths), list(index.crcs))
    cache = IndexCache(tmp_path / "idx")
    cache.put(info.url, index, crc=None)
    assert cache.count(info.url, info.generation, info.size, None, format="lines") == \
        (3, index.data_size)
    assert cache.count(info.url, info.generation, info.size + 1, None, format="lines") is None
    assert cache.count(info.url, info.generation, info.size, None, format="tar") is None
    entry = next((tmp_path / "idx").iterdir())
    entry.write_bytes(entry.read_bytes()[:-1] + b"\x00")  # damaged: dropped when loaded
    assert cache.get(info.url, info.generation, info.size, None, format="lines") is None
    assert not entry.exists()


def test_only_an_index_built_here_is_checked_and_only_the_cache_keeps_it(
        tmp_path: Path) -> None:
    # A checked index's tar headers are not checked again (the region's
    # crc32c vouches for the bytes its builder checked). The cache keeps the
    # mark; a sidecar never carries it, nor is it believed from one.
    write(tmp_path, [3])
    store = LocalStore()
    info = call(store.stat(tmp_path.parts[1], "/".join((*tmp_path.parts[2:], "part-000.jsonl"))))
    index = stream_index(store, info, FORMATS["lines"])
    assert index.checked
    assert b"checked" not in encode_index(index)  # the sidecar's bytes
    two = encode_index(index, version=2)
    assert b'"checked": true' in two
    assert not decode_index(two, "a sidecar").checked
    assert decode_index(two, "an entry", ours=True).checked
    cache = IndexCache(tmp_path / "idx")
    cache.put(info.url, index, crc=None)
    assert cache.get(info.url, info.generation, info.size, None, format="lines").checked
    unchecked = dataclasses.replace(index, checked=False)  # a sidecar's, cached
    cache.put(info.url, unchecked, crc=None)
    assert b"checked" not in next((tmp_path / "idx").iterdir()).read_bytes()
    assert not cache.get(info.url, info.generation, info.size, None, format="lines").checked


def _tiny_shards(root: Path, shards: int, claimed: int) -> None:
    """``shards`` one-line files and a manifest claiming ``claimed`` samples each."""
    entries = []
    for n in range(shards):
        info = put(root / f"s{n:04d}.jsonl", b"{}\n")
        entries.append(Entry(name=info.name.rsplit("/", 1)[1], size=info.size, crc32c=None,
                             version=info.generation, format="lines", compression=None,
                             samples=claimed, data_size=claimed * 40))
    put(root / MANIFEST_NAME, encode_manifest(entries))


def test_a_dataset_of_1e8_samples_pickles_for_spawn_workers_under_1_mib(
        tmp_path: Path) -> None:
    # 1,000 shards a manifest claims 100,000 samples each: the dataset is made
    # from the counts alone (no shard is read), as a spawn worker receives it.
    _tiny_shards(tmp_path, 1000, 100_000)
    ds = dataset(tmp_path, order=Order())
    assert ds.total_samples == 100_000_000 and len(ds._shards.indexes) == 0
    size = len(pickle.dumps(ds))
    assert size < 1 << 20, size
    worker = pickle.loads(pickle.dumps(ds))
    assert worker.counts == ds.counts and worker._shards._lru is None
    assert len(pickle.dumps(ds.state_dict())) <= 64 * 1024
    mapped = dataset(tmp_path, cls=ShardMapDataset)
    assert len(mapped) == 100_000_000 and len(pickle.dumps(mapped)) < 1 << 20


def test_without_a_kept_cache_a_shard_is_streamed_once_not_again_when_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No sidecar, no manifest, cache_indexes=False: the counts come from one
    # pass each, and the indexes dropped after counting come back from this
    # process's temporary directory, not from a second pass.
    write(tmp_path, index=False)
    streamed: list[str] = []
    real = _build.stream_index

    def counting(store: Any, info: Any, *args: Any) -> Any:
        streamed.append(info.name)
        return real(store, info, *args)

    monkeypatch.setattr(_build, "stream_index", counting)
    ds = dataset(tmp_path, cls=ShardMapDataset)
    assert len(streamed) == len(LINES)
    assert [ds[i] for i in range(len(ds))] == rows()
    assert len(streamed) == len(LINES)


def test_the_temporary_index_directory_goes_with_its_dataset(tmp_path: Path) -> None:
    write(tmp_path / "s", index=False)
    script = (f"from aioflux.torch import ShardDataset, ShardReads\n"
              f"ds = ShardDataset.from_prefix('file://{tmp_path}/s', format='lines', "
              f"reads=ShardReads(cache_indexes=False))\n"
              f"print(ds._shards.index_cache.directory)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[3], timeout=120)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("aioflux-shard-index-") and not folder.exists()
    # In the process, it goes with its dataset.
    ds = dataset(tmp_path / "s")
    folder = ds._shards.index_cache.directory
    assert any(folder.iterdir())  # the counted shards' indexes
    del ds
    gc.collect()
    assert not folder.exists()


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The local index cache's lookups made (each opens a file), by shard URL."""
    seen: list[str] = []
    for method in ("count", "get"):
        real = getattr(IndexCache, method)

        def counted(self: IndexCache, url: str, *args: Any, _real: Any = real,
                    **kwargs: Any) -> Any:
            seen.append(url)
            return _real(self, url, *args, **kwargs)

        monkeypatch.setattr(IndexCache, method, counted)
    return seen


def test_with_a_matching_manifest_counting_looks_up_no_cache_entry(
        tmp_path: Path, requests: Counter[str], lookups: list[str]) -> None:
    # A machine that read the shards before holds every index in its cache;
    # the manifest still counts them all with its one read, and no shard's
    # cache entry is opened (a file a shard: minutes at a million shards).
    root, counts = tmp_path / "shards", [3] * 40
    urls = write(root, counts)
    warm = dataset(root, reads=ShardReads(index_dir=tmp_path / "idx"))
    assert len(list(warm)) == sum(counts)
    assert len(list((tmp_path / "idx").iterdir())) == len(counts)
    lookups.clear()
    requests.clear()
    again = dataset(root, reads=ShardReads(index_dir=tmp_path / "idx"))
    assert again.counts == counts
    assert lookups == [] and requests["read"] == 1, (lookups, requests)
    # Shards given by URL (no listing to say whether there is a manifest):
    # the manifest is asked for first all the same.
    given = ShardDataset(urls, format="lines",
                         reads=ShardReads(cache_indexes=True, index_dir=tmp_path / "idx"))
    assert given.counts == counts and lookups == []


def test_the_cache_is_asked_only_for_the_shards_the_manifest_does_not_count(
        tmp_path: Path, lookups: list[str]) -> None:
    write(tmp_path, LINES)
    changed = put(tmp_path / "part-003.jsonl", b"".join(
        json.dumps({"shard": 3, "i": i}).encode() + b"\n" for i in range(2)))
    lookups.clear()
    ds = dataset(tmp_path, reads=ShardReads(index_dir=tmp_path.parent / "idx"))
    # part-003's entry (and its sidecar) are of the old file: it alone is
    # looked up in the cache, then streamed; the rest come from the manifest.
    assert lookups == [changed.url]
    assert ds.counts == [5, 7, 3, 2, 4]
    assert list(ds) == rows([5, 7, 3, 2, 4])


def test_a_manifest_as_columns_matches_as_its_entries_do() -> None:
    # A 128-bit version (an S3 ETag as a number) does not fit an int64 column.
    entries = [Entry(name="a", size=10, crc32c=7, version=5, format="lines",
                     compression=None, samples=2, data_size=10),
               Entry(name="b", size=10, crc32c=None, version=2**100, format="tar",
                     compression=None, samples=3, data_size=10),
               Entry(name="c", size=10, crc32c=None, version=None, format="lines",
                     compression=None, samples=4, data_size=10)]
    table = Table(encode_manifest(entries), "m")
    assert table.formats == ("lines", "tar") and len(table) == 3
    cases = [ObjectInfo("b", name, size, generation, crc)
             for name in "abc" for size in (10, 11) for generation in (5, 6, 2**100, 0)
             for crc in (7, 8, None)]
    for info in cases:
        row = table.rows[info.name]
        assert table.matches(row, info) == entries[row].matches(info), info
    assert table.samples.tolist() == [2, 3, 4]


def test_a_shard_rewritten_at_its_size_or_not_named_is_counted_again(tmp_path: Path) -> None:
    # The listing is the manifest's names in order (matched as bytes): part-002
    # rewritten at the very size (another count; its version moved on) is
    # counted from a pass, not from the manifest; part-005, which the
    # manifest does not name, likewise; the rest from the manifest's one read.
    write(tmp_path)
    old = (tmp_path / "part-002.jsonl").read_bytes()
    new = b'{"shard": 2, "i": 0, "pad": "' + b"x" * (len(old) - 32) + b'"}\n'
    assert len(new) == len(old)
    put(tmp_path / "part-002.jsonl", new)
    stat = os.stat(tmp_path / "part-002.jsonl")
    os.utime(tmp_path / "part-002.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    put(tmp_path / "part-005.jsonl", b'{"shard": 5, "i": 0}\n{"shard": 5, "i": 1}\n')
    ds = dataset(tmp_path)
    assert ds.counts == [5, 7, 1, 6, 4, 2]
    rows_now = list(ds)
    assert rows_now[12] == json.loads(new) and len(rows_now) == 25
