"""Parquet shards over http(s) URLs served by nginx, a read-only store: the
footers are fetched by range once per node into the local cache (a second
dataset fetches none), a manifest the dataset ships is used, only the
asked-for column's chunks are read, and a file replaced mid-job is a typed
error."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioflux import ClientConfig, NotFound, PreconditionFailed, RetryPolicy
from aioflux._engines.shards import _parquet_read
from aioflux.torch import (
    DatasetSettings,
    Order,
    Parquet,
    ShardDataset,
    ShardMapDataset,
    ShardReads,
    ShardWriter,
)
from tests.servers.nginx import Nginx, running_nginx

FAST = RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0)
ROWS = (30, 45, 25)


def _table(f: int, rows: int) -> pa.Table:
    return pa.table({"id": [f * 100 + i for i in range(rows)],
                     "text": [f"row {i} " * (i % 9) for i in range(rows)],
                     "score": [i / 3 for i in range(rows)],
                     "lang": ["en", "de", "fr"] * (rows // 3) + ["en"] * (rows % 3),
                     "tokens": [list(range(i % 4)) for i in range(rows)]})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, Path]]:
    root = tmp_path_factory.mktemp("http-parquet")
    (root / "plain").mkdir()
    for f, rows in enumerate(ROWS):
        pq.write_table(_table(f, rows), root / "plain" / f"p-{f}.parquet", row_group_size=10,
                       write_page_checksum=True)
    with ShardWriter(f"file://{root}/shipped/s-%d.parquet", format="parquet", max_count=40,
                     row_group_bytes=800) as writer:
        for row in _table(9, 100).to_pylist():
            writer.write(row)
    (root / "swap").mkdir()
    with running_nginx(root) as server:
        yield server, root


class Footers:
    """Counts the footers fetched and the other ranged reads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.footers: list[str] = []
        self.reads: list[tuple[str, int, int]] = []
        real_footer, real_read = _parquet_read.read_footer, _parquet_read._pinned_read

        async def footer(store: Any, info: Any) -> Any:
            self.footers.append(info.name)
            return await real_footer(store, info)

        async def read(store: Any, info: Any, version: Any, start: int, end: int,
                       hedger: Any = None) -> bytes:
            self.reads.append((info.name, start, end))
            return await real_read(store, info, version, start, end, hedger)

        monkeypatch.setattr("aioflux.torch.data._shard_parquet.read_footer", footer)
        monkeypatch.setattr(_parquet_read, "_pinned_read", read)


def test_rows_over_http_footers_cached_per_node(served: tuple[Nginx, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    server, _ = served
    seen = Footers(monkeypatch)
    url = f"{server.endpoint}/plain/p-{{0..2}}.parquet"
    opts: dict[str, Any] = {"settings": DatasetSettings(config=ClientConfig(retry=FAST)),
                            "reads": ShardReads(index_dir=tmp_path / "idx")}
    ds = ShardDataset(url, format=Parquet(columns=["id", "lang"]), order=Order(batch_size=4),
                      **opts)
    assert ds.counts == list(ROWS) and sorted(seen.footers) == [f"plain/p-{f}.parquet"
                                                                for f in range(3)]
    got = list(ds)
    expected = [{"id": r["id"], "lang": r["lang"]} for f, n in enumerate(ROWS)
                for r in _table(f, n).to_pylist()]
    assert sorted(got, key=lambda r: r["id"]) == expected
    # Only the id and lang chunks were read past the footers.
    md = pq.read_metadata(served[1] / "plain" / "p-1.parquet")
    wanted = set()
    for g in range(md.num_row_groups):
        spans = set()
        for c in (0, 3):
            col = md.row_group(g).column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page else \
                col.data_page_offset
            spans.add((start, start + col.total_compressed_size))
        wanted.update(_merged(spans))  # a row group's chunks this close: one GET
    size = (served[1] / "plain" / "p-1.parquet").stat().st_size
    data = {(s, e) for name, s, e in seen.reads if name == "plain/p-1.parquet" and e != size}
    assert data == wanted
    # The node's footer cache: a second dataset (and a map-style one) fetches no footer.
    seen.footers.clear()
    again = ShardMapDataset(url, **opts)
    assert again[ROWS[0]]["id"] == 100 and not seen.footers


def _merged(spans: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` with those 4 KiB or less apart as one (as the reads coalesce them)."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s - out[-1][1] <= 4096:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def test_a_shipped_manifest_counts_the_files(served: tuple[Nginx, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    server, root = served
    assert (root / "shipped" / "_aioflux_manifest.jsonl").exists()
    seen = Footers(monkeypatch)
    ds = ShardDataset(f"{server.endpoint}/shipped/s-{{0..2}}.parquet", order=Order(shuffle=False),
                      settings=DatasetSettings(config=ClientConfig(retry=FAST)),
                      reads=ShardReads(index_dir=tmp_path / "idx"))
    # The manifest counted every file: the first file's footer alone was read
    # (for the schema and the read unit).
    assert ds.counts == [40, 40, 20] and seen.footers == ["shipped/s-0.parquet"]
    assert [r["id"] for r in ds] == [900 + i for i in range(100)]


def test_a_file_replaced_mid_job_over_http(served: tuple[Nginx, Path],
                                           tmp_path: Path) -> None:
    server, root = served
    for f in range(2):
        shutil.copy(root / "plain" / f"p-{f}.parquet", root / "swap" / f"p-{f}.parquet")
    ds = ShardDataset(f"{server.endpoint}/swap/p-{{0..1}}.parquet",
                      order=Order(shuffle=False, batch_size=10),
                      reads=ShardReads(reads_in_flight=1, prefetch_bytes=1,
                                       index_dir=tmp_path / "idx"),
                      settings=DatasetSettings(config=ClientConfig(retry=FAST)))
    rows = iter(ds)
    assert [next(rows)["id"] for _ in range(10)] == list(range(10))
    out = io.BytesIO()
    pq.write_table(_table(7, ROWS[1]), out, row_group_size=10)
    (root / "swap" / "p-1.parquet").write_bytes(out.getvalue())
    ids = []
    with pytest.raises((PreconditionFailed, NotFound), match=r"p-1\.parquet: the shard changed"):
        for row in rows:
            ids.append(row["id"])
    assert all(i < 200 for i in ids)  # never a row of the new version (ids 700...)
