"""parquet: one epoch of Parquet files over plain http:// from nginx, rows as dicts.

``files`` Parquet files (40; 8 with --quick) of ``groups`` row groups of
``rows`` rows (8 x 250): id, text (``text_min``-``text_max`` characters of
words), score, lang and a list of token ids, snappy, page CRCs written
(``perf.seed.ParquetRows``), mirrored from the emulator into a local
directory once (untimed) and served by nginx behind the shaper (20 ms,
100 MB/s a connection). Read by aioflux's ``ShardDataset(format="parquet")``
over the list of URLs at 0 and 2 DataLoader workers (the machine has 2
cores), and by pyarrow's dataset API over fsspec's HTTP filesystem. Each
contender's clock runs from making the dataset (footers included: a fresh
``index_dir``) to the last row. ``aioflux-score-w0`` and
``pyarrow-fsspec-score`` read one column of five; aioflux's reports the
bytes it fetched against that column's compressed chunks
(``bytes_ratio``, footers left out).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ParquetRows

__all__ = ["plan"]

FOLDER = "parquet/"


def _aioflux_ready() -> str | None:
    return project_imports("import aioflux.torch, pyarrow.parquet, tests.nginx; "
                           "tests.nginx.install_nginx()")


def _pyarrow_ready() -> str | None:
    return project_imports("import fsspec, aiohttp, pyarrow.dataset, tests.nginx; "
                           "tests.nginx.install_nginx()")


def plan(options: Options) -> Plan:
    files = options.get("files", 8 if options.quick else 40)
    groups = options.get("groups", 8)
    rows = options.get("rows", 250)
    batch = str(options.get("batch", 64))
    data = ParquetRows(f"{FOLDER}part-", files, groups, rows,
                       options.get("text_min", 200), options.get("text_max", 2000))
    common = ("--batch", batch, "--prefix", FOLDER)
    made = (f"ShardDataset([http://127.0.0.1:PORT/{FOLDER}part-NNNNNN.parquet, ...], "
            f"batch_size={batch}, index_dir=fresh) made inside the timed region")
    contenders = [
        Contender(f"aioflux-w{w}", "parquet_aioflux.py", None, ("--workers", w, *common),
                  note=f"{made}, every column, DataLoader(num_workers={w})",
                  available=_aioflux_ready)
        for w in ("0", "2")]
    contenders.append(Contender(
        "aioflux-score-w0", "parquet_aioflux.py", None,
        ("--workers", "0", "--columns", "score", *common),
        note=f"{made}, columns=['score'], DataLoader(num_workers=0)",
        available=_aioflux_ready))
    contenders.append(Contender(
        "pyarrow-fsspec", "parquet_pyarrow_fsspec.py", None, common,
        note="pyarrow.dataset.dataset(URLs, filesystem=PyFileSystem(FSSpecHandler("
             f"fsspec HTTPFileSystem)), format='parquet').to_batches(batch_size={batch}), "
             "each batch's to_pylist(): every column",
        available=_pyarrow_ready))
    contenders.append(Contender(
        "pyarrow-fsspec-score", "parquet_pyarrow_fsspec.py", None,
        ("--columns", "score", *common),
        note="as pyarrow-fsspec, columns=['score']", available=_pyarrow_ready))
    total = files * groups * rows
    return Plan(
        name="parquet",
        description=f"one epoch of {files} Parquet files x {groups} row groups x {rows} rows "
                    f"({data.total_bytes / 2**20:.0f} MiB, snappy) over http:// from nginx as "
                    "rows (dicts), 0 and 2 DataLoader workers, and one column of five",
        bucket="perf-parquet",
        objects=[data],
        contenders=contenders,
        baseline="aioflux-w0",
        targets=[Target("pyarrow-fsspec", None),
                 Target("pyarrow-fsspec-score", None, "aioflux-score-w0")],
        figures=[("first_row_s", "first row (s)"), ("bytes_ratio", "bytes / column chunks")],
        notes=["the files are mirrored from the emulator into a local directory once "
               "(untimed) and served by nginx on loopback behind perf/shaper.py (the "
               "emulator's network: 20 ms, 100 MB/s a connection)",
               "aioflux: each file's footer by range (the last 64 KiB), then each row "
               "group's asked-for column chunks by ranged GETs pinned by If-Match, pyarrow "
               "decoding them with page CRCs verified; the epoch order is shuffled (files, "
               "row groups within a window, rows within a row group) and resumable",
               "pyarrow-fsspec reads in file order (no shuffle, resume or rank split) with "
               "its own read-ahead and threads; it is the common way to read Parquet "
               "over HTTP without aioflux",
               "HF datasets streaming and litdata need the fake Hub (issue 63 item 4): not "
               "in this run"],
        timeout_s=1200.0,
        expect_items=total,
        seed_concurrency=8,
        warm_read=False,
    )
