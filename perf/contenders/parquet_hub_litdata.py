"""parquet contender: litdata on the fake Hub (``_hub_served``,
``HF_ENDPOINT`` at it, read through huggingface_hub's ``HfFileSystem``):
``index_parquet_dataset("hf://datasets/perf/parquet/data", cache_dir)``
(each file's footer by range) and ``StreamingDataset(...,
item_loader=ParquetLoader(), index_path=cache_dir)`` through a
``StreamingDataLoader``, rows as litdata gives them.

Workers are spawned: polars' thread pool does not survive a fork (litdata
says so), the way its users run it. The clock runs from
``index_parquet_dataset`` (a fresh cache directory) to the last row;
``first_row_s`` is the time to the first batch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any

from _contender import Manifest, Stopwatch, load, report
from _hub_served import REPO, served_hub

URL = f"hf://datasets/{REPO}/data"


def rows_of(batch: list[Any]) -> int:
    return len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> dict[str, Any]:
    home = tempfile.mkdtemp(prefix="aioflux-perf-litdata-")
    os.environ["HF_HOME"] = os.path.join(home, "hf")
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    cache = os.path.join(home, "cache")
    os.makedirs(cache)
    try:
        with served_hub(manifest, args.prefix):
            # imported here: huggingface_hub reads HF_ENDPOINT at import
            from litdata import StreamingDataLoader, StreamingDataset, index_parquet_dataset
            from litdata.streaming.item_loader import ParquetLoader

            extra: dict[str, Any] = {}
            if args.workers:
                extra["multiprocessing_context"] = "spawn"
            items = 0
            first = None
            with Stopwatch() as watch:
                start = time.perf_counter()
                index_parquet_dataset(URL, cache_dir=cache)
                ds = StreamingDataset(
                    URL,
                    item_loader=ParquetLoader(),
                    index_path=cache,
                    cache_dir=os.path.join(home, "chunks"),
                )
                loader = StreamingDataLoader(
                    ds, batch_size=args.batch, num_workers=args.workers, collate_fn=rows_of, **extra
                )
                for count in loader:
                    if first is None:
                        first = time.perf_counter() - start
                    items += count
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {"watch": watch, "items": items, "first_row_s": round(first or 0.0, 4)}


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    found = main(manifest, args)
    watch = found.pop("watch")
    items = found.pop("items")
    rate = round(items / watch.seconds) if watch.seconds else 0
    report(watch, nbytes=0, items=items, workers=args.workers, rows_s=rate, **found)
