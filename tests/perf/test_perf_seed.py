"""perf's generated data sets (shards, Parquet files): what the manifest and the
expected counts say is what is seeded."""

from __future__ import annotations

import io
import json
import random
import tarfile

import pytest

from aioflux._engines.shards import FORMATS
from perf.seed import ParquetSet, ShardSet

POOL = random.Random(0).randbytes(1 << 20)


def test_tar_shards_are_the_size_declared_and_read_as_webdataset_samples() -> None:
    shards = ShardSet("t/shard-", 2, 5, 1000)
    data = b"".join(shards.body(1, POOL))
    # The manifest lists shards.size; the harness expects sample_bytes per sample.
    assert len(data) == shards.size
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [(m.name, m.size) for m in tar.getmembers()]
    assert members == [(f"000001{j:06d}.{field}", n) for j in range(5)
                       for field, n in (("jpg", 1000), ("cls", 3))]
    offsets, lengths, _, _ = FORMATS["tar"].index([data], "gs://b/t")
    assert len(offsets) == 5
    sample = FORMATS["tar"].sample(data[offsets[2]:offsets[2] + lengths[2]], "gs://b/t", 0)
    assert len(sample["jpg"]) + len(sample["cls"]) == shards.sample_bytes
    assert sample["cls"] == b"002"
    # Shards differ from one another and are the same bytes every run.
    assert data == b"".join(shards.body(1, POOL)) != b"".join(shards.body(0, POOL))


def test_jsonl_shards_are_lines_of_the_size_declared() -> None:
    shards = ShardSet("l/part-", 1, 7, 300, kind="jsonl", suffix=".jsonl")
    assert shards.names() == ["l/part-000000.jsonl"]
    data = b"".join(shards.body(0, POOL))
    assert len(data) == shards.size == 7 * 300
    lines = data.split(b"\n")
    assert lines.pop() == b""
    assert [len(line) for line in lines] == [shards.sample_bytes] * 7
    assert [json.loads(line)["key"] for line in lines] == [f"000000{j:06d}" for j in range(7)]


def test_parquet_files_are_the_rows_declared_and_the_same_every_run() -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is in the test extra")
    data = ParquetSet("p/part-", 2, 1000, columns=3, row_group=300)
    assert data.names() == ["p/part-000000.parquet", "p/part-000001.parquet"]
    assert data.sizes() == [len(f) for f in data.files] and data.total_bytes == sum(data.sizes())
    tables = [pq.read_table(io.BytesIO(f)) for f in data.files]
    assert [t.column_names for t in tables] == [["key", "c0", "c1", "c2"]] * 2
    assert tables[1].column("key").to_pylist() == list(range(1000, 2000))
    assert pq.read_metadata(io.BytesIO(data.files[0])).num_row_groups == 4
    assert ParquetSet("p/part-", 2, 1000, columns=3, row_group=300).files == data.files
    assert tables[0].column("c0") != tables[1].column("c0")
