"""GCS writes and copies against a server that never finishes or answers
what cannot be checked.

- A resumable upload whose 308s persist nothing new (or next to nothing)
  ends within the retry policy instead of re-sending the same bytes forever.
- A rewrite whose answers bring fresh tokens but no progress ends.
- A result that cannot be verified (no crc32c, another object's name, no
  generation) is never a success; and nothing is deleted that the write
  did not prove its own: without a generation in the answer, another
  writer's object under the name is left alone.

The server is scripted (tests/servers/web_server.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    ProtocolError,
    RetryPolicy,
    StorageError,
    TransportError,
)
from aioflux._core.integrity.crc import Crc32c, crc32c, encode_crc32c
from tests.servers.web_server import Answer, Served, Server

ATTEMPTS = 3
RETRY = RetryPolicy(max_attempts=ATTEMPTS, initial_delay=0, max_delay=0)
# The new code ends in milliseconds; the old one looped until cancelled.
PATIENCE = 5.0
GRANULE = 256 * 1024
DATA = b"d" * (3 * GRANULE)


def _client(endpoint: str) -> AsyncClient:
    return AsyncClient(ClientConfig(retry=RETRY), endpoint=endpoint, credentials=None)


def _resource(name: str, data: bytes, generation: int | None) -> dict[str, str]:
    item = {"bucket": "bkt", "name": name, "size": str(len(data)),
            "crc32c": encode_crc32c(crc32c(data))}
    if generation is not None:
        item["generation"] = str(generation)
    return item


# -- resumable uploads -----------------------------------------------------------------


def _resumable(committed: list[int], step: int, sends: list[str]) -> Answer:
    """A session whose every answer is a 308 persisting ``step`` more bytes
    than ``committed[0]`` (0: nothing new), never publishing."""
    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        await request.read()
        if request.method == "POST":
            return web.Response(headers={"Location": f"http://{request.host}/upload?id=S"})
        if request.method == "DELETE":
            return web.Response(status=204)
        content_range = request.headers["Content-Range"]
        if not content_range.startswith("bytes */"):
            sends.append(content_range)
            committed[0] = min(committed[0] + step, len(DATA) - 1)
        headers = {"Range": f"bytes=0-{committed[0] - 1}"} if committed[0] else {}
        return web.Response(status=308, headers=headers)

    return answer


@pytest.mark.parametrize("first", [0, GRANULE])
async def test_a_308_that_persists_nothing_new_ends_within_the_retry_policy(first: int) -> None:
    """No ``Range`` at all, or the same ``Range`` again: each attempt ends on
    the first 308 that does not move forward, and the retry asks where the
    session stands before sending again."""
    sends: list[str] = []
    async with Server(_resumable([first], 0, sends)) as (endpoint, served), \
            _client(endpoint) as client:
        with pytest.raises(TransportError, match="no progress") as caught:
            await asyncio.wait_for(client.write("bkt", "obj", DATA, resumable=True), PATIENCE)
    assert "gs://bkt/obj" in str(caught.value)
    assert caught.value.attempts == ATTEMPTS
    # With a Range the first 308 moves forward once; then no send does.
    moved = [f"bytes 0-{len(DATA) - 1}/{len(DATA)}"] if first else []
    assert sends == moved + [f"bytes {first}-{len(DATA) - 1}/{len(DATA)}"] * ATTEMPTS
    puts = [p for p in served.paths if p.startswith("PUT")]
    assert len(puts) == len(sends) + ATTEMPTS - 1  # a status query before every retry


async def test_a_308_that_persists_a_byte_at_a_time_is_cut_off() -> None:
    """Progress of a byte an answer would re-send the chunk once per byte:
    an attempt gets the rounds a server persisting 256 KiB each would need."""
    sends: list[str] = []
    async with Server(_resumable([0], 1, sends)) as (endpoint, _), _client(endpoint) as client:
        with pytest.raises(TransportError, match="persisted only up to offset"):
            await asyncio.wait_for(client.write("bkt", "obj", DATA, resumable=True), PATIENCE)
    rounds = 2 + len(DATA) // GRANULE
    assert len(sends) == rounds * ATTEMPTS


# -- copies -----------------------------------------------------------------------------


def _rewrite(answers: list[dict[str, Any]], requests: list[web.Request],
             stored: dict[str, str] | None) -> Answer:
    """``src`` holds DATA at generation 5; rewrites get ``answers`` in turn
    (the last one repeated), an unfinished one with a fresh token each
    time; a stat of ``dst`` finds ``stored``."""
    async def answer(request: web.Request, served: Served) -> web.Response:
        requests.append(request)
        if request.method == "GET" and request.path.endswith("/o/src"):
            return web.json_response(_resource("src", DATA, 5))
        if request.method == "GET":
            return web.json_response(stored) if stored else web.Response(status=404)
        if request.method == "DELETE":
            return web.Response(status=204)
        calls = sum(r.method == "POST" for r in requests)
        body = answers[min(calls, len(answers)) - 1]
        if not body["done"]:
            body = dict(body, rewriteToken=f"token-{calls}")
        return web.json_response(body)

    return answer


def _pending(total: Any) -> dict[str, Any]:
    return {"done": False, "totalBytesRewritten": total, "objectSize": str(len(DATA))}


def _done(resource: Any) -> dict[str, Any]:
    return {"done": True, "resource": resource, "totalBytesRewritten": str(len(DATA))}


async def _copy(answers: list[dict[str, Any]],
                stored: dict[str, str] | None = None) -> tuple[Any, list[web.Request]]:
    """The copy's ObjectInfo or error, and every request the server saw."""
    requests: list[web.Request] = []
    async with Server(_rewrite(answers, requests, stored)) as (endpoint, _), \
            _client(endpoint) as client:
        try:
            outcome: Any = await asyncio.wait_for(client.copy("bkt", "src", "bkt", "dst"),
                                                  PATIENCE)
        except StorageError as exc:
            outcome = exc
    return outcome, requests


