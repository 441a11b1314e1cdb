"""A store's delimited listings held to MemoryStore's over the same names:
the oracle the S3 and Azure offset tests share."""

from __future__ import annotations

from typing import Any

from aioflux._core.storage.protocol import ObjectStore
from aioflux.testing import MemoryStore


async def listed(store: ObjectStore, bucket: str, page_size: int,
                 case: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The names and prefixes of ``store``'s "/"-delimited listing of ``case``
    (its ``prefix`` and offsets)."""
    names: list[str] = []
    prefixes: list[str] = []
    kw = dict(case)
    async for page in store.list(bucket, kw.pop("prefix"), delimiter="/", page_size=page_size,
                                 **kw):
        names += [o.name for o in page.objects]
        prefixes += page.prefixes
    return names, prefixes


async def assert_lists_as_memory(store: ObjectStore, bucket: str, names: list[str],
                                 cases: list[dict[str, Any]], page_size: int) -> None:
    """Each of ``cases`` lists on ``store`` (holding ``names``) as on a MemoryStore."""
    memory = MemoryStore(buckets=[bucket])
    for name in names:
        await memory.write(bucket, name, b"x")
    for case in cases:
        expected = await listed(memory, bucket, page_size, case)
        assert await listed(store, bucket, page_size, case) == expected, case
