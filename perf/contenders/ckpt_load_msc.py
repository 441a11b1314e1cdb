"""ckpt_load contender: the bytes ``multistorageclient.torch.load`` reads.

``msc.torch.load(url)`` opens the object with ``msc.open(url, "rb",
prefetch_file=True)`` (the whole object fetched first) and hands the file to
``torch.load``; this contender does that open and then reads front to back
in 8 MiB ``readinto`` calls, like the aioflux contender, without the
deserialisation (the same local cost for everyone). ``--max-concurrency N``
sets MSC's threads per transfer (default: MSC's).
"""

from __future__ import annotations

import argparse

import multistorageclient as msc
from _contender import Stopwatch, load, report
from ckpt_common import checkpoint_object
from msc_common import configure

if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-concurrency", type=int, default=None)
    args = parser.parse_args(rest)
    root = configure(manifest.endpoint, manifest.bucket, max_concurrency=args.max_concurrency)
    name, size = checkpoint_object(manifest)
    buf = bytearray(8 * 2**20)
    view = memoryview(buf)
    total = 0
    with Stopwatch() as watch:
        with msc.open(root + name, "rb", prefetch_file=True) as f:
            while n := f.readinto(view):
                total += n
    report(watch, nbytes=total, items=1)