def _deletes(requests: list[web.Request]) -> list[tuple[str, dict[str, str]]]:
    return [(r.path, dict(r.query)) for r in requests if r.method == "DELETE"]


async def test_a_rewrite_in_several_calls_that_moves_forward_completes() -> None:
    answers = [_pending("0"), _pending(str(GRANULE)), _done(_resource("dst", DATA, 9))]
    info, requests = await _copy(answers)
    assert (info.size, info.crc32c, info.generation) == (len(DATA), crc32c(DATA), 9)
    tokens = [r.query.get("rewriteToken") for r in requests if r.method == "POST"]
    assert tokens == [None, "token-1", "token-2"]


@pytest.mark.parametrize(("answers", "message"), [
    # A fresh token every time, no byte further: the old code called forever.
    ([_pending("0"), _pending("0")], "0 bytes rewritten after 0"),
    ([_pending("100"), _pending("99")], "99 bytes rewritten after 100"),
    ([_pending(str(len(DATA) + 1))], f"of a {len(DATA)}-byte source"),
    ([_pending(None)], "no byte count"),
], ids=["stuck", "backwards", "past-the-source", "no-count"])
async def test_a_rewrite_that_does_not_move_forward_ends(answers: list[dict[str, Any]],
                                                         message: str) -> None:
    failure, requests = await _copy(answers)
    assert isinstance(failure, ProtocolError), failure
    assert message in str(failure) and "copy gs://bkt/src" in str(failure)
    assert sum(r.method == "POST" for r in requests) == len(answers)
    assert _deletes(requests) == []


async def test_a_copy_result_without_crc32c_is_checked_by_a_stat() -> None:
    stored = _resource("dst", b"other bytes".ljust(len(DATA)), 9)
    no_crc = {k: v for k, v in _resource("dst", DATA, 9).items() if k != "crc32c"}
    failure, requests = await _copy([_done(no_crc)], stored)
    assert isinstance(failure, ChecksumMismatch), failure
    assert "copy gs://bkt/dst" in str(failure) and "deleted" in str(failure)
    assert _deletes(requests) == [("/storage/v1/b/bkt/o/dst",
                                   {"generation": "9", "ifGenerationMatch": "9"})]

    info, _ = await _copy([_done(no_crc)], _resource("dst", DATA, 9))
    assert (info.crc32c, info.generation) == (crc32c(DATA), 9)


@pytest.mark.parametrize(("resource", "error", "message"), [
    (_resource("elsewhere", DATA, 9), StorageError, "gs://bkt/elsewhere; the write is not"),
    (None, ProtocolError, "no readable object resource"),
    # A resource without a size read as a 0-byte copy: the good copy was
    # deleted for "sizes differ".
    ({k: v for k, v in _resource("dst", DATA, 9).items() if k != "size"}, ProtocolError,
     "no readable object resource (gives no size)"),
    # Wrong size, no generation: not ours to delete (whatever is live may
    # be another writer's).
    (_resource("dst", DATA[:10], None), ChecksumMismatch, "left alone"),
], ids=["another-object", "no-resource", "no-size", "no-generation"])
async def test_an_unverifiable_copy_result_fails_and_deletes_nothing(
        resource: Any, error: type[StorageError], message: str) -> None:
    failure, requests = await _copy([_done(resource)], _resource("dst", b"theirs", 99))
    assert type(failure) is error, failure
    assert message in str(failure) and "gs://bkt/dst" in str(failure)
    assert _deletes(requests) == []


