"""Listings that never end, upload listings outside the prefix, and batch
delete answers that are no DeleteResult, from a real HTTP server.

An aiohttp server on 127.0.0.1 answers every page "truncated" with a page
token or marker that does not move: the GCS JSON listing and S3's
ListObjectsV2 (empty pages, or prefix-only pages), ListParts and
ListMultipartUploads (S3's and GCS's XML API). Each listing must end in a
``ProtocolError`` naming it, after a few requests, not loop forever; a
listing whose pages move forward (empty pages with fresh tokens included)
still lists everything. ``clean`` must abort nothing when the upload
listing names a key outside the prefix, and ``delete_many`` must not report
success on an answer that says nothing was deleted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from aioflux import (
    AsyncClient,
    ClientConfig,
    PermissionDenied,
    ProtocolError,
    RetryPolicy,
)
from aioflux._core.checks import pages as pages_module
from aioflux._engines.clean import clean_bucket
from aioflux.cli import main
from aioflux.s3 import S3Store
from tests.servers.web_server import Served, Server

# Retries allowed, so a test sees that the refusal is final.
RETRY = RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0)
# The fixed code refuses within a few requests; the old one never returned.
PATIENCE = 5.0
# A backstop for the CLI tests, which run in a thread wait_for cannot stop.
pytestmark = pytest.mark.timeout(60)
NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
OLD = "2020-01-01T00:00:00.000Z"
BACKENDS = pytest.mark.parametrize("backend", ["gcs", "s3"])

Answer = Callable[[web.Request, Served], Awaitable[web.StreamResponse]]


def _store(backend: str, endpoint: str) -> Any:
    if backend == "gcs":
        return AsyncClient(ClientConfig(retry=RETRY), endpoint=endpoint, credentials="tok")
    return S3Store(ClientConfig(retry=RETRY), endpoint=endpoint, region="us-east-1",
                   addressing="path")


def _xml(body: str) -> web.Response:
    return web.Response(body=f'<?xml version="1.0" encoding="UTF-8"?>{body}'.encode(),
                        content_type="application/xml")


async def _patiently(call: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(call, PATIENCE)


async def _names(objects: AsyncIterator[Any]) -> list[str]:
    return [o.name async for o in objects]


async def _pages(pages: AsyncIterator[Any]) -> list[Any]:
    return [page async for page in pages]


# -- object listings: GCS JSON pageToken, S3 ListObjectsV2 continuation-token --


def _object_lister(backend: str, pages: dict[str, tuple[list[str], list[str], str | None]]
                   ) -> Answer:
    """Answers listings: ``pages[token sent, "" for none]`` is (names,
    prefixes, next token); 404 to the rest."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        if backend == "gcs":
            if not request.path.endswith("/o"):
                return web.Response(status=404)
            names, prefixes, token = pages[request.query.get("pageToken", "")]
            doc: dict[str, Any] = {"kind": "storage#objects", "prefixes": prefixes, "items": [
                {"bucket": "bkt", "name": n, "size": "1", "generation": "1"} for n in names]}
            if token:
                doc["nextPageToken"] = token
            return web.Response(body=json.dumps(doc).encode(), content_type="application/json")
        if "list-type" not in request.query:
            return web.Response(status=404)
        names, prefixes, token = pages[request.query.get("continuation-token", "")]
        more = (f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}"
                "</NextContinuationToken>") if token else "<IsTruncated>false</IsTruncated>"
        entries = "".join(f"<Contents><Key>{n}</Key><Size>1</Size><ETag>\"e\"</ETag>"
                          "</Contents>" for n in names)
        entries += "".join(f"<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>"
                           for p in prefixes)
        return _xml(f"<ListBucketResult {NS}><Name>bkt</Name>{more}{entries}</ListBucketResult>")

    return answer


# Each case: the pages by the token that asks for them, and whether the
# listing is asked with a delimiter.
LOOPS: dict[str, tuple[dict[str, tuple[list[str], list[str], str | None]], bool]] = {
    # r03: every page empty, truncated, the same token.
    "empty pages, one token": ({"": ([], [], "SAME"), "SAME": ([], [], "SAME")}, False),
    # The same with the prefix-only pages of a delimited listing.
    "prefix-only pages, one token": (
        {"": ([], ["pre/a/"], "SAME"), "SAME": ([], ["pre/a/"], "SAME")}, True),
    # A cycle longer than one page: t1, t2, t1...
    "a token cycle": ({"": (["pre/a"], [], "t1"), "t1": ([], [], "t2"),
                       "t2": ([], [], "t1")}, False),
}


