"""Parquet shards on the fake Hub, by the requests they cost: a dataset is
made without a HEAD a file, its first run is read alone before the rest of
the window, and DataLoader workers whose batches share row groups fetch
each row group once between them."""

from __future__ import annotations

import io
import multiprocessing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch.utils.data

from aioflux._engines.shards import _parquet_read
from aioflux.testing import FakeHub
from aioflux.torch import Order, ShardDataset, ShardReads

URL = "hf://datasets/org/pq/data/"
FILES, ROWS, GROUP = 2, 64, 16  # 8 row groups of 16 rows


def _parquet(f: int) -> bytes:
    t = pa.table(
        {
            "id": list(range(f * 1000, f * 1000 + ROWS)),
            "text": [f"row {i} " * (5 + i % 7) for i in range(ROWS)],
        }
    )
    out = io.BytesIO()
    pq.write_table(t, out, row_group_size=GROUP, write_page_checksum=True)
    return out.getvalue()


@pytest.fixture
def repo(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> str:
    hub.create_repo("org/pq")
    commit = hub.push("org/pq", {f"data/part-{f}.parquet": _parquet(f) for f in range(FILES)})
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    return commit


def _chunk_reads(hub: FakeHub, since: int) -> list[tuple[str, str]]:
    """The CDN's ranged GETs from request ``since`` on: (file, range)."""
    return [
        (r.path.split("?")[0], r.headers.get("Range", ""))
        for r in hub.requests[since:]
        if r.origin == "cdn" and r.method == "GET"
    ]


def _rows_of_two_forked_workers(ds: ShardDataset) -> list[int]:
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=4,
        num_workers=2,
        collate_fn=list,
        multiprocessing_context=multiprocessing.get_context("fork"),
    )
    return [row["id"] for batch in loader for row in batch]


def test_made_without_a_head_a_file_and_the_first_run_read_alone(
    hub: FakeHub, repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, int]] = []
    real = _parquet_read.read_group

    async def traced(store: Any, info: Any, footer: Any, group: int, *args: Any, **kw: Any) -> Any:
        events.append(("start", group))
        try:
            return await real(store, info, footer, group, *args, **kw)
        finally:
            events.append(("end", group))

    monkeypatch.setattr(_parquet_read, "read_group", traced)
    ds = ShardDataset.from_prefix(
        URL, format="parquet",
        reads=ShardReads(index_dir=tmp_path / "idx"), order=Order(batch_size=4, shuffle=False)
    )
    sent = [(r.method, r.path.split("?")[0]) for r in hub.sent("hub")]
    # The listing's store learned every file's version at the commit: the
    # footers' reads check theirs without a HEAD a file.
    assert not [p for m, p in sent if m == "HEAD" and p.endswith(".parquet")]
    assert sum(p.endswith(".parquet") for _, p in sent) == FILES  # a footer GET each
    assert sum("/tree/" in p for _, p in sent) == 1
    made = len(hub.requests)
    rows = [row["id"] for row in ds]
    assert rows == [f * 1000 + i for f in range(FILES) for i in range(ROWS)]
    # Every row group once, and nothing else started before the first one ended.
    assert len(_chunk_reads(hub, made)) == FILES * ROWS // GROUP
    assert events[:2] == [("start", 0), ("end", 0)]


def test_workers_sharing_row_groups_fetch_each_once(
    hub: FakeHub, repo: str, tmp_path: Path
) -> None:
    ds = ShardDataset.from_prefix(
        URL, format="parquet",
        reads=ShardReads(index_dir=tmp_path / "idx"), order=Order(batch_size=4, seed=3)
    )
    made = len(hub.requests)
    # Batches of 4 rows from row groups of 16: each row group's rows are in
    # both workers' batches.
    rows = _rows_of_two_forked_workers(ds)
    assert sorted(rows) == [f * 1000 + i for f in range(FILES) for i in range(ROWS)]
    reads = _chunk_reads(hub, made)
    assert len(reads) == len(set(reads)) == FILES * ROWS // GROUP
    # Making the dataset read each file's footer through its 302 to the
    # CDN: the forked workers' reads go to the CDN at once, no 302 again.
    assert [r.path for r in hub.requests[made:] if r.origin != "cdn"] == []


def _revisions(hub: FakeHub) -> int:
    return sum("/revision/" in r.path for r in hub.sent("hub"))


def test_the_first_row_after_one_resolution_and_one_round_trip(
    hub: FakeHub, repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The requests sent by the time the first row group is in hand: the
    # first run is read alone, so none of the window's are among them.
    by_first: list[int] = []
    real = _parquet_read.read_group

    async def traced(*args: Any, **kw: Any) -> Any:
        table = await real(*args, **kw)
        if not by_first:
            by_first.append(len(hub.requests))
        return table

    monkeypatch.setattr(_parquet_read, "read_group", traced)
    ds = ShardDataset.from_prefix(
        URL, format="parquet", reads=ShardReads(index_dir=tmp_path / "idx"), order=Order(seed=5)
    )
    made = len(hub.requests)
    first = next(iter(ds))
    assert first["id"] in {f * 1000 + i for f in range(FILES) for i in range(ROWS)}
    # The listing's store resolved the revision; the reading store reads at
    # that commit without asking again.
    assert _revisions(hub) == 1
    # After the dataset is made (its footers in hand, each file's redirect
    # known): the row group's one ranged GET at the CDN, nothing at the Hub.
    assert [(r.origin, r.method) for r in hub.requests[made : by_first[0]]] == [("cdn", "GET")]


def test_workers_read_at_the_commit_the_listing_resolved(
    hub: FakeHub, repo: str, tmp_path: Path
) -> None:
    ds = ShardDataset.from_prefix(
        URL, format="parquet", reads=ShardReads(index_dir=tmp_path / "idx"), order=Order(seed=3)
    )
    # A push after the dataset was made: its workers still read the listed commit.
    hub.push("org/pq", {"data/part-0.parquet": _parquet(7)})
    rows = _rows_of_two_forked_workers(ds)
    assert sorted(rows) == [f * 1000 + i for f in range(FILES) for i in range(ROWS)]
    assert _revisions(hub) == 1
    assert all(f"/resolve/{repo}/" in r.path for r in hub.sent("hub") if "/resolve/" in r.path)


def test_named_files_are_read_at_the_commit_their_stats_resolved(
    hub: FakeHub, repo: str, tmp_path: Path
) -> None:
    urls = [f"hf://datasets/org/pq/data/part-{f}.parquet" for f in range(FILES)]
    ds = ShardDataset(
        urls, format="parquet",
        reads=ShardReads(index_dir=tmp_path / "idx"), order=Order(shuffle=False)
    )
    rows = [row["id"] for row in ds]
    assert rows == [f * 1000 + i for f in range(FILES) for i in range(ROWS)]
    assert _revisions(hub) == 1
