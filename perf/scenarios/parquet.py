"""parquet: one epoch of Parquet files on a fake Hugging Face Hub, rows as dicts.

``files`` Parquet files (40; 8 with --quick) of ``groups`` row groups of
``rows`` rows (8 x 1,250: 400k rows): id, text (``text_min``-``text_max``
characters of words), score, lang and a list of token ids, snappy, page
CRCs written (``perf.seed.ParquetRows``), mirrored from the emulator into a
local directory once (untimed) and pushed into the dataset repo
``perf/parquet`` of ``aioflux.testing.FakeHub``, run as a process of its
own; its Hub origin and its CDN (where each resolve redirects) each behind
``perf/shaper.py`` (20 ms, 100 MB/s a connection), ``HF_ENDPOINT`` at the
shaped Hub (``perf/contenders/_hub_served.py``).

Contenders, each clocked from making its dataset (a fresh cache: the
revision, the listing and the footers included) to the last row:

- aioflux: ``ShardDataset.from_prefix("hf://datasets/perf/parquet/data/",
  format="parquet")`` at 0 and 4 DataLoader workers; one column of five
  (the CDN's bytes against that column's compressed chunks); and
  ``ShardMapDataset[i]`` at random rows (its p50, each file's redirect
  known);
- HF ``datasets`` streaming (``load_dataset("perf/parquet", streaming=True)``)
  at 0 and 4 workers;
- litdata (``index_parquet_dataset`` + ``ParquetLoader``) at 0 and 4
  (spawned) workers, in its own environment;
- pyarrow's dataset API over aioflux's fsspec face (``aioflux-hf://``),
  every column and one.

The targets are issue 63's: rows/s >= 3x HF streaming and >= 1.5x litdata
at 0 workers, >= 2x and >= 1.5x at 4; one column of five fetched with at
most 1.2x its chunks' bytes; the first row (after the dataset is made) and
a random row within two round trips plus a row group's transfer.
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Limit, Options, Plan, Target
from perf.seed import ParquetRows

__all__ = ["plan"]

FOLDER = "parquet/"
RTT_S = 0.020  # the shaper's time to first byte
LINK_BPS = 100e6  # and one connection's bandwidth


def _ready(*modules: str) -> str | None:
    return project_imports(f"import aioflux.testing, {', '.join(modules)}")


def plan(options: Options) -> Plan:
    files = options.get("files", 8 if options.quick else 40)
    groups = options.get("groups", 8)
    rows = options.get("rows", 1250)
    picks = str(options.get("random", 200))
    batch = str(options.get("batch", 64))
    data = ParquetRows(
        f"{FOLDER}part-",
        files,
        groups,
        rows,
        options.get("text_min", 200),
        options.get("text_max", 2000),
    )
    common = ("--batch", batch, "--prefix", FOLDER)
    url = "hf://datasets/perf/parquet/data/"
    made = (
        f"ShardDataset.from_prefix({url!r}, format='parquet', order=Order(batch_size={batch}), "
        "reads=ShardReads(index_dir=fresh))"
    )
    aioflux = lambda: _ready("aioflux.torch", "pyarrow.parquet")  # noqa: E731
    hf = lambda: _ready("datasets", "torch")  # noqa: E731
    arrow = lambda: _ready("aioflux.fsspec", "pyarrow.dataset")  # noqa: E731
    contenders = [
        Contender(
            f"aioflux-w{w}",
            "parquet_hub_aioflux.py",
            None,
            ("--workers", w, *common),
            note=f"{made}, every column, DataLoader(num_workers={w})",
            available=aioflux,
        )
        for w in ("0", "4")
    ]
    contenders.append(
        Contender(
            "aioflux-score-w0",
            "parquet_hub_aioflux.py",
            None,
            ("--workers", "0", "--columns", "score", *common),
            note=f"{made}, columns=['score'], DataLoader(num_workers=0)",
            available=aioflux,
        )
    )
    contenders.append(
        Contender(
            "aioflux-random",
            "parquet_hub_aioflux.py",
            None,
            ("--random", picks, *common),
            note=f"ShardMapDataset.from_prefix({url!r}, format='parquet') made untimed, a row of "
            f"every file read first (untimed), then ds[i] at {picks} seeded random rows "
            "one at a time (the time is theirs; its items are the rows read)",
            available=aioflux,
        )
    )
    for w in ("0", "4"):
        contenders.append(
            Contender(
                f"hf-streaming-w{w}",
                "parquet_hub_hf.py",
                None,
                ("--workers", w, *common),
                note="datasets.load_dataset('perf/parquet', split='train', streaming=True) "
                f"(HF_ENDPOINT, a fresh HF_HOME), DataLoader(num_workers={w})",
                available=hf,
            )
        )
    for w in ("0", "4"):
        contenders.append(
            Contender(
                f"litdata-w{w}",
                "parquet_hub_litdata.py",
                "litdata-parquet",
                ("--workers", w, *common),
                note="litdata index_parquet_dataset('hf://datasets/perf/parquet/data', cache) + "
                "StreamingDataset(item_loader=ParquetLoader(), index_path=cache), "
                f"StreamingDataLoader(num_workers={w}"
                + (", multiprocessing_context='spawn')" if w != "0" else ")"),
            )
        )
    contenders.append(
        Contender(
            "pyarrow-aioflux-hf",
            "parquet_hub_pyarrow.py",
            None,
            common,
            note="pyarrow.dataset.dataset('datasets/perf/parquet/data/', filesystem=PyFileSystem("
            "FSSpecHandler(AiofluxFileSystem('hf'))), format='parquet')"
            f".to_batches(batch_size={batch}), each batch's to_pylist(): every column",
            available=arrow,
        )
    )
    contenders.append(
        Contender(
            "pyarrow-aioflux-hf-score",
            "parquet_hub_pyarrow.py",
            None,
            ("--columns", "score", *common),
            note="as pyarrow-aioflux-hf, columns=['score']",
            available=arrow,
        )
    )
    # A row group's compressed bytes at one connection's bandwidth: the
    # transfer beside the two round trips the first and random rows may take.
    group_s = max(data.sizes()) / groups / LINK_BPS
    bound = round(2 * RTT_S + group_s, 4)
    return Plan(
        name="parquet",
        description=f"one epoch of {files} Parquet files x {groups} row groups x {rows} rows "
        f"({data.total_bytes / 2**20:.0f} MiB, snappy) on a fake Hugging Face "
        "Hub (hf://) as rows (dicts), 0 and 4 DataLoader workers, one column "
        "of five, and random rows",
        bucket="perf-parquet",
        objects=[data],
        contenders=contenders,
        baseline="aioflux-w0",
        targets=[
            Target("hf-streaming-w0", 3.0),
            Target("litdata-w0", 1.5),
            Target("hf-streaming-w4", 2.0, "aioflux-w4"),
            Target("litdata-w4", 1.5, "aioflux-w4"),
            Target("pyarrow-aioflux-hf", None),
            Target("pyarrow-aioflux-hf-score", None, "aioflux-score-w0"),
        ],
        limits=[
            Limit(
                "aioflux-score-w0",
                "bytes_ratio",
                "<=",
                1.2,
                "x",
                "one column of five: CDN bytes / its chunks",
            ),
            Limit(
                "aioflux-w0",
                "first_after_made_s",
                "<=",
                bound,
                "s",
                "first row after the dataset is made (2 RTT + a row group)",
            ),
            Limit(
                "aioflux-random",
                "random_p50_ms",
                "<=",
                round(bound * 1000, 1),
                "ms",
                "random row p50 (2 RTT + a row group)",
            ),
        ],
        figures=[
            ("rows_s", "rows/s"),
            ("first_row_s", "first row (s)"),
            ("first_after_made_s", "first row after made (s)"),
            ("fetched_bytes", "CDN bytes"),
            ("bytes_ratio", "bytes / column chunks"),
            ("random_p50_ms", "random p50 (ms)"),
            ("random_p90_ms", "random p90 (ms)"),
        ],
        notes=[
            "the files are mirrored from the emulator into a local directory once "
            "(untimed) and pushed into a fake Hub (aioflux.testing.FakeHub, a process of "
            "its own on loopback) whose resolve answers 302 to its CDN origin; each "
            "origin is behind perf/shaper.py (20 ms to first byte, 100 MB/s a connection)",
            "aioflux: the revision resolved to a commit once, the tree listed, each "
            "file's footer by range, then each row group's asked-for column chunks by "
            "ranged GETs at that commit, pyarrow decoding them with page CRCs verified; "
            "the epoch order is shuffled (files, row groups within a window, rows within "
            "a row group) and resumable; the others read in file order",
            "CDN bytes: the fake Hub's own count of file bytes its CDN answered with (a "
            "range's length); bytes_ratio leaves out what it answered while the dataset "
            "was made (the footers)",
            f"the first-row and random-row bounds: 2 x {RTT_S * 1000:.0f} ms + the largest "
            f"row group ({max(data.sizes()) / groups / 2**20:.2f} MiB) at "
            f"{LINK_BPS / 1e6:.0f} MB/s = {bound * 1000:.1f} ms",
            "aioflux-random's items are the rows it read, not an epoch",
        ],
        timeout_s=1200.0,
        seed_concurrency=8,
        warm_read=False,
    )
