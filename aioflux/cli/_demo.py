"""``aioflux demo``: the library's main job on the bundled emulator.

Starts the emulator with a GCS-like profile (20 ms to first byte, 100 MB/s
per connection), writes a small dataset, lists it and reads it back through
the async and the sync API, checking every byte, and reports how fast.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass

from .._client import AsyncClient
from .._config import ClientConfig
from .._crc import crc32c
from .._sync import Client
from . import command

__all__: list[str] = []


@dataclass
class _Step:
    what: str
    items: int
    nbytes: int
    seconds: float

    def line(self) -> str:
        rate = self.items / self.seconds if self.seconds else float("inf")
        mbps = self.nbytes / self.seconds / 1e6 if self.seconds else float("inf")
        return (f"  {self.what:<34} {self.items:>7,} objects  {self.seconds:7.2f} s  "
                f"{rate:9,.0f} obj/s  {mbps:8.1f} MB/s")


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--objects", type=int, default=2000, help="samples to write")
    parser.add_argument("--size", type=int, default=64 * 1024, help="bytes per sample")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight")


async def _async_part(client: AsyncClient, bucket: str, blobs: dict[str, bytes],
                      steps: list[_Step]) -> None:
    total = sum(map(len, blobs.values()))
    t0 = time.perf_counter()
    await asyncio.gather(*(client.write(bucket, n, b) for n, b in blobs.items()))
    steps.append(_Step("write (async)", len(blobs), total, time.perf_counter() - t0))

    t0 = time.perf_counter()
    listed = [o async for o in client.list_objects(bucket, "train/")]
    steps.append(_Step("list (async)", len(listed), 0, time.perf_counter() - t0))
    if sorted(o.name for o in listed) != sorted(blobs):
        raise SystemExit("demo: listing does not match what was written")

    t0 = time.perf_counter()
    datas = await asyncio.gather(*(client.read(bucket, o.name) for o in listed))
    steps.append(_Step("read (async)", len(datas), total, time.perf_counter() - t0))
    for obj, data in zip(listed, datas, strict=True):
        if obj.crc32c != crc32c(data) or data != blobs[obj.name]:
            raise SystemExit(f"demo: {obj.url} read back different bytes")


@command("demo", "Write, list and read a dataset on the bundled emulator and report speed.",
         _configure)
def _run(args: argparse.Namespace) -> int:
    from ..testing import GCS_LIKE_PROFILE, running_emulator

    bucket = "aioflux-demo"
    blobs = {f"train/sample-{i:06d}.bin": os.urandom(args.size) for i in range(args.objects)}
    config = ClientConfig(max_concurrency=args.concurrency)
    steps: list[_Step] = []
    print(f"aioflux demo: emulator with a GCS-like profile (20 ms to first byte, "
          f"100 MB/s per connection); {args.objects:,} samples x {args.size:,} bytes")
    with running_emulator(profile=GCS_LIKE_PROFILE) as emu:
        emu.create_bucket(bucket)
        with Client(config, endpoint=emu.endpoint) as client:
            from .._bridge import call

            call(_async_part(client.aio, bucket, blobs, steps))
            t0 = time.perf_counter()
            names = [o.name for o in client.list_objects(bucket, "train/")][:200]
            ok = sum(client.read(bucket, n) == blobs[n] for n in names)
            steps.append(_Step("read one by one (sync)", ok, ok * args.size,
                               time.perf_counter() - t0))
            stats = client.aio.transport.stats
    print("\n".join(s.line() for s in steps))
    print(f"  requests {stats.requests:,}, retries {stats.retries:,}; "
          "every byte checked against its crc32c")
    return 0
