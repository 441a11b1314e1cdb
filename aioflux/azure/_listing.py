"""List Blobs pages as the storage protocol's listing.

``restype=container&comp=list`` with ``prefix``, ``delimiter``, an opaque
``marker`` and ``include=metadata`` (so a listed blob carries the crc32c
aioflux stored with it, and reads of it are checked against that). Azure
has neither a start nor an end offset: a listing from ``start_offset``
pages from the prefix and drops the names outside the offsets
(``StoreFeatures`` says so: parallel listers do not split such a store).
A listing reports a prefix only if it holds a name inside the offsets, as
GCS and the in-memory store do; List Blobs reports every prefix holding any
name. So a prefix an offset falls inside (``n/10/`` for ``n/10/x``) is
decided by a listing of it (of the names both offsets begin with, where
that is longer) to its first name inside the offsets: at most two such
listings a listing. Names that XML cannot carry come percent-encoded
(``<Name Encoded="true">``).
On an account with a hierarchical namespace, a flat listing names each
directory too (a 0-byte entry whose ``ResourceType`` is ``directory``):
directories are no objects, and are left out as other stores' folders are.

Azure's order is not Python's: a flat account sorts by UTF-16 code units
(U+1F600 before U+E000), a hierarchical-namespace account by path
(``a/x`` before ``a-b``). So a listing cannot stop at the first name past
``end_offset`` (names below it may follow), and every page goes through
:class:`~aioflux._core.checks.pages.ListingCheck` without the order: each name
once, under the prefix and inside the offsets, the markers new.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Protocol
from urllib.parse import quote, unquote

from .._core.checks.pages import ListingCheck
from .._core.checks.stated_counts import count_of
from .._core.errors import ProtocolError, describe
from .._core.integrity.crc import decode_crc32c
from .._core.records.types import NO_METADATA, ListPage, ObjectInfo
from .._net.failures import read_metadata
from .._net.transport import HttpResponse, Op, Transport
from ._xml import CRC_KEY, parse, rfc3339

__all__ = ["MAX_PAGE", "list_pages"]

#: Most blobs List Blobs returns in one page.
MAX_PAGE = 5000


class Lister(Protocol):
    """What a listing needs of its store."""

    @property
    def transport(self) -> Transport:
        """The store's transport."""
        ...

    def container_url(self, container: str) -> str:
        """The container's URL."""
        ...

    def remember(self, etag: str) -> int:
        """The generation of ``etag``."""
        ...


async def list_pages(store: Lister, container: str, prefix: str, delimiter: str | None,
                     start_offset: str | None, end_offset: str | None,
                     page_size: int) -> AsyncGenerator[ListPage, None]:
    """Pages of ``container``'s blobs under ``prefix`` in ``[start_offset, end_offset)``.

    Args:
        store: the store.
        container: the container.
        prefix: only names starting with this.
        delimiter: group names by this into prefixes.
        start_offset: first name (inclusive).
        end_offset: end (exclusive).
        page_size: names per request (at most 5,000).

    Yields:
        ListPage; the last has no ``next_page_token``.
    """
    op = Op("list", container, prefix, "az")
    base = (f"{store.container_url(container)}?restype=container&comp=list&include=metadata"
            f"&maxresults={min(page_size, MAX_PAGE)}")
    if prefix:
        base += f"&prefix={quote(prefix, safe='')}"
    if delimiter:
        base += f"&delimiter={quote(delimiter, safe='')}"
    check = ListingCheck("az", container, prefix, start_offset, end_offset, ordered=False,
                         once=True)

    async def handle(resp: HttpResponse) -> bytes:
        return await read_metadata(resp, op)

    marker: str | None = None
    while True:
        url = base if marker is None else f"{base}&marker={quote(marker, safe='')}"
        raw = await store.transport.request(op, "GET", url, handle)
        # Parsed off the event loop (lxml releases the GIL).
        root = await asyncio.to_thread(parse, raw, op)
        page = _read_page(store, container, root, op, start_offset, end_offset)
        if page.prefixes and (start_offset or end_offset):
            page = await _in_range(store, container, page, start_offset, end_offset, page_size)
        marker = page.next_page_token
        yield check.page(page)
        if marker is None:
            return


