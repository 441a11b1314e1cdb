"""Every client operation, against our emulator and against fake-gcs-server.

The same tests run on both servers, so our client and our emulator are held
against a third-party implementation of the GCS JSON API.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioflux import (
    AsyncClient,
    ClientConfig,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
)
from aioflux._core.crc import crc32c
from aioflux._engines.listing import list_objects_parallel
from aioflux._net.transport import Op
from aioflux.gcs._resumable import ResumableUpload
from tests.conftest import FAST_RETRY, unique_bucket


@pytest.fixture(params=["emulator", "fake-gcs"])
def server_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def gcs(request: pytest.FixtureRequest,
              server_kind: str) -> AsyncIterator[tuple[AsyncClient, str]]:
    server: Any = request.getfixturevalue("emulator" if server_kind == "emulator"
                                          else "fake_gcs")
    async with AsyncClient(ClientConfig(max_concurrency=16, retry=FAST_RETRY),
                           endpoint=server.endpoint) as client:
        bucket = unique_bucket("conf")
        await client.create_bucket(bucket)
        yield client, bucket


async def test_write_stat_read(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    data = os.urandom(100_003)
    info = await client.write(bucket, "dir/a b%?#.bin", data, metadata={"k": "v"})
    assert info.size == len(data)
    assert info.crc32c == crc32c(data)
    stat = await client.stat(bucket, "dir/a b%?#.bin")
    assert (stat.size, stat.generation, stat.crc32c) == (len(data), info.generation, crc32c(data))
    assert stat.metadata == {"k": "v"}
    assert await client.read(bucket, "dir/a b%?#.bin") == data
    assert await client.exists(bucket, "dir/a b%?#.bin")
    assert not await client.exists(bucket, "missing")


async def test_ranged_reads_and_into(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    data = os.urandom(50_000)
    await client.write(bucket, "obj", data)
    assert await client.read(bucket, "obj", start=100, end=1100) == data[100:1100]
    assert await client.read(bucket, "obj", start=49_000) == data[49_000:]
    assert await client.read(bucket, "obj", start=5, end=5) == b""
    buf = bytearray(60_000)
    assert await client.read(bucket, "obj", into=buf) == len(data)
    assert bytes(buf[: len(data)]) == data
    view = memoryview(buf)[10:1010]
    assert await client.read(bucket, "obj", start=2000, end=3000, into=view) == 1000
    assert bytes(view) == data[2000:3000]
    with pytest.raises(InvalidArgument, match="do not fit"):
        await client.read(bucket, "obj", into=bytearray(10))
    with pytest.raises(InvalidArgument, match="bad range"):
        await client.read(bucket, "obj", start=10, end=5)


async def test_read_missing_is_not_found(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    with pytest.raises(NotFound) as info:
        await client.read(bucket, "nope")
    assert info.value.bucket == bucket
    assert info.value.name == "nope"
    assert info.value.attempts == 1
    with pytest.raises(NotFound):
        await client.stat(bucket, "nope")
    with pytest.raises(NotFound):
        await client.delete(bucket, "nope")


async def test_list_paging_prefix_delimiter_offsets(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    names = [f"p/{i:04d}" for i in range(1050)] + ["p/sub/x", "p/sub/y", "q/z"]
    for name in names:
        await client.write(bucket, name, name.encode())
    pages = [page async for page in client.list(bucket, "p/")]
    assert len(pages) == 2  # GCS caps a page at 1000 items
    listed = [o.name for page in pages for o in page.objects]
    assert listed == sorted(n for n in names if n.startswith("p/"))
    first = pages[0].objects[0]
    assert first.size == len(first.name) and first.crc32c == crc32c(first.name.encode())
    page = [p async for p in client.list(bucket, "p/", delimiter="/", page_size=2000)]
    assert page[-1].prefixes == ["p/sub/"]
    assert len([o for p in page for o in p.objects]) == 1050
    ranged = [o.name async for o in client.list_objects(bucket, start_offset="p/0100",
                                                         end_offset="p/0105")]
    assert ranged == [f"p/{i:04d}" for i in range(100, 105)]


async def test_if_generation_match(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    first = await client.write(bucket, "g", b"one", if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        await client.write(bucket, "g", b"two", if_generation_match=0)
    second = await client.write(bucket, "g", b"two", if_generation_match=first.generation)
    assert second.generation != first.generation
    assert await client.read(bucket, "g") == b"two"
    await client.delete(bucket, "g", if_generation_match=second.generation)
    assert not await client.exists(bucket, "g")


async def test_resumable_upload_in_chunks(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    data = os.urandom(3 * 256 * 1024 + 777)
    upload = ResumableUpload(client, bucket, "big", chunk_size=256 * 1024)
    await upload.start()
    await upload.send(data[: 256 * 1024])
    assert not await client.exists(bucket, "big")  # nothing visible before the end
    info = await upload.finish(data[256 * 1024:], crc32c=crc32c(data))
    assert info.size == len(data)
    assert await client.read(bucket, "big") == data
    forced = await client.write(bucket, "forced", data, resumable=True)
    assert forced.crc32c == crc32c(data)


async def test_resumable_cancel_publishes_nothing(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    upload = ResumableUpload(client, bucket, "cancelled", chunk_size=256 * 1024)
    await upload.start()
    await upload.send(os.urandom(256 * 1024))
    await upload.cancel()
    await upload.cancel()  # idempotent
    assert not await client.exists(bucket, "cancelled")


async def test_compose_pins_generations(gcs: tuple[AsyncClient, str], server_kind: str) -> None:
    client, bucket = gcs
    parts = [os.urandom(1000 + i) for i in range(3)]
    infos = [await client.write(bucket, f"src{i}", p) for i, p in enumerate(parts)]
    composite = await client.compose(bucket, "composite", infos)
    assert composite.size == sum(map(len, parts))
    assert composite.crc32c == crc32c(b"".join(parts))
    assert await client.read(bucket, "composite") == b"".join(parts)
    await client.write(bucket, "src0", b"changed")
    if server_kind == "emulator":  # fake-gcs-server ignores source preconditions
        with pytest.raises(PreconditionFailed):
            await client.compose(bucket, "composite2", infos)
    with pytest.raises(InvalidArgument, match="1-32"):
        await client.compose(bucket, "too-many", ["src1"] * 33)


async def test_delete(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    await client.write(bucket, "d", b"x")
    await client.delete(bucket, "d")
    assert not await client.exists(bucket, "d")
    await client.delete(bucket, "d", missing_ok=True)  # already gone: fine
    with pytest.raises(NotFound):
        await client.delete(bucket, "d")


async def test_delete_precondition(client: AsyncClient, bucket: str) -> None:
    # Emulator only: fake-gcs-server ignores preconditions on delete.
    first = await client.write(bucket, "g", b"one")
    await client.write(bucket, "g", b"two")
    with pytest.raises(PreconditionFailed):
        await client.delete(bucket, "g", if_generation_match=first.generation)
    assert await client.read(bucket, "g") == b"two"


async def test_server_side_copy(gcs: tuple[AsyncClient, str]) -> None:
    client, bucket = gcs
    data = os.urandom(5000)
    await client.write(bucket, "orig", data)
    info = await client.copy(bucket, "orig", bucket, "dir/copy")
    assert (info.name, info.size, info.crc32c) == ("dir/copy", len(data), crc32c(data))
    assert await client.read(bucket, "dir/copy") == data
    with pytest.raises(NotFound):
        await client.copy(bucket, "missing", bucket, "x")


@pytest.mark.asyncio
async def test_json_requests_ask_for_compact_bodies(client: AsyncClient, bucket: str,
                                                    emulator: Any) -> None:
    # GCS indents JSON unless told prettyPrint=false (~40% more bytes per
    # listing page); the emulator counts every document it indented.
    before = emulator.stats["pretty_printed"]
    await client.write(bucket, "compact/a", b"a" * 10)
    await client.write(bucket, "compact/b", b"b" * 10)
    assert (await client.stat(bucket, "compact/a")).size == 10
    assert len([o async for o in client.list_objects(bucket, "compact/")]) == 2
    assert len(await list_objects_parallel(client, bucket, "compact/")) == 2
    await client.compose(bucket, "compact/ab", ["compact/a", "compact/b"])
    await client.copy(bucket, "compact/ab", bucket, "compact/copy")
    assert await client.read(bucket, "compact/copy") == b"a" * 10 + b"b" * 10
    assert emulator.stats["pretty_printed"] == before
    # The counter does count: a request without the parameter is indented.
    await client.transport.request(
        Op("stat", bucket, "compact/a"), "GET",
        f"{client.endpoint}/storage/v1/b/{bucket}/o/compact%2Fa", _read_body)
    assert emulator.stats["pretty_printed"] == before + 1


async def _read_body(resp: Any) -> bytes:
    return bytes(await resp.read())
