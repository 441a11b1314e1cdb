"""shards contenders: s3torchconnector's ``S3IterableDataset`` over the shards, in a DataLoader.

``S3IterableDataset.from_prefix("s3://BUCKET/FOLDER/", enable_sharding=
workers > 0, transform=shard_to_dict)`` yields ``{"url": key, "stream":
reader}`` with one sequential ``S3Reader`` per shard (its listing
runs inside the timed epoch, as in training; shards split across
DataLoader workers by s3torchconnector; no shuffle: it has none). Then:

- ``--format tar``: webdataset's ``tar_file_expander`` over those (as
  s3torchconnector's WebDataset example pairs them), then its
  ``group_by_keys`` into samples;
- ``--format lines``: the reader read in 8 MiB pieces (its part size),
  split on newlines, each line's bytes without its newline.

Reaches the emulator's S3 face as ``s3tc_common`` says.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator
from typing import Any

import torch.utils.data
from _contender import Manifest, Stopwatch, load, report
from s3tc_common import REGION, client_config
from s3torchconnector import S3IterableDataset
from webdataset.tariterators import group_by_keys, tar_file_expander

_PIECE = 8 * 1024 * 1024


def shard_to_dict(reader: Any) -> dict[str, Any]:
    return {"url": reader.key, "stream": reader}


def lines_of(reader: Any) -> Iterator[bytes]:
    carry = b""
    while piece := reader.read(_PIECE):
        lines = (carry + piece).split(b"\n")
        carry = lines.pop()
        yield from (line for line in lines if line)
    if carry:
        yield carry


class Samples(torch.utils.data.IterableDataset[Any]):
    """The shards' samples (tar) or lines, from the shards ``shards`` yields."""

    def __init__(self, shards: Iterable[Any], fmt: str) -> None:
        self.shards, self.fmt = shards, fmt

    def __iter__(self) -> Iterator[Any]:
        if self.fmt == "tar":
            return group_by_keys(tar_file_expander(self.shards))
        return (line for shard in self.shards for line in lines_of(shard["stream"]))


def tar_batch(batch: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(len(s["jpg"]) + len(s["cls"]) for s in batch), len(batch)


def lines_batch(batch: list[bytes]) -> tuple[int, int]:
    return sum(len(line) for line in batch), len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    url = f"s3://{manifest.bucket}/{args.prefix}"
    shards = S3IterableDataset.from_prefix(url, region=REGION, endpoint=manifest.s3,
                                           s3client_config=client_config(),
                                           enable_sharding=args.workers > 0,
                                           transform=shard_to_dict)
    loader = torch.utils.data.DataLoader(
        Samples(shards, args.format), batch_size=args.batch, num_workers=args.workers,
        collate_fn=tar_batch if args.format == "tar" else lines_batch)
    nbytes = items = 0
    with Stopwatch() as watch:
        for size, count in loader:
            nbytes += size
            items += count
    return watch, nbytes, items


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--format", choices=["tar", "lines"], default="tar")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, workers=args.workers)
