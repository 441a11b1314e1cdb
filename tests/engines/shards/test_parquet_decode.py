"""A row group decodes into jemalloc's pool where pyarrow has it (mimalloc's
first decode after torch's import often pays tens of milliseconds of system
time), with the same rows and the same column projection, list columns
included, as ``ParquetFile.read_row_group``; a footer counts a row group's
column chunks' compressed bytes as the file's metadata does."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioflux._engines.shards._parquet import footer_of_tail, read_row_group


def _file() -> bytes:
    out = io.BytesIO()
    table = pa.table({
        "id": pa.array(range(300), pa.int64()),
        "text": [f"row {i} " * (i % 7) for i in range(300)],
        "tokens": [list(range(i % 5)) for i in range(300)],
        "score": [i / 3 for i in range(300)],
    })
    pq.write_table(table, out, row_group_size=100, write_page_checksum=True)
    return out.getvalue()


@pytest.mark.parametrize("columns", [None, ["tokens"], ["score", "id"], ["text", "tokens"]])
def test_a_row_group_decodes_as_parquet_file_does(columns: list[str] | None) -> None:
    data = _file()
    footer = footer_of_tail(data, len(data), "mem://f.parquet")
    assert not isinstance(footer, int)
    for group in range(3):
        got = read_row_group(pa.BufferReader(data), footer, group, columns)
        wanted = pq.ParquetFile(pa.BufferReader(data)).read_row_group(group, columns=columns)
        assert got.equals(wanted)
        assert got.column_names == (columns or ["id", "text", "tokens", "score"])


def test_a_row_group_is_allocated_from_jemalloc_where_pyarrow_has_it() -> None:
    data = _file()
    footer = footer_of_tail(data, len(data), "mem://f.parquet")
    assert not isinstance(footer, int)
    if "jemalloc" not in pa.supported_memory_backends():
        pool = pa.default_memory_pool()  # this pyarrow decodes into its default
    else:
        pool = pa.jemalloc_memory_pool()
    before = pool.bytes_allocated()
    table = read_row_group(pa.BufferReader(data), footer, 0, None)
    assert pool.bytes_allocated() - before >= table.nbytes


@pytest.mark.parametrize("columns", [None, ["tokens"], ["score", "id"]])
def test_chunk_bytes_are_the_column_chunks_compressed_sizes(columns: list[str] | None) -> None:
    data = _file()
    footer = footer_of_tail(data, len(data), "mem://f.parquet")
    assert not isinstance(footer, int)
    metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    names = [metadata.schema.column(c).path.split(".")[0] for c in range(metadata.num_columns)]
    for group in range(3):
        rg = metadata.row_group(group)
        wanted = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns)
                     if columns is None or names[c] in columns)
        assert footer.chunk_bytes(group, columns) == wanted
        assert footer.chunk_bytes(group, columns) == wanted  # kept, the same
    assert footer.chunk_bytes(0, ["id"]) != footer.chunk_bytes(0, ["text"])


def test_each_top_level_column_has_its_leaves_whatever_dots_its_name_holds() -> None:
    # Dotted paths would take "a.b" and "a.c" for one struct column "a".
    table = pa.table({
        "id": pa.array([1, 2], pa.int64()),
        "a.b": pa.array([10, 20], pa.int64()),
        "s": pa.array([{"x": 1, "y": "p"}, None],
                      pa.struct([("x", pa.int32()), ("y", pa.string())])),
        "a.c": ["c1", "c2"],
        "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())),
        "l": pa.array([[{"p": 1, "q": [1.0]}], []],
                      pa.list_(pa.struct([("p", pa.int8()), ("q", pa.list_(pa.float32()))]))),
    })
    out = io.BytesIO()
    pq.write_table(table, out)
    data = out.getvalue()
    footer = footer_of_tail(data, len(data), "mem://f.parquet")
    assert not isinstance(footer, int)
    assert footer.leaves == {"id": (0,), "a.b": (1,), "s": (2, 3), "a.c": (4,), "m": (5, 6),
                             "l": (7, 8)}
    for columns in (["a.b"], ["a.c", "id"], ["s", "a.b"], ["m", "l"]):
        got = read_row_group(pa.BufferReader(data), footer, 0, columns)
        assert got.equals(table.select(columns))
