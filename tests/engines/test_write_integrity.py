"""Every write is all-or-nothing: verified, or not left published.

A small HTTP relay sits between the client and a server (our emulator or
fake-gcs-server). It can swap bytes in what the client sends (so the server
stores other bytes than the client's crc32c describes) and cut a connection
after the server received a request but before the client reads the answer
(so a retry meets a finished upload).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

import aioflux
from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    ClientConfig,
    NotFound,
    StorageError,
    WriterOptions,
)
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux.gcs._resumable import CHUNK_GRANULARITY, ResumableUpload
from aioflux.testing import Emulator
from tests.conftest import FAST_RETRY, unique_bucket
from tests.servers.raw_server import Listener

MiB = 1024 * 1024
MARK = b"\x00MARK-OF-THE-BEAST\x00"
BAD_MARK = b"\x00MARK-OF-THE-BEAT!\x00"


class Relay:
    """An HTTP/1.1 relay on its own thread and loop.

    Requests are read whole (head and ``Content-Length`` body) so that
    ``replace`` pairs (same length) apply across TCP segments;
    ``replace_down`` pairs apply to each read of the answers (short headers
    arrive whole). The first
    request containing ``cut_after`` is delivered, but its response is
    dropped and the client's connection closed; ``on_cut`` runs first.
    """

    def __init__(self, upstream: str, *, replace: tuple[tuple[bytes, bytes], ...] = (),
                 replace_down: tuple[tuple[bytes, bytes], ...] = (),
                 cut_after: bytes | None = None,
                 on_cut: Callable[[], None] | None = None) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self._upstream = (host, int(port))
        self.replace = replace
        self.replace_down = replace_down
        self.cut_after = cut_after
        self.on_cut = on_cut
        self.cuts = 0
        self.replaced = 0
        #: body bytes of every request sent upstream, in order
        self.bodies: list[bytes] = []
        self.heads: list[bytes] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._listener = Listener(self._serve)
        self._tasks: set[asyncio.Task[None]] = set()

    def __enter__(self) -> str:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._listener.start(), self._loop).result(10)
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            # Aborting the sockets ends each connection's task on its own (a
            # cancelled stream-server task makes asyncio log an error).
            await self._listener.close()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await self._listener.connect(*self._upstream)
        drop = asyncio.Event()

        async def upward() -> None:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    key, _, value = line.partition(b":")
                    if key.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                for old, new in self.replace:
                    if old in body or old in head:
                        self.replaced += 1
                    head, body = head.replace(old, new), body.replace(old, new)
                if self.cut_after is not None and self.cuts == 0 and (
                        self.cut_after in head or self.cut_after in body):
                    self.cuts += 1
                    drop.set()
                self.heads.append(head)
                self.bodies.append(body)
                up_writer.write(head + body)
                await up_writer.drain()

        async def downward() -> None:
            while True:
                data = await up_reader.read(1 << 16)
                if not data:
                    return
                if drop.is_set():
                    if self.on_cut is not None:
                        self.on_cut()
                    return
                for old, new in self.replace_down:
                    data = data.replace(old, new)
                writer.write(data)
                await writer.drain()

        up = asyncio.ensure_future(upward())
        try:
            await downward()
        except (ConnectionError, OSError):
            pass
        finally:
            up.cancel()
            await asyncio.gather(up, return_exceptions=True)
            writer.close()
            up_writer.close()
            for w in (writer, up_writer):
                try:
                    await w.wait_closed()
                except (ConnectionError, asyncio.CancelledError):
                    pass


@pytest.fixture(params=["emulator", "fake_gcs"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(kind, endpoint) of our emulator, then of fake-gcs-server."""
    target = request.getfixturevalue(request.param)
    yield request.param, target.endpoint


async def _client(endpoint: str) -> AsyncClient:
    return AsyncClient(ClientConfig(max_concurrency=8, retry=FAST_RETRY), endpoint=endpoint)


@pytest.fixture
async def direct(server: tuple[str, str]) -> AsyncIterator[tuple[AsyncClient, str]]:
    """A client that talks to the server directly, and a fresh bucket."""
    async with await _client(server[1]) as client:
        bucket = unique_bucket("wi")
        await client.create_bucket(bucket)
        yield client, bucket


