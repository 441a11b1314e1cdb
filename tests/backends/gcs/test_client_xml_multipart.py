"""XML-API multipart primitives against our emulator (fake-gcs-server has none)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from aioflux import AsyncClient, InvalidRequest, NotFound, StorageError
from aioflux._core.integrity.crc import crc32c
from aioflux.gcs._xml import MIN_PART_SIZE


async def test_multipart_flow(client: AsyncClient, bucket: str) -> None:
    parts = [os.urandom(MIN_PART_SIZE), os.urandom(1234)]
    upload_id = await client.initiate_multipart(bucket, "dir/ckpt.pt")
    assert [u.upload_id for u in await client.list_multipart_uploads(bucket)] == [upload_id]
    infos = [await client.upload_part(bucket, "dir/ckpt.pt", upload_id, i + 1, p)
             for i, p in enumerate(parts)]
    listed = await client.list_parts(bucket, "dir/ckpt.pt", upload_id)
    assert [(p.number, p.etag, p.size) for p in listed] == [
        (i.number, i.etag, i.size) for i in infos]
    assert not await client.exists(bucket, "dir/ckpt.pt")  # invisible until complete
    await client.complete_multipart(bucket, "dir/ckpt.pt", upload_id, list(reversed(infos)))
    info = await client.stat(bucket, "dir/ckpt.pt")
    assert info.crc32c == crc32c(b"".join(parts))
    assert await client.read(bucket, "dir/ckpt.pt") == b"".join(parts)
    assert await client.list_multipart_uploads(bucket) == []


async def test_abort_leaves_nothing(client: AsyncClient, bucket: str) -> None:
    upload_id = await client.initiate_multipart(bucket, "aborted")
    await client.upload_part(bucket, "aborted", upload_id, 1, b"x" * 100)
    await client.abort_multipart(bucket, "aborted", upload_id)
    assert not await client.exists(bucket, "aborted")
    assert await client.list_multipart_uploads(bucket) == []
    with pytest.raises(NotFound):
        await client.abort_multipart(bucket, "aborted", upload_id)


async def test_small_middle_part_is_rejected(client: AsyncClient, bucket: str) -> None:
    upload_id = await client.initiate_multipart(bucket, "small")
    infos = [await client.upload_part(bucket, "small", upload_id, n, b"y" * 10) for n in (1, 2)]
    with pytest.raises(InvalidRequest, match="EntityTooSmall"):
        await client.complete_multipart(bucket, "small", upload_id, infos)
    assert not await client.exists(bucket, "small")


async def test_corrupted_part_is_rejected(client: AsyncClient, bucket: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    upload_id = await client.initiate_multipart(bucket, "corrupt")
    import aioflux.gcs._xml as xml

    real = xml.crc32c
    monkeypatch.setattr(xml, "crc32c", lambda data: real(data) ^ 1)
    with pytest.raises(InvalidRequest, match="BadDigest"):
        await client.upload_part(bucket, "corrupt", upload_id, 1, b"z" * 100)
    assert await client.list_parts(bucket, "corrupt", upload_id) == []


async def test_given_part_checksum_is_sent_and_checked(client: AsyncClient, bucket: str) -> None:
    # The writer passes each part's crc32c (derived from its running checksum);
    # the server holds the bytes against it.
    upload_id = await client.initiate_multipart(bucket, "given")
    body = b"g" * 100
    with pytest.raises(InvalidRequest, match="BadDigest"):
        await client.upload_part(bucket, "given", upload_id, 1, body, crc32c(body) ^ 1)
    part = await client.upload_part(bucket, "given", upload_id, 1, body, crc32c(body))
    assert part.size == 100
    await client.complete_multipart(bucket, "given", upload_id, [part])
    assert await client.read(bucket, "given") == body


async def test_part_number_range(client: AsyncClient, bucket: str) -> None:
    with pytest.raises(ValueError, match=r"1\.\.10000"):
        await client.upload_part(bucket, "x", "id", 0, b"")


async def test_fake_gcs_has_no_xml_multipart(fake_gcs: Any) -> None:
    async with AsyncClient(endpoint=fake_gcs.endpoint) as client:
        await client.create_bucket("xml-probe")
        with pytest.raises(StorageError) as info:
            await client.initiate_multipart("xml-probe", "obj")
        assert info.value.status in (400, 404, 405)
