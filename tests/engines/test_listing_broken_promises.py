"""Listing pages that break a listing's promise, from a real HTTP server.

A store lists each name once, in ascending order, under the prefix and
inside the offsets asked; the parallel lister and ``rm -r`` rely on it. An
aiohttp server on 127.0.0.1 answers the GCS JSON and S3 ListObjectsV2
listings with a first page that keeps the promise and a second that does
not. The listing must end in a ``ProtocolError`` naming it, and ``rm -r``
must delete nothing that page lists.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import socket
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from aioflux import AsyncClient, ClientConfig, ProtocolError, RetryPolicy
from aioflux.cli import main
from aioflux.s3 import S3Store
from tests.servers.raw_server import serving
from tests.servers.web_server import Served, Server

RETRY = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)
GOOD = ["pre/a", "pre/b"]
# The second page of each case, after GOOD.
BROKEN = {
    "outside the prefix": ["pre/c", "secret/key"],
    "out of order": ["pre/d", "pre/c"],
    "repeated across pages": ["pre/b", "pre/c"],
    "repeated in a page": ["pre/c", "pre/c"],
}
WHY = {
    "outside the prefix": "'secret/key', which is not under the prefix",
    "out of order": "'pre/c' after 'pre/d'",
    "repeated across pages": "'pre/b' after 'pre/b'",
    "repeated in a page": "'pre/c' after 'pre/c'",
}


def _gcs_page(names: list[str], token: str | None, prefixes: list[str]) -> bytes:
    doc: dict[str, Any] = {"kind": "storage#objects", "prefixes": prefixes, "items": [
        {"bucket": "bkt", "name": n, "size": "1", "generation": "1"} for n in names]}
    if token:
        doc["nextPageToken"] = token
    return json.dumps(doc).encode()


def _s3_page(names: list[str], token: str | None, prefixes: list[str]) -> bytes:
    entries = "".join(f"<Contents><Key>{n}</Key><Size>1</Size><ETag>\"e\"</ETag>"
                      "<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>"
                      for n in names)
    entries += "".join(f"<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>"
                       for p in prefixes)
    more = (f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}"
            "</NextContinuationToken>") if token else "<IsTruncated>false</IsTruncated>"
    return ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
            'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name>'
            f"{more}{entries}</ListBucketResult>").encode()


def _lister(backend: str, first: list[str], second: list[str],
            prefixes: tuple[list[str], list[str]] = ([], [])) -> Any:
    """Answers listing requests (page 2 when a token is sent), 404 to the rest."""
    page = _gcs_page if backend == "gcs" else _s3_page

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        token = request.query.get("pageToken") or request.query.get("continuation-token")
        listing = "list-type" in request.query or request.path.endswith("/o")
        if request.method != "GET" or not listing:
            return web.Response(status=404)
        body = page(second, None, prefixes[1]) if token else page(first, "t2", prefixes[0])
        ctype = "application/json" if backend == "gcs" else "application/xml"
        return web.Response(body=body, content_type=ctype)

    return answer


def _store(backend: str, endpoint: str) -> Any:
    if backend == "gcs":
        return AsyncClient(ClientConfig(retry=RETRY), endpoint=endpoint, credentials="tok")
    return S3Store(ClientConfig(retry=RETRY), endpoint=endpoint, region="us-east-1",
                   addressing="path")


async def _names(objects: AsyncIterator[Any]) -> list[str]:
    return [o.name async for o in objects]


BACKENDS = pytest.mark.parametrize("backend", ["gcs", "s3"])


@BACKENDS
@pytest.mark.parametrize("case", list(BROKEN))
async def test_a_page_breaking_the_listing_promise_is_refused(backend: str, case: str) -> None:
    async with Server(_lister(backend, GOOD, BROKEN[case])) as (endpoint, served):
        async with _store(backend, endpoint) as store:
            seen: list[str] = []
            with pytest.raises(ProtocolError) as info:
                async for obj in store.list_objects("bkt", "pre/"):
                    seen.append(obj.name)
    assert seen == GOOD  # nothing of the broken page reached the caller
    scheme = "gs" if backend == "gcs" else "s3"
    message = str(info.value)
    assert message.startswith(f"list {scheme}://bkt/pre/ failed: the server listed "), message
    assert WHY[case] in message
    assert len(served.paths) == 2  # not retried: the same server answers the same


@BACKENDS
async def test_a_prefix_outside_the_prefix_is_refused(backend: str) -> None:
    async with Server(_lister(backend, GOOD, [], ([], ["other/"]))) as (endpoint, _):
        async with _store(backend, endpoint) as store:
            with pytest.raises(ProtocolError, match="the prefix 'other/'"):
                async for _page in store.list("bkt", "pre/", delimiter="/"):
                    pass


async def test_gcs_names_outside_the_offsets_are_refused() -> None:
    # GCS applies both offsets itself (S3 has no end offset: the S3 store
    # drops what lies past it, as a legitimate answer).
    async with Server(_lister("gcs", ["pre/a"], ["pre/x"])) as (endpoint, _):
        async with _store("gcs", endpoint) as store:
            with pytest.raises(ProtocolError, match="at or past the end offset 'pre/m'"):
                await _names(store.list_objects("bkt", "pre/", end_offset="pre/m"))
            with pytest.raises(ProtocolError, match="below the start offset 'pre/b'"):
                await _names(store.list_objects("bkt", "pre/", start_offset="pre/b"))


async def test_a_kept_promise_lists_every_page() -> None:
    async with Server(_lister("s3", GOOD, ["pre/c", "pre/d"])) as (endpoint, _):
        async with _store("s3", endpoint) as store:
            assert await _names(store.list_objects("bkt", "pre/")) == [*GOOD, "pre/c", "pre/d"]


@BACKENDS
def test_rm_deletes_nothing_when_the_listing_names_a_foreign_object(
        backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def serve() -> tuple[int, list[str]]:
        listing = _lister(backend, ["tmp/a"], ["tmp/b", "users/passwords"])
        async with Server(listing) as (endpoint, served):
            flag = "--endpoint" if backend == "gcs" else "--s3-endpoint"
            scheme = "gs" if backend == "gcs" else "s3"
            extra = [] if backend == "gcs" else ["--region", "us-east-1"]
            code = await asyncio.to_thread(main, ["rm", "-r", f"{scheme}://bkt/tmp/", flag,
                                                  endpoint, *extra])
            return code, served.paths

    code, paths = asyncio.run(serve())
    assert code != 0
    assert "users/passwords" in capsys.readouterr().err
    # rm deletes as it lists: the first page's object may be gone (a DELETE
    # of tmp/a), never one of the page that breaks the promise (no batch
    # POST either: its names would be unknown here).
    assert all(p.startswith(("GET ", "DELETE /storage/v1/b/bkt/o/tmp%2Fa?")) for p in paths), \
        paths


async def test_a_directory_bucket_may_list_out_of_order() -> None:
    # S3 Express One Zone lists keys in no particular order: held to the prefix only.
    bucket = "bkt--use1-az4--x-s3"
    async with Server(_lister("s3", ["pre/z", "pre/b"], ["pre/a"])) as (endpoint, _):
        async with _store("s3", endpoint) as store:
            assert await _names(store.list_objects(bucket, "pre/")) == ["pre/z", "pre/b", "pre/a"]
        async with _store("s3", endpoint) as store:
            with pytest.raises(ProtocolError, match="not under the prefix"):
                await _names(store.list_objects(bucket, "other/"))


async def _no_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


@pytest.mark.parametrize("kind", ["aiohttp", "raw"])
async def test_a_connection_accepted_as_the_server_closes_is_closed(kind: str) -> None:
    # rm's flake under load: a connection the client abandoned (a DELETE
    # cut short as the listing failed) was accepted just before the
    # scripted server closed; its transport, built after, was left open.
    async with contextlib.AsyncExitStack() as stack:
        if kind == "aiohttp":
            endpoint, _ = await stack.enter_async_context(Server(_lister("s3", [], [])))
        else:
            endpoint = await stack.enter_async_context(serving(_no_answer))
        client = socket.create_connection(("127.0.0.1", int(endpoint.rsplit(":", 1)[1])))
        # Turn 1 accepts it (the connect is done: the kernel completed it);
        # turn 2 would build its transport, after the close below.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    client.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
