"""One ListObjectsV2 answer as a :class:`ListPage`, parsed by lxml.

A listing is the one XML the client reads in bulk, and on a parallel
listing parsing is the client's whole cost. lxml parses a page in about
half ElementTree's time and hands over each field of every entry in one
XPath call (in C). The parser resolves no
entities and loads no DTD or network resource: a hostile server's page is
data, nothing more. An entry lacking a field (or with an empty one) makes
the columns uneven; the page is then read entry by entry.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

from .._core.checks.stated_counts import count_of
from .._core.errors import ProtocolError, describe
from .._core.records.types import NO_METADATA, ListPage, ObjectInfo
from .._net.transport import Op
from .._net.xml_answers import lxml_etree
from ._auth import missing_extra
from ._xml import fail, raise_if_error

if TYPE_CHECKING:
    from ._store import S3Store

__all__ = ["lxml", "parse_page", "read_page"]

_FIELDS = ("Key", "Size", "ETag", "LastModified")


def lxml() -> Any:
    """``lxml.etree``; checked when a store is made, whatever it is then used for.

    Raises:
        InvalidArgument: lxml is not installed; the message names the extra.
    """
    return lxml_etree(lambda: missing_extra("lxml", "reading S3's XML answers"))


@functools.lru_cache(maxsize=8)
def _columns_of(namespace: str) -> tuple[Any, tuple[Any, ...]]:
    """Compiled XPaths for a document in ``namespace``: the entry count, and
    each field's text over all entries, in order."""
    etree = lxml()
    nsmap = {"s": namespace} if namespace else None
    p = "s:" if namespace else ""

    def xpath(expr: str) -> Any:
        return etree.XPath(expr.replace("s:", p), namespaces=nsmap, smart_strings=False)

    return (xpath("count(s:Contents)"),
            tuple(xpath(f"s:Contents/s:{field}/text()") for field in _FIELDS))


def _entries(root: Any, namespace: str) -> Iterable[tuple[str, str, str, str]]:
    count, columns = _columns_of(namespace)
    values = [column(root) for column in columns]
    if all(len(v) == int(count(root)) for v in values):
        return zip(*values, strict=True)
    q = f"{{{namespace}}}" if namespace else ""
    return [tuple(el.findtext(q + field) or "" for field in _FIELDS)  # type: ignore[misc]
            for el in root.iterfind(q + "Contents")]


def parse_page(raw: bytes, op: Op) -> Any:
    """The document's root element. lxml parses without the GIL, so this
    runs in a worker thread while the event loop reads other pages.

    Raises:
        StorageError: unparsable XML, or an error document.
    """
    etree = lxml()
    # A parser per call: lxml's parsers are not to be shared between threads.
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             remove_comments=True, remove_pis=True)
    try:
        root = etree.fromstring(raw, parser)
    except etree.XMLSyntaxError as exc:
        fail(op, f"unparsable XML response ({exc})", exc)
    raise_if_error(root, op)
    return root


def read_page(store: S3Store, bucket: str, root: Any, start_offset: str | None,
              end_offset: str | None) -> tuple[ListPage, bool]:
    """A parsed ListObjectsV2 document (:func:`parse_page`) as a page (its
    token None when it is the last), and whether a key at or past
    ``end_offset`` was reached."""
    tag = root.tag
    namespace = tag[1:tag.index("}")] if tag.startswith("{") else ""
    q = f"{{{namespace}}}" if namespace else ""
    encoded = root.findtext(q + "EncodingType") == "url"
    remember = store._etags.remember
    # tuple.__new__ fills the record in one C call, as objects_from_json
    # does for GCS: ObjectInfo(...) goes through its Python __new__ (0.31
    # against 0.18 us a key, on a listing bound by this loop).
    new, cls, no_metadata = tuple.__new__, ObjectInfo, NO_METADATA
    fromhex, from_bytes = bytes.fromhex, int.from_bytes
    objects: list[ObjectInfo] = []
    append = objects.append
    done = False
    for key, size, etag, modified in _entries(root, namespace):
        if encoded and ("%" in key or "+" in key):
            # AWS encodes a space as "+", others as %20: unquote_plus reads both.
            key = unquote_plus(key)
        if start_offset and key < start_offset:
            continue
        if end_offset and key >= end_offset:
            done = True
            break
        count = count_of(size)
        if count is None:
            # A size is how much a ranged download and a reader of the
            # listed object take for granted: a missing one read as an empty
            # object, a negative one as less than empty, a malformed one
            # raised a bare ValueError naming nothing.
            raise ProtocolError(f"{describe('list', bucket, key[:200], 's3')} failed: the "
                                f"listing gives the object the size {size[:40]!r}, not a "
                                "count of bytes", operation="list", bucket=bucket, name=key,
                                status=200)
        # The common ETag, "<md5 hex>", read here: generation_of's regular
        # expression and remember's two calls would be a third of this loop.
        generation = 0
        if len(etag) == 34 and etag[0] == '"' == etag[33]:
            try:
                digest = fromhex(etag[1:33])
            except ValueError:
                digest = b""
            if len(digest) == 16:
                generation = from_bytes(digest, "big") << 16
        append(new(cls, (bucket, key, count, generation or remember(etag), None, None,
                         None, None, modified or None, no_metadata, "s3")))
    # Kept: a prefix inside the offsets, or one the end offset falls inside
    # (the listing asks whether it holds a key before it). The one the start
    # offset falls inside is the listing's to decide: S3 leaves out a common
    # prefix not above start-after, whatever keys it holds.
    prefixes = []
    for cp in root.iterfind(q + "CommonPrefixes"):
        p = cp.findtext(q + "Prefix") or ""
        p = unquote_plus(p) if encoded else p
        if (not end_offset or p < end_offset) and (not start_offset or p >= start_offset):
            prefixes.append(p)
    prefixes.sort()
    truncated = (root.findtext(q + "IsTruncated") or "").lower() == "true"
    token = (root.findtext(q + "NextContinuationToken") or None) if truncated else None
    if truncated and token is None and not done:
        # The rest could not be asked for: the listing would end short.
        raise ProtocolError(f"{describe('list', bucket, '', 's3')} failed: the server said "
                            "more keys follow but gave no continuation token",
                            operation="list", bucket=bucket, name="")
    return ListPage(objects=objects, prefixes=prefixes, next_page_token=token), done
