"""Server-side copies (JSON ``rewriteTo``), checked.

The copy is of the source generation a stat saw (``ifSourceGenerationMatch``)
and must be the destination asked for, with the source's size and crc32c
(a stat supplies a crc32c the answer lacks), else exactly that generation of
the copy is deleted before ``ChecksumMismatch``. A rewrite that takes
several calls must hand a new token and report more bytes rewritten each
time: each call is its own request, so no retry deadline would end one
that never moves forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.errors import NotFound, ProtocolError, as_operation, describe
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import copy_differs
from .._net.transport import Op
from ._json import json_handler, quote_name, resource_fault
from ._published import discard_published, verify_published

if TYPE_CHECKING:
    from ._client import AsyncClient

__all__ = ["rewrite_object"]


async def rewrite_object(client: AsyncClient, bucket: str, name: str, dest_bucket: str,
                         dest_name: str) -> ObjectInfo:
    """Copy ``name`` to ``dest_name`` server-side; ObjectInfo of the copy."""
    url = f"{client._json_url(bucket, name)}/rewriteTo/b/{dest_bucket}/o/{quote_name(dest_name)}"
    op = Op("copy", bucket, name)
    handle = json_handler(op)
    # The generation copied is the one stat saw, so the copy can be held
    # to its size and crc32c.
    try:
        src = await client.stat(bucket, name)
    except NotFound as exc:
        raise as_operation(exc, "copy") from None
    pinned = dict(client._json_params, ifSourceGenerationMatch=str(src.generation))
    token = ""
    rewritten = -1  # a first answer may report nothing rewritten yet
    while True:
        # Large cross-location rewrites take several calls; each returns
        # a token to continue from.
        params = dict(pinned, rewriteToken=token) if token else pinned
        try:
            result = await client.transport.request(
                op, "POST", url, handle, params=params,
                headers={"Content-Type": "application/json"}, data=b"{}")
        except NotFound as exc:
            raise await _missing(client, exc, src, dest_bucket, dest_name) from exc
        if result.get("done"):
            break
        token, rewritten = _continuation(op, result, token, rewritten, src.size)
    dest = Op("copy", dest_bucket, dest_name)
    info = _copied(dest, result)
    differs = copy_differs(src, info)
    if differs:
        await discard_published(client, dest, info, f"the copy's {' and '.join(differs)} "
                                "differ from the source's")
    # What the answer left out (a crc32c, the generation) is learned or
    # confirmed as for a write, and an answer about another object fails.
    return await verify_published(client, dest, info, src.size, src.crc32c)


async def _missing(client: AsyncClient, exc: NotFound, src: ObjectInfo, dest_bucket: str,
                   dest_name: str) -> NotFound:
    """What a rewrite's 404 is about: the source, when a stat no longer
    finds it, else the destination's bucket (a request names both)."""
    try:
        await client.stat(src.bucket, src.name)
    except NotFound as gone:
        return as_operation(gone, "copy")
    detail = str(exc).partition(" failed: ")[2] or str(exc)
    return NotFound(f"{describe('copy', dest_bucket, dest_name)} failed: {detail}",
                    operation="copy", bucket=dest_bucket, name=dest_name, status=exc.status,
                    reason=exc.reason, attempts=exc.attempts)


def _continuation(op: Op, result: dict[str, Any], token: str, rewritten: int,
                  size: int) -> tuple[str, int]:
    """The token of an unfinished rewrite and its bytes rewritten so far,
    which must exceed ``rewritten`` and stay within the source's ``size``."""
    new_token = str(result.get("rewriteToken") or "")
    if not new_token or new_token == token:
        raise _stuck(op, "answered a rewrite with no new token to continue from")
    reported = result.get("totalBytesRewritten")
    try:
        total = int(str(reported))  # an int64 as a string, or a number
    except ValueError:
        raise _stuck(op, f"answered a rewrite with no byte count "
                         f"({str(reported)[:40]!r})") from None
    if not 0 <= total <= size:
        raise _stuck(op, f"reports {total} bytes rewritten of a {size}-byte source")
    if total <= rewritten:
        raise _stuck(op, f"reports {total} bytes rewritten after {rewritten}: the rewrite "
                         "does not move forward")
    return new_token, total


def _copied(dest: Op, result: dict[str, Any]) -> ObjectInfo:
    # Checked as any object resource: one without a size must not read as a
    # 0-byte copy, which "sizes differ" would then delete.
    resource = result.get("resource")
    fault = resource_fault(resource) or ""
    if not fault:
        assert isinstance(resource, dict)
        return ObjectInfo.from_json(dest.bucket, resource)
    raise ProtocolError(f"{describe(dest.operation, dest.bucket, dest.name)}: the finished "
                        f"rewrite has no readable object resource ({fault}); the copy is "
                        "not verified", operation=dest.operation, bucket=dest.bucket,
                        name=dest.name)


def _stuck(op: Op, what: str) -> ProtocolError:
    return ProtocolError(f"{describe(op.operation, op.bucket, op.name)} failed: the server "
                         f"{what}", operation=op.operation, bucket=op.bucket, name=op.name)
