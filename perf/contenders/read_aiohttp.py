"""read_small contender: a bare aiohttp loop, the ceiling for aioflux.

One session, ``TCPConnector(limit=C)``, ``Semaphore(C)``, a media GET per
object and the whole body read. No retries, no checksums, no error
mapping: what aioflux adds on top of this is what the ratio measures.
"""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import quote

import aiohttp
from _contender import Manifest, Stopwatch, load, report, run


async def main(manifest: Manifest, concurrency: int) -> tuple[Stopwatch, int, int]:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)
    connector = aiohttp.TCPConnector(limit=concurrency)
    base = f"{manifest.endpoint}/storage/v1/b/{manifest.bucket}/o/"
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sem = asyncio.Semaphore(concurrency)

        async def one(name: str) -> int:
            async with sem, session.get(f"{base}{quote(name, safe='')}?alt=media") as resp:
                resp.raise_for_status()
                return len(await resp.read())

        with Stopwatch() as watch:
            sizes = await asyncio.gather(*(one(name) for name in manifest.names))
    return watch, sum(sizes), len(sizes)


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--loop", default="uvloop")
    args = parser.parse_args(rest)
    (watch, nbytes, items), loop = run(main(manifest, args.concurrency), args.loop)
    report(watch, nbytes=nbytes, items=items, loop=loop, concurrency=args.concurrency)
