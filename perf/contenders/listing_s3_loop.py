"""listing contender on S3: a sequential ListObjectsV2 loop.

What a user writes without a parallel lister: one page of 1000 keys after
another, each asked for with the previous page's continuation token,
parsed with ElementTree. Plain aiohttp, unsigned (the emulator verifies no
signature), so the figure is the protocol's, not a client library's.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET

import aiohttp
from _contender import Manifest, Stopwatch, load, report, run

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


async def main(manifest: Manifest, prefix: str) -> tuple[Stopwatch, int, int]:
    url = f"{manifest.s3}/{manifest.bucket}"
    keys: list[str] = []
    async with aiohttp.ClientSession() as session:
        with Stopwatch() as watch:
            token = None
            while True:
                params = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
                if token:
                    params["continuation-token"] = token
                async with session.get(url, params=params) as resp:
                    resp.raise_for_status()
                    root = ET.fromstring(await resp.read())
                keys += [el.text or "" for el in root.iter(f"{_NS}Key")]
                token = root.findtext(f"{_NS}NextContinuationToken")
                if root.findtext(f"{_NS}IsTruncated") != "true" or not token:
                    break
    return watch, 0, len(keys)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    (watch, nbytes, items), loop = run(main(manifest, args.prefix))
    assert items == len(manifest.objects), (items, len(manifest.objects))
    report(watch, nbytes=nbytes, items=items, loop=loop)
