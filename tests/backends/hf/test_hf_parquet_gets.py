"""Parquet shards on the fake Hub, by the ranged GETs their bytes cost: a
footer that fits the last 64 KiB is one GET, a longer one two; a pass's
first row group, read alone, is fetched as several GETs at once (a
connection's bandwidth is capped), the window's row groups one GET each."""

from __future__ import annotations

import io
import itertools
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioflux._engines.shards import _parquet_read
from aioflux._engines.shards._parquet import TAIL
from aioflux.testing import FakeHub
from aioflux.torch import ShardDataset, ShardReads

URL = "hf://datasets/org/pq/data/"


def _write(table: pa.Table, rows_per_group: int) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=rows_per_group, write_page_checksum=True)
    return out.getvalue()


def _cdn_gets(hub: FakeHub, since: int = 0) -> list[tuple[str, int, int]]:
    """The CDN's ranged GETs from request ``since`` on: (file, first, last byte)."""
    out = []
    for r in hub.requests[since:]:
        if r.origin == "cdn" and r.method == "GET":
            first, _, last = r.headers["Range"].removeprefix("bytes=").partition("-")
            out.append((r.path.split("?")[0].rsplit("/", 1)[-1], int(first), int(last)))
    return out


def _push(hub: FakeHub, monkeypatch: pytest.MonkeyPatch, files: dict[str, bytes]) -> None:
    hub.create_repo("org/pq")
    hub.push("org/pq", {f"data/{name}": data for name, data in files.items()})
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)


def _span(rg: pq.RowGroupMetaData) -> tuple[int, int]:
    """A row group's bytes: its column chunks', dictionary pages first."""
    chunks = [rg.column(c) for c in range(rg.num_columns)]
    starts = [
        c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in chunks
    ]
    ends = [start + c.total_compressed_size for start, c in zip(starts, chunks, strict=True)]
    return min(starts), max(ends)


def _footer_length(data: bytes) -> int:
    return int.from_bytes(data[-8:-4], "little") + 8


def test_a_footer_costs_one_get_and_a_longer_one_two(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One schema: 60 columns and a blob. The small file's incompressible
    # blobs put it past 64 KiB, so its one GET is its tail, not all of it;
    # the wide one's 40 row groups of 61 chunks make its footer longer.
    def table(rows: int, blob: int) -> pa.Table:
        columns = {f"c{c}": range(rows) for c in range(60)}
        return pa.table({**columns, "blob": [os.urandom(blob) for _ in range(rows)]})

    small = _write(table(64, 2048), 64)
    wide = _write(table(400, 8), 10)
    assert len(small) > TAIL > _footer_length(small)
    assert _footer_length(wide) > TAIL
    _push(hub, monkeypatch, {"a-small.parquet": small, "b-wide.parquet": wide})
    ShardDataset.from_prefix(URL, format="parquet", reads=ShardReads(index_dir=tmp_path / "idx"))
    gets = sorted(_cdn_gets(hub))
    # Requests name the file by its content hash at the CDN: tell them by range.
    size_small, size_wide = len(small), len(wide)
    tails = [(first, last) for _, first, last in gets]
    assert (size_small - TAIL, size_small - 1) in tails
    assert (size_wide - TAIL, size_wide - 1) in tails
    rest = (size_wide - _footer_length(wide), size_wide - TAIL - 1)
    assert rest in tails
    assert len(gets) == 3  # the small footer one GET, the wide one two


def test_the_first_row_group_is_fetched_by_several_gets_the_others_by_one(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 4 row groups of 8 rows of 128 KiB of random bytes: each group's chunks
    # (~1 MiB) are past two of its parts.
    rows = 32
    blobs = [os.urandom(128 * 1024) for _ in range(rows)]
    data = _write(pa.table({"id": range(rows), "blob": blobs}), 8)
    _push(hub, monkeypatch, {"part-0.parquet": data})
    ds = ShardDataset.from_prefix(URL, format="parquet",
                                  reads=ShardReads(index_dir=tmp_path / "idx"))
    made = len(hub.requests)
    got = [(row["id"], row["blob"]) for row in ds]
    assert got == [(i, blobs[i]) for i in ds.epoch_order(0)]
    md = pq.ParquetFile(io.BytesIO(data)).metadata
    spans = [_span(md.row_group(g)) for g in range(md.num_row_groups)]
    assert all(end - start > 2 * _parquet_read._PART for start, end in spans)
    gets = sorted((a, b + 1) for _, a, b in _cdn_gets(hub, made))
    # The first run's row group (the epoch's first row's): up to _PARTS
    # GETs, each at least _PART, which together are its chunks' bytes once.
    g = got[0][0] // 8
    first = [(a, b) for a, b in gets if spans[g][0] <= a < spans[g][1]]
    assert 1 < len(first) <= _parquet_read._PARTS
    assert first[0][0] == spans[g][0] and first[-1][1] == spans[g][1]
    assert all(a == b for (_, a), (b, _) in itertools.pairwise(first))
    assert all(b - a >= _parquet_read._PART for a, b in first)
    # Each of the others: one GET of its chunks.
    assert [span for span in gets if span not in first] == spans[:g] + spans[g + 1 :]
