"""listing contenders on S3: aioflux's parallel listing, or its sequential lister.

S3 has no end offset, so each
parallel lister stops at its key range's end itself.
"""

from __future__ import annotations

import argparse

from _contender import Manifest, Stopwatch, load, report, run
from aioflux_s3_common import s3_store

from aioflux import ClientConfig
from aioflux._engines.listing import list_objects_parallel


async def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    store = s3_store(manifest, ClientConfig(max_concurrency=64))
    async with store:
        with Stopwatch() as watch:
            if args.mode == "parallel":
                objs = await list_objects_parallel(store, manifest.bucket, args.prefix,
                                                   concurrency=args.concurrency)
            else:
                objs = [o async for o in store.list_objects(manifest.bucket, args.prefix)]
    return watch, 0, len(objs)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["parallel", "sequential"], default="parallel")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    (watch, nbytes, items), loop = run(main(manifest, args))
    assert items == len(manifest.objects), (items, len(manifest.objects))
    report(watch, nbytes=nbytes, items=items, mode=args.mode, loop=loop)