def _payload(size: int) -> bytes:
    """Random bytes with MARK in the middle (where the relay corrupts them)."""
    data = bytearray(os.urandom(size))
    middle = size // 2
    data[middle:middle + len(MARK)] = MARK
    return bytes(data)


def _corrupted(data: bytes) -> bytes:
    return data.replace(MARK, BAD_MARK)


async def _write_resumable(client: AsyncClient, bucket: str, name: str, data: bytes) -> None:
    await client.write(bucket, name, data, resumable=True)


async def _write_simple(client: AsyncClient, bucket: str, name: str, data: bytes) -> None:
    await client.write(bucket, name, data, resumable=False)


async def _write_streaming(client: AsyncClient, bucket: str, name: str, data: bytes) -> None:
    async with AsyncObjectWriter(client, bucket, name,
                                 options=WriterOptions(part_size=5 * MiB)) as writer:
        for i in range(0, len(data), MiB):
            await writer.write(data[i:i + MiB])


WRITES = {"simple": (_write_simple, 300_000), "resumable": (_write_resumable, 300_000),
          "streaming": (_write_streaming, 11 * MiB + 5)}


# -- corrupted in flight -------------------------------------------------------

@pytest.mark.parametrize("how", sorted(WRITES))
async def test_corrupted_body_is_not_published(server: tuple[str, str],
                                               direct: tuple[AsyncClient, str],
                                               how: str) -> None:
    kind, endpoint = server
    client, bucket = direct
    write, size = WRITES[how]
    data = _payload(size)
    older = b"the older generation"
    await client.write(bucket, "old", older)
    with Relay(endpoint, replace=((MARK, BAD_MARK),)) as relayed:
        async with await _client(relayed) as via:
            for name in ("new", "old"):
                with pytest.raises(StorageError) as caught:
                    await write(via, bucket, name, data)
                assert f"gs://{bucket}/{name}" in str(caught.value)
                if kind == "fake_gcs":
                    # It stores what arrived: we saw the crc32c differ and
                    # deleted that generation.
                    assert isinstance(caught.value, ChecksumMismatch), caught.value
                    assert "deleted" in str(caught.value)
    with pytest.raises(NotFound):
        await client.stat(bucket, "new")
    if kind == "emulator":
        # A checking server refused the bytes: the older object is untouched.
        assert await client.read(bucket, "old") == older
    else:
        # fake-gcs-server replaced it with the corrupt bytes (it keeps no
        # versions); what matters is that they did not stay.
        with pytest.raises(NotFound):
            await client.stat(bucket, "old")


async def test_bad_object_deleted_but_newer_write_kept(emulator: Emulator) -> None:
    """The relay also rewrites the crc32c we send, so the emulator stores the
    corrupt bytes as a non-checking server would; a newer write lands before
    our delete, which must spare it (ifGenerationMatch)."""
    async with await _client(emulator.endpoint) as client:
        bucket = unique_bucket("wi")
        await client.create_bucket(bucket)
        data = _payload(200_000)
        good, bad = encode_crc32c(crc32c(data)), encode_crc32c(crc32c(_corrupted(data)))
        newer = b"a newer concurrent write"

        def write_newer() -> None:
            request = urllib.request.Request(
                f"{emulator.endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name=x",
                data=newer, method="POST")
            with urllib.request.urlopen(request) as resp:
                assert resp.status == 200

        replace = ((MARK, BAD_MARK), (good.encode(), bad.encode()))
        with Relay(emulator.endpoint, replace=replace) as relayed:
            async with await _client(relayed) as via:
                with pytest.raises(ChecksumMismatch):
                    await via.write(bucket, "x", data)  # plain bad object: deleted
                with pytest.raises(NotFound):
                    await client.stat(bucket, "x")
        # Now the newer write sneaks in between the upload and our delete.
        with Relay(emulator.endpoint, replace=replace) as relayed:
            async with await _client(relayed) as via:
                original = via.delete

                async def delete_after_newer(*args: object, **kwargs: object) -> None:
                    await asyncio.to_thread(write_newer)
                    await original(*args, **kwargs)  # type: ignore[arg-type]

                via.delete = delete_after_newer  # type: ignore[method-assign]
                with pytest.raises(ChecksumMismatch) as caught:
                    await via.write(bucket, "x", data)
                # Replaced already: nothing of ours to delete, the newer stays.
                assert "already gone" in str(caught.value) or "newer" in str(caught.value)
        assert await client.read(bucket, "x") == newer


