"""``listing="rank0"`` over Parquet shards on the fake Hub, in a real 2-process
gloo group: rank 0 lists the folder and reads the footers, rank 1 makes its
dataset without a request to the Hub, and the ranks' rows split the epoch."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioflux.testing import FakeHub
from tests.torch._two_ranks import run_job

FILES, ROWS = 3, 40


def _parquet(f: int) -> bytes:
    t = pa.table({"id": list(range(f * 1000, f * 1000 + ROWS)), "text": ["t" * 30] * ROWS})
    out = io.BytesIO()
    pq.write_table(t, out, row_group_size=16, write_page_checksum=True)
    return out.getvalue()


def test_rank0_lists_and_reads_the_footers_for_both_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeHub(lfs_threshold=64, tokens=("hf_rank0", "hf_rank1")) as hub:
        hub.create_repo("org/pq")
        hub.push("org/pq", {f"data/part-{f}.parquet": _parquet(f) for f in range(FILES)})
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        (tmp_path / "root").mkdir()
        zero, one = (
            r["rank0_listing"]
            for r in run_job("tests.backends.hf._rank_parquet_worker", tmp_path, tmp_path / "root")
        )
        by_rank = {
            rank: [
                (r.method, r.path)
                for r in hub.requests
                if r.headers.get("Authorization") == f"Bearer hf_rank{rank}"
            ]
            for rank in (0, 1)
        }
    assert one["names"] == zero["names"] == [f"data/part-{f}.parquet" for f in range(FILES)]
    assert one["counts"] == zero["counts"] == [ROWS] * FILES
    # Rank 0 alone listed and counted; rank 1 read one footer (the schema
    # its reads are held to) and the rows of its share.
    assert any("/tree/" in p for _, p in by_rank[0])
    assert not any("/tree/" in p for _, p in by_rank[1])
    every = [f * 1000 + i for f in range(FILES) for i in range(ROWS)]
    assert sorted(zero["ids"] + one["ids"]) == every
    assert not set(zero["ids"]) & set(one["ids"])
