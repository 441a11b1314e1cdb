"""The http(s) store's fast paths (issue 51's http_shards): ranged reads
over the lean HTTP/1.1 client with every check of the aiohttp path, and a
read pinned to a generation another store learnt (a DataLoader worker's)
held by its first answer instead of a HEAD first."""

from __future__ import annotations

import re

import pytest
from aiohttp import web

from aioflux import ClientConfig, RetryPolicy
from aioflux._core.errors import NotFound, ProtocolError
from aioflux.http import HttpStore
from tests.servers.web_server import Served, Server

DATA = bytes(range(256)) * 4096  # 1 MiB
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0.0, max_delay=0.0))
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def _bucket(endpoint: str) -> str:
    return endpoint.removeprefix("http://")


def _answer(request: web.Request, body: bytes, etag: str) -> web.Response:
    headers = {"Accept-Ranges": "bytes", "ETag": etag}
    if request.method == "HEAD":
        headers["Content-Length"] = str(len(body))
        return web.Response(status=200, headers=headers)
    wanted = request.headers.get("If-Match")
    if wanted is not None and wanted != etag:
        return web.Response(status=412)
    match = _RANGE.match(request.headers.get("Range", ""))
    if match is None:
        return web.Response(body=body, headers=headers)
    first = int(match.group(1))
    last = min(int(match.group(2)) if match.group(2) else len(body) - 1, len(body) - 1)
    headers["Content-Range"] = f"bytes {first}-{last}/{len(body)}"
    return web.Response(status=206, body=body[first:last + 1], headers=headers)


@pytest.mark.parametrize("lean", [True, False])
async def test_ranged_reads_take_the_lean_client_where_it_is_on(lean: bool) -> None:
    """Ranges, into a buffer or not, arrive over the lean client (counted in
    ``stats.lean_reads``), or over aiohttp with ``lean_reads=False``: the
    same bytes, pinned the same way."""
    pins: list[str | None] = []

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        pins.append(request.headers.get("If-Match"))
        return _answer(request, DATA, '"v1"')

    config = CONFIG.replace(lean_reads=lean)
    async with Server(answer) as (endpoint, _), HttpStore(config, scheme="http") as store:
        bucket = _bucket(endpoint)
        info = await store.stat(bucket, "x.bin")
        assert await store.read(bucket, "x.bin", start=100, end=300_000,
                                generation=info.generation) == DATA[100:300_000]
        buffer = bytearray(5000)
        assert await store.read(bucket, "x.bin", start=7, end=5007, into=buffer,
                                generation=info.generation) == 5000
        assert bytes(buffer) == DATA[7:5007]
        assert store.stats.lean_reads == (2 if lean else 0)
        assert pins == [None, '"v1"', '"v1"']  # the HEAD, then both reads pinned


async def test_a_wrong_content_range_is_refused_on_the_lean_path() -> None:
    """The lean client's 206 is checked as aiohttp's: another range than
    asked is a ProtocolError, its bytes never returned."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        return web.Response(status=206, body=DATA[:1000], headers={
            "ETag": '"v1"', "Content-Range": f"bytes 0-999/{len(DATA)}"})

    async with Server(answer) as (endpoint, _), HttpStore(CONFIG, scheme="http") as store:
        with pytest.raises(ProtocolError, match=r"asked for bytes \[10, 1010\)"):
            await store.read(_bucket(endpoint), "x.bin", start=10, end=1010)


async def test_a_generation_another_store_learnt_costs_no_head() -> None:
    """A worker's store reads at the generation the parent's stat found:
    the first answer's ETag hashes to it, so no HEAD goes first; the pin is
    then remembered (the next read carries If-Match)."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        return _answer(request, DATA, '"v1"')

    async with Server(answer) as (endpoint, served), HttpStore(CONFIG, scheme="http") as a, \
            HttpStore(CONFIG, scheme="http") as b:
        bucket = _bucket(endpoint)
        generation = (await a.stat(bucket, "x.bin")).generation
        del served.paths[:]
        assert await b.read(bucket, "x.bin", start=0, end=1000,
                            generation=generation) == DATA[:1000]
        assert await b.read(bucket, "x.bin", start=1000, end=2000,
                            generation=generation) == DATA[1000:2000]
        assert [p.split()[0] for p in served.paths] == ["GET", "GET"]


@pytest.mark.parametrize("lean", [True, False])
async def test_a_generation_another_store_learnt_of_a_replaced_object_is_not_found(
        lean: bool) -> None:
    """The object was replaced after the parent's stat: the worker's first
    answer states another version, so the read is NotFound (that
    generation is gone), with no HEAD and no retry."""
    versions = ['"v1"']

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        return _answer(request, DATA if versions[-1] == '"v1"' else DATA[::-1], versions[-1])

    config = CONFIG.replace(lean_reads=lean)
    async with Server(answer) as (endpoint, served), HttpStore(config, scheme="http") as a, \
            HttpStore(config, scheme="http") as b:
        bucket = _bucket(endpoint)
        generation = (await a.stat(bucket, "x.bin")).generation
        versions.append('"v2"')
        del served.paths[:]
        with pytest.raises(NotFound, match=f"no longer generation {generation}") as caught:
            await b.read(bucket, "x.bin", start=0, end=1000, generation=generation)
        assert caught.value.name == "x.bin"
        assert [p.split()[0] for p in served.paths] == ["GET"]
