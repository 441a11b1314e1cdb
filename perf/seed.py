"""Write a scenario's data set into the emulator, and warm the emulator up.

Seeding uses plain aiohttp JSON-API media uploads rather than aioflux so a
bug in the code under test cannot shape the data the peers read.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp

__all__ = ["ObjectSet", "read_all", "seed"]

# Object bodies are windows into one random pool: distinct per object,
# incompressible, and cheap to make for hundreds of MB.
_POOL_BYTES = 8 * 1024 * 1024
# Larger objects are streamed in chunks of this size (see _large_body).
_STREAM_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class ObjectSet:
    """``count`` objects of ``size`` bytes named ``{prefix}{i:06d}``."""

    prefix: str
    count: int
    size: int

    def names(self) -> list[str]:
        return [f"{self.prefix}{i:06d}" for i in range(self.count)]

    @property
    def total_bytes(self) -> int:
        return self.count * self.size


def _bodies(obj: ObjectSet, pool: bytes) -> list[tuple[str, memoryview]]:
    view = memoryview(pool)
    span = len(pool) - obj.size
    rng = random.Random(obj.prefix)
    return [(name, view[(off := rng.randrange(span + 1)) : off + obj.size]) for name in obj.names()]


def _large_body(name: str, size: int, pool: bytes) -> AsyncIterator[bytes]:
    """A body larger than the pool, streamed in pool windows at random offsets.

    ``random.randbytes`` of 256 MiB raises OverflowError (it asks for 2**31
    random bits at once), and holding 8 such bodies would cost 2 GiB here on
    top of the emulator's copy; this makes the bytes as they are sent.
    """

    async def chunks() -> AsyncIterator[bytes]:
        rng = random.Random(name)
        view = memoryview(pool)
        sent = 0
        while sent < size:
            n = min(_STREAM_CHUNK, size - sent)
            off = rng.randrange(len(pool) - n + 1)
            yield bytes(view[off : off + n])
            sent += n

    return chunks()


async def _upload(endpoint: str, bucket: str, sets: Sequence[ObjectSet], concurrency: int) -> int:
    pool = random.Random(0).randbytes(_POOL_BYTES)
    small = [s for s in sets if s.size <= _POOL_BYTES]
    items: list[tuple[str, memoryview | int]] = [
        item for s in small for item in _bodies(s, pool)]
    items += [(name, s.size) for s in sets if s.size > _POOL_BYTES for name in s.names()]
    sem = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def put(name: str, body: memoryview | int) -> None:
            url = f"{endpoint}/upload/storage/v1/b/{bucket}/o"
            params = {"uploadType": "media", "name": name}
            async with sem:
                for attempt in range(5):  # the emulator may inject faults
                    data = (bytes(body) if isinstance(body, memoryview)
                            else _large_body(name, body, pool))
                    async with session.post(url, params=params, data=data) as resp:
                        if resp.status < 300:
                            await resp.read()
                            return
                        if resp.status not in (408, 429, 500, 502, 503, 504) or attempt == 4:
                            raise RuntimeError(
                                f"seeding {bucket}/{name}: HTTP {resp.status} {await resp.text()}"
                            )
                    await asyncio.sleep(0.1 * 2**attempt)

        await asyncio.gather(*(put(name, body) for name, body in items))
    return len(items)


def seed(endpoint: str, bucket: str, sets: Sequence[ObjectSet], *, concurrency: int = 64) -> None:
    """Upload every object of ``sets`` into ``bucket``, concurrently."""
    if not sets:
        return
    start = time.perf_counter()
    count = asyncio.run(_upload(endpoint, bucket, sets, concurrency))
    total = sum(s.total_bytes for s in sets)
    print(
        f"[perf] seeded {count} objects, {total / 1e6:.1f} MB "
        f"in {time.perf_counter() - start:.1f}s",
        flush=True,
    )


async def _read(endpoint: str, bucket: str, names: Sequence[str], concurrency: int) -> int:
    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def get(name: str) -> int:
            async with (
                sem,
                session.get(
                    f"{endpoint}/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media"
                ) as r,
            ):
                r.raise_for_status()
                return len(await r.read())

        return sum(await asyncio.gather(*(get(n) for n in names)))


def read_all(
    endpoint: str, bucket: str, sets: Sequence[ObjectSet], *, concurrency: int = 64
) -> None:
    """Read every seeded object once, untimed.

    Run before the first contender so that whoever goes first does not pay
    for the emulator's cold code paths and allocator growth alone.
    """
    names = [n for s in sets for n in s.names()]
    if not names:
        return
    start = time.perf_counter()
    total = asyncio.run(_read(endpoint, bucket, names, concurrency))
    print(
        f"[perf] warm-up read {len(names)} objects, {total / 1e6:.1f} MB "
        f"in {time.perf_counter() - start:.1f}s",
        flush=True,
    )
