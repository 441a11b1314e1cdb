"""ckpt_save contender: ``multistorageclient.torch.save`` to the emulator.

``msc.torch.save(state, "msc://perf/...")`` opens an MSC file for writing
and runs ``torch.save`` into it; the provider uploads it on close (see
``msc_common.py`` for the profile and which of MSC's clients runs).
``--max-concurrency N`` sets MSC's threads per transfer (default: MSC's).
"""

from __future__ import annotations

import argparse

import multistorageclient as msc
from _contender import Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state
from msc_common import configure

if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    parser.add_argument("--max-concurrency", type=int, default=None)
    args = parser.parse_args(rest)
    root = configure(manifest.endpoint, manifest.bucket, max_concurrency=args.max_concurrency)
    url = root + "ckpt_save/msc.pt"
    state = build_state(args)
    rss_state = rss_mb()
    with Stopwatch() as watch:
        msc.torch.save(state, url)
    stored = msc.info(url).content_length
    report(watch, nbytes=stored, items=1, stored_bytes=stored, rss_state_mb=round(rss_state, 1))
