"""listing contender: dataflux_core's fast listing (``--processes``, default one per CPU)."""

from __future__ import annotations

import argparse
import os

from _contender import Stopwatch, load, report
from dataflux_core import fast_list

if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--prefix", default="")
    p.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(rest)
    with Stopwatch() as watch:
        found = fast_list.ListingController(args.processes, "perf", manifest.bucket,
                                            prefix=args.prefix).run()
    assert len(found) == len(manifest.objects), (len(found), len(manifest.objects))
    report(watch, nbytes=0, items=len(found), processes=args.processes)
