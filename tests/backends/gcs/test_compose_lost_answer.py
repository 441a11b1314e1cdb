"""A compose whose first attempt landed and whose answer was lost is retried,
fails its own ``if_generation_match=0``, and is taken as published when the
object holds exactly what the sources compose to.

With sources given by name (or by name and generation) the check needs
their sizes and crc32c: the compose reported ``PreconditionFailed`` (as if
another writer held the name) although the object was its own. Now the
sources are looked at as they stand; a source changed since is no proof,
and the failure stands.
"""

from __future__ import annotations

import pytest
from aiohttp import web

from aioflux import AsyncClient, ClientConfig, PreconditionFailed, RetryPolicy
from aioflux._core.integrity.crc import crc32c, crc32c_combine, encode_crc32c
from tests.servers.web_server import Served, Server

SOURCES = {"a": b"A" * 1000, "b": b"B" * 1001}
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0))


def _resource(name: str, data: bytes, generation: int) -> dict[str, str]:
    return {"bucket": "bkt", "name": name, "generation": str(generation),
            "metageneration": "1", "size": str(len(data)),
            "crc32c": encode_crc32c(crc32c(data))}


def _bucket(changed: bool = False) -> Server:
    """The sources at generation 3; the first compose lands (its data the
    sources' at that time) and its answer is lost; ``changed``: source
    ``b`` is rewritten (generation 4) right after."""
    stored = {name: (data, 3) for name, data in SOURCES.items()}

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        await request.read()
        name = request.path.split("/o/", 1)[1]
        if request.method == "POST" and name.endswith("/compose"):
            destination = name[:-len("/compose")]
            if destination in stored:
                return web.json_response({"error": {"code": 412, "message": "conditionNotMet"}},
                                         status=412)
            stored[destination] = (b"".join(d for d, _ in stored.values()), 9)
            if changed:
                stored["b"] = (b"b" * 1001, 4)
            assert request.transport is not None
            request.transport.close()  # landed, answer lost
            return web.Response(status=200)
        if request.method == "GET" and name in stored:
            data, generation = stored[name]
            return web.json_response(_resource(name, data, generation))
        return web.json_response({"error": {"code": 404, "message": "Not Found"}}, status=404)

    return Server(answer)


@pytest.mark.parametrize("given", ["names", "pairs"])
async def test_a_compose_of_named_sources_whose_answer_was_lost_succeeds(given: str) -> None:
    sources = list(SOURCES) if given == "names" else [(n, 3) for n in SOURCES]
    async with _bucket() as (endpoint, _), AsyncClient(CONFIG, endpoint=endpoint) as client:
        info = await client.compose("bkt", "dst", sources, if_generation_match=0)
    expected = crc32c_combine(crc32c(SOURCES["a"]), crc32c(SOURCES["b"]), 1001)
    assert (info.name, info.size, info.crc32c) == ("dst", 2001, expected)


@pytest.mark.parametrize("given", ["names", "pairs"])
async def test_a_source_changed_since_leaves_the_precondition_failed(given: str) -> None:
    sources = list(SOURCES) if given == "names" else [(n, 3) for n in SOURCES]
    async with _bucket(changed=True) as (endpoint, _), \
            AsyncClient(CONFIG, endpoint=endpoint) as client:
        with pytest.raises(PreconditionFailed):
            await client.compose("bkt", "dst", sources, if_generation_match=0)
