"""ranged contender: obstore reading large objects one after another.

``--mode ranges``: ``get_ranges_async`` with the object cut into
``--chunk``-byte ranges, as LitData's downloader calls it. object_store
coalesces ranges closer than ``coalesce`` bytes (default 1 MiB) before
fetching, and contiguous ranges are always closer than that, so this is
one GET per object. ``--mode gather``: one ``get_range_async`` per chunk,
all of an object's chunks gathered at once (parallel ranged GETs, the way
to make obstore fetch in parallel). The store is set up as in
``read_obstore.py``. Bodies are only measured, never copied.
"""

from __future__ import annotations

import argparse
import asyncio

import obstore
from _contender import Manifest, Stopwatch, load, report, run
from read_obstore import store_for


async def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int]:
    store = store_for(manifest)
    nbytes = 0
    with Stopwatch() as watch:
        for name, size in manifest.objects:
            starts = list(range(0, size, args.chunk))
            lengths = [min(args.chunk, size - s) for s in starts]
            if args.mode == "ranges":
                parts = await obstore.get_ranges_async(store, name, starts=starts,
                                                       lengths=lengths)
            else:
                parts = await asyncio.gather(*(
                    obstore.get_range_async(store, name, start=s, length=n)
                    for s, n in zip(starts, lengths, strict=True)))
            nbytes += sum(len(p) for p in parts)
            del parts
    return watch, nbytes


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ranges", "gather"], default="ranges")
    p.add_argument("--chunk", type=int, default=16 * 1024 * 1024)
    p.add_argument("--loop", default="uvloop")
    args = p.parse_args(rest)
    (watch, nbytes), loop = run(main(manifest, args), args.loop)
    report(watch, nbytes=nbytes, items=len(manifest.objects), mode=args.mode, loop=loop)
