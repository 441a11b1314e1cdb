"""ObjectIndex: a dataset's objects in columns, equal to the records given,
and shared (not copied) by forked DataLoader workers."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from aioflux._core.memory.object_index import IndexBuilder, ObjectIndex
from aioflux._core.records.types import NO_METADATA, ObjectInfo

RECORDS = [
    # GCS listing: generation, crc32c, md5, metageneration, updated.
    ObjectInfo("b", "train/0001.jpg", 100, 1_700_000_000_000_001, 0xFFFFFFFF,
               "q83vEjRWeJq83vEjRWeJqw==", 1, "image/jpeg", "2026-11-22T10:00:00.123Z"),
    # No crc32c nor md5 (S3 listings), metadata, another bucket and store.
    ObjectInfo("other", "k", 0, 5, None, None, None, None, None, {"a": "1", "b": "2"}, "s3"),
    # Unicode, a name that is not valid UTF-8 (os.fsdecode), a pre-1970 file.
    ObjectInfo("dir", "été/😀", 7, -123_456_789, 0, "", 0, "", None, NO_METADATA, "file"),
    ObjectInfo("dir", os.fsdecode(b"bad-\xff-name"), 8, 9, 1, None, None, None, None,
               {"a": "1", "b": "2"}, "file"),
    ObjectInfo("b", "train/0002.jpg", (1 << 62), 2, 0, None, 7, "image/jpeg", "t",
               {"x": "y"}),
]


def test_records_come_back_equal_field_for_field() -> None:
    index = ObjectIndex(RECORDS)
    assert len(index) == len(RECORDS)
    assert list(index) == RECORDS
    for got, want in zip(index, RECORDS, strict=True):
        assert tuple(got) == tuple(want)
        assert [type(v) for v in got] == [type(v) for v in want] or got.metadata == want.metadata
    assert index[-1] == RECORDS[-1] and index[1:3] == RECORDS[1:3]
    assert index[::-2] == RECORDS[::-2]
    assert list(index.names()) == [o.name for o in RECORDS]
    assert [index.size(i) for i in range(len(index))] == [o.size for o in RECORDS]
    assert [index.place(i) for i in range(-len(index), 0)] == \
        [(o.bucket, o.name) for o in RECORDS]
    with pytest.raises(IndexError):
        index.place(len(RECORDS))
    with pytest.raises(IndexError):
        index[len(RECORDS)]
    with pytest.raises(IndexError):
        index[-len(RECORDS) - 1]


def test_values_beyond_64_bits_keep_their_exact_value() -> None:
    # S3's generation is its ETag as a number (an MD5 and a part count: 144
    # bits); the int64 column's None marker is a value too.
    s3 = [ObjectInfo("b", f"k{i}", i, (0x9E107D9D372BB6826BD81D3542A419D6 << 16) | i,
                     scheme="s3") for i in range(3)]
    edge = [ObjectInfo("b", "x", 1, -(1 << 63)), ObjectInfo("b", "y", 1, 1, -(1 << 63))]
    assert list(ObjectIndex(s3)) == s3
    assert list(ObjectIndex(edge)) == edge


def test_a_record_s_metadata_is_its_own() -> None:
    index = ObjectIndex(RECORDS)
    index[1].metadata["a"] = "changed"
    assert index[1].metadata == {"a": "1", "b": "2"} == index[3].metadata


def test_selection_is_a_view_in_the_order_given() -> None:
    index = ObjectIndex(RECORDS)
    view = index.select([4, 0, 4])
    assert len(view) == 3 and list(view) == [RECORDS[4], RECORDS[0], RECORDS[4]]
    assert view[1] == RECORDS[0] and view[1:] == [RECORDS[0], RECORDS[4]]


def test_pickles_to_an_equal_index() -> None:
    again = pickle.loads(pickle.dumps(ObjectIndex(RECORDS)))
    assert isinstance(again, ObjectIndex) and list(again) == RECORDS


# Run in a fresh interpreter: a forked child reports the MiB it made its own
# by a collection, then by a shuffled pass over the objects, as a DataLoader
# worker does.
_FORKED_PASS = """
import gc, os, random, sys
from array import array
from aioflux._core.memory.object_index import IndexBuilder, ObjectIndex
from aioflux._core.records.types import ObjectInfo

def private_dirty():
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(l.split()[1]) for l in f if l.startswith("Private_Dirty")) / 1024

def listed():
    return [ObjectInfo("bucket", f"train/shard-{i // 1000:04d}/{i:08d}.jpg", 1000 + i,
                       1_700_000_000_000_000 + i, i, None, 1, None,
                       "2026-11-22T10:00:00.123Z") for i in range(count)]

count = 200_000
objects = ObjectIndex(listed()) if sys.argv[1] == "index" else listed()
order = array("q", random.Random(0).sample(range(count), count))
gc.collect()
pid = os.fork()
if pid == 0:
    before = private_dirty()
    gc.collect()
    collected = private_dirty()
    total = 0
    for i in order:
        total += objects[i].size
    print(collected - before, private_dirty() - collected, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not (sys.platform == "linux" and Path("/proc/self/smaps_rollup").exists()),
                    reason="reads Linux's smaps_rollup")
def test_forked_workers_share_the_index_instead_of_copying_it() -> None:
    def private_mib(kind: str) -> tuple[float, float]:
        done = subprocess.run([sys.executable, "-c", _FORKED_PASS, kind], check=True,
                              capture_output=True, text=True, timeout=120)
        collection, reads = done.stdout.split()
        return float(collection), float(reads)

    (list_gc, list_reads), (index_gc, index_reads) = private_mib("list"), private_mib("index")
    found = dict(list_gc=list_gc, list_reads=list_reads, index_gc=index_gc,
                 index_reads=index_reads)
    # A list's records (~70 MB here): the collector writes every record's
    # header, reads write reference counts. The columns: neither (what the
    # collector copies then is the interpreter's own objects, for both).
    assert list_gc - index_gc > 20, found
    assert list_reads > 5, found
    assert index_reads < 2, found


def test_pages_without_metadata_then_with_it_keep_each_record_s() -> None:
    # A page of objects without custom metadata is added without a key made
    # per object; a later page with some must still read back each one's.
    plain = [ObjectInfo("b", f"p{i}", 1) for i in range(3)]
    tagged = [ObjectInfo("b", "q0", 1, metadata={"k": "v"}), ObjectInfo("b", "q1", 1)]
    builder = IndexBuilder()
    builder.add(plain)
    builder.add(tagged)
    index = builder.finish()
    assert list(index) == plain + tagged
    assert [dict(o.metadata) for o in index] == [{}, {}, {}, {"k": "v"}, {}]
    assert index[0].metadata is NO_METADATA
