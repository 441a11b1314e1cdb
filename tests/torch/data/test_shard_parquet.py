"""ShardDataset and ShardMapDataset over Parquet shards on every store: rows
and batches round trip (dotted column names and row groups past the read
budget included), only the asked-for columns' chunks are fetched, resume
is exact at a row inside a row group across world sizes, and a replaced
file, another schema, a damaged page, a filter on a missing column or a
list column no tensor holds is a typed error. The writer takes each row
as it is written, and refuses one of other columns."""

from __future__ import annotations

import collections
import dataclasses
import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.utils.data

from aioflux import (
    ChecksumMismatch,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    ShardFormatError,
)
from aioflux._engines.shards import _parquet_read
from aioflux._engines.shards._parquet_read import Picked
from aioflux.torch import DatasetSettings, Order, Parquet, ShardDataset, ShardMapDataset, ShardReads
from aioflux.torch.data._shard_parquet import ParquetRows
from tests.torch.conftest import Where

# Rows per file, in row groups of GROUP (the last one shorter).
ROWS = (60, 60, 60)
GROUP = 16


def table(f: int, rows: int, *, extra: bool = False) -> pa.Table:
    columns: dict[str, Any] = {
        "id": [f * 1000 + i for i in range(rows)],
        "text": [f"file {f} row {i} " * (3 + i % 5) for i in range(rows)],
        "score": [i / 4 for i in range(rows)],
        "lang": ["en" if i % 3 else "fr" for i in range(rows)],
        "tokens": [list(range(i % 7)) for i in range(rows)],
    }
    if extra:
        columns["more"] = list(range(rows))
    return pa.table(columns)


def parquet(t: pa.Table, **kw: Any) -> bytes:
    out = io.BytesIO()
    pq.write_table(t, out, row_group_size=GROUP, write_page_checksum=True, **kw)
    return out.getvalue()


def seed(where: Where, **kw: Any) -> dict[int, dict[str, Any]]:
    expected = {}
    for f, rows in enumerate(ROWS):
        t = table(f, rows)
        where.put(f"part-{f}.parquet", parquet(t, **kw))
        expected.update((row["id"], row) for row in t.to_pylist())
    return expected


def dataset(where: Where, tmp_path: Path, *, settings: DatasetSettings | None = None,
            reads: ShardReads | None = None, **kw: Any) -> ShardDataset:
    reads = dataclasses.replace(reads or ShardReads(), index_dir=tmp_path / "idx")
    return ShardDataset.from_prefix(where.root, reads=reads,
                                    settings=settings or where.settings(), **kw)


