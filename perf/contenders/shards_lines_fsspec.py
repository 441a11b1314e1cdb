"""shards_lines contender: fsspec ``open()`` and line iteration, in a DataLoader.

``--fs gcs``: gcsfs's ``GCSFileSystem(endpoint_url=emulator, token="anon")``
(gcsfs venv); ``--fs s3``: s3fs's ``S3FileSystem(endpoint_url=S3 face,
path-style addressing, region us-east-1)`` with the harness's dummy
credentials (s3fs venv). Each DataLoader worker takes every n-th shard
(all of them with no workers), in a shuffled shard order, opens it with
``fs.open(path, "rt")`` at the file system's defaults (readahead cache;
gcsfs's block is 5 MiB, s3fs's 50 MiB) and iterates its lines, each with
its newline stripped: the JSONL idiom. (Binary ``for line in f`` is far
slower: fsspec's ``readline`` reads a whole block per line.) One file
system per process. No listing: the shard paths are the manifest's.
``--compression gzip``: the shards are ``.jsonl.gz``, opened with
``compression="gzip"`` (each is read, and decompressed, by one worker).
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Iterator
from typing import Any

# Must be set before gcsfs is imported (see read_gcsfs.py); harmless for s3fs.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

import torch.utils.data
from _contender import Manifest, Stopwatch, load, object_gets, report


def new_fs(kind: str, manifest: Manifest) -> Any:
    if kind == "gcs":
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(project="perf", token="anon", endpoint_url=manifest.endpoint)
    from s3fs import S3FileSystem

    return S3FileSystem(endpoint_url=manifest.s3, client_kwargs={"region_name": "us-east-1"},
                        config_kwargs={"s3": {"addressing_style": "path"}})


class Lines(torch.utils.data.IterableDataset[str]):
    """The shards' lines; each worker reads every n-th shard of a shuffled list."""

    def __init__(self, kind: str, manifest: Manifest, paths: list[str],
                 compression: str | None) -> None:
        self.kind, self.manifest, self.compression = kind, manifest, compression
        self.paths = random.Random(0).sample(paths, len(paths))

    def __iter__(self) -> Iterator[str]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        fs = new_fs(self.kind, self.manifest)  # in the worker: fsspec's loop is per process
        for path in self.paths[worker::workers]:
            with fs.open(path, "rt", encoding="utf-8", compression=self.compression) as f:
                for line in f:
                    line = line.rstrip("\n")
                    if line:
                        yield line


def lines_batch(batch: list[str]) -> tuple[int, int]:
    return sum(len(line) for line in batch), len(batch)  # ASCII: characters are bytes


def main(manifest: Manifest, args: argparse.Namespace
         ) -> tuple[Stopwatch, int, int, int | None]:
    paths = [f"{manifest.bucket}/{name}" for name in manifest.names
             if name.startswith(args.prefix)]
    ds = Lines(args.fs, manifest, paths, args.compression)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                         collate_fn=lines_batch)
    nbytes = items = 0
    gets = object_gets(manifest.endpoint) if args.fs == "gcs" else None
    with Stopwatch() as watch:
        for size, count in loader:
            nbytes += size
            items += count
    after = object_gets(manifest.endpoint) if gets is not None else None
    return watch, nbytes, items, None if gets is None or after is None else after - gets


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--fs", choices=["gcs", "s3"], default="gcs")
    p.add_argument("--compression", choices=["gzip"], default=None)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, items, gets = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, workers=args.workers, object_gets=gets)
