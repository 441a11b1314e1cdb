"""Object listings of the JSON API, as the storage protocol's pages.

Each page is one GET of the bucket's objects; the server applies the
prefix, the delimiter and both offsets, and each page is checked
(:class:`~aioflux._core.checks.pages.ListingCheck`: names once, in order, under
the prefix and inside the offsets).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import NoReturn

from .._core.checks.pages import ListingCheck
from .._core.errors import ProtocolError, describe
from .._core.records.types import COMPACT_JSON, ListPage
from .._net.transport import Op, Transport
from ._json import json_handler, listed_objects

__all__ = ["list_pages"]


async def list_pages(transport: Transport, url: str, bucket: str, prefix: str,
                     delimiter: str | None, start_offset: str | None, end_offset: str | None,
                     page_size: int, fields: str | None,
                     base: Mapping[str, str] = COMPACT_JSON) -> AsyncIterator[ListPage]:
    """Pages of ``bucket``'s objects under ``prefix`` in ``[start_offset, end_offset)``.

    Args:
        transport: the client's transport.
        url: the bucket's objects (``.../storage/v1/b/<bucket>/o``).
        bucket: bucket name.
        prefix: only names starting with this.
        delimiter: group names by this into prefixes.
        start_offset: first name (inclusive).
        end_offset: end (exclusive).
        page_size: items per request (at most 1000).
        fields: JSON ``fields`` selector; None returns full resources.
        base: the parameters every request of the client carries
            (``prettyPrint``, a requester-pays bucket's ``userProject``).

    Yields:
        ListPage; the last has no ``next_page_token``.
    """
    params = {"maxResults": str(min(max(page_size, 1), 1000)), **base}
    for key, value in (("prefix", prefix), ("delimiter", delimiter),
                       ("startOffset", start_offset), ("endOffset", end_offset),
                       ("fields", fields)):
        if value:
            params[key] = value
    # A plain GET and ``json.loads`` of the body bytes rather than
    # gcloud-aio-storage's ``list_objects`` (its session wrapper, header
    # merging and ``resp.json()`` text decode): listing is CPU-bound on
    # the client, and with ``objects_from_json`` this costs under half the
    # wrapper's CPU a listing (perf/scenarios/listing.py).
    op = Op("list", bucket, prefix)
    check = ListingCheck("gs", bucket, prefix, start_offset, end_offset)
    token: str | None = None
    while True:
        page_params = dict(params, pageToken=token) if token else params
        data = await transport.request(op, "GET", url, json_handler(op), params=page_params)
        token = _token(op, data.get("nextPageToken"))
        yield check.page(ListPage(
            objects=listed_objects(op, data.get("items", [])),
            prefixes=_prefixes(op, data.get("prefixes", [])),
            next_page_token=token,
        ))
        if token is None:
            return


def _token(op: Op, value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        _refuse(op, f"gives the next page token as {type(value).__name__}, not a string")
    return value


def _prefixes(op: Op, value: object) -> list[str]:
    # list() of a string is its characters: with an empty prefix each one
    # passed for a "folder".
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        _refuse(op, "gives prefixes that are not a list of strings")
    return value


def _refuse(op: Op, what: str) -> NoReturn:
    raise ProtocolError(f"{describe(op.operation, op.bucket, op.name)} failed: the listing "
                        f"{what}", operation=op.operation, bucket=op.bucket, name=op.name,
                        status=200)
