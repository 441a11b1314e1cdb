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

from aioflux import (
    AsyncClient,
    ClientConfig,
    ObjectInfo,
    PermissionDenied,
    PreconditionFailed,
    RetryPolicy,
    ServerError,
    StorageError,
)
from aioflux._core.integrity.crc import crc32c, crc32c_combine, encode_crc32c
from aioflux._engines.compose import ComposeMismatch, fetch_composed, leftover_composites
from aioflux._engines.download import Downloader, DownloadOptions
from tests.servers.web_server import Served, Server

OBJECTS = {f"o{i}": bytes([65 + i]) * (1000 + i) for i in range(4)}
COMPOSITE = b"".join(OBJECTS.values())
# The four objects in one composite (fewer than the default's fewest).
PAIRS = DownloadOptions(min_sources=2)
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
        downloader = Downloader(client, PAIRS)
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
        downloader = Downloader(client, PAIRS)
        got = await downloader.download_many(objs)
    assert [bytes(g) for g in got] == list(OBJECTS.values())
    assert downloader.stats.composed_batches == 1 and downloader.stats.direct == 0
    assert [p.split(" ", 1)[0] for p in served.paths] == ["POST", "GET", "DELETE"]


async def test_a_compose_that_landed_then_failed_its_retries_is_deleted() -> None:
    # The first compose lands and its answer is lost; the retries get 503.
    # Taken for "the server said no", the composite was neither deleted nor
    # left for the exit clean-up: it stayed in the bucket.
    stored: dict[str, bytes] = {}
    deleted: list[str] = []

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        await request.read()
        path = request.path
        if request.method == "POST" and path.endswith("/compose"):
            name = path.split("/o/", 1)[1][:-len("/compose")]
            if name not in stored:
                stored[name] = COMPOSITE
                assert request.transport is not None
                request.transport.close()  # landed, answer lost
                return web.Response(status=200)
            return web.json_response({"error": {"code": 503, "message": "backendError"}},
                                     status=503)
        if request.method == "DELETE":
            name = path.split("/o/", 1)[1]
            deleted.append(name)
            stored.pop(name, None)
            return web.Response(status=204)
        return web.Response(status=404)

    config = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0))
    async with Server(answer) as (endpoint, _), AsyncClient(config, endpoint=endpoint) as client:
        with pytest.raises(ServerError) as failed:
            await fetch_composed(client, _listed())
    assert (failed.value.operation, failed.value.status, failed.value.attempts) == (
        "compose", 503, 3)
    assert len(deleted) == 1 and not stored and not leftover_composites()


@pytest.mark.parametrize(("status", "created", "error"), [
    (500, True, ServerError), (503, True, ServerError), (408, True, ServerError),
    (403, False, PermissionDenied), (412, False, PreconditionFailed)])
async def test_a_compose_answered_once_is_deleted_unless_refused(
        status: int, created: bool, error: type[StorageError]) -> None:
    # At a single attempt, a 5xx (or 408) may come after the compose was
    # applied: taken for a refusal, the composite was neither deleted nor
    # left for the exit clean-up. A 4xx is a refusal: nothing to delete.
    stored: dict[str, bytes] = {}
    deleted: list[str] = []

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        await request.read()
        path = request.path
        if request.method == "POST" and path.endswith("/compose"):
            if created:
                stored[path.split("/o/", 1)[1][:-len("/compose")]] = COMPOSITE
            return web.json_response({"error": {"code": status, "message": "x"}},
                                     status=status)
        if request.method == "DELETE":
            name = path.split("/o/", 1)[1]
            deleted.append(name)
            stored.pop(name, None)
            return web.Response(status=204)
        return web.Response(status=404)

    config = ClientConfig(retry=RetryPolicy(max_attempts=1, initial_delay=0, max_delay=0))
    async with Server(answer) as (endpoint, _), AsyncClient(config, endpoint=endpoint) as client:
        with pytest.raises(error) as failed:
            await fetch_composed(client, _listed())
    assert (failed.value.operation, failed.value.status) == ("compose", status)
    assert not stored and not leftover_composites()
    assert len(deleted) == (1 if created else 0)


def test_composites_go_in_a_folder_clean_finds() -> None:
    # "tmp-composed-<pid>-<uuid>" composites were never found by clean_bucket.
    from aioflux._engines.download import DownloadOptions

    with pytest.raises(ValueError, match="composed_prefix must be a folder"):
        DownloadOptions(composed_prefix="tmp-composed-")
    assert DownloadOptions(composed_prefix="tmp/").composed_prefix == "tmp/"


async def test_a_closing_client_deletes_the_composites_it_could_not() -> None:
    # A composite whose delete failed is left for the exit clean-up; after an
    # `async with` client closed, that clean-up could not use it: it stayed.
    deletes: list[str] = []

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        await request.read()
        path = request.path
        if request.method == "POST" and path.endswith("/compose"):
            name = path.split("/o/", 1)[1][:-len("/compose")]
            return web.json_response({"bucket": "bkt", "name": name, "generation": "11",
                                      "size": str(len(COMPOSITE)),
                                      "crc32c": encode_crc32c(_composite_crc())})
        if request.method == "DELETE":
            deletes.append(path)
            if len(deletes) <= 2:  # the call's delete fails (both attempts)
                return web.json_response({"error": {"code": 503, "message": "x"}}, status=503)
            return web.Response(status=204)
        name = path.split("/o/", 1)[1]
        return web.Response(body=COMPOSITE, headers={"x-goog-generation": "11",
                                                     "x-goog-hash": f"crc32c={_crc(COMPOSITE)}"})

    async with Server(answer) as (endpoint, _):
        async with AsyncClient(CONFIG, endpoint=endpoint) as client:
            assert b"".join(await fetch_composed(client, _listed())) == COMPOSITE
            assert len(leftover_composites()) == 1  # left for later
        assert len(deletes) == 3 and not leftover_composites()  # deleted at the close
