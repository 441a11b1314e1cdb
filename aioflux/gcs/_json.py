"""The GCS JSON API's wire format: name quoting, request bodies, response handlers."""

from __future__ import annotations

import binascii
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from operator import itemgetter
from typing import Any
from urllib.parse import quote

from .._core.checks.stated_counts import MOST_DIGITS, count_of
from .._core.errors import ProtocolError, describe
from .._core.records.types import ObjectInfo, objects_from_json
from .._core.storage.protocol import SourceSpec, source_of
from .._net.failures import read_metadata
from .._net.transport import HttpResponse, Op

__all__ = [
    "compose_body",
    "json_handler",
    "listed_objects",
    "multipart_related",
    "object_handler",
    "object_of",
    "quote_name",
    "refused_resource",
    "resource_fault",
    "written_handler",
]

# Most object names need no escaping beyond their slashes; urllib's quote
# walks the name byte by byte in Python (~8 us, ~5% of a small read's CPU).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.~/-]*")


def quote_name(name: str) -> str:
    if _PLAIN_NAME.fullmatch(name):
        return name.replace("/", "%2F")
    return quote(name, safe="")


def compose_body(sources: Sequence[SourceSpec], content_type: str) -> bytes:
    """The JSON body of a compose request.

    Args:
        sources: names, ``(name, generation)`` pairs or ObjectInfo.
        content_type: Content-Type of the composite.

    Returns:
        The encoded body.
    """
    items = []
    for src in sources:
        src_name, gen = source_of(src)
        item: dict[str, Any] = {"name": src_name}
        if gen:
            # A precondition, not a pinned ``generation``: a replaced
            # source then fails with 412 (changed) rather than 404.
            item["objectPreconditions"] = {"ifGenerationMatch": str(gen)}
        items.append(item)
    return json.dumps({"sourceObjects": items,
                       "destination": {"contentType": content_type}}).encode()


def multipart_related(resource: dict[str, Any], content_type: str,
                      data: memoryview) -> tuple[str, bytes]:
    """A ``multipart/related`` upload body: the object resource, then its bytes.

    Args:
        resource: the JSON object resource (name, crc32c, metadata...).
        content_type: Content-Type of the data part.
        data: the object's bytes.

    Returns:
        ``(boundary, body)``.
    """
    boundary = uuid.uuid4().hex
    body = b"".join((
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
        json.dumps(resource).encode(),
        f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(),
        data,
        f"\r\n--{boundary}--\r\n".encode(),
    ))
    return boundary, body


def json_handler(op: Op) -> Callable[[HttpResponse], Awaitable[dict[str, Any]]]:
    async def handle(resp: HttpResponse) -> dict[str, Any]:
        body = await read_metadata(resp, op)
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            # An HTML page from a captive portal or proxy, an empty 204...:
            # not an answer of the JSON API.
            raise ProtocolError(
                f"{describe(op.operation, op.bucket, op.name)} failed: HTTP {resp.status} "
                f"with a body that is not a JSON object ({body[:60]!r})",
                operation=op.operation, bucket=op.bucket, name=op.name, status=resp.status)
        return data

    return handle


def object_handler(op: Op) -> Callable[[HttpResponse], Awaitable[ObjectInfo]]:
    parse = json_handler(op)

    async def handle(resp: HttpResponse) -> ObjectInfo:
        return object_of(op, await parse(resp), status=resp.status)

    return handle


_NAME, _SIZE, _GENERATION = itemgetter("name"), itemgetter("size"), itemgetter("generation")


def _count(value: object) -> bool:
    # JSON carries an int64 as a string of digits (a number from some
    # servers); never a float, a bool or a negative number.
    if type(value) is str:
        return count_of(value) is not None
    return type(value) is int and 0 <= value < 1 << 63


def resource_fault(item: object) -> str | None:
    """What makes ``item`` no object resource we can read, or None."""
    if not isinstance(item, dict):
        return f"is not an object resource ({type(item).__name__})"
    name, bucket = item.get("name"), item.get("bucket", "")
    if type(name) is not str or not name or type(bucket) is not str:
        return "names no object"
    if "size" not in item:
        return "gives no size"
    for key in ("size", "generation", "metageneration"):
        value = item.get(key, "0")
        if not _count(value):
            return f"gives the {key} {str(value)[:40]!r}, not a count"
    crc = item.get("crc32c")
    if crc:
        try:
            if type(crc) is not str or len(binascii.a2b_base64(crc)) != 4:
                raise ValueError(crc)
        except ValueError:  # binascii.Error is one
            return f"gives the crc32c {str(crc)[:40]!r}, not 4 bytes of base64"
    metadata = item.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return "gives custom metadata that is not an object"
    return None