class Fetched:
    """Every ranged read of a Parquet shard: ``(name, start, end, bytes)``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[tuple[str, int, int, int]] = []
        real = _parquet_read._pinned_read

        async def counted(store: Any, info: Any, version: Any, start: int, end: int,
                          hedger: Any = None) -> bytes:
            data = await real(store, info, version, start, end, hedger)
            self.reads.append((info.name, start, end, len(data)))
            return data

        monkeypatch.setattr(_parquet_read, "_pinned_read", counted)



def test_rows_round_trip_on_every_store(where: Where, tmp_path: Path) -> None:
    expected = seed(where)
    ds = dataset(where, tmp_path, order=Order(batch_size=4))
    assert ds.counts == list(ROWS) and ds.samples_per_read == GROUP
    got = list(ds)
    assert len(got) == sum(ROWS)
    assert {row["id"]: row for row in got} == expected  # every row once, lists as lists
    assert isinstance(got[0]["tokens"], list)
    mapped = ShardMapDataset(f"{where.root}/part-{{0..2}}.parquet",
                             reads=ShardReads(index_dir=tmp_path / "idx"),
                             settings=where.settings())
    assert len(mapped) == sum(ROWS)
    assert mapped[0] == expected[0] and mapped[-1] == expected[2059]
    assert mapped.__getitems__([61, 17, 59]) == [expected[1001], expected[17], expected[59]]


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_batches_as_columns_tensors_or_record_batches(where: Where, tmp_path: Path) -> None:
    expected = seed(where)
    ds = dataset(where, tmp_path, order=Order(batch_size=7, shuffle=False),
                 format=Parquet(output="columns", tensors=True, columns=["id", "tokens"]))
    batches = list(ds)
    assert [len(b["id"]) for b in batches] == [7] * 25 + [5]  # 180 rows; the last pads to 7
    first = batches[0]
    assert isinstance(first["id"], torch.Tensor) and first["id"].tolist() == list(range(7))
    assert [t.tolist() for t in first["tokens"]] == [expected[i]["tokens"] for i in range(7)]
    assert set(first) == {"id", "tokens"}
    arrow = list(dataset(where, tmp_path, order=Order(batch_size=32),
                         format=Parquet(output="arrow")))
    assert all(isinstance(b, pa.RecordBatch) for b in arrow)
    rows = [row for b in arrow for row in b.to_pylist()]
    assert sorted(r["id"] for r in rows)[:sum(ROWS)] == sorted(expected)[:sum(ROWS)]
    assert {r["id"]: r for r in rows} == expected


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_one_column_of_five_fetches_only_its_chunks(where: Where, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    seed(where)
    fetched = Fetched(monkeypatch)
    ds = dataset(where, tmp_path, format=Parquet(columns=["score"]), order=Order(shuffle=False))
    got = list(ds)
    assert set(got[0]) == {"score"} and len(got) == sum(ROWS)
    chunks, sizes = set(), {}
    for f, rows in enumerate(ROWS):
        data = parquet(table(f, rows))
        name = f"{where.base}part-{f}.parquet"
        sizes[name] = len(data)
        md = pq.read_metadata(io.BytesIO(data))
        for g in range(md.num_row_groups):
            col = md.row_group(g).column(2)  # score, the third of five
            start = col.dictionary_page_offset if col.has_dictionary_page else \
                col.data_page_offset
            chunks.add((name, start, start + col.total_compressed_size))
    # Past the footers (a read of each file's end), the reads are the score
    # column's chunks, each once, each length checked.
    data_reads = [(name, start, end) for name, start, end, _ in fetched.reads
                  if end != sizes[name]]
    assert sorted(data_reads) == sorted(chunks)
    assert all(n == end - start for _, start, end, n in fetched.reads)
    assert len(fetched.reads) - len(data_reads) == len(ROWS)  # a footer a file


def _consume(ds: ShardDataset, steps: int | None,
             workers: int = 0) -> tuple[list[int], dict[str, Any]]:
    loader = torch.utils.data.DataLoader(ds, batch_size=ds.batch_size, num_workers=workers,
                                         collate_fn=list,
                                         multiprocessing_context="fork" if workers else None)
    out: list[int] = []
    for step, batch in enumerate(ds.track(loader), 1):
        out += [row["id"] for row in batch]
        if step == steps:
            return out, ds.state_dict()
    return out, ds.state_dict()


@pytest.mark.parametrize("stop", [1, 3])
def test_resume_exact_at_a_row_across_two_three_and_one_ranks(tmp_path: Path,
                                                              stop: int) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    expected = seed(where)
    order = Order(batch_size=2, seed=11, shuffle_window=40)
    opts: dict[str, Any] = {"format": Parquet(columns=["id"])}
    seen: list[int] = []
    two = []
    for rank in range(2):
        ids, state = _consume(dataset(where, tmp_path, **opts,
                                      order=dataclasses.replace(order, rank=rank, world_size=2)),
                              stop)
        seen += ids
        two.append(state)
    assert two[0] == two[1] and two[0]["samples"] == stop * 4  # inside a row group of 16
    three = []
    for rank in range(3):
        ds = dataset(where, tmp_path, **opts,
                     order=dataclasses.replace(order, rank=rank, world_size=3))
        ds.load_state_dict(two[0])
        ids, state = _consume(ds, 2, workers=2 if rank == 0 else 0)
        seen += ids
        three.append(state)
    assert three[0] == three[1] == three[2] and three[0]["samples"] == stop * 4 + 12
    ds = dataset(where, tmp_path, **opts, order=dataclasses.replace(order, rank=0, world_size=1))
    ds.load_state_dict(three[0])
    seen += _consume(ds, None)[0]
    # 180 rows: no padding at any of the three world sizes; each row exactly once.
    assert collections.Counter(seen) == collections.Counter(list(expected))


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_a_file_replaced_mid_job_is_a_typed_error(where: Where, tmp_path: Path) -> None:
    seed(where)
    # One read in flight: part-2 is read only after part-0's first rows are taken.
    ds = dataset(where, tmp_path, order=Order(shuffle=False, batch_size=GROUP),
                 reads=ShardReads(reads_in_flight=1, prefetch_bytes=1))
    rows = iter(ds)
    first = [next(rows) for _ in range(GROUP)]
    assert [r["id"] for r in first] == list(range(GROUP))
    t = table(2, ROWS[2])
    where.put("part-2.parquet", parquet(t.set_column(0, "id", pa.array(
        [-1 - i for i in range(ROWS[2])]))))
    ids = []
    with pytest.raises((PreconditionFailed, NotFound), match=r"part-2\.parquet: the shard "
                       r"changed"):
        for row in rows:
            ids.append(row["id"])
    assert len(ids) >= ROWS[1] and all(i >= 0 for i in ids)  # never a row of the new version
    # A dataset made after the change reads the new version.
    again = sorted(r["id"] for r in dataset(where, tmp_path, format=Parquet(columns=["id"])))
    assert again[:2] == [-60, -59] and len(again) == sum(ROWS)


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_files_of_two_schemas_are_refused_naming_both(where: Where, tmp_path: Path) -> None:
    where.put("a.parquet", parquet(table(0, 20)))
    where.put("b.parquet", parquet(table(1, 20, extra=True)))
    with pytest.raises(ShardFormatError, match=r"b\.parquet and .*a\.parquet have different "
                       r"schemas"):
        dataset(where, tmp_path)


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_filters_skip_row_groups_by_their_statistics(where: Where, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seed(where)
    fetched = Fetched(monkeypatch)
    # ids 1020..1039 lie in part-1's row groups 1 (1016-1031) and 2 (1032-1047).
    ds = dataset(where, tmp_path,
                 format=Parquet(filters=[("id", ">=", 1020), ("id", "<", 1040)], columns=["id"]),
                 order=Order(shuffle=False))
    assert ds.counts == [0, 2 * GROUP, 0]
    assert [r["id"] for r in ds] == list(range(1016, 1048))
    md = pq.read_metadata(io.BytesIO(parquet(table(1, ROWS[1]))))
    kept = [md.row_group(g).column(0) for g in (1, 2)]
    data = [r for r in fetched.reads if r[0].endswith("part-1.parquet")
            and r[2] <= md.row_group(3).column(0).data_page_offset and r[2] - r[1] < 4096]
    assert sorted((r[1], r[2]) for r in data) == sorted(
        (c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset,
         (c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset)
         + c.total_compressed_size) for c in kept)
    either = dataset(where, tmp_path,
                     format=Parquet(filters=[[("id", "<", 3)], [("id", "==", 2059)]],
                                    columns=["id"]))
    assert either.counts == [GROUP, 0, ROWS[2] - 3 * GROUP]
    with pytest.raises(InvalidArgument, match="filters"):
        dataset(where, tmp_path, format=Parquet(filters=[("id", "~", 3)]))


def _flip_in_page(data: bytes, column: int) -> bytes:
    """``data`` with a byte of row group 0's ``column`` values flipped."""
    md = pq.read_metadata(io.BytesIO(data))
    col = md.row_group(0).column(column)
    at = col.data_page_offset + col.total_compressed_size - 3
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_a_damaged_page_fails_its_crc(where: Where, tmp_path: Path) -> None:
    good = parquet(table(0, 40), compression="none", use_dictionary=False)
    where.put("a.parquet", _flip_in_page(good, 2))
    with pytest.raises(ChecksumMismatch, match=r"a\.parquet: row group 0"):
        list(dataset(where, tmp_path, format=Parquet(columns=["score"])))
    # Another column of the row group is read as it is.
    assert len(list(dataset(where, tmp_path, format=Parquet(columns=["id"])))) == 40


