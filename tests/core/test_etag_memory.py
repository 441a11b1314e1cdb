"""The ETag memory S3 and Azure share: hashed ETags map back to their ETag,
bounded, forgetting the oldest first; decodable ones are never stored."""

from __future__ import annotations

import pytest

from aioflux import NotFound, ObjectInfo
from aioflux._core.storage.etags import EtagMemory
from aioflux.azure import _xml as azure_xml
from aioflux.s3 import _xml as s3_xml


def _s3(limit: int = 4) -> EtagMemory:
    return EtagMemory(s3_xml.generation_of, s3_xml.etag_of, limit)


def test_decodable_etags_are_decoded_never_stored() -> None:
    memory = _s3(limit=1)
    md5 = '"9867ddc9cb5c19bb41459bf15cdc0675"'
    hashed = '"opaque"'
    g_hashed = memory.remember(hashed)
    for _ in range(3):  # a decodable ETag takes no room: the hashed one stays
        g_md5 = memory.remember(md5)
    assert memory.known(g_md5) == md5
    assert memory.known(g_hashed) == hashed


def test_a_full_memory_forgets_its_oldest_not_everything() -> None:
    # It used to clear everything when full: the ETag remembered just
    # before was forgotten with the rest, and a pinned read of that object
    # cost a stat (or, once it changed, failed as gone).
    memory = _s3(limit=3)
    generations = [memory.remember(f'"tag-{i}"') for i in range(4)]
    assert memory.known(generations[0]) is None
    assert [memory.known(g) for g in generations[1:]] == ['"tag-1"', '"tag-2"', '"tag-3"']
    memory.remember('"tag-3"')  # remembered again: no room taken
    assert memory.known(generations[1]) == '"tag-1"'


def test_azure_etags_decode_and_others_hash() -> None:
    memory = EtagMemory(azure_xml.generation_of, azure_xml.etag_of, 2)
    g = memory.remember('"0x8DC1234ABCD"')
    assert memory.known(g) == '"0x8DC1234ABCD"'
    h = memory.remember('"weird"')
    assert memory.known(h) == '"weird"'


async def test_lookup_asks_the_object_for_a_generation_not_known() -> None:
    memory = _s3()
    wanted = s3_xml.generation_of('"opaque"')
    stats: list[str] = []

    async def stat_same() -> ObjectInfo:
        stats.append("same")
        return ObjectInfo("b", "o", 1, memory.remember('"opaque"'))

    async def stat_other() -> ObjectInfo:
        stats.append("other")
        return ObjectInfo("b", "o", 1, memory.remember('"another"'))

    async def stat_gone() -> ObjectInfo:
        stats.append("gone")
        raise NotFound("stat gs://b/o failed: gone")

    assert await memory.lookup(wanted, stat_other) is None
    assert await memory.lookup(wanted, stat_gone) is None
    assert await memory.lookup(wanted, stat_same) == '"opaque"'
    assert await memory.lookup(wanted, stat_gone) == '"opaque"'  # remembered: no stat
    assert stats == ["other", "gone", "same"]


@pytest.mark.parametrize("limit", [1, 10])
def test_the_memory_stays_within_its_limit(limit: int) -> None:
    memory = _s3(limit)
    for i in range(5 * limit):
        memory.remember(f'"t{i}"')
    assert len(memory._hashed) == limit