# -- the answer to a publishing request is lost --------------------------------

@pytest.mark.parametrize("how", ["resumable", "streaming"])
async def test_final_request_answer_lost(server: tuple[str, str],
                                         direct: tuple[AsyncClient, str], how: str) -> None:
    """The server publishes, the connection dies before the client reads the
    answer; the retry must find the upload done (fake-gcs-server answers 404
    to a finished session, the emulator NoSuchUpload to a completed XML
    upload), not fail and not publish twice."""
    kind, endpoint = server
    client, bucket = direct
    write, size = WRITES[how]
    data = os.urandom(size)
    final = (b"<CompleteMultipartUpload>" if how == "streaming" and kind == "emulator"
             else f"-{size - 1}/{size}\r\n".encode())
    relay = Relay(endpoint, cut_after=final)
    with relay as relayed:
        async with await _client(relayed) as via:
            await write(via, bucket, "obj", data)
            assert via.transport.stats.retries == 1
    assert relay.cuts == 1
    info = await client.stat(bucket, "obj")
    assert (info.size, info.crc32c) == (len(data), crc32c(data))
    assert await client.read(bucket, "obj") == data


async def test_mid_upload_answer_lost(server: tuple[str, str],
                                      direct: tuple[AsyncClient, str]) -> None:
    """A non-final chunk's answer is lost. The retry asks the session what it
    holds and resumes there, sending no byte twice (emulator). fake-gcs-server
    cannot say what it holds: it publishes what it has on any status query,
    so the write fails with a typed error and that partial object is gone."""
    kind, endpoint = server
    client, bucket = direct
    data = os.urandom(2 * CHUNK_GRANULARITY + 1000)
    relay = Relay(endpoint, cut_after=f"bytes 0-{CHUNK_GRANULARITY - 1}/*".encode())
    with relay as relayed:
        async with await _client(relayed) as via:
            upload = ResumableUpload(via, bucket, "obj", chunk_size=CHUNK_GRANULARITY)
            await upload.start()
            if kind == "fake_gcs":
                with pytest.raises(ChecksumMismatch, match="status query") as caught:
                    await upload.send(data[:CHUNK_GRANULARITY])
                assert f"gs://{bucket}/obj" in str(caught.value)
                await upload.cancel()
            else:
                await upload.send(data[:CHUNK_GRANULARITY])
                info = await upload.finish(data[CHUNK_GRANULARITY:], crc32c=crc32c(data))
                assert (info.size, info.crc32c) == (len(data), crc32c(data))
    assert relay.cuts == 1
    if kind == "fake_gcs":
        with pytest.raises(NotFound):
            await client.stat(bucket, "obj")
        return
    # Every byte went up exactly once: resumed from the persisted offset.
    assert sum(len(body) for body in relay.bodies[1:]) == len(data)
    assert await client.read(bucket, "obj") == data


async def test_lost_answer_and_replaced_object_is_not_success(
        fake_gcs: object, ) -> None:
    """The final chunk's answer is lost and, before the retry, another writer
    replaces the object: the write cannot be verified, so it is an error,
    and the other writer's object is left alone."""
    endpoint = fake_gcs.endpoint  # type: ignore[attr-defined]
    async with await _client(endpoint) as client:
        bucket = unique_bucket("wi")
        await client.create_bucket(bucket)
        data = os.urandom(300_000)
        other = b"someone else's bytes"

        def overwrite() -> None:
            request = urllib.request.Request(
                f"{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name=obj",
                data=other, method="POST")
            with urllib.request.urlopen(request) as resp:
                assert resp.status == 200

        relay = Relay(endpoint, cut_after=f"/{len(data)}\r\n".encode(), on_cut=overwrite)
        with relay as relayed:
            async with await _client(relayed) as via:
                with pytest.raises(StorageError, match="not verified") as caught:
                    await via.write(bucket, "obj", data, resumable=True)
        assert f"gs://{bucket}/obj" in str(caught.value)
        assert relay.cuts == 1
        assert await client.read(bucket, "obj") == other


