"""ckpt_load contender: bare aiohttp ranged GETs, the ceiling for aioflux.

One session, ``TCPConnector(limit=C)``, ``Semaphore(C)``, one ranged media
GET per ``chunk`` bytes of the object, all submitted at once; each body is
read and only its length kept. No retries, checksums or ordering: what
aioflux's reader adds on top is what the ratio measures.
"""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import quote

import aiohttp
from _contender import Manifest, Stopwatch, load, report, run
from ckpt_common import checkpoint_object


async def main(manifest: Manifest, chunk: int, concurrency: int) -> tuple[Stopwatch, int]:
    name, size = checkpoint_object(manifest)
    url = f"{manifest.endpoint}/storage/v1/b/{manifest.bucket}/o/{quote(name, safe='')}?alt=media"
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sem = asyncio.Semaphore(concurrency)

        async def one(start: int) -> int:
            end = min(start + chunk, size) - 1
            async with sem, session.get(url, headers={"Range": f"bytes={start}-{end}"}) as resp:
                resp.raise_for_status()
                return len(await resp.read())

        with Stopwatch() as watch:
            sizes = await asyncio.gather(*(one(s) for s in range(0, size, chunk)))
    return watch, sum(sizes)


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunk-mib", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--loop", default="uvloop")
    args = parser.parse_args(rest)
    (watch, nbytes), loop = run(main(manifest, args.chunk_mib * 2**20, args.concurrency), args.loop)
    report(watch, nbytes=nbytes, items=1, loop=loop, chunk_mib=args.chunk_mib,
           concurrency=args.concurrency)
