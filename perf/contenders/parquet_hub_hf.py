"""parquet contender: HF ``datasets`` streaming on the fake Hub
(``_hub_served``, ``HF_ENDPOINT`` at it): ``load_dataset("perf/parquet",
split="train", streaming=True)`` through a DataLoader (its IterableDataset
is a torch one: workers split the files), rows as dicts.

The clock runs from ``load_dataset`` (the repo's info, its tree, the data
files resolved; a fresh ``HF_HOME``) to the last row; ``first_row_s`` is
the time to the first batch.
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


def rows_of(batch: list[dict[str, Any]]) -> int:
    return len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> dict[str, Any]:
    home = tempfile.mkdtemp(prefix="aioflux-perf-hf-home-")
    os.environ["HF_HOME"] = home
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    try:
        with served_hub(manifest, args.prefix):
            # imported here: huggingface_hub reads HF_ENDPOINT at import
            import torch.utils.data
            from datasets import load_dataset

            items = 0
            first = None
            with Stopwatch() as watch:
                start = time.perf_counter()
                ds = load_dataset(REPO, split="train", streaming=True)
                loader = torch.utils.data.DataLoader(
                    ds, batch_size=args.batch, num_workers=args.workers, collate_fn=rows_of
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
