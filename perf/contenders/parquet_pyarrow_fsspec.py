"""parquet contender: pyarrow's dataset API over fsspec's HTTP filesystem
(``pyarrow.dataset.dataset(urls, filesystem=PyFileSystem(FSSpecHandler(
HTTPFileSystem())), format="parquet")``), the same http:// URLs, rows as
dicts (``RecordBatch.to_pylist``) a batch at a time, in the order pyarrow
reads them (its own threads; no shuffle, no resume, no rank split).

The clock runs from making the dataset (fsspec's HEADs, pyarrow's footer
reads) to the last row. ``--columns`` reads only those columns.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _contender import Manifest, Stopwatch, load, report
from _http_served import served


def main(manifest: Manifest, args: argparse.Namespace) -> dict[str, Any]:
    import fsspec
    import pyarrow.dataset as pads
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    columns = args.columns.split(",") if args.columns else None
    with served(manifest, args.prefix) as urls:
        items = 0
        first = None
        with Stopwatch() as watch:
            start = time.perf_counter()
            fs = PyFileSystem(FSSpecHandler(fsspec.filesystem("http")))
            data = pads.dataset(urls, filesystem=fs, format="parquet")
            for batch in data.to_batches(columns=columns, batch_size=args.batch):
                rows = batch.to_pylist()
                if first is None and rows:
                    first = time.perf_counter() - start
                items += len(rows)
    return {"watch": watch, "items": items, "first_row_s": round(first or 0.0, 4)}


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    p.add_argument("--columns", default="")
    args = p.parse_args(rest)
    found = main(manifest, args)
    watch = found.pop("watch")
    items = found.pop("items")
    report(watch, nbytes=0, items=items, workers=0, **found)
