"""The GCS JSON API's wire format: name quoting, request bodies, response handlers."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import quote

from .._core.errors import ProtocolError, describe
from .._core.store import SourceSpec, source_of
from .._core.types import ObjectInfo
from .._net.failures import read_metadata
from .._net.transport import HttpResponse, Op

__all__ = [
    "compose_body",
    "json_handler",
    "multipart_related",
    "object_handler",
    "quote_name",
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
        return ObjectInfo.from_json(op.bucket, await parse(resp))

    return handle
