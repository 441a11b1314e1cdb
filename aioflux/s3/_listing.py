"""ListObjectsV2 pages as the storage protocol's listing.

S3 has no end offset: a listing stops itself at the first key past it (so
a parallel lister costs no page beyond its range). ``start-after`` is
exclusive, so a key just below ``start_offset`` is sent (its last character
lowered by one, then the highest code point) and any key between is dropped
here. (Sending ``start_offset`` minus its last character instead made a
parallel lister whose split point ends in a letter, ``obj-005j``, page
through every ``obj-005<digit>`` key below it: 3x the keys parsed on a 100k
listing.) A listing reports a prefix only if it holds a key inside the
offsets, as GCS and the in-memory store do. S3 rolls every key under a
common prefix into it, inside the offsets or not, and leaves out one not
above start-after: a prefix an offset falls inside (``n/10/`` for
``n/10/x``) is decided by a listing of it from ``start_offset``, one key
long, that finds a key before ``end_offset`` or not. At most two such
requests a listing. Keys come URL-encoded (XML 1.0 cannot
carry every character a key may hold). Listed objects have no crc32c:
ListObjectsV2 names an object's checksum algorithm, never its value. A
page is read by :mod:`._page`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING

from .._core.checks.pages import ListingCheck
from .._core.memory.gc_pause import collector_paused
from .._core.records.types import ListPage
from .._net.failures import read_metadata
from .._net.transport import HttpResponse, Op
from ._page import parse_page, read_page
from ._xml import NOT_XML, query

if TYPE_CHECKING:
    from ._store import S3Store

__all__ = ["list_pages"]


async def list_pages(store: S3Store, bucket: str, prefix: str, delimiter: str | None,
                     start_offset: str | None, end_offset: str | None,
                     page_size: int) -> AsyncGenerator[ListPage, None]:
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
    below = _just_below(start_offset) if start_offset else ""
    if below:
        base.append(("start-after", below))
    token: str | None = None
    url = store.object_url(bucket)
    # Directory buckets (S3 Express One Zone, "<name>--<zone>--x-s3") list
    # keys in no particular order.
    check = ListingCheck("s3", bucket, prefix, start_offset, end_offset,
                         ordered=not bucket.endswith("--x-s3"))
    # The prefix the start offset falls inside (S3 lists none not above
    # start-after), asked for once a first page has proved the bucket there,
    # and listed first, where it sorts.
    pending = _start_group(prefix, delimiter, start_offset)

    async def handle(resp: HttpResponse) -> bytes:
        return await read_metadata(resp, op)

    while True:
        pairs = sorted(base + ([("continuation-token", token)] if token else []))
        raw = await store.transport.request(op, "GET", url + query(*pairs), handle)
        # Parsed off the event loop (lxml releases the GIL): a parallel
        # listing's one CPU-heavy step overlaps the others' reading.
        root = await asyncio.to_thread(parse_page, raw, op)
        with collector_paused():
            page, done = read_page(store, bucket, root, start_offset, end_offset)
        del root
        lead: list[str] = []
        if pending is not None:
            if await _holds(store, bucket, pending, start_offset, end_offset):
                lead.append(pending)
            pending = None
        if lead or (page.prefixes and end_offset):
            page = await _in_range(store, bucket, page, lead, start_offset, end_offset)
        token = page.next_page_token
        if done or token is None:
            yield check.page(ListPage(objects=page.objects, prefixes=page.prefixes,
                                      next_page_token=None))
            return
        yield check.page(page)


async def _in_range(store: S3Store, bucket: str, page: ListPage, lead: list[str],
                    start_offset: str | None, end_offset: str | None) -> ListPage:
    """``page`` with ``lead`` first, less the prefixes the end offset falls
    inside that hold no key inside the offsets."""
    kept = [p for p in page.prefixes
            if not _splits(p, end_offset)
            or await _holds(store, bucket, p, start_offset, end_offset)]
    return ListPage(objects=page.objects, prefixes=lead + kept,
                    next_page_token=page.next_page_token)


def _splits(prefix: str, offset: str | None) -> bool:
    """Whether ``offset`` falls inside ``prefix``: keys under it may lie on
    either side of it."""
    return offset is not None and offset != prefix and offset.startswith(prefix)


def _start_group(prefix: str, delimiter: str | None, start_offset: str | None) -> str | None:
    """The common prefix of a listing that ``start_offset`` falls inside, or None."""
    if not delimiter or not start_offset or not start_offset.startswith(prefix):
        return None
    cut = start_offset.find(delimiter, len(prefix))
    group = start_offset[:cut + len(delimiter)]
    return group if cut >= 0 and _splits(group, start_offset) else None


async def _holds(store: S3Store, bucket: str, prefix: str, start_offset: str | None,
                 end_offset: str | None) -> bool:
    """Whether a key under ``prefix`` lies in ``[start_offset, end_offset)``:
    the first key from ``start_offset``, one a page (more pages only past
    keys the inexact start-after lets through below ``start_offset``)."""
    async with aclosing(list_pages(store, bucket, prefix, None, start_offset, end_offset,
                                   1)) as pages:
        async for page in pages:
            if page.objects:
                return True
    return False


def _just_below(key: str) -> str:
    """A string below ``key`` with (practically) no key between: the last
    character lowered by one, then U+10FFFF. Where that is not encodable
    (lowering into the surrogates) or not XML (lowering into the
    controls), the key minus its last character; a key holding a character
    XML cannot carry is cut before it (correct, only less tight: the keys
    between are dropped here). May be empty (then no start-after)."""
    # A listing echoes start-after in <StartAfter>: AWS URL-encodes it, moto
    # does not, so a page answering a character XML cannot carry did not
    # parse ("a b " as a start offset, lowered to "a b\x1f\U0010ffff",
    # failed every listing from it, and parallel listings split at such names).
    bad = NOT_XML.search(key)
    if bad is not None:
        return key[:bad.start()]
    last = ord(key[-1])
    if 0xD800 <= last - 1 <= 0xDFFF or NOT_XML.match(chr(last - 1)):
        return key[:-1]
    return key[:-1] + chr(last - 1) + "\U0010ffff"
