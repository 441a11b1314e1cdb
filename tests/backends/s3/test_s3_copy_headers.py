"""An S3 copy keeps the headers S3 stores with the object, whatever its size.

CopyObject (``x-amz-metadata-directive: COPY``) copies the source's
Cache-Control, Content-Disposition, Content-Encoding, Content-Language,
Content-Type, Expires and ``x-amz-meta-*``; a copy past CopyObject's limit is
a multipart upload, whose object has only what its CreateMultipartUpload
carried. Both must give the same object: a copied ``Content-Encoding: gzip``
object that lost its coding is served as raw gzip bytes. Against moto and the
emulator's S3 face, within a bucket and between buckets; the 5 GiB limit is
lowered (module constant) so 12 MiB takes the multipart path.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import pytest

from aioflux import ClientConfig, PreconditionFailed, S3Store
from aioflux._core.integrity.crc import crc32c, encode_crc32c
from aioflux._net.failures import Op, drain
from aioflux._net.responses import HttpResponse
from aioflux.s3 import _copy
from tests.conftest import FAST_RETRY, unique_bucket

MIB = 1024 * 1024

# What S3 stores with an object and CopyObject copies (lower-case names).
SOURCE_HEADERS = {
    "cache-control": "public, max-age=86400, immutable",
    "content-disposition": 'attachment; filename="readings.csv"',
    "content-encoding": "gzip",
    "content-language": "de-CH",
    "content-type": "text/csv",
    "expires": "Wed, 21 Oct 2037 07:28:00 GMT",
    "x-amz-meta-origin": "sensor-7",
    "x-amz-meta-batch": "42",
}


class Servers(NamedTuple):
    """A store on one server, with two buckets."""

    store: S3Store
    bucket: str
    other: str
    server: str  # "moto" or "emulator"


@pytest.fixture(params=["moto", "emulator"])
async def s3(request: pytest.FixtureRequest,
             monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Servers]:
    monkeypatch.setattr(_copy, "SINGLE_COPY_LIMIT", 6 * MIB)
    monkeypatch.setattr(_copy, "COPY_PART_SIZE", 5 * MIB)
    if request.param == "moto":
        endpoint = request.getfixturevalue("moto_s3").endpoint
    else:
        endpoint = request.getfixturevalue("emulator").s3_endpoint
    async with S3Store(ClientConfig(max_concurrency=8, retry=FAST_RETRY),
                       endpoint=endpoint) as store:
        bucket, other = unique_bucket("hdr"), unique_bucket("hdr-other")
        await store.create_bucket(bucket)
        await store.create_bucket(other)
        yield Servers(store, bucket, other, request.param)


async def _put_with_headers(store: S3Store, bucket: str, name: str, data: bytes) -> None:
    """A PUT carrying SOURCE_HEADERS (``S3Store.write`` sets only the content
    type and custom metadata), with its crc32c."""
    headers = {**SOURCE_HEADERS, "x-amz-checksum-crc32c": encode_crc32c(crc32c(data)),
               "x-amz-sdk-checksum-algorithm": "CRC32C"}
    await store.transport.request(Op("write", bucket, name, "s3"), "PUT",
                                  store.object_url(bucket, name), drain, headers=headers,
                                  data=data)


async def _head(store: S3Store, bucket: str, name: str) -> dict[str, str]:
    """What a HEAD answers of SOURCE_HEADERS' names and ``x-amz-meta-*``."""
    async def handle(resp: HttpResponse) -> dict[str, str]:
        return {k.lower(): v for k, v in resp.headers.items()
                if k.lower() in SOURCE_HEADERS or k.lower().startswith("x-amz-meta-")}

    return await store.transport.request(Op("stat", bucket, name, "s3"), "HEAD",
                                         store.object_url(bucket, name), handle)


@pytest.mark.parametrize("across", [False, True], ids=["same-bucket", "other-bucket"])
@pytest.mark.parametrize("size", [MIB, 12 * MIB + 3], ids=["copyobject", "multipart"])
async def test_a_copy_keeps_the_sources_headers_and_metadata(
        s3: Servers, size: int, across: bool) -> None:
    store, bucket, other, _ = s3
    dest = other if across else bucket
    data = gzip.compress(os.urandom(size), compresslevel=1)
    await _put_with_headers(store, bucket, "src", data)
    assert await _head(store, bucket, "src") == SOURCE_HEADERS  # the server keeps them
    info = await store.copy(bucket, "src", dest, "dir/dst")
    assert await _head(store, dest, "dir/dst") == SOURCE_HEADERS
    # The crc32c is the copy's and checked as before; the bytes are stored
    # as they were, never decoded.
    assert (info.size, info.crc32c) == (len(data), crc32c(data))
    copied = await store.stat(dest, "dir/dst")
    assert (copied.crc32c, copied.content_type) == (crc32c(data), "text/csv")
    assert copied.metadata == {"origin": "sensor-7", "batch": "42"}
    assert await store.read(dest, "dir/dst") == data
    assert await store.list_multipart_uploads(dest, "") == []


