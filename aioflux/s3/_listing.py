"""ListObjectsV2 pages as the storage protocol's listing.

S3 has no end offset: a listing stops itself at the first key past it (so
a parallel lister costs no page beyond its range). ``start-after`` is
exclusive, so ``start_offset`` minus its last character is sent and the
few keys between are dropped here. Keys come URL-encoded (XML 1.0 cannot
carry every character a key may hold). Listed objects have no crc32c:
ListObjectsV2 names an object's checksum algorithm, never its value.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote_plus

from .._core.types import NO_METADATA, ListPage, ObjectInfo
from .._net.transport import HttpResponse, Op
from ._xml import children, parse, query, text

if TYPE_CHECKING:
    from ._store import S3Store

__all__ = ["list_pages"]


async def list_pages(store: S3Store, bucket: str, prefix: str, delimiter: str | None,
                     start_offset: str | None, end_offset: str | None,
                     page_size: int) -> AsyncIterator[ListPage]:
    """Pages of ``bucket``'s keys under ``prefix`` in ``[start_offset, end_offset)``.

    Args:
        store: the store (its transport, URLs and ETag memory).
        bucket: bucket name.
        prefix: only keys starting with this.
        delimiter: group keys by this into prefixes.
        start_offset: first key (inclusive).
        end_offset: end (exclusive).
        page_size: keys per request (at most 1000).

    Yields:
        ListPage; the last has no ``next_page_token``.
    """
    await store._ready(bucket)
    op = Op("list", bucket, prefix, "s3")
    base = [("encoding-type", "url"), ("list-type", "2"),
            ("max-keys", str(min(page_size, 1000)))]
    if prefix:
        base.append(("prefix", prefix))
    if delimiter:
        base.append(("delimiter", delimiter))
    if start_offset:
        base.append(("start-after", start_offset[:-1]))
    token: str | None = None
    url = store.object_url(bucket)

    async def handle(resp: HttpResponse) -> ET.Element:
        return parse(await resp.read(), op)

    while True:
        pairs = sorted(base + ([("continuation-token", token)] if token else []))
        root = await store.transport.request(op, "GET", url + query(*pairs), handle)
        # AWS encodes a space as "+", others as %20: unquote_plus reads both.
        decode: Callable[[str], str] = (
            unquote_plus if text(root, "EncodingType") == "url" else str)
        objects: list[ObjectInfo] = []
        done = False
        for el in children(root, "Contents"):
            key = decode(text(el, "Key"))
            if start_offset and key < start_offset:
                continue
            if end_offset and key >= end_offset:
                done = True
                break
            objects.append(ObjectInfo(bucket, key, int(text(el, "Size", "0")),
                                      store._remember(text(el, "ETag")), None, None, None, None,
                                      text(el, "LastModified") or None, NO_METADATA, "s3"))
        prefixes = sorted(
            p for p in (decode(text(cp, "Prefix")) for cp in children(root, "CommonPrefixes"))
            if (not end_offset or p < end_offset)
            and (not start_offset or p >= start_offset or start_offset.startswith(p)))
        truncated = text(root, "IsTruncated").lower() == "true"
        token = text(root, "NextContinuationToken") or None
        if done or not truncated or token is None:
            yield ListPage(objects=objects, prefixes=prefixes, next_page_token=None)
            return
        yield ListPage(objects=objects, prefixes=prefixes, next_page_token=token)