@BACKENDS
@pytest.mark.parametrize("case", list(LOOPS))
async def test_a_listing_whose_token_repeats_is_refused(backend: str, case: str) -> None:
    pages, delimited = LOOPS[case]
    async with Server(_object_lister(backend, pages)) as (endpoint, served):
        async with _store(backend, endpoint) as store:
            with pytest.raises(ProtocolError) as info:
                if delimited:
                    await _patiently(_pages(store.list("bkt", "pre/", delimiter="/")))
                else:
                    await _patiently(_names(store.list_objects("bkt", "pre/")))
    scheme = "gs" if backend == "gcs" else "s3"
    message = str(info.value)
    assert message.startswith(f"list {scheme}://bkt/pre/ failed: the server answered a page "
                              "token it had already given in this listing"), message
    assert "SAME" not in message and "t1" not in message  # tokens are opaque server data
    assert (info.value.operation, info.value.bucket, info.value.name) == ("list", "bkt", "pre/")
    # Refused on the first repeat, not retried.
    assert len(served.paths) == len(pages)


@BACKENDS
async def test_empty_pages_with_fresh_tokens_list_everything(backend: str) -> None:
    pages: dict[str, tuple[list[str], list[str], str | None]] = {
        "": (["pre/a"], [], "t1"), "t1": ([], [], "t2"), "t2": ([], [], "t3"),
        "t3": (["pre/b"], [], None)}
    async with Server(_object_lister(backend, pages)) as (endpoint, served):
        async with _store(backend, endpoint) as store:
            assert await _patiently(_names(store.list_objects("bkt", "pre/"))) == [
                "pre/a", "pre/b"]
    assert len(served.paths) == 4


@BACKENDS
async def test_empty_pages_without_end_are_refused(backend: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages_module, "MOST_EMPTY_PAGES", 5)
    # Every page empty, each with a fresh token: the server would go on forever.
    pages: dict[str, tuple[list[str], list[str], str | None]] = {
        "": (["pre/a"], [], "t1"), **{f"t{i}": ([], [], f"t{i + 1}") for i in range(1, 20)}}
    async with Server(_object_lister(backend, pages)) as (endpoint, served):
        async with _store(backend, endpoint) as store:
            with pytest.raises(ProtocolError) as info:
                await _patiently(_names(store.list_objects("bkt", "pre/")))
    scheme = "gs" if backend == "gcs" else "s3"
    assert str(info.value).startswith(
        f"list {scheme}://bkt/pre/ failed: the server answered 6 empty pages in a row"), info.value
    assert len(served.paths) == 7  # the page with a name, then 6 empty ones


# -- ListParts -------------------------------------------------------------------


