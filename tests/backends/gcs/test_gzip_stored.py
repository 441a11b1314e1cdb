"""An object stored gzip-compressed (``Content-Encoding: gzip``) read
through the GCS client. GCS serves it decompressed, whole, whatever Range
was asked for (decompressive transcoding): a whole read is its
decompressed bytes; a ranged one cannot be served, and says why instead of
blaming the server ("sent the whole object instead of the range") or
calling it a decompression bomb (the cap was taken from the range's length).

Only our emulator can test it: fake-gcs-server (1.5x, the third-party GCS
server the tests run) does no decompressive transcoding; it sends the
stored gzip bytes with ``Content-Encoding: gzip`` whatever
``Accept-Encoding`` asked (aioflux asks ``identity``).
"""

from __future__ import annotations

import gzip
import json

import aiohttp
import pytest

from aioflux import AsyncClient, InvalidRequest
from aioflux.testing import Emulator

PLAIN = b"".join(b"line %d of a compressible text\n" % i for i in range(4000))


async def _upload_gzip(emulator: Emulator, bucket: str, name: str) -> None:
    meta = {"name": name, "contentType": "text/plain", "contentEncoding": "gzip"}
    body = (b"--B\r\nContent-Type: application/json\r\n\r\n" + json.dumps(meta).encode()
            + b"\r\n--B\r\nContent-Type: text/plain\r\n\r\n" + gzip.compress(PLAIN)
            + b"\r\n--B--\r\n")
    async with aiohttp.ClientSession(auto_decompress=False) as http, http.post(
            f"{emulator.endpoint}/upload/storage/v1/b/{bucket}/o",
            params={"uploadType": "multipart"}, data=body,
            headers={"Content-Type": "multipart/related; boundary=B"}) as r:
        assert r.status == 200, await r.text()


async def test_a_whole_read_is_the_decompressed_bytes(client: AsyncClient, emulator: Emulator,
                                                      bucket: str) -> None:
    await _upload_gzip(emulator, bucket, "gz")
    assert await client.read(bucket, "gz") == PLAIN


@pytest.mark.parametrize("start, end", [(10, None), (0, 100), (5, 9000)])
async def test_a_ranged_read_says_the_object_is_served_whole(
        client: AsyncClient, emulator: Emulator, bucket: str, start: int,
        end: int | None) -> None:
    await _upload_gzip(emulator, bucket, "gz")
    with pytest.raises(InvalidRequest, match="stored gzip-compressed") as info:
        await client.read(bucket, "gz", start=start, end=end)
    assert (info.value.bucket, info.value.name) == (bucket, "gz")
    assert "bomb" not in str(info.value) and "instead of the range" not in str(info.value)