def object_of(op: Op, item: object, *, status: int = 200, listed: bool = False) -> ObjectInfo:
    """The ObjectInfo of a JSON API object resource, checked.

    A size is what a reader of the object takes for granted and where a
    ranged download places its ranges: a missing one read as an empty
    object, a negative one as less than empty, and a malformed size,
    generation or crc32c raised a bare ValueError (or KeyError, TypeError)
    naming nothing.

    Args:
        op: the operation, bucket and object answered about.
        item: the resource, as parsed from JSON.
        status: the answer's HTTP status, for the error.
        listed: the resource is an item of a listing page (the error then
            names the listed object, not the listing's prefix).

    Returns:
        The object's metadata.

    Raises:
        ProtocolError: no name, no size, or a size, generation,
            metageneration or crc32c that is not one.
    """
    fault = resource_fault(item)
    if fault is None:
        assert isinstance(item, dict)
        return ObjectInfo.from_json(op.bucket, item)
    name = op.name
    if listed and isinstance(item, dict) and type(item.get("name")) is str:
        name = item["name"][:200]
    raise refused_resource(Op(op.operation, op.bucket, name),
                           "the listing's item" if listed else "the object resource", fault,
                           status)


def refused_resource(op: Op, what: str, fault: str, status: int = 200) -> ProtocolError:
    """The error for an object resource that :func:`resource_fault` refuses.

    Args:
        op: the operation, bucket and object.
        what: the answer, for the message (``"the object resource"``).
        fault: what is wrong with it.
        status: the answer's HTTP status.

    Returns:
        The error to raise.
    """
    return ProtocolError(f"{describe(op.operation, op.bucket, op.name)} failed: {what} {fault}",
                         operation=op.operation, bucket=op.bucket, name=op.name, status=status)


def written_handler(op: Op) -> Callable[[HttpResponse], Awaitable[ObjectInfo | str]]:
    """:func:`object_handler` for the answer of a request that may have
    published an object (a write, a compose): a resource that cannot be
    read comes back as what is wrong with it, for the caller to learn by a
    stat whether the name holds what was written. Raising would leave a
    published object behind an error, unverified.
    """
    parse = json_handler(op)

    async def handle(resp: HttpResponse) -> ObjectInfo | str:
        item = await parse(resp)
        fault = resource_fault(item)
        return ObjectInfo.from_json(op.bucket, item) if fault is None else fault

    return handle


def _all_counts(values: list[Any]) -> bool:
    # One join and a few C-level passes rather than a Python call per item:
    # this runs on every page of a 100k listing.
    try:
        joined = "".join(values)
    except TypeError:  # a value that is no string (a number, null...)
        return False
    return not values or (joined.isascii() and joined.isdigit() and all(values)
                          and max(map(len, values)) <= MOST_DIGITS)


def listed_objects(op: Op, items: object) -> list[ObjectInfo]:
    """The objects of a listing page's ``items``, each checked as
    :func:`object_of` checks one.

    Args:
        op: the listing (operation, bucket, prefix).
        items: the page's ``items``, as parsed from JSON.

    Returns:
        ObjectInfo of each item, in order.

    Raises:
        ProtocolError: ``items`` is not a list, or an item is no object
            resource with a name, a size and a generation (the first such
            item is named).
    """
    if type(items) is not list:
        raise ProtocolError(f"{describe(op.operation, op.bucket, op.name)} failed: the listing's "
                            f"items are not a list ({type(items).__name__})",
                            operation=op.operation, bucket=op.bucket, name=op.name, status=200)
    try:
        # What a listing sends (LIST_FIELDS; strings): checked at once.
        names = list(map(_NAME, items))
        "".join(names)  # a TypeError on a name that is no string
        if (all(names) and _all_counts(list(map(_SIZE, items)))
                and _all_counts(list(map(_GENERATION, items)))):
            return objects_from_json(op.bucket, items)
    except (KeyError, TypeError, ValueError):  # named below
        pass
    # Something to name (or only unusual: a size as a JSON number, no
    # generation): each item on its own.
    return [object_of(op, item, listed=True) for item in items]
