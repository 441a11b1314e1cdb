"""Azure requests whose answer is lost after Azurite acted on them.

A proxy in front of Azurite relays each request and its answer, but drops
the connection instead of relaying the answer of the first request a test
picks: the service did the work, the client never heard. The retry then
meets the outcome of its own first attempt (a blob gone, an ETag changed, a
blob that exists), which must read as success, never as someone else's
doing, and publish the bytes once.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioflux import ClientConfig, NotFound, RetryPolicy, WriterOptions
from aioflux._core.integrity.crc import crc32c
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux.azure import AzureStore
from tests.conftest import unique_bucket
from tests.servers.azurite import Azurite
from tests.servers.raw_server import Listener

RETRY = RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0)
_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding: *chunked", re.IGNORECASE)


class LosingProxy:
    """Relays HTTP/1.1 to ``upstream``; the answer to the first request whose
    head matches ``lose`` (a regex, set by the test) is dropped with the
    connection, after the server acted on the request."""

    def __init__(self, upstream: str) -> None:
        found = re.fullmatch(r"http://([^:/]+):(\d+)(/.*)?", upstream)
        assert found is not None
        self._host, self._port, self._path = found[1], int(found[2]), found[3] or ""
        self.lose: bytes | None = None
        self.lost: list[bytes] = []
        self._listener = Listener(self._serve)
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> str:
        return f"http://127.0.0.1:{await self._listener.start()}{self._path}"

    async def __aexit__(self, *exc: object) -> None:
        await self._listener.close()  # a handler waiting for the next request fails
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await self._listener.connect(self._host, self._port)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = _LENGTH.search(head)
                body = await reader.readexactly(int(length[1])) if length else b""
                up_writer.write(head + body)
                await up_writer.drain()
                answer = await _answer(up_reader, bodiless=head.startswith(b"HEAD "))
                if self.lose is not None and re.search(self.lose, head):
                    self.lose = None
                    self.lost.append(head)
                    return  # done upstream; the answer never comes back
                writer.write(answer)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            up_writer.close()


async def _answer(reader: asyncio.StreamReader, *, bodiless: bool) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = _LENGTH.search(head)
    if bodiless or head.split(b" ", 2)[1] in (b"204", b"304"):
        return head
    if length is not None:
        return head + await reader.readexactly(int(length[1]))
    if _CHUNKED.search(head) is None:
        return head
    body = b""
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";")[0].strip(), 16)
        body += line + await reader.readexactly(size + 2)
        if size == 0:
            return head + body


@pytest.fixture
async def lossy(azurite: Azurite) -> AsyncIterator[tuple[AzureStore, str, LosingProxy]]:
    proxy = LosingProxy(azurite.endpoint)
    async with proxy as endpoint, AzureStore(
            ClientConfig(max_concurrency=4, retry=RETRY), endpoint=endpoint,
            account=azurite.account, account_key=azurite.key) as store:
        container = unique_bucket("lost")
        await store.create_bucket(container)
        yield store, container, proxy


@pytest.mark.parametrize("pin", ["none", "generation", "if_generation_match"])
async def test_a_delete_whose_answer_was_lost_is_done(
        lossy: tuple[AzureStore, str, LosingProxy], pin: str) -> None:
    # The retry finds the blob gone (404), or its ETag no more (412): its
    # own first attempt's doing, not a NotFound or PreconditionFailed.
    store, container, proxy = lossy
    info = await store.write(container, "x", b"doomed")
    kwargs: dict[str, Any] = {} if pin == "none" else {pin: info.generation}
    proxy.lose = rb"^DELETE "
    await store.delete(container, "x", **kwargs)
    assert len(proxy.lost) == 1
    assert not await store.exists(container, "x")


async def test_a_delete_of_a_missing_blob_still_says_so(
        lossy: tuple[AzureStore, str, LosingProxy]) -> None:
    store, container, proxy = lossy
    with pytest.raises(NotFound, match=f"delete az://{container}/never"):
        await store.delete(container, "never")
    old = await store.write(container, "x", b"one")
    await store.write(container, "x", b"two")
    with pytest.raises(NotFound, match="no longer generation"):
        await store.delete(container, "x", generation=old.generation)
    assert await store.read(container, "x") == b"two" and proxy.lost == []


@pytest.mark.parametrize("precondition", ["none", "create-only", "generation"])
@pytest.mark.parametrize("commit", ["put blob", "block list"])
async def test_a_write_whose_answer_was_lost_publishes_its_bytes_once(
        lossy: tuple[AzureStore, str, LosingProxy], commit: str, precondition: str) -> None:
    # The retried Put Blob or Put Block List fails its own precondition
    # (409 BlobAlreadyExists, 412), or commits the same blocks again.
    store, container, proxy = lossy
    match: int | None = None
    if precondition == "create-only":
        match = 0
    elif precondition == "generation":
        match = (await store.write(container, "w", b"before")).generation
    data = os.urandom(2500)
    writer = AsyncObjectWriter(store, container, "w", if_generation_match=match,
                               options=WriterOptions(part_size=1000 if commit == "block list"
                                                     else 4096))
    await writer.write(data)
    proxy.lose = rb"comp=blocklist" if commit == "block list" else rb"^PUT [^?]*/w\?"
    await writer.close()
    assert len(proxy.lost) == 1
    info = await store.stat(container, "w")
    assert (info.size, info.crc32c) == (len(data), crc32c(data))
    assert await store.read(container, "w") == data