# -- answers with no generation -----------------------------------------------------------


THEIRS = _resource("obj", b"another writer's object", 99)


def _single(answer_resource: dict[str, str], live: dict[str, str],
            requests: list[web.Request]) -> Answer:
    """A single-request upload answered with ``answer_resource``; a stat
    finds ``live`` under the name."""
    async def answer(request: web.Request, served: Served) -> web.Response:
        requests.append(request)
        await request.read()
        if request.method == "POST":
            return web.json_response(answer_resource)
        if request.method == "GET":
            return web.json_response(live)
        return web.Response(status=204)

    return answer


@pytest.mark.parametrize("answer_resource", [
    {"bucket": "bkt", "name": "obj", "size": "1"},                   # other size
    {"bucket": "bkt", "name": "obj", "size": str(len(b"abc"))},      # no crc32c
], ids=["other-size", "no-crc32c"])
async def test_a_write_answer_without_generation_deletes_nothing(
        answer_resource: dict[str, str]) -> None:
    requests: list[web.Request] = []
    async with Server(_single(answer_resource, THEIRS, requests)) as (endpoint, _), \
            _client(endpoint) as client:
        with pytest.raises(ChecksumMismatch, match="not verified and the object was left alone"):
            await client.write("bkt", "obj", b"abc")
    assert _deletes(requests) == []


async def test_a_write_answer_without_generation_is_confirmed_by_a_stat() -> None:
    requests: list[web.Request] = []
    answer_resource = {"bucket": "bkt", "name": "obj", "size": "3"}
    async with Server(_single(answer_resource, _resource("obj", b"abc", 12), requests)) as (
            endpoint, _), _client(endpoint) as client:
        info = await client.write("bkt", "obj", b"abc")
    # What the stat found is what the write returns: generation and crc32c.
    assert (info.size, info.generation, info.crc32c) == (3, 12, crc32c(b"abc"))
    assert [r.method for r in requests] == ["POST", "GET"]


def _xml(live: dict[str, str], requests: list[web.Request]) -> Answer:
    """XML multipart whose completion answer has no x-goog-generation or
    x-goog-hash; a stat finds ``live`` under the name."""
    async def answer(request: web.Request, served: Served) -> web.Response:
        requests.append(request)
        await request.read()
        if request.method == "POST" and "uploads" in request.query:
            return web.Response(body=b"<InitiateMultipartUploadResult><UploadId>U</UploadId>"
                                     b"</InitiateMultipartUploadResult>")
        if request.method == "PUT":
            return web.Response(headers={"ETag": '"e1"'})
        if request.method == "POST":
            return web.Response(body=b"<CompleteMultipartUploadResult/>")
        if request.method == "GET":
            return web.json_response(live)
        return web.Response(status=204)

    return answer


PART = b"p" * (5 * 1024 * 1024)
TAIL = b"tail"


async def _stream(live: dict[str, str]) -> tuple[Any, list[web.Request]]:
    expected = Crc32c()
    expected.update(PART)
    expected.update(TAIL)
    requests: list[web.Request] = []
    async with Server(_xml(live, requests)) as (endpoint, _), _client(endpoint) as client:
        upload = client.start_upload("bkt", "obj")
        await upload.put(1, memoryview(PART))
        try:
            outcome: Any = await upload.finish(2, memoryview(TAIL), expected)
        except StorageError as exc:
            outcome = exc
    return outcome, requests


async def test_a_completion_without_generation_leaves_a_newer_object_alone() -> None:
    """The stat finds another writer's newer object: the old code "verified"
    it against our crc32c and deleted it."""
    failure, requests = await _stream(THEIRS)
    assert isinstance(failure, ChecksumMismatch), failure
    assert "write gs://bkt/obj" in str(failure) and "left alone" in str(failure)
    assert _deletes(requests) == []


async def test_a_completion_without_generation_is_confirmed_by_a_stat() -> None:
    ours = _resource("obj", PART + TAIL, 12)
    info, requests = await _stream(ours)
    assert (info.size, info.crc32c, info.generation) == (len(PART + TAIL),
                                                         crc32c(PART + TAIL), 12)
    assert _deletes(requests) == []