async def test_retried_create_only_write_whose_first_attempt_landed(
        server: tuple[str, str], direct: tuple[AsyncClient, str]) -> None:
    """``if_generation_match=0`` and the answer is lost: the retry meets its
    own object (412). Same bytes: success."""
    _, endpoint = server
    client, bucket = direct
    data = os.urandom(100_000)
    relay = Relay(endpoint, cut_after=b"uploadType=multipart")
    with relay as relayed:
        async with await _client(relayed) as via:
            info = await via.write(bucket, "obj", data, if_generation_match=0)
    assert relay.cuts == 1
    assert (info.size, info.crc32c) == (len(data), crc32c(data))
    assert await client.read(bucket, "obj") == data


# -- compose -------------------------------------------------------------------

async def test_compose_result_checked_against_sources(server: tuple[str, str],
                                                      direct: tuple[AsyncClient, str]) -> None:
    client, bucket = direct
    parts = [os.urandom(1000 + i) for i in range(3)]
    infos = [await client.write(bucket, f"p{i}", p) for i, p in enumerate(parts)]
    info = await client.compose(bucket, "whole", infos)
    assert (info.size, info.crc32c) == (3003, crc32c(b"".join(parts)))
    # A source whose known crc32c is not what the server composed (it
    # changed under the same generation, or the server mixed something up):
    # the composite must not stay.
    stale = [infos[0]._replace(crc32c=crc32c(b"something else")), *infos[1:]]
    with pytest.raises(ChecksumMismatch, match="compose gs://"):
        await client.compose(bucket, "bad", stale)
    with pytest.raises(NotFound):
        await client.stat(bucket, "bad")


# -- the streaming writer ------------------------------------------------------

async def test_streaming_corrupt_part_caught_before_publishing(emulator: Emulator) -> None:
    """The relay corrupts a part and rewrites that part's x-goog-hash to
    match, so the emulator stores it as a non-checking server would. Its
    answer reports the stored crc32c: the part fails (on every retry), the
    upload is aborted and the older object under the name survives."""
    async with await _client(emulator.endpoint) as client:
        bucket = unique_bucket("wi")
        await client.create_bucket(bucket)
        await client.write(bucket, "obj", b"older")
        data = _payload(11 * MiB + 5)
        part = data[5 * MiB:10 * MiB]
        good, bad = encode_crc32c(crc32c(part)), encode_crc32c(crc32c(_corrupted(part)))
        relay = Relay(emulator.endpoint, replace=((MARK, BAD_MARK), (good.encode(), bad.encode())))
        with relay as relayed:
            async with await _client(relayed) as via:
                with pytest.raises(ChecksumMismatch, match="upload part 2"):
                    await _write_streaming(via, bucket, "obj", data)
        assert await client.read(bucket, "obj") == b"older"
        assert await client.list_multipart_uploads(bucket) == []


async def test_streaming_complete_is_verified(emulator: Emulator) -> None:
    """As above, but the part's answer is rewritten back too (a server that
    reports what it was told): the whole object's crc32c after completion
    differs, and the object is deleted."""
    async with await _client(emulator.endpoint) as client:
        bucket = unique_bucket("wi")
        await client.create_bucket(bucket)
        data = _payload(11 * MiB + 5)
        part = data[5 * MiB:10 * MiB]
        assert MARK in part
        good, bad = encode_crc32c(crc32c(part)), encode_crc32c(crc32c(_corrupted(part)))
        relay = Relay(emulator.endpoint, replace=((MARK, BAD_MARK), (good.encode(), bad.encode())),
                      replace_down=((bad.encode(), good.encode()),))
        with relay as relayed:
            async with await _client(relayed) as via:
                with pytest.raises(ChecksumMismatch, match="deleted"):
                    await _write_streaming(via, bucket, "obj", data)
        assert relay.replaced >= 2  # the part body and its header
        with pytest.raises(NotFound):
            await client.stat(bucket, "obj")
        assert await client.list_multipart_uploads(bucket) == []


