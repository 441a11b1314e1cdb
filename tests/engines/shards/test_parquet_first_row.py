"""The first row of a Parquet dataset waits on no import: pyarrow looks for
pandas at ``pa.array`` of a list (and ``pa.table`` of a dict), and a
process's first look imports it, seconds of CPU on a busy host, in each
DataLoader worker too; numpy's ``unique`` imports ``numpy.ma`` (6 ms).
Run in a fresh interpreter, whose modules are its own.
Nor does it wait on the rest of its run's rows being picked, nor share the
loop and the GIL with the window's reads until its first slice is picked."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioflux._engines.shards import _parquet_read
from aioflux._engines.shards._parquet_read import Kept, kept_groups, read_footer, read_row_runs
from aioflux._engines.shards._spans import Run
from aioflux.testing import MemoryStore
from aioflux.torch import Order, ShardDataset, ShardReads
from aioflux.torch.data import _shard_parquet

_SCRIPT = textwrap.dedent(
    """
    import sys
    from aioflux.torch import Order, ShardDataset, ShardReads

    ds = ShardDataset(sys.argv[1], format="parquet", order=Order(seed=1),
                      reads=ShardReads(index_dir=sys.argv[2]))
    rows = iter(ds)
    first = next(rows)
    print(first["id"], "pandas" in sys.modules, "numpy.ma" in sys.modules)
    """
)


def test_the_first_row_imports_neither_pandas_nor_numpy_ma(tmp_path: Path) -> None:
    # pandas is in the test extra: the pyarrow call that imports it would here.
    __import__("pandas")
    path = tmp_path / "part-0.parquet"
    table = pa.table(
        {"id": pa.array(range(64), pa.int64()), "text": [f"row {i}" for i in range(64)]}
    )
    pq.write_table(table, path, row_group_size=16, write_page_checksum=True)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, path.as_uri(), str(tmp_path / "idx")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    row, pandas, numpy_ma = done.stdout.split()
    assert 0 <= int(row) < 64
    assert (pandas, numpy_ma) == ("False", "False")


def test_the_first_row_goes_out_before_the_rest_of_its_run_is_picked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run is a row group of 1,024 rows: its rows are picked out of the
    # decoded row group a slice at a time, the first slice before the first
    # row is handed out, and in the epoch's order whatever the slicing.
    # The first run is picked in the thread that takes the rows; a later
    # one is taken whole on the loop's, which a loaded machine may have
    # done by then: only the first run's picks are counted.
    picked: list[int] = []
    real = _parquet_read._indices
    taker = threading.get_ident()

    def counted(rows: Any) -> Any:
        if threading.get_ident() == taker:
            picked.append(len(rows))
        return real(rows)

    monkeypatch.setattr(_parquet_read, "_indices", counted)
    path = tmp_path / "part-0.parquet"
    pq.write_table(
        pa.table({"id": pa.array(range(2048), pa.int64())}),
        path,
        row_group_size=1024,
        write_page_checksum=True,
    )
    ds = ShardDataset(
        path.as_uri(), format="parquet", order=Order(seed=1),
        reads=ShardReads(index_dir=tmp_path / "idx")
    )
    rows = iter(ds)
    first = next(rows)
    assert sum(picked) == _shard_parquet._FIRST_ROWS
    assert [first["id"], *(row["id"] for row in rows)] == ds.epoch_order(0)


async def _three_files(rows: int) -> tuple[MemoryStore, list[Any], list[int], Any]:
    """A store of 3 one-row-group Parquet files of ``rows`` rows, their
    infos, the shards whose footers were asked for, and ``kept_of``."""
    store = MemoryStore()
    await store.create_bucket("bkt")
    for k in range(3):
        out = io.BytesIO()
        pq.write_table(pa.table({"id": pa.array(range(k * rows, (k + 1) * rows), pa.int64())}),
                       out, write_page_checksum=True)
        await store.write("bkt", f"p/{k}.parquet", out.getvalue())
    infos = [info async for info in store.list_objects("bkt", "p/")]
    asked: list[int] = []

    async def kept_of(k: int) -> Kept:
        asked.append(k)
        return kept_groups(await read_footer(store, infos[k]), None)

    return store, infos, asked, kept_of


async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


@pytest.mark.parametrize("first_out", [True, False])
async def test_the_window_waits_until_the_first_slice_is_picked(first_out: bool) -> None:
    # The window's work (cutting runs, loading footers, starting reads) runs
    # on the loop; for a consumer in another thread it would share the GIL
    # with the first rows being picked. Counted in loop turns, not time.
    store, infos, asked, kept_of = await _three_files(100)
    runs = [Run(k, tuple(range(100))) for k in range(3)]
    agen = read_row_runs(store, infos, kept_of, runs, columns=None, limit=4,
                         max_bytes=1 << 20, first_out=first_out)
    _, first = await anext(agen)
    following = asyncio.ensure_future(anext(agen))
    await _turns(50)
    if not first_out:  # without it the window starts at once
        assert asked[:2] == [0, 1]
        await following  # its read under way: the generator closes after it
        await agen.aclose()
        return
    assert asked == [0] and not following.done()
    head = first.slice(0, 64).column("id").to_pylist()
    await _turns(50)
    assert asked[:2] == [0, 1]  # the window went on
    run, table = await following
    assert (run.shard, table.column("id").to_pylist()) == (1, list(range(100, 200)))
    assert head + first.slice(64, 36).column("id").to_pylist() == list(range(100))
    await agen.aclose()
