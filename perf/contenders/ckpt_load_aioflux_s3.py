"""ckpt_load contender on S3: ``aioflux.open("s3://...", "rb")``, the parallel ranged reader.

Reads front to back with
``readinto`` into one reused 8 MiB buffer, as ``ckpt_load_aioflux.py``
does on ``gs://``.
"""

from __future__ import annotations

import argparse

from _contender import Stopwatch, load, report
from aioflux_s3_common import s3_store
from ckpt_common import checkpoint_object

import aioflux
from aioflux import ReaderOptions

if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunk-mib", type=int, required=True)
    parser.add_argument("--read-ahead", type=int, required=True)
    args = parser.parse_args(rest)
    name, size = checkpoint_object(manifest)  # composed through the GCS API, same store
    store = s3_store(manifest)
    view = memoryview(bytearray(8 * 2**20))
    total = 0
    options = ReaderOptions(block_size=args.chunk_mib * 2**20, read_ahead=args.read_ahead)
    with Stopwatch() as watch:
        with aioflux.open(f"s3://{manifest.bucket}/{name}", "rb", client=store,
                          reader=options) as f:
            while n := f.readinto(view):
                total += n
    report(watch, nbytes=total, items=1, chunk_mib=args.chunk_mib, read_ahead=args.read_ahead)