async def test_every_part_copy_is_pinned_to_the_source_the_head_saw(
        s3: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    store, bucket, other, _ = s3
    await _put_with_headers(store, bucket, "src", os.urandom(17 * MIB))
    etag = (await store.stat(bucket, "src")).version
    request = store.transport.request
    sent: list[tuple[str, dict[str, str]]] = []

    async def recording(op: Op, *args: Any, **kwargs: Any) -> Any:
        sent.append((op.operation, dict(kwargs.get("headers") or {})))
        return await request(op, *args, **kwargs)

    monkeypatch.setattr(store.transport, "request", recording)
    await store.copy(bucket, "src", other, "dst")
    parts = [headers for operation, headers in sent if operation.startswith("copy part")]
    assert len(parts) == 4
    pinned = {headers.get("x-amz-copy-source-if-match") for headers in parts}
    assert len(pinned) == 1 and None not in pinned
    assert str(store._remember(pinned.pop() or "")) == etag


@pytest.mark.parametrize("size", [MIB, 12 * MIB], ids=["copyobject", "multipart"])
async def test_a_source_replaced_during_the_copy_fails_it_naming_the_source(
        s3: Servers, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    store, bucket, other, server = s3
    if server == "moto":
        # moto ignores x-amz-copy-source-if-match (CopyObject, UploadPartCopy);
        # the copy's size and crc32c checks stop a mix there (test_s3_copy.py).
        pytest.skip("moto does not honour x-amz-copy-source-if-match")
    await _put_with_headers(store, bucket, "src", os.urandom(size))
    copy_whole, copy_part = _copy._copy_whole, _copy._copy_part

    async def whole_after_replacing(*args: Any) -> Any:
        await _put_with_headers(store, bucket, "src", os.urandom(size))  # after the HEAD
        return await copy_whole(*args)

    async def part_after_replacing(*args: Any) -> Any:
        if args[3] == 2:  # between part 1 and part 2: another version
            await _put_with_headers(store, bucket, "src", os.urandom(size))
        return await copy_part(*args)

    monkeypatch.setattr(_copy, "_copy_whole", whole_after_replacing)
    monkeypatch.setattr(_copy, "_copy_part", part_after_replacing)
    monkeypatch.setattr(_copy, "_PARTS_IN_FLIGHT", 1)
    with pytest.raises(PreconditionFailed) as raised:
        await store.copy(bucket, "src", other, "dst")
    failed = raised.value
    assert (failed.operation, failed.bucket, failed.name) == ("copy", other, "dst")
    assert str(failed).startswith(f"copy s3://{other}/dst failed: the source "
                                  f"s3://{bucket}/src was replaced while it was copied")
    assert not await store.exists(other, "dst")
    assert await store.list_multipart_uploads(other, "") == []


# -- what the servers do: the emulator's S3 face held to moto's (and S3's) behaviour ----


async def _request_headers(store: S3Store, method: str, bucket: str, name: str,
                           headers: dict[str, str], query: str = "") -> dict[str, str]:
    """Send a request; the answer's headers among SOURCE_HEADERS' and ``x-amz-meta-*``
    (its body left unread: a range of a gzip-coded object is no gzip stream)."""
    async def handle(resp: HttpResponse) -> dict[str, str]:
        return {k.lower(): v for k, v in resp.headers.items()
                if k.lower() in SOURCE_HEADERS or k.lower().startswith("x-amz-meta-")}

    return await store.transport.request(Op("probe", bucket, name, "s3"), method,
                                         store.object_url(bucket, name) + query, handle,
                                         headers=headers, ok=(200, 206))


async def test_a_ranged_get_carries_the_stored_headers(s3: Servers) -> None:
    store, bucket, _, _ = s3
    await _put_with_headers(store, bucket, "src", os.urandom(1000))
    assert await _request_headers(store, "GET", bucket, "src",
                                  {"Range": "bytes=10-19"}) == SOURCE_HEADERS


async def test_copyobject_replace_takes_the_requests_headers_only(s3: Servers) -> None:
    store, bucket, other, _ = s3
    await _put_with_headers(store, bucket, "src", os.urandom(1000))
    replaced = {"cache-control": "no-cache", "content-type": "text/plain",
                "x-amz-meta-fresh": "1"}
    await _request_headers(store, "PUT", other, "dst", {
        "x-amz-copy-source": f"/{bucket}/src", "x-amz-metadata-directive": "REPLACE",
        **replaced})
    assert await _head(store, other, "dst") == replaced


async def test_a_part_copy_brings_bytes_only(s3: Servers) -> None:
    # The object a multipart upload completes into has the headers its
    # creation carried, none of its part copies' source: what the copy in
    # parts must make up for.
    store, bucket, other, _ = s3
    data = os.urandom(1000)
    await _put_with_headers(store, bucket, "src", data)
    upload_id = await store._multipart.initiate(other, "dst", "text/plain", {"own": "1"},
                                                {"Cache-Control": "no-store"})
    part, _ = await _copy._copy_part(store, Op("copy", other, "dst", "s3"), upload_id, 1,
                                     {"x-amz-copy-source": f"/{bucket}/src"}, 0, len(data))
    await store._multipart.complete(other, "dst", upload_id, [part], crc32c(data))
    assert await _head(store, other, "dst") == {
        "cache-control": "no-store", "content-type": "text/plain", "x-amz-meta-own": "1"}
    assert await store.read(other, "dst") == data
