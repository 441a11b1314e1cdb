"""read_small / loader_small contender: obstore's ``get_async`` at concurrency C.

obstore (Rust ``object_store`` behind an asyncio facade; the GIL is released
while Rust does the HTTP) reaches the emulator through its own GCS store
settings, no patching: ``GCSStore(bucket, base_url=ENDPOINT,
skip_signature=True, client_options={"allow_http": True})``. Object GETs
go to ``{base_url}/{bucket}/{name}`` (the XML API path the emulator serves).

``--mode all``: every read submitted at once behind ``Semaphore(C)``, as
read_small's other async contenders. ``--mode batches``: a loader-like
loop, ``--batch`` names at a time, each batch gathered before the next
starts (what a map-style dataset's ``__getitems__`` without read-ahead
does). Only each body's length is kept.
"""

from __future__ import annotations

import argparse
import asyncio

import obstore
from _contender import Manifest, Stopwatch, load, report, run
from obstore.store import GCSStore


def store_for(manifest: Manifest) -> GCSStore:
    """The emulator's bucket as an obstore GCS store (no credentials, plain HTTP)."""
    return GCSStore(manifest.bucket, base_url=manifest.endpoint, skip_signature=True,
                    client_options={"allow_http": True})


async def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    store = store_for(manifest)
    gate = asyncio.Semaphore(args.concurrency)

    async def one(name: str) -> int:
        async with gate:
            result = await obstore.get_async(store, name)
            return len(await result.bytes_async())

    names = manifest.names
    sizes: list[int] = []
    with Stopwatch() as watch:
        if args.mode == "all":
            sizes = await asyncio.gather(*(one(n) for n in names))
        else:
            for i in range(0, len(names), args.batch):
                sizes += await asyncio.gather(*(one(n) for n in names[i:i + args.batch]))
    return watch, sum(sizes), len(sizes)


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--mode", choices=["all", "batches"], default="all")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--loop", default="uvloop")
    args = parser.parse_args(rest)
    (watch, nbytes, items), loop = run(main(manifest, args), args.loop)
    report(watch, nbytes=nbytes, items=items, loop=loop, concurrency=args.concurrency,
           mode=args.mode)
