"""A composed batch's read is held to the size and crc32c the planner predicts.

The planner checks the compose answer against the listing, then reads the
composite back. That read used to be checked only against the GET answer's
own ``x-goog-hash``: an answer without one (a proxy stripped it) or with one
recomputed over altered bytes handed the caller wrong object contents. Now
such a composite is a mismatch and the batch falls back to direct reads.
"""

from __future__ import annotations

import pytest
from aiohttp import web

from aioflux import AsyncClient, ClientConfig, ObjectInfo, RetryPolicy
from aioflux._core.crc import crc32c, crc32c_combine, encode_crc32c
from aioflux._engines.compose import ComposeMismatch, fetch_composed, leftover_composites
from aioflux._engines.download import Downloader
from tests.web_server import Served, Server

OBJECTS = {f"o{i}": bytes([65 + i]) * (1000 + i) for i in range(4)}
COMPOSITE = b"".join(OBJECTS.values())
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))


def _crc(data: bytes) -> str:
    return encode_crc32c(crc32c(data))


def _composite_crc() -> int:
    value = 0
    for data in OBJECTS.values():
        value = crc32c_combine(value, crc32c(data), len(data))
    return value


def _storage(composite: bytes, hash_header: str) -> Server:
    """Serves the sources right and ``composite`` as the composed object."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        await request.read()
        path = request.path
        if request.method == "POST" and path.endswith("/compose"):
            name = path.split("/o/", 1)[1][:-len("/compose")]
            # The compose answer itself is right: only the bytes read back are not.
            return web.json_response({"bucket": "bkt", "name": name, "generation": "11",
                                      "size": str(len(COMPOSITE)),
                                      "crc32c": encode_crc32c(_composite_crc())})
        if request.method == "DELETE":
            return web.Response(status=204)
        name = path.split("/o/", 1)[1]
        if name in OBJECTS:
            return web.Response(body=OBJECTS[name], headers={
                "x-goog-hash": f"crc32c={_crc(OBJECTS[name])}", "x-goog-generation": "3"})
        headers = {"x-goog-generation": "11"}
        if hash_header == "recomputed":
            headers["x-goog-hash"] = f"crc32c={_crc(composite)}"
        return web.Response(body=composite, headers=headers)

    return Server(answer)


def _flipped() -> bytes:
    body = bytearray(COMPOSITE)
    body[1500] ^= 0x01  # one bit, inside o1
    return bytes(body)


WRONG = pytest.mark.parametrize("composite", [_flipped(), COMPOSITE[:-1] + b"?",
                                               COMPOSITE[:-5]],
                                ids=["bit flipped", "last byte changed", "short"])


def _listed() -> list[ObjectInfo]:
    return [ObjectInfo("bkt", n, len(d), 3, crc32c(d)) for n, d in OBJECTS.items()]


@pytest.mark.parametrize("hash_header", ["none", "recomputed"])
@WRONG
async def test_a_composite_read_back_wrong_falls_back_to_direct_reads(
        hash_header: str, composite: bytes) -> None:
    objs = _listed()
    async with _storage(composite, hash_header) as (endpoint, served), \
            AsyncClient(CONFIG, endpoint=endpoint) as client:
        downloader = Downloader(client)
        got = await downloader.download_many(objs)
    assert [bytes(g) for g in got] == list(OBJECTS.values())
    stats = downloader.stats
    assert stats.compose_mismatches == 1 and stats.compose_fallbacks == 1
    assert stats.composed_batches == 0 and stats.direct == len(OBJECTS)
    assert sum(p.startswith("DELETE") for p in served.paths) == 1
    assert leftover_composites() == []


@WRONG
async def test_without_a_listed_crc32c_the_compose_answer_is_the_check(composite: bytes) -> None:
    # The planner composes only listed crc32c; fetch_composed takes any.
    objs = _listed()
    objs[2] = objs[2].replace(crc32c=None)
    async with _storage(composite, "recomputed") as (endpoint, served), \
            AsyncClient(CONFIG, endpoint=endpoint) as client:
        with pytest.raises(ComposeMismatch, match="read gs://bkt/aioflux-composed/"):
            await fetch_composed(client, objs)
    assert sum(p.startswith("DELETE") for p in served.paths) == 1
    assert leftover_composites() == []


async def test_a_right_composite_is_split_without_extra_requests() -> None:
    objs = _listed()
    async with _storage(COMPOSITE, "none") as (endpoint, served), \
            AsyncClient(CONFIG, endpoint=endpoint) as client:
        downloader = Downloader(client)
        got = await downloader.download_many(objs)
    assert [bytes(g) for g in got] == list(OBJECTS.values())
    assert downloader.stats.composed_batches == 1 and downloader.stats.direct == 0
    assert [p.split(" ", 1)[0] for p in served.paths] == ["POST", "GET", "DELETE"]
