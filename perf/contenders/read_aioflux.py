"""read_small contender: ``aioflux.AsyncClient.read`` at concurrency C.

The client's own ``max_concurrency`` is the only bound: every read is
submitted at once, as an application gathering reads would. ``--no-lean``
sets ``ClientConfig(lean_reads=False)``: bodies come through aiohttp, so the
lean HTTP path's share is measured on its own. ``--stream`` lists the
objects' folder and downloads them as listed, ``client.stream(url,
ordered=False)``: the listing is timed too. ``--load-files``: the blocking
``aioflux.load_files(urls, client=Client(...), concurrency=C)`` in input
order, from the caller's thread (no event loop of its own).
"""

from __future__ import annotations

import argparse
import asyncio

from _contender import Manifest, Stopwatch, load, report, run

import aioflux
from aioflux import AsyncClient, Client, ClientConfig


async def main(manifest: Manifest, concurrency: int, lean: bool,
               stream: bool) -> tuple[Stopwatch, int, int]:
    config = ClientConfig(max_concurrency=concurrency, lean_reads=lean)
    async with AsyncClient(config, endpoint=manifest.endpoint) as client:
        if stream:
            folder = manifest.names[0].rsplit("/", 1)[0] + "/"
            nbytes = items = 0
            with Stopwatch() as watch:
                async for item in client.stream(f"gs://{manifest.bucket}/{folder}",
                                                ordered=False, concurrency=concurrency):
                    nbytes += len(item.data)
                    items += 1
            return watch, nbytes, items

        async def one(name: str) -> int:
            # Keep only the length, as every contender does, so peak RSS
            # compares working memory rather than a retained data set.
            return len(await client.read(manifest.bucket, name))

        with Stopwatch() as watch:
            sizes = await asyncio.gather(*(one(name) for name in manifest.names))
    return watch, sum(sizes), len(sizes)


def load_files(manifest: Manifest, concurrency: int) -> tuple[Stopwatch, int, int]:
    config = ClientConfig(max_concurrency=concurrency)
    with Client(config, endpoint=manifest.endpoint) as client:
        urls = [f"gs://{manifest.bucket}/{name}" for name in manifest.names]
        nbytes = items = 0
        with Stopwatch() as watch:
            for _, data in aioflux.load_files(urls, client=client, concurrency=concurrency):
                nbytes += len(data)
                items += 1
    return watch, nbytes, items


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--loop", default="uvloop")
    parser.add_argument("--no-lean", dest="lean", action="store_false")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--load-files", action="store_true")
    args = parser.parse_args(rest)
    if args.load_files:
        watch, nbytes, items = load_files(manifest, args.concurrency)
        report(watch, nbytes=nbytes, items=items, concurrency=args.concurrency)
        raise SystemExit(0)
    (watch, nbytes, items), loop = run(main(manifest, args.concurrency, args.lean, args.stream),
                                       args.loop)
    report(watch, nbytes=nbytes, items=items, loop=loop, concurrency=args.concurrency,
           lean_reads=args.lean, stream=args.stream)
