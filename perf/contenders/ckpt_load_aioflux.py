"""ckpt_load contender: ``aioflux.open(url, "rb")``, the parallel ranged reader.

Reads the object front to back with ``readinto`` into one reused 8 MiB
buffer, the access pattern ``torch.load`` has on a checkpoint (sequential
record reads) without its deserialisation cost, which is the same for every
contender. The reader keeps ``read_ahead`` ranged GETs of ``block_size``
bytes in flight ahead of the position.
"""

from __future__ import annotations

import argparse

from _contender import Stopwatch, load, report
from ckpt_common import checkpoint_object

import aioflux
from aioflux import AsyncClient, ReaderOptions

if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    # The scenario always passes both (its copies of the library's defaults).
    parser.add_argument("--chunk-mib", type=int, required=True)
    parser.add_argument("--read-ahead", type=int, required=True)
    args = parser.parse_args(rest)
    client = AsyncClient(endpoint=manifest.endpoint)
    name, size = checkpoint_object(manifest)
    buf = bytearray(8 * 2**20)
    view = memoryview(buf)
    total = 0
    options = ReaderOptions(block_size=args.chunk_mib * 2**20, read_ahead=args.read_ahead)
    with Stopwatch() as watch:
        with aioflux.open(f"gs://{manifest.bucket}/{name}", "rb", client=client,
                          reader=options) as f:
            while n := f.readinto(view):
                total += n
    report(watch, nbytes=total, items=1, chunk_mib=args.chunk_mib, read_ahead=args.read_ahead)
