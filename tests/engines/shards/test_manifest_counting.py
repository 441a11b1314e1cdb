"""Counting shards from their manifest straight from the listing's columns (issue 49).

``count_shards`` over an ``ObjectIndex`` compares the manifest's columns
with the index's (sizes, crc32cs, versions), building no record a shard,
and takes an entry exactly where ``Entry.matches`` would: a shard changed
since the manifest was written (size, crc32c or version) is never counted
from it, and one it does not name is left to the other ways.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest

from aioflux._core.concurrency.portal import call
from aioflux._core.memory.object_index import ObjectIndex
from aioflux._core.records.types import ObjectInfo
from aioflux._engines.shards import FORMATS, _manifest
from aioflux._engines.shards._counts import _shared_folder, count_shards
from aioflux._engines.shards._manifest import (
    MANIFEST_NAME,
    Entry,
    encode_manifest,
    manifest_folder,
)
from aioflux.testing import MemoryStore

LINES = FORMATS["lines"]


def store_with(entries: list[Entry], folder: str = "ds/") -> MemoryStore:
    store = MemoryStore(buckets=["bkt"])
    call(store.write("bkt", folder + MANIFEST_NAME, encode_manifest(entries)))
    return store


def grid() -> tuple[list[Entry], list[ObjectInfo]]:
    """An entry and the shard as listed now, for every way they can differ."""
    entries, infos = [], []
    cases = itertools.product((7, None), (5, 2**100, 0, None), ("lines", "tar"), (10, 11),
                              (5, 6, 2**100, 0), (7, 8, None))
    for k, (crc, version, fmt, size, generation, listed_crc) in enumerate(cases):
        name = f"shard-{k:04d}.jsonl"
        entries.append(Entry(name=name, size=10, crc32c=crc, version=version, format=fmt,
                             compression=None, samples=k + 1, data_size=2 * k))
        infos.append(ObjectInfo("bkt", "ds/" + name, size, generation, listed_crc, scheme="gs"))
    return entries, infos


def expected(entries: list[Entry], infos: list[ObjectInfo]) -> list[Any]:
    return [(e.samples, e.data_size) if e.format == "lines" and e.matches(info) else None
            for e, info in zip(entries, infos, strict=True)]


@pytest.mark.parametrize("versions", ["int64", "past int64"])
def test_an_entry_counts_where_it_matches_its_shard_as_now(versions: str) -> None:
    entries, infos = grid()
    if versions == "int64":  # the index's versions an int64 column, not Python ints
        keep = [k for k, info in enumerate(infos) if info.generation < 2**63]
        entries, infos = [entries[k] for k in keep], [infos[k] for k in keep]
    store = store_with(entries)
    want = expected(entries, infos)
    assert 0 < sum(c is not None for c in want) < len(want)
    order = list(range(len(infos)))
    random.Random(1).shuffle(order)
    shuffled = [infos[k] for k in order]
    # Columns, in the manifest's order (its names compared as bytes) and
    # in another (looked up by name); records.
    for shards, want_now in ((ObjectIndex(infos), want), (ObjectIndex(shuffled), None),
                             (infos, want)):
        found = count_shards(store, shards, LINES, cache=None, sidecars=True,
                             manifests=["ds/" + MANIFEST_NAME])
        assert list(found) == (want_now or [want[k] for k in order])


def test_a_listing_the_manifest_names_in_order_is_matched_as_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [Entry(name=f"p{k:03d}/s{k}.jsonl", size=k, crc32c=k, version=None,
                     format="lines", compression=None, samples=k, data_size=k)
               for k in range(50)]
    infos = [ObjectInfo("bkt", f"ds/{e.name}", e.size, 1, e.crc32c, scheme="gs")
             for e in entries]
    real_folder_names = ObjectIndex.folder_names
    in_order, store = ObjectIndex(infos), store_with(entries)
    monkeypatch.setattr(_manifest, "_NAMES_AT_ONCE", 3)  # compared 3 names at a time
    # No str a name: the index's names are never decoded.
    monkeypatch.setattr(ObjectIndex, "folder_names", None)
    found = count_shards(store, in_order, LINES, cache=None, sidecars=True)
    assert list(found) == [(k, k) for k in range(50)]
    # One name differs by a byte: looked up by name (and that one not counted).
    infos[7] = infos[7].replace(name="ds/p007/s8.jsonl")
    monkeypatch.setattr(ObjectIndex, "folder_names", real_folder_names)
    found = count_shards(store, ObjectIndex(infos), LINES, cache=None, sidecars=True)
    assert found.missing() == [7] and found[8] == (8, 8)


def test_the_deepest_folder_of_the_index_s_names() -> None:
    rng = random.Random(5)
    parts = ["a", "a/b", "a/bc", "é", "a/b/c", ""]
    for _ in range(300):
        names = [f"{rng.choice(parts)}/{rng.choice(parts)}/{rng.choice('xyz')}"
                 for _ in range(rng.randint(1, 5))]
        names = [name.lstrip("/") for name in names]
        index = ObjectIndex([ObjectInfo("bkt", name, 1, 1) for name in names])
        shared, raw, ends = index.name_bytes()
        assert shared + _shared_folder(raw, np.asarray(ends).astype(np.int64)) == \
            manifest_folder(names), names


def test_counting_from_the_manifest_builds_no_record_a_shard(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # It built each shard's record from the index's columns to compare it
    # (~3 us a shard): now the columns are compared.
    n = 3000
    entries = [Entry(name=f"{k:05d}.jsonl", size=100 + k, crc32c=(k * 2654435761) % 2**32,
                     version=1_700_000_000_000_000 + k, format="lines", compression=None,
                     samples=k % 9, data_size=100 + k) for k in range(n)]
    infos = [ObjectInfo("bkt", f"ds/sub/{e.name}", e.size, e.version or 0, e.crc32c, scheme="gs")
             for e in entries]
    # Changed since: a size, a crc32c (same size and version); one not named.
    infos[10] = infos[10].replace(size=1)
    infos[20] = infos[20].replace(crc32c=(infos[20].crc32c or 0) + 1)
    infos.append(ObjectInfo("bkt", "ds/sub/new.jsonl", 5, 5, 5, scheme="gs"))
    shards = ObjectIndex(infos)
    store = store_with(entries, "ds/sub/")
    built: list[int] = []
    record = ObjectIndex._record

    def counted(self: ObjectIndex, i: int) -> ObjectInfo:
        built.append(i)
        return record(self, i)

    monkeypatch.setattr(ObjectIndex, "_record", counted)
    found = count_shards(store, shards, LINES, cache=None, sidecars=True)
    assert found.missing() == [10, 20, n]
    assert sorted(built) == [10, 20, n]  # only those left to the sidecars
    assert found.samples[:10].tolist() == [k % 9 for k in range(10)]
    assert list(found)[n - 1] == ((n - 1) % 9, 100 + n - 1)


def test_only_the_manifest_s_bucket_counts_from_it() -> None:
    entries = [Entry(name=f"{k}.jsonl", size=1, crc32c=1, version=1, format="lines",
                     compression=None, samples=3, data_size=1) for k in range(3)]
    store = store_with(entries)
    # The same names in another bucket: the manifest is of bucket b's objects.
    infos = [ObjectInfo("bkt" if k != 1 else "other", f"ds/{k}.jsonl", 1, 1, 1, scheme="gs")
             for k in range(3)]
    for shards in (ObjectIndex(infos), infos):
        found = count_shards(store, shards, LINES, cache=None, sidecars=True)
        assert list(found) == [(3, 1), None, (3, 1)]


def test_the_index_s_columns_read_as_its_records() -> None:
    infos = [ObjectInfo("b", name, size, generation, crc, scheme="s3")
             for name, size, generation, crc in (("a/x/1", 1, 2**100, None), ("a/x/é", 2, 0, 3),
                                                 ("a/y/3", 2**40, 7, 2**32 - 1))]
    index = ObjectIndex(infos)
    folder, rest = index.folder_names()
    assert folder == "a/" and list(rest) == ["x/1", "x/é", "y/3"]
    assert list(index.names()) == [i.name for i in infos]
    assert index.integers("size").tolist() == [1, 2, 2**40]
    assert index.integers("generation").tolist() == [2**100, 0, 7]
    assert index.integers("crc32c").tolist() == [-1, 3, 2**32 - 1]
    assert index.buckets() == ["b"] and ObjectIndex([]).buckets() == []
    with pytest.raises(ValueError, match="not a column of integers"):
        index.integers("name")
