"""loader ceiling on S3: a bare aiohttp GetObject loop, unsigned.

One session, ``TCPConnector(limit=C)``, ``Semaphore(C)``, a path-style GET
per object and the whole body read. No signing (the emulator verifies
none, and SigV4 is the same local cost for any client), no retries, no
checksums: the ceiling aioflux's S3 datasets are held to.
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
    base = f"{manifest.s3}/{manifest.bucket}/"
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sem = asyncio.Semaphore(concurrency)

        async def one(name: str) -> int:
            async with sem, session.get(base + quote(name, safe="/~")) as resp:
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
