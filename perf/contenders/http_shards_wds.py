"""http_shards contender: webdataset's ``WebDataset`` over the same http://
URLs (served by nginx, see ``_http_served.py``), in a DataLoader.

``wds.WebDataset(urls, shardshuffle=SHARDS, workersplitter=split_by_worker)``
at its defaults: webdataset opens http(s) URLs with its own handler (a
``curl`` subprocess per shard, streamed front to back through its tar
expander and ``group_by_keys``). CPU per sample counts the curl children.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch.utils.data
import webdataset as wds
from _contender import Manifest, Stopwatch, load, report
from _http_served import served


def tar_batch(batch: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(len(s["jpg"]) + len(s["cls"]) for s in batch), len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    with served(manifest, args.prefix) as urls:
        ds = wds.WebDataset(urls, shardshuffle=len(urls), workersplitter=wds.split_by_worker)
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch,
                                             num_workers=args.workers, collate_fn=tar_batch)
        nbytes = items = 0
        with Stopwatch() as watch:
            for size, count in loader:
                nbytes += size
                items += count
    return watch, nbytes, items


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    cpu = watch.cpu_user_s + watch.cpu_sys_s
    report(watch, nbytes=nbytes, items=items, workers=args.workers,
           cpu_us_per_sample=round(cpu / max(items, 1) * 1e6, 1))