def test_settings_of_parquet_on_other_formats_and_bad_columns_are_refused(
        tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    where.put("a.jsonl", b'{"a": 1}\n')
    # format=Parquet(...) says the format: another is not Parquet.
    with pytest.raises(ShardFormatError, match="not a Parquet file"):
        dataset(where, tmp_path, format=Parquet(columns=["a"]))
    # The old keywords leave the format to the names, and only apply to Parquet.
    with pytest.raises(InvalidArgument, match="apply to Parquet shards only"), \
            pytest.warns(DeprecationWarning, match=r"format=Parquet\(columns=\.\.\.\)"):
        ShardDataset(where.url("a.jsonl"),
                     reads=ShardReads(index_dir=tmp_path / "idx"), columns=["a"])
    where.put("p/a.parquet", parquet(table(0, 5)))
    with pytest.raises(InvalidArgument, match="has no column 'nope'"):
        ShardDataset.from_prefix(where.url("p"), reads=ShardReads(index_dir=tmp_path / "idx"),
                                 format=Parquet(columns=["nope"]))
    with pytest.raises(InvalidArgument, match="output"):
        ShardDataset.from_prefix(where.url("p"), reads=ShardReads(index_dir=tmp_path / "idx"),
                                 format=Parquet(output="rows!"))


def _rows(n: int, base: int = 0) -> list[dict[str, Any]]:
    return [{"id": base + i, "text": "w" * (i % 40), "tokens": list(range(i % 6)),
             "score": i / 2} for i in range(n)]


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_the_writer_packs_rows_into_row_groups_and_shards_with_manifest_entries(
        where: Where, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux.torch import ShardWriter
    rows = _rows(250)
    with ShardWriter(f"{where.root}/w-%03d.parquet", format="parquet", max_count=100,
                     row_group_bytes=1500, **where.kwargs) as writer:
        for row in rows:
            writer.write(row)
    assert [u.rsplit("/", 1)[1] for u in writer.shards] == [f"w-{n:03d}.parquet"
                                                          for n in range(3)]
    names = where.names()
    assert {"_aioflux_manifest.jsonl", "_aioflux_parquet_footers.bin"} <= set(names)
    assert not [n for n in names if n.endswith(".idx")]
    for n, url in enumerate(writer.shards):
        data = _object(where, url)
        md = pq.read_metadata(io.BytesIO(data))
        assert md.num_rows == (100, 100, 50)[n] and md.num_row_groups >= 2  # ~1500 B each
        assert pq.read_table(io.BytesIO(data)).to_pylist() == rows[n * 100:n * 100 + md.num_rows]
    reads: list[str] = []
    real = _parquet_read.read_footer

    async def footer(store: Any, info: Any) -> Any:
        reads.append(info.name)
        return await real(store, info)

    monkeypatch.setattr("aioflux.torch.data._shard_parquet.read_footer", footer)
    ds = dataset(where, tmp_path, format=Parquet(columns=["id", "tokens"]))
    # The manifest counted the rows, the footers object gave every footer:
    # two GETs, no file's end read.
    assert ds.counts == [100, 100, 50] and reads == []
    assert sorted(r["id"] for r in ds) == list(range(250))
    assert _reads(ds) == []


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_a_failed_write_publishes_nothing_of_its_shard(where: Where) -> None:
    from aioflux.torch import ShardWriter
    with pytest.raises(RuntimeError, match="boom"), \
            ShardWriter(f"{where.root}/f-%d.parquet", format="parquet", max_count=10,
                        **where.kwargs) as writer:
        for row in _rows(15):
            writer.write(row)
        raise RuntimeError("boom")
    assert [n for n in where.names() if n.endswith(".parquet")] == ["f-0.parquet"]
    with pytest.raises(InvalidArgument, match="do not fit the schema"), \
            ShardWriter(f"{where.root}/g-%d.parquet", format="parquet", **where.kwargs) as w:
        for row in [*_rows(3), *[{"id": "not an int", "text": 1, "tokens": [], "score": 0}]
                    * 20]:
            w.write(row)


def _object(where: Where, url: str) -> bytes:
    name = url.split("/root/", 1)[1]
    if where.scheme == "file":
        return (Path(url[len("file://"):])).read_bytes()
    assert where.emulator is not None
    return bytes(where.emulator.store.get(where.bucket, where.base + name).data)


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_cli_ls_index_and_verify_cover_parquet(where: Where, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from aioflux.torch import ShardWriter
    from tests.cli.calls import call

    endpoint = ("--endpoint", where.kwargs["endpoint"]) if where.kwargs else ()
    with ShardWriter(f"{where.root}/c-%d.parquet", format="parquet", max_count=40,
                     index=False, **where.kwargs) as writer:
        for row in _rows(100):
            writer.write(row)
    code, out, _ = call(capsys, "shards", "ls", where.root, *endpoint)
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[:1] + line.split()[2:3] for line in lines[:3]] == \
        [["40", "footer"], ["40", "footer"], ["20", "footer"]]
    assert lines[-1].split()[:1] == ["100"] and "3 shards" in lines[-1]
    code, out, _ = call(capsys, "shards", "index", where.root, *endpoint)
    assert code == 0 and "indexed 3 shards" in out
    assert {"_aioflux_manifest.jsonl", "_aioflux_parquet_footers.bin"} <= set(where.names())
    assert not [n for n in where.names() if n.endswith(".idx")]
    code, out, _ = call(capsys, "shards", "ls", where.root, *endpoint)
    assert "3 shards" in out.splitlines()[-1]  # the footers object is no shard
    code, out, _ = call(capsys, "shards", "verify", where.root, *endpoint)
    assert code == 0 and out.splitlines()[-1] == \
        "verified 3 shards, 100 samples in the good ones: all good"
    # A flipped byte in a page the writer wrote: its CRC finds it.
    good = _object(where, writer.shards[1])
    where.put("c-1.parquet", _flip_in_page(good, 1))
    code, out, _ = call(capsys, "shards", "verify", where.root, *endpoint)
    bad = [line for line in out.splitlines() if line.startswith("BAD")]
    assert code == 1 and len(bad) == 1 and "c-1.parquet: row group 0 does not decode" in bad[0]
    assert "CRC" in bad[0] or "checksum" in bad[0].lower()
    where.put("c-2.parquet", good[:-5])  # no footer
    code, out, _ = call(capsys, "shards", "ls", where.root, *endpoint)
    assert "damaged" in [line.split()[2] for line in out.splitlines()[:3]][2]


def test_a_manifest_entry_of_another_row_count_fails_the_read(tmp_path: Path) -> None:
    from aioflux.torch import ShardWriter
    where = Where("file", f"file://{tmp_path}/root", None)
    with ShardWriter(f"{where.root}/m-%d.parquet", format="parquet", max_count=20) as writer:
        for row in _rows(30):
            writer.write(row)
    manifest = Path(f"{tmp_path}/root/_aioflux_manifest.jsonl")
    # An entry of the same size that counts one row more (a stale manifest).
    manifest.write_text(manifest.read_text().replace('"samples":10', '"samples":11'))
    ds = dataset(where, tmp_path, order=Order(shuffle=False))
    assert ds.counts == [20, 11]
    with pytest.raises(ShardFormatError, match=r"m-1\.parquet: 10 rows, but the dataset was "
                       r"made with 11"):
        list(ds)


@pytest.mark.parametrize("between", [100, 3000, 6000, 12000])
def test_columns_apart_by_any_gap_read_only_their_chunks(tmp_path: Path, between: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The chunk between the two asked for takes about ``between`` bytes: both
    # sides of the 4 KiB the reads coalesce over, and of pyarrow's own 8 KiB.
    where = Where("file", f"file://{tmp_path}/root", None)
    rng = __import__("random").Random(between)
    t = pa.table({"a": list(range(50)),
                  "middle": [rng.randbytes(max(1, between // 50)) for _ in range(50)],
                  "b": [[i, -i] for i in range(50)]})
    where.put("gap.parquet", parquet(t, compression="none"))
    fetched = Fetched(monkeypatch)
    got = list(dataset(where, tmp_path, format=Parquet(columns=["a", "b"]),
                       order=Order(shuffle=False)))
    assert got == [{"a": i, "b": [i, -i]} for i in range(50)]
    size = len(parquet(t, compression="none"))
    md = pq.read_metadata(io.BytesIO(parquet(t, compression="none")))
    middle = md.row_group(0).column(1)
    lo = middle.dictionary_page_offset if middle.has_dictionary_page else \
        middle.data_page_offset
    hi = lo + middle.total_compressed_size
    spans = [(s, e) for _, s, e, _ in fetched.reads if e != size]
    # Row group 0's middle chunk is fetched only where it is small enough to
    # ride along between its neighbours (a gap of 4 KiB at most).
    assert any(s < hi and lo < e for s, e in spans) == (hi - lo <= 4096)


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_the_disk_cache_serves_later_epochs(where: Where, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    expected = seed(where)
    fetched = Fetched(monkeypatch)
    ds = dataset(where, tmp_path, format=Parquet(columns=["id", "tokens"]),
                 settings=where.settings(cache_dir=tmp_path / "cache"))
    first = [r["id"] for r in ds]
    reads = len(fetched.reads)
    assert sorted(first) == sorted(expected) and reads > len(ROWS)
    ds.set_epoch(1)
    again = dataset(where, tmp_path, format=Parquet(columns=["id", "tokens"]),
                    settings=where.settings(cache_dir=tmp_path / "cache"))
    again.set_epoch(1)
    assert sorted(r["id"] for r in again) == sorted(expected)
    assert len(fetched.reads) == reads  # every chunk from the cache, every footer from the node's


def test_spawned_workers_read_every_row_once_decoded(tmp_path: Path) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    expected = seed(where)
    ds = dataset(where, tmp_path, format=Parquet(columns=["id", "lang"]), order=Order(batch_size=5),
                 decode={"lang": str.upper})
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2, collate_fn=list,
                                         multiprocessing_context="spawn")
    rows = [row for batch in loader for row in batch]
    assert sorted(r["id"] for r in rows) == sorted(expected)
    assert all(r["lang"] == expected[r["id"]]["lang"].upper() for r in rows)
    with pytest.raises(InvalidArgument, match="decode applies to rows"):
        dataset(where, tmp_path, format=Parquet(output="columns"), decode=dict)


def test_publish_indexes_writes_the_rows_into_the_manifest(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    where = Where("file", f"file://{tmp_path}/root", None)
    seed(where)
    dataset(where, tmp_path, reads=ShardReads(publish_indexes=True))
    manifest = Path(f"{tmp_path}/root/_aioflux_manifest.jsonl").read_text().splitlines()
    assert len(manifest) == 4 and all('"format":"parquet"' in line for line in manifest[1:])
    reads: list[str] = []
    real = _parquet_read.read_footer

    async def footer(store: Any, info: Any) -> Any:
        reads.append(info.name)
        return await real(store, info)

    monkeypatch.setattr("aioflux.torch.data._shard_parquet.read_footer", footer)
    again = dataset(where, tmp_path / "other")  # another node: no footer cached
    assert again.counts == list(ROWS) and len(reads) == 1


def _reads(ds: ShardDataset) -> list[Any]:
    """No read of a file's end (a footer) went to the store: the footer cache
    holds every shard's (taken from the footers object)."""
    cache = ds._shards.parquet.footers  # type: ignore[union-attr]
    return [info.name for info in ds.shards if not cache.has(info)]


def test_a_stale_footer_in_the_footers_object_is_not_taken(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    from aioflux.torch import ShardWriter
    where = Where("file", f"file://{tmp_path}/root", None)
    with ShardWriter(f"{where.root}/s-%d.parquet", format="parquet", max_count=20) as writer:
        for row in _rows(40):
            writer.write(row)
    # s-1 rewritten by another tool: other bytes, other footer; the objects stay.
    other = pa.table({"id": list(range(100, 120)), "text": ["x"] * 20,
                      "tokens": [[1]] * 20, "score": [0.5] * 20})
    where.put("s-1.parquet", parquet(other), foreign=True)
    reads: list[str] = []
    real = _parquet_read.read_footer

    async def footer(store: Any, info: Any) -> Any:
        reads.append(info.name.rsplit("/", 1)[1])
        return await real(store, info)

    monkeypatch.setattr("aioflux.torch.data._shard_parquet.read_footer", footer)
    ds = dataset(where, tmp_path, order=Order(shuffle=False), format=Parquet(columns=["id"]))
    assert reads == ["s-1.parquet"]  # its footer by range; s-0's from the footers object
    assert [r["id"] for r in ds] == [*range(20), *range(100, 120)]


def _local(tmp_path: Path) -> Where:
    return Where("file", f"file://{tmp_path}/root", None)


@pytest.mark.parametrize("budget", [64 << 20, 100])
def test_top_level_names_with_a_dot_are_read_as_columns_of_their_own(
        tmp_path: Path, budget: int) -> None:
    # 100 bytes: every row group past the budget, read a column at a time.
    where = _local(tmp_path)
    t = pa.table({"id": list(range(40)), "a.b": [i * 10 for i in range(40)],
                  "a.c": [f"c{i}" for i in range(40)]})
    where.put("dots.parquet", parquet(t))
    reads = ShardReads(prefetch_bytes=budget)
    assert list(dataset(where, tmp_path, reads=reads, order=Order(shuffle=False))) \
        == t.to_pylist()
    only = dataset(where, tmp_path, reads=reads, order=Order(shuffle=False),
                   format=Parquet(columns=["a.c"], filters=[("a.b", ">=", 200)]))
    # Row group 0 (ids 0-15) holds no a.b >= 200: its statistics rule it out.
    assert only.counts == [40 - GROUP]
    assert [r["a.c"] for r in only] == [f"c{i}" for i in range(GROUP, 40)]


@pytest.mark.parametrize("output", ["arrow", "columns"])
def test_row_groups_on_both_sides_of_the_budget_give_one_schema(tmp_path: Path,
                                                                output: str) -> None:
    # Row group 0 is read whole, row group 1 (past the budget) a column at a
    # time; a batch holds rows of both.
    where = _local(tmp_path)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("text", pa.string(), metadata={"k": "v"})],
                       metadata={"made by": "test"})
    out = io.BytesIO()
    with pq.ParquetWriter(out, schema, write_page_checksum=True, compression="none") as w:
        w.write_table(pa.table({"id": range(50), "text": ["x"] * 50}, schema=schema))
        w.write_table(pa.table({"id": range(50, 100), "text": [f"{i:04d}" * 500
                                                               for i in range(50)]},
                               schema=schema))
    where.put("p.parquet", out.getvalue())
    whole = pq.read_table(io.BytesIO(out.getvalue()))
    batches = list(dataset(where, tmp_path, reads=ShardReads(prefetch_bytes=20_000),
                           order=Order(batch_size=100, shuffle=False),
                           format=Parquet(output=output)))
    assert len(batches) == 1
    if output == "arrow":
        assert batches[0].schema.equals(whole.schema, check_metadata=True)
        assert batches[0].to_pylist() == whole.to_pylist()
    else:
        assert batches[0] == whole.to_pydict()


def test_a_row_dict_filled_again_is_written_as_it_was(tmp_path: Path) -> None:
    from aioflux.torch import ShardWriter
    row: dict[str, Any] = {"tokens": [0, 0], "raw": bytearray(2), "vec": np.zeros(2),
                           "meta": {"tags": ["", ""]}}
    with ShardWriter(f"file://{tmp_path}/root/r-%d.parquet", format="parquet") as writer:
        for i in range(40):  # past the first block of rows taken into Arrow
            row["id"] = i
            row["tokens"][:] = [i, -i]
            row["raw"][:] = bytes([i, i + 1])
            row["vec"][:] = [i / 2, i]
            row["meta"]["tags"][:] = [f"t{i}", "u"]
            writer.write(row)
    got = pq.read_table(f"{tmp_path}/root/r-0.parquet").to_pylist()
    assert got == [{"tokens": [i, -i], "raw": bytes([i, i + 1]), "vec": [i / 2, i],
                    "meta": {"tags": [f"t{i}", "u"]}, "id": i} for i in range(40)]


@pytest.mark.parametrize(("at", "bad", "named"), [
    (1, {"id": 1, "text": "", "tokens": [], "score": 0, "extra": 1}, "extra 'extra'"),
    (40, {"id": 40, "text": ""}, "missing 'score', 'tokens'"),
])
def test_a_row_of_other_columns_is_refused_and_its_shard_not_published(
        tmp_path: Path, at: int, bad: dict[str, Any], named: str) -> None:
    from aioflux.torch import ShardWriter
    where = _local(tmp_path)
    with pytest.raises(InvalidArgument, match=rf"w-0\.parquet \(row {at}\): .*{named}"), \
            ShardWriter(f"{where.root}/w-%d.parquet", format="parquet") as writer:
        for row in [*_rows(at), bad, *_rows(5)]:
            writer.write(row)
    assert [n for n in where.names() if n.endswith(".parquet")] == []


def test_a_given_schema_s_nullable_columns_may_be_left_out(tmp_path: Path) -> None:
    # As pyarrow writes them: null. A column not nullable, or one more than
    # the schema's, is refused.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aioflux.torch import ShardWriter

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("label", pa.string())])
    with ShardWriter(f"{tmp_path}/s-%d.parquet", format="parquet", schema=schema) as writer:
        writer.write({"id": 1, "label": "one"})
        writer.write({"id": 2})
    assert pq.read_table(f"{tmp_path}/s-0.parquet").to_pylist() == [
        {"id": 1, "label": "one"}, {"id": 2, "label": None}]
    for bad in ({"label": "no id"}, {"id": 3, "label": "x", "more": 1}):
        with pytest.raises(InvalidArgument, match="its columns differ"), \
                ShardWriter(f"{tmp_path}/bad-%d.parquet", format="parquet",
                            schema=schema) as writer:
            writer.write(bad)


def test_an_empty_first_file_leaves_the_read_unit_a_row_group(tmp_path: Path) -> None:
    where = _local(tmp_path)
    full = table(1, 40)
    where.put("a-empty.parquet", parquet(full.slice(0, 0)))
    where.put("b.parquet", parquet(full))
    ds = dataset(where, tmp_path, reads=ShardReads(publish_indexes=True))
    assert ds.counts == [0, 40] and ds.samples_per_read == GROUP
    # Another node counts both from the manifest: only the empty file's
    # footer is read for the schema, then b's for the read unit.
    again = dataset(where, tmp_path / "other")
    assert again.counts == [0, 40] and again.samples_per_read == GROUP
    assert sorted(r["id"] for r in again) == list(range(1000, 1040))


def test_a_filter_on_a_column_the_files_lack_is_refused(tmp_path: Path) -> None:
    where = _local(tmp_path)
    seed(where)
    with pytest.raises(InvalidArgument, match=r"filters: .*part-0\.parquet has no column "
                       r"'lnag' \(it has id, text, score, lang, tokens\)"):
        dataset(where, tmp_path, format=Parquet(filters=[("lang", "==", "en"),
                                                         ("lnag", "==", "en")]))


@pytest.mark.parametrize("output", ["rows", "columns"])
def test_tensors_are_made_of_list_columns_of_numbers_only(tmp_path: Path, output: str) -> None:
    where = _local(tmp_path)
    t = pa.table({"tags": [["a", "b"], ["c"], None],
                  "tok": [[1, 2], [3], None],
                  "grid": [[[1.0, 2.0]], [[3.0, 4.0], [5.0, 6.0]], []]})
    where.put("t.parquet", parquet(t))
    got = list(dataset(where, tmp_path, order=Order(batch_size=3, shuffle=False),
                       format=Parquet(tensors=True, output=output)))
    rows = got if output == "rows" else [dict(zip(got[0], values, strict=True))
                                         for values in zip(*got[0].values(), strict=True)]
    assert [r["tags"] for r in rows] == [["a", "b"], ["c"], None]  # strings stay lists
    assert isinstance(rows[0]["tok"], torch.Tensor) and rows[2]["tok"] is None
    assert [r["tok"].tolist() for r in rows[:2]] == [[1, 2], [3]]
    assert [r["grid"].tolist() for r in rows] == t.column("grid").to_pylist()


@pytest.mark.parametrize(("values", "why"), [
    ([[1, 2], [3, None]], "a null inside a list"),
    ([[[1, 2]], [[3], [4, 5]]], "lists of different lengths in one row"),
])
@pytest.mark.parametrize("output", ["rows", "columns"])
def test_a_list_column_that_makes_no_tensor_is_refused_naming_file_and_column(
        tmp_path: Path, values: list[Any], why: str, output: str) -> None:
    where = _local(tmp_path)
    where.put("t.parquet", parquet(pa.table({"id": [0, 1], "tok": values})))
    ds = dataset(where, tmp_path, format=Parquet(tensors=True, output=output))
    with pytest.raises(InvalidArgument, match=rf"tensors=True: .*t\.parquet's column 'tok' "
                       rf"holds {why}"):
        list(ds)
    assert len(list(dataset(where, tmp_path, format=Parquet(output=output)))) >= 1


def test_a_run_is_refused_only_for_its_own_rows(tmp_path: Path) -> None:
    rows = ParquetRows("t", columns=None, filters=None, output="rows", tensors=True,
                       footer_dir=tmp_path)
    whole = pa.table({"tok": [[1], [2, None], [3]]})
    rows.check_tensors(Picked(whole, np.array([2, 0], dtype=np.int64)), "mem://t")
    with pytest.raises(InvalidArgument, match="mem://t's column 'tok'"):
        rows.check_tensors(Picked(whole, np.array([1], dtype=np.int64)), "mem://t")
