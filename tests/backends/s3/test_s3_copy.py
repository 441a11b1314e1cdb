"""S3 copies past CopyObject's 5 GiB: a multipart upload of UploadPartCopy
ranges, checked, all or nothing; against moto and the emulator's S3 face.

The 5 GiB limit and the part size are lowered here (module constants) so a
few MiB take the same path."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from aioflux import (
    ChecksumMismatch,
    ClientConfig,
    NotFound,
    PreconditionFailed,
    RetryPolicy,
    S3Store,
)
from aioflux._core.integrity.crc import crc32c
from aioflux._core.records.types import PartInfo
from aioflux.s3 import _copy
from tests.conftest import FAST_RETRY, unique_bucket
from tests.servers.web_server import Served, Server

MIB = 1024 * 1024


@pytest.fixture(params=["moto", "emulator"])
async def s3(request: pytest.FixtureRequest,
             monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[S3Store, str]]:
    monkeypatch.setattr(_copy, "SINGLE_COPY_LIMIT", 6 * MIB)
    monkeypatch.setattr(_copy, "COPY_PART_SIZE", 5 * MIB)
    if request.param == "moto":
        endpoint = request.getfixturevalue("moto_s3").endpoint
    else:
        endpoint = request.getfixturevalue("emulator").s3_endpoint
    async with S3Store(ClientConfig(max_concurrency=8, retry=FAST_RETRY),
                       endpoint=endpoint) as store:
        bucket = unique_bucket("copy")
        await store.create_bucket(bucket)
        yield store, bucket


async def _open_uploads(store: S3Store, bucket: str) -> list[str]:
    return [u.name for u in await store.list_multipart_uploads(bucket, "")]


async def test_a_copy_past_the_limit_goes_in_parts_with_its_attributes(
        s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    data = os.urandom(12 * MIB + 3)
    await store.write(bucket, "src", data, content_type="text/csv", metadata={"k": "v"})
    before = store.stats.requests
    info = await store.copy(bucket, "src", bucket, "dir/dst")
    # stat, create, 3 part copies, complete, stat of the copy
    assert store.stats.requests - before == 7
    assert (info.name, info.size, info.crc32c) == ("dir/dst", len(data), crc32c(data))
    assert await store.read(bucket, "dir/dst") == data
    copied = await store.stat(bucket, "dir/dst")
    assert (copied.content_type, copied.metadata) == ("text/csv", {"k": "v"})
    assert await _open_uploads(store, bucket) == []


async def test_a_copy_at_the_limit_is_one_copyobject(s3: tuple[S3Store, str]) -> None:
    store, bucket = s3
    data = os.urandom(6 * MIB)
    await store.write(bucket, "src", data)
    before = store.stats.requests
    info = await store.copy(bucket, "src", bucket, "dst")
    assert store.stats.requests - before == 3  # stat, CopyObject, stat of the copy
    assert (info.size, info.crc32c) == (len(data), crc32c(data))


async def test_a_source_replaced_during_the_copy_publishes_nothing(
        s3: tuple[S3Store, str], monkeypatch: pytest.MonkeyPatch) -> None:
    store, bucket = s3
    await store.write(bucket, "src", os.urandom(12 * MIB))
    copy_part = _copy._copy_part
    replaced = False

    async def replacing(*args: Any) -> Any:
        nonlocal replaced
        if args[3] == 3 and not replaced:  # before the last part: a new version
            replaced = True
            await store.write(bucket, "src", os.urandom(12 * MIB))
        return await copy_part(*args)

    monkeypatch.setattr(_copy, "_copy_part", replacing)
    monkeypatch.setattr(_copy, "_PARTS_IN_FLIGHT", 1)
    # The emulator refuses the last part (x-amz-copy-source-if-match); moto
    # ignores that condition on UploadPartCopy, and the copy's check then
    # finds a crc32c that is not the source's and deletes it.
    with pytest.raises((PreconditionFailed, ChecksumMismatch), match=rf"s3://{bucket}/dst"):
        await store.copy(bucket, "src", bucket, "dst")
    assert replaced
    assert not await store.exists(bucket, "dst")
    assert await _open_uploads(store, bucket) == []


async def test_parts_whose_crc32c_is_not_the_sources_publish_nothing(
        s3: tuple[S3Store, str], monkeypatch: pytest.MonkeyPatch) -> None:
    store, bucket = s3
    await store.write(bucket, "src", os.urandom(12 * MIB))
    copy_part = _copy._copy_part
    reported: list[int | None] = []

    async def recording(*args: Any) -> tuple[PartInfo, int | None]:
        part, crc = await copy_part(*args)
        reported.append(crc)
        return part, crc

    monkeypatch.setattr(_copy, "_copy_part", recording)
    await store.copy(bucket, "src", bucket, "first")
    if None in reported:
        pytest.skip("this server reports no crc32c for a copied part")

    async def misreported(*args: Any) -> tuple[PartInfo, int | None]:
        part, crc = await copy_part(*args)
        # As a server that copied other bytes into part 2 would report it.
        return part, (crc ^ 1 if part.number == 2 and crc is not None else crc)

    monkeypatch.setattr(_copy, "_copy_part", misreported)
    with pytest.raises(ChecksumMismatch, match=rf"copy s3://{bucket}/dst.*nothing was published"):
        await store.copy(bucket, "src", bucket, "dst")
    assert not await store.exists(bucket, "dst")
    assert await _open_uploads(store, bucket) == []


def test_part_size_stays_within_ten_thousand_parts() -> None:
    assert _copy.part_size(6 * 1024**3) == _copy.COPY_PART_SIZE
    five_tib = 5 * 1024**4
    size = _copy.part_size(five_tib)
    assert size % MIB == 0 and -(-five_tib // size) <= 10_000
    assert size - MIB < -(-five_tib // 10_000)  # the smallest whole MiB that fits


async def test_a_cancelled_copy_in_parts_leaves_no_upload(
        s3: tuple[S3Store, str], monkeypatch: pytest.MonkeyPatch) -> None:
    store, bucket = s3
    await store.write(bucket, "src", os.urandom(12 * MIB))
    copy_part = _copy._copy_part
    started = asyncio.Event()

    async def stuck(*args: Any) -> Any:
        if args[3] == 2:
            started.set()
            await asyncio.Event().wait()  # never answers
        return await copy_part(*args)

    monkeypatch.setattr(_copy, "_copy_part", stuck)
    task = asyncio.create_task(store.copy(bucket, "src", bucket, "dst"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _open_uploads(store, bucket) == []
    assert not await store.exists(bucket, "dst")


@pytest.mark.parametrize("size", [MIB, 12 * MIB], ids=["whole", "parts"])
async def test_a_copy_deleted_before_its_check_is_the_copys_not_found(
        s3: tuple[S3Store, str], monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    store, bucket = s3
    await store.write(bucket, "src", os.urandom(size))
    stat = store.stat
    deleted = False

    async def deleted_first(b: str, name: str) -> Any:
        nonlocal deleted
        if name == "dst" and not deleted:  # another client deletes the copy as it lands
            deleted = True
            await store.delete(b, name)
        return await stat(b, name)

    monkeypatch.setattr(store, "stat", deleted_first)
    with pytest.raises(NotFound, match=rf"^copy s3://{bucket}/dst") as gone:
        await store.copy(bucket, "src", bucket, "dst")
    assert (gone.value.operation, gone.value.name) == ("copy", "dst")


async def test_an_upload_deleted_before_its_check_is_the_writes_not_found(
        s3: tuple[S3Store, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux._core.integrity.crc import Crc32c

    store, bucket = s3
    data = os.urandom(5 * MIB + 10)
    upload = store.start_upload(bucket, "up", part_size=5 * MIB)
    await upload.put(1, memoryview(data)[:5 * MIB])
    stat = store.stat

    async def deleted_first(b: str, name: str) -> Any:
        monkeypatch.setattr(store, "stat", stat)
        await store.delete(b, name)  # another client deletes it as it lands
        return await stat(b, name)

    monkeypatch.setattr(store, "stat", deleted_first)
    running = Crc32c()
    running.update(data)
    with pytest.raises(NotFound, match=rf"^write s3://{bucket}/up") as gone:
        await upload.finish(2, memoryview(data)[5 * MIB:], running)
    assert gone.value.operation == "write"


# A copy in parts cancelled while its multipart upload is being created
# leaves no upload open. S3 creates the upload when the request arrives; its
# id is known only once the answer is read, so a copy cancelled in between
# (Ctrl-C during ``aioflux cp`` of an object past 5 GiB) waits for that answer
# and aborts, as the writer's uploads do; a dropped answer would leave an
# upload no abort can name. The server is scripted
# (tests/servers/web_server.py): it holds the answer to the creation until
# the test has cancelled the copy.


NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


class SlowCreation:
    """A source of 7 MiB; the creation of an upload answered once released."""

    def __init__(self) -> None:
        self.creating = asyncio.Event()
        self.release = asyncio.Event()

    async def answer(self, request: web.Request, served: Served) -> web.Response:
        if request.method == "HEAD":
            return web.Response(headers={"Content-Length": str(7 * MIB),
                                         "ETag": '"0123456789abcdef0123456789abcdef"'})
        if request.method == "POST" and "uploads" in request.query:
            self.creating.set()
            await self.release.wait()
            return web.Response(body=f'<?xml version="1.0"?><InitiateMultipartUploadResult '
                                     f"{NS}><UploadId>U1</UploadId>"
                                     "</InitiateMultipartUploadResult>".encode(),
                                content_type="application/xml")
        if request.method == "DELETE":
            return web.Response(status=204)
        return web.Response(status=500)  # no part copy gets this far


async def test_a_copy_cancelled_while_its_upload_is_created_aborts_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_copy, "SINGLE_COPY_LIMIT", 6 * MIB)
    monkeypatch.setattr(_copy, "COPY_PART_SIZE", 5 * MIB)
    server = SlowCreation()
    async with Server(server.answer) as (endpoint, served), S3Store(
            ClientConfig(retry=RetryPolicy(max_attempts=1)), endpoint=endpoint,
            region="us-east-1", addressing="path", anonymous=True) as store:
        task = asyncio.create_task(store.copy("bkt", "src", "bkt", "dst"))
        await server.creating.wait()
        task.cancel()  # lands before the held answer can arrive
        server.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [p for p in served.paths if not p.startswith("HEAD")] == [
            "POST /bkt/dst?uploads", "DELETE /bkt/dst?uploadId=U1"]
