"""A GCS copy (JSON ``rewriteTo``) is of the source generation a stat saw,
must have the source's size and crc32c, and a rewrite whose calls do not
move forward is refused instead of called forever.

The server is scripted (tests/servers/web_server.py).
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    NotFound,
    ProtocolError,
    RetryPolicy,
)
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from tests.servers.web_server import Answer, Served, Server

RETRY = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)
DATA = b"x" * 1000


def _resource(name: str, data: bytes, generation: int) -> dict[str, str]:
    return {"bucket": "bkt", "name": name, "size": str(len(data)),
            "generation": str(generation), "crc32c": encode_crc32c(crc32c(data))}


def _gcs(fault: str, requests: list[web.Request]) -> Answer:
    """``src`` holds DATA at generation 5; the rewrite answers with
    ``fault``: ``truncate`` (a shorter copy), ``loop`` (the same token
    forever) or none."""
    async def answer(request: web.Request, served: Served) -> web.Response:
        requests.append(request)
        if request.method == "GET":
            return web.json_response(_resource("src", DATA, 5))
        if request.method == "DELETE":
            return web.Response(status=204)
        if fault == "loop":
            return web.json_response({"done": False, "rewriteToken": "SAME",
                                      "totalBytesRewritten": "0"})
        copy = DATA[:500] if fault == "truncate" else DATA
        return web.json_response({"done": True, "resource": _resource("dst", copy, 9)})

    return answer


@pytest.mark.parametrize("fault", ["", "truncate", "loop"])
async def test_a_copy_is_pinned_checked_and_ends(fault: str) -> None:
    requests: list[web.Request] = []
    async with Server(_gcs(fault, requests)) as (endpoint, _), AsyncClient(
            ClientConfig(retry=RETRY), endpoint=endpoint, credentials=None) as client:
        if fault == "truncate":
            with pytest.raises(ChecksumMismatch, match=r"copy gs://bkt/dst: the copy's size "
                                                       r"and crc32c differ.*deleted"):
                await client.copy("bkt", "src", "bkt", "dst")
        elif fault == "loop":
            with pytest.raises(ProtocolError, match="no new token"):
                # Bounded: the old code called a looping rewrite forever.
                await asyncio.wait_for(client.copy("bkt", "src", "bkt", "dst"), 5)
        else:
            assert (await client.copy("bkt", "src", "bkt", "dst")).size == len(DATA)
    rewrites = [r for r in requests if r.method == "POST"]
    assert all(r.query["ifSourceGenerationMatch"] == "5" for r in rewrites)
    assert len(rewrites) == (2 if fault == "loop" else 1)  # refused on the first repeat
    deletes = [(r.path, r.query.get("ifGenerationMatch")) for r in requests
               if r.method == "DELETE"]
    assert deletes == ([("/storage/v1/b/bkt/o/dst", "9")] if fault == "truncate" else [])


@pytest.mark.parametrize("source_gone", [False, True])
async def test_a_rewrite_not_found_names_what_is_missing(source_gone: bool) -> None:
    # A rewrite's 404 names neither side: a second stat tells a source
    # deleted since the first from a destination bucket that is not there.
    stats: list[str] = []

    async def answer(request: web.Request, served: Served) -> web.Response:
        if request.method == "GET":
            stats.append(request.path)
            if source_gone and len(stats) > 1:
                return web.json_response({"error": {"code": 404, "message": "No such object: "
                                                    "bkt/src"}}, status=404)
            return web.json_response(_resource("src", DATA, 5))
        return web.json_response({"error": {"code": 404, "message": "The specified bucket "
                                            "does not exist."}}, status=404)

    async with Server(answer) as (endpoint, _), AsyncClient(
            ClientConfig(retry=RETRY), endpoint=endpoint, credentials=None) as client:
        with pytest.raises(NotFound) as failed:
            await client.copy("bkt", "src", "nobkt", "dst")
    assert len(stats) == 2
    missing = ("bkt", "src") if source_gone else ("nobkt", "dst")
    assert (failed.value.operation, failed.value.bucket, failed.value.name) == ("copy", *missing)
    assert str(failed.value).startswith(f"copy gs://{missing[0]}/{missing[1]} failed: HTTP 404")
