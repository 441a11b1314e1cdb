"""ckpt_save contender on S3: aioflux's checkpoint save of one ``s3://`` object.

``--mode save`` (the default): ``Checkpoint(store).save(state, url)``,
aioflux's one-call save: ``torch.save`` into the streaming multipart writer
(parts with ``x-amz-checksum-crc32c`` leave while it still writes), without
torch's zip CRC32, which the writer's crc32c makes redundant
(``aioflux/torch/checkpoint/_zip_crc.py``). ``--mode open``:
``torch.save(state, aioflux.open(url, "wb"))``, the same writer with torch's
defaults, the CRC32 included.
"""

from __future__ import annotations

import argparse

import torch
from _contender import Stopwatch, load, report, rss_mb
from aioflux_s3_common import s3_store
from ckpt_common import add_state_args, build_state

import aioflux
from aioflux import WriterOptions
from aioflux.torch import Checkpoint

if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    parser.add_argument("--mode", choices=["save", "open"], default="save")
    parser.add_argument("--part-mib", type=int, default=WriterOptions().part_size // 2**20)
    parser.add_argument("--in-flight", type=int, default=WriterOptions().max_in_flight)
    args = parser.parse_args(rest)
    store = s3_store(manifest)
    options = WriterOptions(part_size=args.part_mib * 2**20, max_in_flight=args.in_flight)
    url = f"s3://{manifest.bucket}/s3_ckpt_save/aioflux-{args.mode}.pt"
    state = build_state(args)
    rss_state = rss_mb()
    with Stopwatch() as watch:
        if args.mode == "save":
            serialized = Checkpoint(store, writer=options).save(state, url).size
        else:
            with aioflux.open(url, "wb", client=store, writer=options) as f:
                torch.save(state, f)
                serialized = f.tell()
    report(watch, nbytes=serialized, items=1, part_mib=args.part_mib, in_flight=args.in_flight,
           rss_state_mb=round(rss_state, 1))
