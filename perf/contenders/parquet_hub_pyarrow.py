"""parquet contender: pyarrow's dataset API over aioflux's fsspec face of
the Hub (``aioflux-hf://``, the fake Hub of ``_hub_served``):
``pyarrow.dataset.dataset("datasets/perf/parquet/data/",
filesystem=PyFileSystem(FSSpecHandler(AiofluxFileSystem("hf"))),
format="parquet")`` (the class ``fsspec.filesystem("aioflux-hf")`` makes,
named directly: an editable install made before the entry point has none),
rows as dicts (``RecordBatch.to_pylist``) a batch at a time, in the order
pyarrow reads them (its own threads and read-ahead; no shuffle, resume or
rank split).

The clock runs from making the filesystem and the dataset (the listing,
pyarrow's footer reads) to the last row. ``--columns`` reads only those
columns; the CDN's byte count over the run is reported
(``fetched_bytes``, footers included).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _contender import Manifest, Stopwatch, load, report
from _hub_served import REPO, served_hub


def main(manifest: Manifest, args: argparse.Namespace) -> dict[str, Any]:
    columns = args.columns.split(",") if args.columns else None
    with served_hub(manifest, args.prefix) as hub:
        import pyarrow.dataset as pads
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        from aioflux.fsspec import AiofluxFileSystem

        items = 0
        first = None
        before = hub.cdn_bytes()
        with Stopwatch() as watch:
            start = time.perf_counter()
            fs = PyFileSystem(FSSpecHandler(AiofluxFileSystem("hf", skip_instance_cache=True)))
            data = pads.dataset(f"datasets/{REPO}/data/", filesystem=fs, format="parquet")
            for batch in data.to_batches(columns=columns, batch_size=args.batch):
                rows = batch.to_pylist()
                if first is None and rows:
                    first = time.perf_counter() - start
                items += len(rows)
        fetched = hub.cdn_bytes() - before
    return {
        "watch": watch,
        "items": items,
        "first_row_s": round(first or 0.0, 4),
        "fetched_bytes": fetched,
    }


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
    rate = round(items / watch.seconds) if watch.seconds else 0
    report(watch, nbytes=0, items=items, workers=0, rows_s=rate, **found)
