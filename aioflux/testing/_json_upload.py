"""JSON API uploads: ``uploadType=media``, ``multipart`` and ``resumable``.

Each request body is read once; resumable chunks are kept as a list and
joined once when the session completes, so a large upload is never copied
more than once per chunk.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any
from urllib.parse import quote

import google_crc32c
from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._runtime import Runtime
from aioflux.testing._store import ObjectRecord, ResumableSession
from aioflux.testing._util import (
    check_object_name,
    json_response,
    parse_goog_hash,
    preconditions_from,
    verify_hashes,
)

__all__ = ["CHUNK_GRANULARITY", "handle_upload"]

CHUNK_GRANULARITY = 256 * 1024
"""Every resumable chunk but the final one is a multiple of this (GCS's rule)."""


async def handle_upload(rt: Runtime, request: web.BaseRequest, bucket: str) -> web.StreamResponse:
    """Handle a request on ``/upload/storage/v1/b/{bucket}/o``.

    Args:
        rt: the emulator runtime.
        request: a POST (new upload), or a PUT / POST / DELETE on a
            resumable session URL (``upload_id=``).
        bucket: the bucket name.

    Returns:
        The response (object resource, 308 for an incomplete session, 499
        for a cancelled one).

    Raises:
        ApiError: 400 (bad request or hash mismatch), 404, 412.
    """
    q = request.query
    upload_id = q.get("upload_id")
    if upload_id is not None:
        return await _session_request(rt, request, bucket, upload_id)
    upload_type = q.get("uploadType", "media")
    if upload_type == "resumable":
        return await _start_resumable(rt, request, bucket)
    if upload_type not in ("media", "multipart"):
        # GCS refuses a type it does not know rather than storing the body.
        raise err.invalid(f"Invalid upload type: {upload_type}")
    rt.admit("upload")
    await rt.first_byte_delay()
    body = _transport_decoded(request, await rt.read_body(request))
    meta: dict[str, Any] = {}
    if upload_type == "multipart":
        meta, data, media_type = _split_multipart(request.headers.get("Content-Type", ""), body)
        # Without a contentType in the metadata, GCS takes the media part's.
        content_type = meta.get("contentType") or media_type
    else:
        data = body
        content_type = request.headers.get("Content-Type")
        if q.get("contentEncoding"):
            meta["contentEncoding"] = q["contentEncoding"]
    name = q.get("name") or meta.get("name")
    if not name:
        raise err.ApiError(400, "required", "Required")
    check_object_name(name)
    rt.store.bucket(bucket)
    crc = google_crc32c.value(data)
    sent = parse_goog_hash(request.headers.get("x-goog-hash"))
    md5 = verify_hashes(
        data, crc, meta.get("crc32c") or sent.get("crc32c"), meta.get("md5Hash") or sent.get("md5")
    )
    rec = rt.store.put(
        bucket,
        name,
        data,
        content_type=content_type,
        metadata=meta.get("metadata"),
        preconditions=preconditions_from(q),
        crc32c=crc,
        md5=md5,
        content_encoding=_encoding(meta),
    )
    return json_response(rec.to_json(rt.base_url))


def _transport_decoded(request: web.BaseRequest, body: bytes) -> bytes:
    """A JSON API upload body without its transport coding.

    On the JSON API a request's ``Content-Encoding: gzip`` only compresses
    the request (gsutil's ``-j``): GCS stores what it inflates to. The
    object's own coding is the ``contentEncoding`` of its metadata.

    Raises:
        ApiError: 400 for a body that is not the gzip it claims to be.
    """
    if request.headers.get("Content-Encoding", "").strip().lower() != "gzip":
        return body
    try:
        return gzip.decompress(body)
    except (OSError, EOFError, zlib.error):
        raise err.invalid("The request body is not valid gzip") from None


def _encoding(meta: dict[str, Any]) -> str | None:
    value = meta.get("contentEncoding")
    return value if isinstance(value, str) and value else None


def _split_multipart(content_type: str,
                     body: bytes) -> tuple[dict[str, Any], bytes, str | None]:
    """Split a ``multipart/related`` body into (JSON metadata, media bytes,
    the media part's Content-Type)."""
    boundary = ""
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary":
            boundary = value.strip('"')
    if not boundary:
        raise err.invalid("Missing boundary in multipart/related Content-Type")
    delim = b"--" + boundary.encode()
    first = body.find(delim)
    meta_start = body.find(b"\r\n\r\n", first) + 4
    meta_end = body.find(b"\r\n" + delim, meta_start)
    media_start = body.find(b"\r\n\r\n", meta_end + 2) + 4
    media_end = body.rfind(b"\r\n" + delim)
    if first < 0 or meta_start < 4 or meta_end < 0 or media_start < 4 or media_end < media_start:
        raise err.invalid("Malformed multipart/related body")
    try:
        meta = json.loads(body[meta_start:meta_end]) if meta_end > meta_start else {}
    except ValueError:
        raise err.invalid("Parse Error") from None
    if not isinstance(meta, dict):
        raise err.invalid("Parse Error")
    media_type = None
    for line in body[meta_end + 2:media_start].split(b"\r\n"):
        name, sep, value = line.decode("latin-1").partition(":")
        if sep and name.strip().lower() == "content-type":
            media_type = value.strip() or None
    return meta, body[media_start:media_end], media_type


async def _start_resumable(
    rt: Runtime, request: web.BaseRequest, bucket: str
) -> web.StreamResponse:
    rt.admit("resumable_start")
    await rt.first_byte_delay()
    q = request.query
    raw = await rt.read_body(request)
    try:
        meta = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise err.invalid("Parse Error") from None
    name = q.get("name") or meta.get("name")
    if not name:
        raise err.ApiError(400, "required", "Required")
    check_object_name(name)
    store = rt.store
    pre = preconditions_from(q)
    pre.check(store.bucket(bucket).objects.get(name))
    session = ResumableSession(
        upload_id=store.new_upload_id(),
        bucket=bucket,
        name=name,
        content_type=meta.get("contentType")
        or request.headers.get("X-Upload-Content-Type")
        or "application/octet-stream",
        metadata=meta.get("metadata"),
        preconditions=pre,
        expected_crc32c=meta.get("crc32c"),
        expected_md5=meta.get("md5Hash"),
        content_encoding=_encoding(meta),
    )
    store.sessions[session.upload_id] = session
    # As GCS's, the session URL repeats the query it was opened with (a
    # requester-pays bucket's userProject included).
    billed = q.get("userProject")
    payer = f"&userProject={quote(billed, safe='')}" if billed else ""
    location = (
        f"{request.scheme}://{request.host}/upload/storage/v1/b/{quote(bucket, safe='')}/o"
        f"?uploadType=resumable&name={quote(name, safe='')}{payer}&upload_id={session.upload_id}"
    )
    return web.Response(
        status=200, headers={"Location": location, "X-GUploader-UploadID": session.upload_id}
    )


def _incomplete(session: ResumableSession) -> web.Response:
    headers = {"X-GUploader-UploadID": session.upload_id}
    if session.committed:
        headers["Range"] = f"bytes=0-{session.committed - 1}"
    return web.Response(status=308, headers=headers)


def _parse_content_range(value: str) -> tuple[int | None, int | None, int | None]:
    """``bytes a-b/T`` -> (a, b+1, T); ``*`` parts become ``None``."""
    unit, _, spec = value.strip().partition(" ")
    rng, _, total = spec.partition("/")
    if unit.lower() != "bytes" or not total:
        raise err.invalid(f"Invalid Content-Range: {value}")
    try:
        size = None if total == "*" else int(total)
        if rng == "*":
            return None, None, size
        first, _, last = rng.partition("-")
        return int(first), int(last) + 1, size
    except ValueError:
        raise err.invalid(f"Invalid Content-Range: {value}") from None


async def _session_request(
    rt: Runtime, request: web.BaseRequest, bucket: str, upload_id: str
) -> web.StreamResponse:
    store = rt.store
    session = store.sessions.get(upload_id)
    if request.method == "DELETE":
        rt.admit("resumable_cancel")
        if session is None or session.bucket != bucket:
            raise err.no_such_upload(upload_id)
        del store.sessions[upload_id]
        return web.Response(status=499, reason="Client Closed Request")
    rt.admit("resumable_put")
    await rt.first_byte_delay()
    data = await rt.read_body(request)
    if session is None or session.bucket != bucket:
        raise err.no_such_upload(upload_id)
    if session.result is not None:
        return json_response(session.result.to_json(rt.base_url))
    header = request.headers.get("Content-Range")
    if header is None:
        start: int | None = session.committed
        end: int | None = session.committed + len(data)
        total: int | None = end
    else:
        start, end, total = _parse_content_range(header)
    if start is not None and end is not None:
        _take_chunk(session, data, start, end, total)
    if total is None or session.committed < total:
        return _incomplete(session)
    if session.committed > total:
        raise err.invalid("Upload is larger than the declared total size")
    # The request that completes the upload may carry the whole object's
    # hashes (X-Goog-Hash); GCS checks them as it checks those of the metadata.
    sent = parse_goog_hash(request.headers.get("x-goog-hash"))
    return json_response(_finish(rt, session, sent).to_json(rt.base_url))


def _take_chunk(session: ResumableSession, data: bytes, start: int, end: int,
                total: int | None) -> None:
    """Persist what GCS would of the chunk ``[start, end)``.

    Every chunk but the final one (the one reaching the declared total) is
    at least 256 KiB, or GCS refuses it with 400; of a non-final chunk that
    is not a multiple of 256 KiB, GCS persists only up to the last multiple
    and says so in the 308's ``Range``: the client must resend the rest. A
    chunk that starts past what the session holds is a 503 (the client
    asks for the status and resends).

    Raises:
        ApiError: 400 (length mismatch, past the declared total, a short
            non-final chunk) or 503 (a gap).
    """
    if end - start != len(data):
        raise err.invalid("Content-Range does not match the request body length")
    if total is not None and end > total:
        raise err.invalid("Content-Range goes past the declared total size")
    if start > session.committed:
        raise err.ApiError(503, "backendError", f"Invalid request. The chunk starts at byte "
                           f"{start}, past the {session.committed} bytes persisted.")
    if total is None or end < total:
        if len(data) < CHUNK_GRANULARITY:
            raise err.invalid(
                "Invalid request.  The number of bytes uploaded is required to be equal or "
                f"greater than {CHUNK_GRANULARITY}, except for the final request (it's "
                f"recommended to be the exact multiple of {CHUNK_GRANULARITY}).  The received "
                f"request contained {len(data)} bytes, which does not meet this requirement.")
        end -= end % CHUNK_GRANULARITY
    if end > session.committed:
        skip = session.committed - start
        session.chunks.append(data[skip:end - start] if skip or end - start < len(data)
                              else data)
        session.committed = end


def _finish(rt: Runtime, session: ResumableSession, sent: dict[str, str]) -> ObjectRecord:
    chunks = session.chunks
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    crc = google_crc32c.value(data)
    try:
        md5 = verify_hashes(data, crc, sent.get("crc32c"), sent.get("md5"))
        md5 = verify_hashes(data, crc, session.expected_crc32c, session.expected_md5) or md5
        rec = rt.store.put(
            session.bucket,
            session.name,
            data,
            content_type=session.content_type,
            metadata=session.metadata,
            preconditions=session.preconditions,
            crc32c=crc,
            md5=md5,
            content_encoding=session.content_encoding,
        )
    except err.ApiError:
        # A failed finalization ends the session, as on GCS; nothing is stored.
        rt.store.sessions.pop(session.upload_id, None)
        raise
    session.chunks = []
    session.result = rec
    return rec
