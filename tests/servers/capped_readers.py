"""The readers tests/core/rate/test_throttle_servers.py spawns: each
reads its share of a bucket's objects through a capping proxy and sends
back what it got and what its store counted.

A module of its own, importing only aioflux and the backend a reader
uses: a spawned process imports the module of the function it runs, and
the test module's (pytest, the fixtures, every backend) cost each process
seconds on a busy machine.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aioflux import ClientConfig

__all__ = ["RATE_DOUBLING", "api_root", "payload", "process", "read_all", "store"]

#: a fast ramp (the default is GCS's: a doubling per 20 minutes): paced from
#: next to nothing (little was served before the first refusals), the rate
#: grows by ~70 requests/s each second
RATE_DOUBLING = 10.0


def payload(name: str) -> bytes:
    """The bytes of object ``name`` (each object's its own)."""
    return f"{name}|".encode() * 16


def api_root(kind: str, endpoint: str) -> str:
    """The API root a store of ``kind`` on ``endpoint`` keys its rate by
    (an Azure store's names the account)."""
    if kind == "azure":
        from tests.servers.azurite import ACCOUNT
        return f"{endpoint}/{ACCOUNT}"
    return endpoint


def store(kind: str, endpoint: str, concurrency: int) -> Any:
    """A store of ``kind`` (``gcs``, ``s3``, ``azure``) on ``endpoint``
    (Azurite's origin, for ``azure``)."""
    config = ClientConfig(max_concurrency=concurrency, rate_doubling=RATE_DOUBLING)
    if kind == "gcs":
        from aioflux import AsyncClient
        return AsyncClient(config, endpoint=endpoint)
    if kind == "s3":
        from aioflux import S3Store
        return S3Store(config, endpoint=endpoint, region="us-east-1", addressing="path")
    from aioflux.azure import AzureStore
    from tests.servers.azurite import ACCOUNT, KEY
    return AzureStore(config, account=ACCOUNT, endpoint=api_root(kind, endpoint),
                      account_key=KEY)


async def read_all(kind: str, endpoint: str, bucket: str, names: list[str],
                   concurrency: int) -> dict[str, Any]:
    """Read ``names`` at once; what failed, what was wrong, and the store's
    counters."""
    started = time.perf_counter()
    async with store(kind, endpoint, concurrency) as reader:
        got = await asyncio.gather(*(reader.read(bucket, n) for n in names),
                                   return_exceptions=True)
        stats = reader.stats
        return {"failures": [repr(g) for g in got if isinstance(g, BaseException)],
                "wrong": sum(1 for n, g in zip(names, got, strict=True)
                             if not isinstance(g, BaseException) and g != payload(n)),
                "attempts": stats.requests, "throttled": stats.throttled,
                "waited": stats.budget_wait, "rates": dict(stats.rates),
                "seconds": time.perf_counter() - started}  # to read a failure by


def process(kind: str, endpoint: str, bucket: str, names: list[str], concurrency: int,
            barrier: Any, conn: Any) -> None:
    """A spawned reader: waits for the others, reads, sends the result."""
    barrier.wait()
    conn.send(asyncio.run(read_all(kind, endpoint, bucket, names, concurrency)))
