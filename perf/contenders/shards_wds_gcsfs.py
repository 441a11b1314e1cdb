"""shards_tar contender: webdataset's ``WebDataset`` over gcsfs, in a DataLoader.

``wds.WebDataset(["gs://BUCKET/...tar", ...], shardshuffle=SHARDS,
workersplitter=split_by_worker)``: shards shuffled, split across
DataLoader workers, each streamed front to back through its tar expander
and ``group_by_keys``. webdataset opens ``gs://`` with ``gsutil cat`` (a
subprocess per shard; no gsutil here); its ``gopen_schemes`` dispatch
table is where a scheme's opener is chosen, and this script registers
there an opener that returns ``GCSFileSystem(endpoint_url=emulator,
token="anon").open(url, "rb")`` at gcsfs's defaults (readahead cache of
5 MiB blocks), one file system per process (each DataLoader worker makes
its own). No listing: the shard URLs are the manifest's.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

# Must be set before gcsfs is imported: it picks its class at import time
# (see read_gcsfs.py: the extended file system's gRPC probe waits 60 s).
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

import torch.utils.data
import webdataset as wds
from _contender import Manifest, Stopwatch, load, report
from gcsfs.core import GCSFileSystem

_fs: dict[int, GCSFileSystem] = {}


def gcsfs_open(url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> Any:
    """webdataset's opener signature; one GCSFileSystem per process."""
    fs = _fs.get(os.getpid())
    if fs is None:
        fs = _fs[os.getpid()] = GCSFileSystem(project="perf", token="anon",
                                              endpoint_url=os.environ["STORAGE_EMULATOR_HOST"])
    return fs.open(url, mode)


def tar_batch(batch: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(len(s["jpg"]) + len(s["cls"]) for s in batch), len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    wds.gopen_schemes["gs"] = gcsfs_open
    urls = [f"gs://{manifest.bucket}/{name}" for name in manifest.names
            if name.startswith(args.prefix)]
    ds = wds.WebDataset(urls, shardshuffle=len(urls), workersplitter=wds.split_by_worker)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                         collate_fn=tar_batch)
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
    report(watch, nbytes=nbytes, items=items, workers=args.workers)