def _parts_lister(pages: dict[str, tuple[list[int], str | None]]) -> Answer:
    """ListParts: ``pages[part-number-marker sent, "" for none]`` is (part
    numbers, next marker or None for the last page)."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        if request.method != "GET" or "uploadId" not in request.query:
            return web.Response(status=404)
        numbers, marker = pages[request.query.get("part-number-marker", "")]
        parts = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>\"e{n}\"</ETag>"
                        "<Size>5</Size></Part>" for n in numbers)
        more = ("<IsTruncated>false</IsTruncated>" if marker is None else
                f"<IsTruncated>true</IsTruncated><NextPartNumberMarker>{marker}"
                "</NextPartNumberMarker>")
        return _xml(f"<ListPartsResult {NS}><Bucket>bkt</Bucket><Key>obj</Key>{more}{parts}"
                    "</ListPartsResult>")

    return answer


PART_LOOPS: dict[str, tuple[dict[str, tuple[list[int], str | None]], str]] = {
    # r03: the same part and the same marker on every page.
    "the same part and marker": ({"": ([1], "1"), "1": ([1], "1")}, "listed part 1 after part 1"),
    # Empty pages whose marker does not move: no part repeats, still endless.
    "empty pages, one marker": ({"": ([1, 2], "2"), "2": ([], "2")},
                                "the next part number marker 2 after the marker 2"),
    "a marker going back": ({"": ([1, 2], "2"), "2": ([3], "1"), "1": ([2], "2")},
                            "the next part number marker 1 after the marker 2"),
    "parts out of order": ({"": ([2, 1], None)}, "listed part 1 after part 2"),
    "a marker that is no part number": ({"": ([1], "x"), "x": ([1], "x")},
                                        "the part number marker 'x'"),
    # Truncated, with no marker to ask for the rest: a listing cut short.
    "more parts but no marker": ({"": ([1], "")}, "the part number marker ''"),
}


@BACKENDS
@pytest.mark.parametrize("case", list(PART_LOOPS))
async def test_a_part_listing_that_does_not_move_forward_is_refused(backend: str,
                                                                    case: str) -> None:
    pages, why = PART_LOOPS[case]
    async with Server(_parts_lister(pages)) as (endpoint, served):
        async with _store(backend, endpoint) as store:
            with pytest.raises(ProtocolError) as info:
                await _patiently(store.list_parts("bkt", "obj", "up1"))
    scheme = "gs" if backend == "gcs" else "s3"
    message = str(info.value)
    assert message.startswith(f"list parts {scheme}://bkt/obj failed: the server "), message
    assert why in message
    assert "up1" not in message
    assert (info.value.operation, info.value.bucket, info.value.name) == (
        "list parts", "bkt", "obj")
    assert len(served.paths) <= 3


@BACKENDS
async def test_a_part_listing_that_moves_forward_lists_every_part(backend: str) -> None:
    pages: dict[str, tuple[list[int], str | None]] = {
        "": ([1, 2], "2"), "2": ([], "4"), "4": ([5, 7], None)}
    async with Server(_parts_lister(pages)) as (endpoint, _):
        async with _store(backend, endpoint) as store:
            parts = await _patiently(store.list_parts("bkt", "obj", "up1"))
    assert [p.number for p in parts] == [1, 2, 5, 7]


# -- ListMultipartUploads --------------------------------------------------------

Uploads = list[tuple[str, str]]


def _uploads_lister(pages: dict[tuple[str, str], tuple[Uploads, tuple[str, str] | None]],
                    aborted: list[str] | None = None) -> Answer:
    """ListMultipartUploads: ``pages[(key-marker, upload-id-marker) sent]``
    is ((key, upload id) entries, next markers or None); object listings
    (a GCS clean lists composites first) are empty; aborts are recorded."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        q = request.query
        if request.method == "DELETE":
            if aborted is not None:
                aborted.append(request.path_qs)
            return web.Response(status=204)
        if request.path.endswith("/o"):  # GCS JSON listing: no composites
            return web.Response(body=b'{"kind": "storage#objects"}',
                                content_type="application/json")
        if request.method != "GET" or "uploads" not in q:
            return web.Response(status=404)
        entries, markers = pages[(q.get("key-marker", ""), q.get("upload-id-marker", ""))]
        body = "".join(f"<Upload><Key>{k}</Key><UploadId>{u}</UploadId>"
                       f"<Initiated>{OLD}</Initiated></Upload>" for k, u in entries)
        more = ("<IsTruncated>false</IsTruncated>" if markers is None else
                f"<IsTruncated>true</IsTruncated><NextKeyMarker>{markers[0]}</NextKeyMarker>"
                f"<NextUploadIdMarker>{markers[1]}</NextUploadIdMarker>")
        return _xml(f"<ListMultipartUploadsResult {NS}><Bucket>bkt</Bucket>"
                    f"<Prefix>{q.get('prefix', '')}</Prefix>{more}{body}"
                    "</ListMultipartUploadsResult>")

    return answer


UPLOAD_LOOPS: dict[str, tuple[dict[tuple[str, str], tuple[Uploads, tuple[str, str] | None]],
                              str]] = {
    # r03: the same upload and the same markers on every page.
    "the same upload and markers": (
        {("", ""): ([("k", "u")], ("k", "u")), ("k", "u"): ([("k", "u")], ("k", "u"))},
        "listed an upload of 'k' twice"),
    "empty pages, the same markers": (
        {("", ""): ([("k", "u")], ("k", "u")), ("k", "u"): ([], ("k", "u"))},
        "answered the next markers (key 'k') twice"),
    # Cycles through fresh markers: each sends the listing back to its start.
    "a key marker going back": (
        {("", ""): ([("k", "u")], ("k", "u")), ("k", "u"): ([("m", "v")], ("a", "w")),
         ("a", "w"): ([("k", "u")], ("k", "u"))},
        "the next key marker 'a' after 'k'"),
    "a page below its key marker": (
        {("", ""): ([("a", "u"), ("k", "v")], ("k", "v")),
         ("k", "v"): ([("a", "u"), ("k", "v")], ("k", "w")),
         ("k", "w"): ([("a", "u"), ("k", "v")], ("k", "v"))},
        "listed an upload of 'a' after the key marker 'k'"),
    # Truncated, with no marker to ask for the rest: a listing cut short.
    "more uploads but no marker": (
        {("", ""): ([("k", "u")], ("", ""))}, "said more uploads follow but named no key marker"),
}


