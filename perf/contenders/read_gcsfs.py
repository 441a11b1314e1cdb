"""read_small contender: gcsfs ``cat`` on the whole list of paths.

fsspec runs the ``_cat_file`` coroutines ``batch_size`` at a time on its
own event loop thread. The plain ``GCSFileSystem`` is used: with
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` gcsfs does not install its
extended filesystem, whose gRPC bucket-type probe waits out a 60 s timeout
against an emulator. ``cat`` returns a dict of every body, so its peak RSS
holds the data set.
"""

from __future__ import annotations

import argparse
import os

# Must be set before gcsfs is imported: it picks its class at import time.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

from _contender import Manifest, Stopwatch, load, report
from gcsfs.core import GCSFileSystem


def main(manifest: Manifest, concurrency: int) -> tuple[Stopwatch, int, int]:
    fs = GCSFileSystem(project="perf", token="anon", endpoint_url=manifest.endpoint)
    paths = [f"{manifest.bucket}/{name}" for name in manifest.names]
    with Stopwatch() as watch:
        bodies = fs.cat(paths, batch_size=concurrency)
        nbytes = sum(len(body) for body in bodies.values())
    return watch, nbytes, len(bodies)


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=128)
    args = parser.parse_args(rest)
    watch, nbytes, items = main(manifest, args.concurrency)
    report(watch, nbytes=nbytes, items=items, concurrency=args.concurrency)