async def _in_range(store: Lister, container: str, page: ListPage, start_offset: str | None,
                    end_offset: str | None, page_size: int) -> ListPage:
    """``page`` less the prefixes an offset falls inside that hold no name
    inside the offsets."""
    kept = [p for p in page.prefixes
            if not (_splits(p, start_offset) or _splits(p, end_offset))
            or await _holds(store, container, p, start_offset, end_offset, page_size)]
    return ListPage(objects=page.objects, prefixes=kept, next_page_token=page.next_page_token)


def _splits(prefix: str, offset: str | None) -> bool:
    """Whether ``offset`` falls inside ``prefix``: names under it may lie on
    either side of it."""
    return offset is not None and offset != prefix and offset.startswith(prefix)


async def _holds(store: Lister, container: str, prefix: str, start_offset: str | None,
                 end_offset: str | None, page_size: int) -> bool:
    """Whether a name under ``prefix`` lies in ``[start_offset, end_offset)``,
    listed up to the first such name. Every name between the offsets begins
    with what both begin with: where that is longer, only it is listed."""
    shared = _shared(start_offset, end_offset) if start_offset and end_offset else ""
    within = shared if len(shared) > len(prefix) else prefix
    async with aclosing(list_pages(store, container, within, None, start_offset, end_offset,
                                   page_size)) as pages:
        async for page in pages:
            if page.objects:
                return True
    return False


def _shared(a: str, b: str) -> str:
    """What ``a`` and ``b`` both begin with."""
    n, most = 0, min(len(a), len(b))
    while n < most and a[n] == b[n]:
        n += 1
    return a[:n]


def _name(el: Any) -> str:
    text = el.text or ""
    return unquote(text) if el.get("Encoded") == "true" else text


def _read_page(store: Lister, container: str, root: Any, op: Op, start_offset: str | None,
               end_offset: str | None) -> ListPage:
    if root.tag != "EnumerationResults":
        raise ProtocolError(f"{describe('list', container, op.name, 'az')} failed: the server "
                            f"answered <{str(root.tag)[:40]}>, not <EnumerationResults>",
                            operation="list", bucket=container, name=op.name, status=200)
    objects: list[ObjectInfo] = []
    for blob in root.iterfind("Blobs/Blob"):
        name_el = blob.find("Name")
        name = "" if name_el is None else _name(name_el)
        if (start_offset and name < start_offset) or (end_offset and name >= end_offset):
            continue
        props = blob.find("Properties")
        if props is not None and props.findtext("ResourceType") == "directory":
            # A hierarchical namespace's directory (abfss:// accounts) is
            # listed as a 0-byte blob: a folder, not an object to read or copy.
            continue
        text = props.findtext("Content-Length") if props is not None else None
        size = count_of(text) if text else None
        if size is None:
            raise ProtocolError(f"{describe('list', container, name[:200], 'az')} failed: "
                                "a listed blob has no Content-Length", operation="list",
                                bucket=container, name=name, status=200)
        etag = props.findtext("Etag") or "" if props is not None else ""
        md5 = (props.findtext("Content-MD5") or None) if props is not None else None
        modified = props.findtext("Last-Modified") if props is not None else None
        content_type = (props.findtext("Content-Type") or None) if props is not None else None
        metadata: dict[str, str] = {}
        crc: int | None = None
        meta = blob.find("Metadata")
        if meta is not None:
            for el in meta:
                if el.tag.lower() == CRC_KEY:
                    crc = _crc(el.text or "")
                elif isinstance(el.tag, str):
                    # Lower-cased, as a stat reads them from its headers:
                    # one blob's metadata the same both ways.
                    metadata[el.tag.lower()] = el.text or ""
        objects.append(ObjectInfo(container, name, size, store.remember(etag), crc, md5,
                                  None, content_type, rfc3339(modified),
                                  metadata or NO_METADATA, "az"))
    # A prefix wholly outside the offsets is left out here; one an offset
    # falls inside is kept, for ``_in_range`` to decide.
    prefixes = []
    for el in root.iterfind("Blobs/BlobPrefix/Name"):
        p = _name(el)
        if (not end_offset or p < end_offset) and (
                not start_offset or p >= start_offset or start_offset.startswith(p)):
            prefixes.append(p)
    prefixes.sort()
    marker = root.findtext("NextMarker") or None
    return ListPage(objects=objects, prefixes=prefixes, next_page_token=marker)


def _crc(text: str) -> int | None:
    try:
        return decode_crc32c(text.strip())
    except ValueError:
        return None
