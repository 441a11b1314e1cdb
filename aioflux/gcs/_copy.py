"""Server-side copies (JSON ``rewriteTo``), checked.

The copy is of the source generation a stat saw (``ifSourceGenerationMatch``)
and must have its size and crc32c, else exactly that generation of the copy
is deleted before ``ChecksumMismatch``. A rewrite that takes several calls
must hand a new token each time: one that repeats would be called forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.errors import ProtocolError, describe
from .._core.store import copy_differs
from .._core.types import COMPACT_JSON, ObjectInfo
from .._net.transport import Op
from ._json import json_handler, quote_name
from ._published import discard_published

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
    src = await client.stat(bucket, name)
    pinned = dict(COMPACT_JSON, ifSourceGenerationMatch=str(src.generation))
    token: str | None = None
    tokens: set[str] = set()
    while True:
        # Large cross-location rewrites take several calls; each returns
        # a token to continue from.
        params = dict(pinned, rewriteToken=token) if token else pinned
        result = await client.transport.request(
            op, "POST", url, handle, params=params,
            headers={"Content-Type": "application/json"}, data=b"{}")
        if result.get("done"):
            break
        token = str(result.get("rewriteToken") or "")
        if not token or token in tokens:
            # A rewrite that never ends: the same call again and again.
            raise ProtocolError(f"{describe('copy', bucket, name)} failed: the server "
                                "answered a rewrite with no new token to continue from",
                                operation="copy", bucket=bucket, name=name)
        tokens.add(token)
    info = ObjectInfo.from_json(dest_bucket, result["resource"])
    differs = copy_differs(src, info)
    if differs:
        await discard_published(client, Op("copy", dest_bucket, dest_name), info,
                                f"the copy's {' and '.join(differs)} differ from the "
                                "source's")
    return info