async def test_streaming_failed_complete_aborts(emulator: Emulator) -> None:
    """A completion the server refuses: a typed error, nothing published, and
    no multipart upload left open."""
    async with await _client(emulator.endpoint) as client:
        bucket = unique_bucket("wi")
        await client.create_bucket(bucket)
        data = os.urandom(6 * MiB)
        # Part numbers the upload does not have: the completion is refused.
        replace = ((b"<PartNumber>2</PartNumber>", b"<PartNumber>7</PartNumber>"),)
        relay = Relay(emulator.endpoint, replace=replace)
        with relay as relayed:
            async with await _client(relayed) as via:
                with pytest.raises(StorageError, match=f"gs://{bucket}/obj"):
                    await _write_streaming(via, bucket, "obj", data)
        assert relay.replaced == 1
        with pytest.raises(NotFound):
            await client.stat(bucket, "obj")
        assert await client.list_multipart_uploads(bucket) == []


def test_open_wb_corrupted_on_fake_gcs(fake_gcs: object) -> None:
    """``aioflux.open(url, "wb")`` (the blocking writer checkpoints use) on a
    server that stores whatever arrives: the corrupt object does not stay."""
    endpoint = fake_gcs.endpoint  # type: ignore[attr-defined]
    config = ClientConfig(max_concurrency=8, retry=FAST_RETRY)
    data = _payload(7 * MiB)
    with Relay(endpoint, replace=((MARK, BAD_MARK),)) as relayed, \
            aioflux.Client(config, endpoint=relayed) as client:
        bucket = unique_bucket("wi")
        client.create_bucket(bucket)
        with pytest.raises(ChecksumMismatch, match="deleted"):
            with aioflux.open(f"gs://{bucket}/ckpt.pt", "wb", client=client,
                              writer=WriterOptions(part_size=5 * MiB)) as f:
                f.write(data)
        assert not client.exists(bucket, "ckpt.pt")


# -- hostile answers (a scripted server) ---------------------------------------

Answer = tuple[int, dict[str, str], bytes]


class Scripted:
    """An HTTP/1.1 server answering whole requests as ``answer`` says; it
    reads every body, so a connection never closes with unread bytes."""

    def __init__(self, answer: Callable[[bytes, bytes], Answer]) -> None:
        self.answer = answer
        self.requests: list[tuple[bytes, bytes]] = []
        self._listener = Listener(self._serve)

    async def __aenter__(self) -> str:
        return f"http://127.0.0.1:{await self._listener.start()}"

    async def __aexit__(self, *exc: object) -> None:
        await self._listener.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    key, _, value = line.partition(b":")
                    if key.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                status, headers, payload = self.answer(head, body)
                lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(payload)}"]
                lines += [f"{k}: {v}" for k, v in headers.items()]
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_session_location_off_origin_gets_no_bytes() -> None:
    other = Scripted(lambda head, body: (200, {}, b"{}"))
    async with other as elsewhere:
        server = Scripted(lambda head, body: (200, {"Location": f"{elsewhere}/upload?id=1"}, b""))
        async with server as endpoint:
            async with AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=endpoint,
                                   credentials="secret-token") as client:
                with pytest.raises(StorageError, match="origin") as caught:
                    await client.write("bkt", "obj", b"data", resumable=True)
    assert "secret-token" not in str(caught.value)
    assert other.requests == []


async def test_answer_about_another_object_is_not_success() -> None:
    data = b"payload"

    def answer(head: bytes, body: bytes) -> Answer:
        resource = {"bucket": "bkt", "name": "other", "size": str(len(data)),
                    "generation": "7", "crc32c": encode_crc32c(crc32c(data))}
        return 200, {"Content-Type": "application/json"}, json.dumps(resource).encode()

    server = Scripted(answer)
    async with server as endpoint:
        async with AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=endpoint) as client:
            with pytest.raises(StorageError, match="not verified"):
                await client.write("bkt", "obj", data)
    assert len(server.requests) == 1  # no delete of "other"


async def test_unreadable_final_answer_is_not_success() -> None:
    def answer(head: bytes, body: bytes) -> Answer:
        if head.startswith(b"POST"):
            return 200, {"Location": f"{base}/upload?id=1"}, b""
        return 200, {}, b"<html>not json</html>"

    server = Scripted(answer)
    async with server as base:
        async with AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=base) as client:
            # Published, but with no object resource to say what: a stat
            # decides, and here it cannot tell either (its answer is no JSON).
            with pytest.raises(StorageError, match="not a JSON object"):
                await client.write("bkt", "obj", b"data", resumable=True)
    assert not any(head.startswith(b"DELETE") for head, _ in server.requests)
