"""JSON API handlers: buckets, list, metadata, media download, delete,
patch, compose, rewrite, copy and move. Uploads live in :mod:`._json_upload`.

Paths arrive already split into raw (still percent-encoded) segments after
``/storage/v1`` (or ``/download/storage/v1``), so an object name encoded as
one segment may contain ``/``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._billing import check_user_project
from aioflux.testing._json_upload import handle_upload
from aioflux.testing._rope import Rope
from aioflux.testing._runtime import Runtime, parse_range
from aioflux.testing._store import ObjectRecord
from aioflux.testing._util import (
    check_object_name,
    json_response,
    media_headers,
    parse_fields,
    preconditions_from,
    query_int,
    trim_fields,
)

__all__ = ["handle_json"]

_MAX_COMPOSE = 32


async def handle_json(
    rt: Runtime, request: web.BaseRequest, segs: list[str], *, media: bool = False
) -> web.StreamResponse:
    """Dispatch one JSON API request.

    Args:
        rt: the emulator runtime.
        request: the request.
        segs: raw path segments after ``storage/v1``.
        media: the path was under ``/download`` (always serve bytes).

    Returns:
        The response.

    Raises:
        ApiError: any GCS error; the caller renders it as JSON.
    """
    method = request.method
    n = len(segs)
    if n == 0 or segs[0] != "b":
        raise _unknown(request)
    if n == 1:
        if method == "POST":
            return await _create_bucket(rt, request)
        if method == "GET":
            rt.admit("bucket_list", object_request=False)
            items = [b.to_json() for b in rt.store.buckets.values()]
            return json_response({"kind": "storage#buckets", "items": items})
        raise _unknown(request)
    bucket = unquote(segs[1])
    if "upload_id" not in request.query:
        # A resumable session's later requests are the session's: its
        # URL (which echoes the userProject it was opened with) is the grant.
        check_user_project(rt.store, request, bucket)
    if n == 2:
        return await _bucket_op(rt, request, bucket)
    if segs[2] == "iam" and n == 4 and segs[3] == "testPermissions":
        rt.admit("test_permissions", object_request=False)
        rt.store.bucket(bucket)
        perms = request.query.getall("permissions", [])
        return json_response({"kind": "storage#testIamPermissionsResponse", "permissions": perms})
    if segs[2] != "o":
        raise _unknown(request)
    if n == 3:
        if method == "GET":
            return await _list(rt, request, bucket)
        if method in ("POST", "PUT", "DELETE"):
            return await handle_upload(rt, request, bucket)
        raise _unknown(request)
    if n == 5 and segs[4] == "compose" and method == "POST":
        return await _compose(rt, request, bucket, unquote(segs[3]))
    if n == 9 and segs[4] in ("rewriteTo", "copyTo") and segs[5] == "b" and segs[7] == "o":
        src = (bucket, unquote(segs[3]))
        dst = (unquote(segs[6]), unquote(segs[8]))
        check_user_project(rt.store, request, dst[0])
        return await _rewrite(rt, request, src, dst, rewrite=segs[4] == "rewriteTo")
    if n == 7 and segs[4] == "moveTo" and segs[5] == "o" and method == "POST":
        return await _move(rt, request, bucket, unquote(segs[3]), unquote(segs[6]))
    # One encoded segment normally; tolerate clients that left '/' unencoded.
    name = unquote("/".join(segs[3:]))
    if method in ("GET", "HEAD"):
        return await _get(rt, request, bucket, name, media)
    if method == "DELETE":
        rt.admit("delete")
        q = request.query
        store = rt.store
        generation = query_int(q, "generation")
        preconditions_from(q).check(store.get(bucket, name, generation))
        store.delete(bucket, name, generation=generation)
        return web.Response(status=204)
    if method in ("PATCH", "PUT"):
        return await _patch(rt, request, bucket, name)
    raise _unknown(request)


def _unknown(request: web.BaseRequest) -> err.ApiError:
    return err.ApiError(
        404, "notFound", f"Not Found: {request.method} {request.path}", xml_code="NotFound"
    )


async def _read_json(rt: Runtime, request: web.BaseRequest) -> dict[str, Any]:
    raw = await rt.read_body(request)
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        raise err.invalid("Parse Error") from None
    if not isinstance(doc, dict):
        raise err.invalid("Parse Error")
    return doc


async def _create_bucket(rt: Runtime, request: web.BaseRequest) -> web.StreamResponse:
    rt.admit("bucket_create", object_request=False)
    doc = await _read_json(rt, request)
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise err.ApiError(400, "required", "Required")
    requester_pays = _requester_pays(doc)
    return json_response(rt.store.create_bucket(name, requester_pays=bool(requester_pays))
                         .to_json())


def _requester_pays(doc: dict[str, Any]) -> bool | None:
    """``billing.requesterPays`` of a bucket resource, None when absent."""
    billing = doc.get("billing")
    if not isinstance(billing, dict) or "requesterPays" not in billing:
        return None
    value = billing["requesterPays"]
    if not isinstance(value, bool):
        raise err.invalid(f"Invalid value for billing.requesterPays: {value!r}")
    return value


async def _bucket_op(rt: Runtime, request: web.BaseRequest, bucket: str) -> web.StreamResponse:
    if request.method == "GET":
        rt.admit("bucket_get", object_request=False)
        return json_response(rt.store.bucket(bucket).to_json())
    if request.method == "DELETE":
        rt.admit("bucket_delete", object_request=False)
        rt.store.delete_bucket(bucket)
        return web.Response(status=204)
    if request.method == "PATCH":
        rt.admit("bucket_patch", object_request=False)
        found = rt.store.bucket(bucket)
        requester_pays = _requester_pays(await _read_json(rt, request))
        if requester_pays is not None:
            found.requester_pays = requester_pays
        return json_response(found.to_json())
    raise _unknown(request)


def _refuse_unimplemented_filters(query: Mapping[str, str]) -> None:
    """Refuse what would make GCS list other objects than the emulator does
    (400 naming the parameter), rather than answer as if it were absent.

    ``versions`` and ``includeFoldersAsPrefixes`` change nothing here: the
    emulator keeps no noncurrent generations and no managed folders.
    """
    named = [k for k in ("matchGlob", "filter") if k in query]
    if query.get("softDeleted", "").lower() == "true":
        named.append("softDeleted")
    if named:
        raise err.invalid(f"{named[0]} is not implemented by this emulator (aioflux.testing)")


async def _list(rt: Runtime, request: web.BaseRequest, bucket: str) -> web.StreamResponse:
    rt.admit("list")
    q = request.query
    _refuse_unimplemented_filters(q)
    await rt.first_byte_delay()
    max_results = query_int(q, "maxResults") or 1000
    items, prefixes, token = rt.store.list_page(
        bucket,
        prefix=q.get("prefix", ""),
        delimiter=q.get("delimiter", ""),
        start_offset=q.get("startOffset", ""),
        end_offset=q.get("endOffset", ""),
        include_trailing_delimiter=q.get("includeTrailingDelimiter", "").lower() == "true",
        page_token=q.get("pageToken", ""),
        max_results=max(1, min(max_results, 1000)),
    )
    fields = q.get("fields") or ""
    selection = parse_fields(fields) if fields else None
    item_fields = selection.get("items") if selection is not None else None

    def wanted(key: str) -> bool:
        return selection is None or key in selection

    def encode(rec: ObjectRecord) -> bytes:
        return _dumps(trim_fields(rec.to_json(rt.base_url), item_fields))

    cache_key = f"{rt.base_url} {fields}"
    # Assembled from per-record cached fragments; key order matches GCS.
    entries = [b'"kind":"storage#objects"'] if wanted("kind") else []
    if token is not None and wanted("nextPageToken"):
        entries.append(b'"nextPageToken":' + _dumps(token))
    if prefixes and wanted("prefixes"):
        entries.append(b'"prefixes":' + _dumps(prefixes))
    if items and wanted("items"):
        entries.append(b'"items":[' + b",".join(r.encoded(cache_key, encode) for r in items) + b"]")
    return web.Response(
        body=b"{" + b",".join(entries) + b"}",
        content_type="application/json",
        charset="UTF-8",
    )


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


async def _get(
    rt: Runtime, request: web.BaseRequest, bucket: str, name: str, media: bool
) -> web.StreamResponse:
    q = request.query
    media = media or q.get("alt") == "media"
    rt.admit("get_media" if media else "get_metadata")
    await rt.first_byte_delay()
    rec = rt.store.get(bucket, name, query_int(q, "generation"))
    preconditions_from(q).check(rec, read=True)
    if not media:
        fields = q.get("fields")
        doc = rec.to_json(rt.base_url)
        return json_response(trim_fields(doc, parse_fields(fields)) if fields else doc)
    headers = media_headers(rec)
    whole = await rt.send_transcoded(request, rec, headers)
    if whole is not None:
        return whole
    rng = parse_range(request.headers.get("Range"), rec.size)
    if rng is None or rng == (0, rec.size):
        if rng is not None:
            headers["Content-Range"] = f"bytes 0-{rec.size - 1}/{rec.size}"
        status = 200 if rng is None else 206
        return await rt.send_body(
            request, rec.data, status=status, headers=headers, content_type=rec.content_type
        )
    start, end = rng
    headers["Content-Range"] = f"bytes {start}-{end - 1}/{rec.size}"
    return await rt.send_body(
        request,
        rec.data.slice(start, end),
        status=206,
        headers=headers,
        content_type=rec.content_type,
    )


async def _patch(
    rt: Runtime, request: web.BaseRequest, bucket: str, name: str
) -> web.StreamResponse:
    rt.admit("patch")
    await rt.first_byte_delay()
    doc = await _read_json(rt, request)
    preconditions_from(request.query).check(rt.store.get(bucket, name))
    metadata = doc.get("metadata")
    rec = rt.store.patch(
        bucket,
        name,
        content_type=doc.get("contentType"),
        metadata=metadata if isinstance(metadata, dict) else None,
    )
    return json_response(rec.to_json(rt.base_url))


async def _compose(
    rt: Runtime, request: web.BaseRequest, bucket: str, name: str
) -> web.StreamResponse:
    rt.admit("compose")
    await rt.first_byte_delay()
    check_object_name(name)
    doc = await _read_json(rt, request)
    sources = doc.get("sourceObjects") or []
    if not isinstance(sources, list) or not sources:
        raise err.ApiError(400, "required", "Required: sourceObjects")
    if len(sources) > _MAX_COMPOSE:
        raise err.invalid(
            f"The number of source components provided ({len(sources)}) "
            f"exceeds the maximum ({_MAX_COMPOSE})"
        )
    store = rt.store
    records = []
    for src in sources:
        if not isinstance(src, dict) or not isinstance(src.get("name"), str):
            raise err.ApiError(400, "required", "Required: sourceObjects.name")
        generation = src.get("generation")
        rec = store.get(bucket, src["name"], int(generation) if generation else None)
        match = (src.get("objectPreconditions") or {}).get("ifGenerationMatch")
        if match is not None and int(match) != rec.generation:
            raise err.precondition_failed(f"{bucket}/{rec.name}")
        records.append(rec)
    # The composite shares its sources' pieces (no copy, no fresh memory).
    data = Rope(r.data for r in records)
    dest = doc.get("destination") or {}
    result = store.put(
        bucket,
        name,
        data,
        content_type=dest.get("contentType") or records[0].content_type,
        metadata=dest.get("metadata"),
        preconditions=preconditions_from(request.query),
        with_md5=False,  # composite objects carry no MD5 on GCS
        component_count=sum(r.component_count or 1 for r in records),
        content_encoding=dest.get("contentEncoding"),
    )
    return json_response(result.to_json(rt.base_url))


async def _move(rt: Runtime, request: web.BaseRequest, bucket: str, src: str,
                dst: str) -> web.StreamResponse:
    """objects.move: rename within a bucket (gcsfs's ``mv`` uses it); the
    source's ``ifSource*`` and the destination's ``if*`` preconditions hold."""
    rt.admit("move")
    await rt.first_byte_delay()
    if src == dst:
        # Replacing the source by itself and then deleting it would lose it.
        raise err.invalid("Source and destination object names must be different.")
    check_object_name(dst)
    q = request.query
    rec = rt.store.get(bucket, src)
    preconditions_from(q, "ifSource").check(rec)
    out = rt.store.put(bucket, dst, rec.data, content_type=rec.content_type,
                       metadata=rec.metadata, preconditions=preconditions_from(q),
                       crc32c=rec.crc32c, md5=rec.md5, with_md5=rec.md5 is not None,
                       component_count=rec.component_count,
                       content_encoding=rec.content_encoding)
    rt.store.delete(bucket, src, generation=rec.generation)
    return json_response(out.to_json(rt.base_url))


async def _rewrite(
    rt: Runtime,
    request: web.BaseRequest,
    src: tuple[str, str],
    dst: tuple[str, str],
    *,
    rewrite: bool,
) -> web.StreamResponse:
    rt.admit("rewrite" if rewrite else "copy")
    await rt.first_byte_delay()
    check_object_name(dst[1])
    q = request.query
    doc = await _read_json(rt, request)
    rec = rt.store.get(*src, generation=query_int(q, "sourceGeneration"))
    preconditions_from(q, "ifSource").check(rec)
    rt.store.bucket(dst[0])
    out = rt.store.put(
        *dst,
        rec.data,
        content_type=doc.get("contentType") or rec.content_type,
        metadata=doc.get("metadata") or rec.metadata,
        preconditions=preconditions_from(q),
        crc32c=rec.crc32c,
        md5=rec.md5,
        with_md5=rec.md5 is not None,
        component_count=rec.component_count,
        content_encoding=doc.get("contentEncoding") or rec.content_encoding,
    )
    if not rewrite:
        return json_response(out.to_json(rt.base_url))
    return json_response(
        {
            "kind": "storage#rewriteResponse",
            "totalBytesRewritten": str(out.size),
            "objectSize": str(out.size),
            "done": True,
            "resource": out.to_json(rt.base_url),
        }
    )