@BACKENDS
@pytest.mark.parametrize("case", list(UPLOAD_LOOPS))
async def test_an_upload_listing_that_does_not_move_forward_is_refused(backend: str,
                                                                      case: str) -> None:
    pages, why = UPLOAD_LOOPS[case]
    async with Server(_uploads_lister(pages)) as (endpoint, served):
        async with _store(backend, endpoint) as store:
            with pytest.raises(ProtocolError) as info:
                await _patiently(store.list_multipart_uploads("bkt"))
            with pytest.raises(ProtocolError):  # r03: `aioflux clean` looped too
                await _patiently(clean_bucket(store, "bkt", dry_run=True))
    scheme = "gs" if backend == "gcs" else "s3"
    message = str(info.value)
    assert message.startswith(f"list multipart uploads {scheme}://bkt failed: the server "), (
        message)
    assert why in message
    assert info.value.operation == "list multipart uploads"
    assert not any(p.startswith("DELETE") for p in served.paths)


@BACKENDS
async def test_uploads_in_start_order_list_every_page(backend: str) -> None:
    # AWS lists a key's uploads by when they started (their ids in no
    # order); moto lists all uploads in start order, whatever their keys.
    pages: dict[tuple[str, str], tuple[Uploads, tuple[str, str] | None]] = {
        ("", ""): ([("k", "y"), ("a", "zz")], ("k", "y")),
        ("k", "y"): ([("k", "b")], ("k", "b")),
        ("k", "b"): ([("m", "c"), ("k", "a")], None)}
    async with Server(_uploads_lister(pages)) as (endpoint, _):
        async with _store(backend, endpoint) as store:
            listed = await _patiently(store.list_multipart_uploads("bkt"))
    assert [(u.name, u.upload_id) for u in listed] == [
        ("k", "y"), ("a", "zz"), ("k", "b"), ("m", "c"), ("k", "a")]


# -- clean and uploads outside the prefix (r04) -----------------------------------

FOREIGN: dict[tuple[str, str], tuple[Uploads, tuple[str, str] | None]] = {
    ("", ""): ([("tmp/a", "U1"), ("prod/model-final.ckpt", "LIVE-UPLOAD")], None)}


@BACKENDS
async def test_an_upload_listing_outside_the_prefix_is_refused_and_nothing_aborted(
        backend: str) -> None:
    aborted: list[str] = []
    async with Server(_uploads_lister(FOREIGN, aborted)) as (endpoint, served):
        async with _store(backend, endpoint) as store:
            with pytest.raises(ProtocolError) as info:
                await _patiently(store.list_multipart_uploads("bkt", "tmp/"))
            with pytest.raises(ProtocolError, match=r"prod/model-final\.ckpt"):
                await _patiently(clean_bucket(store, "bkt", "tmp/", older_than=0))
    scheme = "gs" if backend == "gcs" else "s3"
    assert str(info.value).startswith(
        f"list multipart uploads {scheme}://bkt/tmp/ failed: the server listed an upload of "
        "'prod/model-final.ckpt', which is not under the prefix"), str(info.value)
    assert "LIVE-UPLOAD" not in str(info.value)
    assert aborted == []
    assert all(p.startswith("GET ") for p in served.paths), served.paths


