"""shards contenders: aioflux's ``ShardDataset.from_prefix`` through a torch DataLoader.

``--format tar`` (WebDataset shards; a batch is reduced to the bytes of its
samples' ``jpg`` and ``cls`` fields) or ``--format lines`` (JSONL; the
bytes of its lines). The dataset is made inside the timed region: one
listing of the folder, then each shard's index, then the epoch.

``--index cold``: the index cache (``index_dir``) is a fresh temporary
directory and the shards have no ``.idx`` sidecars, so the timed region
holds the sidecar look-ups (404s) and one streamed, crc32c-checked pass
over every shard that builds its index. ``--index warm``: the same dataset
is made once before the timer with the same ``index_dir`` (the local index
cache filled), so the timed construction reads the cache.

``--cache``: a disk cache (``cache_dir``, a fresh temporary directory, no
limit) shared by the DataLoader workers: a compressed shard is then
decompressed once into it, not once per worker.

Everything else at the library's defaults: ``shuffle=True`` (shards
permuted, reads of ``samples_per_read`` consecutive samples, about 1 MiB,
permuted within 8,192 samples), ``ShardReads``' ``reads_in_flight=32`` and
``prefetch_bytes=64 MiB`` per iterator (per DataLoader worker).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from typing import Any

import torch.utils.data
from _contender import Manifest, Stopwatch, load, object_gets, report

from aioflux.torch import DatasetSettings, Order, ShardDataset, ShardReads


def tar_batch(batch: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(len(s["jpg"]) + len(s["cls"]) for s in batch), len(batch)


def lines_batch(batch: list[bytes]) -> tuple[int, int]:
    return sum(len(line) for line in batch), len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int, int | None]:
    url = f"gs://{manifest.bucket}/{args.prefix}"
    index_dir = tempfile.mkdtemp(prefix="aioflux-shard-index-")
    cache_dir = tempfile.mkdtemp(prefix="aioflux-shard-cache-") if args.cache else None
    kw: dict[str, Any] = dict(format=args.format, order=Order(batch_size=args.batch),
                              reads=ShardReads(index_dir=index_dir),
                              settings=DatasetSettings(endpoint=manifest.endpoint,
                                                       cache_dir=cache_dir))
    try:
        if args.index == "warm":
            ShardDataset.from_prefix(url, **kw).close()
        nbytes = items = 0
        gets = object_gets(manifest.endpoint)
        with Stopwatch() as watch:
            ds = ShardDataset.from_prefix(url, **kw)
            loader = torch.utils.data.DataLoader(
                ds, batch_size=args.batch, num_workers=args.workers,
                collate_fn=tar_batch if args.format == "tar" else lines_batch)
            for size, count in loader:
                nbytes += size
                items += count
        after = object_gets(manifest.endpoint)
        ds.close()
    finally:
        shutil.rmtree(index_dir, ignore_errors=True)
        if cache_dir is not None:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return watch, nbytes, items, None if gets is None or after is None else after - gets


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--format", choices=["tar", "lines"], default="tar")
    p.add_argument("--index", choices=["cold", "warm"], default="cold")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    p.add_argument("--cache", action="store_true")
    args = p.parse_args(rest)
    watch, nbytes, items, gets = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, workers=args.workers, index=args.index,
           cache=args.cache, object_gets=gets)