@BACKENDS
def test_cli_clean_aborts_nothing_outside_the_prefix(
        backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def serve() -> tuple[int, list[str], list[str]]:
        aborted: list[str] = []
        async with Server(_uploads_lister(FOREIGN, aborted)) as (endpoint, served):
            scheme = "gs" if backend == "gcs" else "s3"
            where = (["--endpoint", endpoint] if backend == "gcs" else
                     ["--s3-endpoint", endpoint, "--region", "us-east-1"])
            code = await asyncio.to_thread(main, ["clean", f"{scheme}://bkt/tmp/",
                                                  "--older-than", "0", *where])
            return code, served.paths, aborted

    code, paths, aborted = asyncio.run(serve())
    assert code != 0
    assert "prod/model-final.ckpt" in capsys.readouterr().err
    assert aborted == []
    assert all(p.startswith("GET ") for p in paths), paths  # the server saw no DELETE


# -- DeleteObjects (r11, b) ------------------------------------------------------


def _deleter(answer_body: str) -> Answer:
    """Answers DeleteObjects with ``answer_body`` (a 200), lists ``tmp/a``
    and ``tmp/b`` to ListObjectsV2."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        if request.method == "POST" and "delete" in request.query:
            await request.read()
            return _xml(answer_body)
        if request.method == "GET" and "list-type" in request.query:
            return _xml(f"<ListBucketResult {NS}><Name>bkt</Name><IsTruncated>false"
                        "</IsTruncated><Contents><Key>tmp/a</Key><Size>1</Size><ETag>\"e\""
                        "</ETag></Contents><Contents><Key>tmp/b</Key><Size>1</Size><ETag>\"e\""
                        "</ETag></Contents></ListBucketResult>")
        return web.Response(status=404)

    return answer


NOT_DELETED = {
    "another document": (f"<ListBucketResult {NS}><Name>bkt</Name></ListBucketResult>",
                         "answered <ListBucketResult>, not <DeleteResult>"),
    "a key not asked for": (f"<DeleteResult {NS}><Deleted><Key>tmp/a</Key></Deleted>"
                            "<Deleted><Key>users/passwords</Key></Deleted></DeleteResult>",
                            "reported deleting 'users/passwords', a key it was not asked"),
}


@pytest.mark.parametrize("case", list(NOT_DELETED))
async def test_delete_many_refuses_an_answer_that_is_no_delete_result(case: str) -> None:
    body, why = NOT_DELETED[case]
    async with Server(_deleter(body)) as (endpoint, served):
        async with _store("s3", endpoint) as store:
            with pytest.raises(ProtocolError) as info:
                await _patiently(store.delete_many("bkt", ["tmp/a", "tmp/b"]))
    message = str(info.value)
    assert message.startswith("delete many s3://bkt/tmp/a failed: the server "), message
    assert why in message
    assert info.value.operation == "delete many" and info.value.bucket == "bkt"
    assert [p.split("?")[0] for p in served.paths] == ["POST /bkt"]  # final: not retried


async def test_delete_many_accepts_a_delete_result() -> None:
    body = (f"<DeleteResult {NS}><Deleted><Key>tmp/a</Key></Deleted>"
            "<Error><Key>tmp/b</Key><Code>NoSuchKey</Code><Message>gone</Message></Error>"
            "</DeleteResult>")
    async with Server(_deleter(body)) as (endpoint, served):
        async with _store("s3", endpoint) as store:
            await _patiently(store.delete_many("bkt", ["tmp/a", "tmp/b"]))
    assert len(served.paths) == 1


async def test_delete_many_still_raises_a_key_it_could_not_delete() -> None:
    body = (f"<DeleteResult {NS}><Error><Key>tmp/b</Key><Code>AccessDenied</Code>"
            "<Message>no</Message></Error></DeleteResult>")
    async with Server(_deleter(body)) as (endpoint, _):
        async with _store("s3", endpoint) as store:
            with pytest.raises(PermissionDenied, match="AccessDenied") as info:
                await _patiently(store.delete_many("bkt", ["tmp/a", "tmp/b"]))
    assert (info.value.bucket, info.value.name, info.value.reason) == (
        "bkt", "tmp/b", "AccessDenied")
    assert "tmp/b" in str(info.value)


def test_rm_reports_no_removal_when_the_answer_is_no_delete_result(
        capsys: pytest.CaptureFixture[str]) -> None:
    async def serve() -> int:
        async with Server(_deleter(NOT_DELETED["another document"][0])) as (endpoint, _):
            return await asyncio.to_thread(main, ["rm", "-r", "s3://bkt/tmp/", "--s3-endpoint",
                                                  endpoint, "--region", "us-east-1"])

    code = asyncio.run(serve())
    out = capsys.readouterr()
    assert code != 0
    assert "removed" not in out.out
    assert "not <DeleteResult>" in out.err
