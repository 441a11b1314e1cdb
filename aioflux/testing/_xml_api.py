"""XML API handlers (path style ``/{bucket}/{object}``): GET/HEAD/PUT/DELETE
and the S3-compatible multipart upload.

A multipart upload keeps its parts as separate ``bytes``; the object is
assembled with a single join at completion and becomes visible only then.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from datetime import datetime
from email.utils import format_datetime
from urllib.parse import quote
from xml.sax.saxutils import escape

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._rope import Rope
from aioflux.testing._runtime import Runtime, parse_range
from aioflux.testing._s3_common import S3State, read_conditions
from aioflux.testing._s3_list import list_objects
from aioflux.testing._store import Preconditions, b64_crc32c, b64_md5, rfc3339
from aioflux.testing._util import (
    check_object_name,
    media_headers,
    parse_goog_hash,
    query_int,
    verify_hashes,
)

__all__ = ["handle_xml"]

_MIN_PART = 5 * 1024 * 1024
_MAX_PARTS = 10000
_XML_HEAD = "<?xml version='1.0' encoding='UTF-8'?>"
_S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


async def handle_xml(
    rt: Runtime, request: web.BaseRequest, bucket: str, key: str
) -> web.StreamResponse:
    """Dispatch one XML API request.

    Args:
        rt: the emulator runtime.
        request: the request.
        bucket: the decoded bucket name.
        key: the decoded object name (``""`` for bucket-level requests).

    Returns:
        The response.

    Raises:
        ApiError: any GCS error; the caller renders it as XML.
    """
    q = request.query
    method = request.method
    if not key:
        if method == "GET" and "uploads" in q:
            rt.admit("xml_list_uploads")
            return _list_uploads(rt, request, bucket)
        if method == "HEAD":
            rt.admit("xml_bucket_get", object_request=False)
            rt.store.bucket(bucket)
            return web.Response(status=200)
        if method == "GET":
            # List Objects, as S3's (V1, or V2 with list-type=2): GCS's XML API
            # answers S3 clients (boto3, s3fs) pointed at it.
            rt.admit("xml_list")
            return await list_objects(S3State(rt), request, bucket, checksums=False)
        raise err.ApiError(405, "invalid", "Method not allowed", xml_code="MethodNotAllowed")
    upload_id = q.get("uploadId")
    if method == "POST" and "uploads" in q:
        rt.admit("xml_initiate")
        return await _initiate(rt, request, bucket, check_object_name(key))
    if upload_id is not None:
        if method == "PUT":
            rt.admit("xml_put_part")
            return await _put_part(rt, request, bucket, key, upload_id)
        if method == "POST":
            rt.admit("xml_complete")
            return await _complete(rt, request, bucket, key, upload_id)
        if method == "DELETE":
            rt.admit("xml_abort")
            await rt.first_byte_delay()
            rt.store.multipart(bucket, key, upload_id)
            del rt.store.uploads[upload_id]
            return web.Response(status=204)
        if method == "GET":
            rt.admit("xml_list_parts")
            return _list_parts(rt, request, bucket, key, upload_id)
    if method in ("GET", "HEAD"):
        rt.admit("xml_get" if method == "GET" else "xml_head")
        return await _get(rt, request, bucket, key)
    if method == "PUT":
        rt.admit("xml_put")
        return await _put(rt, request, bucket, check_object_name(key))
    if method == "DELETE":
        rt.admit("xml_delete")
        await rt.first_byte_delay()
        generation = query_int(q, "generation")
        _preconditions(request).check(rt.store.get(bucket, key, generation))
        rt.store.delete(bucket, key, generation=generation)
        return web.Response(status=204)
    raise err.ApiError(405, "invalid", "Method not allowed", xml_code="MethodNotAllowed")


def _xml(root: str, children: Iterable[tuple[str, str]], raw: str = "") -> bytes:
    inner = "".join(f"<{tag}>{escape(value)}</{tag}>" for tag, value in children)
    # google-resumable-media looks nodes up under the S3 namespace, as GCS sends it.
    return f"{_XML_HEAD}<{root} xmlns='{_S3_NS}'>{inner}{raw}</{root}>".encode()


def _preconditions(request: web.BaseRequest) -> Preconditions:
    h = request.headers

    def num(name: str) -> int | None:
        raw = h.get(name)
        try:
            return int(raw) if raw else None
        except ValueError:
            raise err.invalid(f"Invalid value for {name}: {raw}") from None

    return Preconditions(
        num("x-goog-if-generation-match"),
        None,
        num("x-goog-if-metageneration-match"),
        None,
    )


async def _get(rt: Runtime, request: web.BaseRequest, bucket: str, key: str) -> web.StreamResponse:
    await rt.first_byte_delay()
    rec = rt.store.get(bucket, key, query_int(request.query, "generation"))
    _preconditions(request).check(rec, read=True)
    # If-Match / If-None-Match on the ETag and If-(Un)Modified-Since: 412 or 304.
    read_conditions(request, rec)
    headers = media_headers(rec)
    headers["Last-Modified"] = _http_date(rec.updated)
    whole = await rt.send_transcoded(request, rec, headers)
    if whole is not None:
        return whole
    rng = parse_range(request.headers.get("Range"), rec.size)
    if rng is None:
        return await rt.send_body(request, rec.data, headers=headers, content_type=rec.content_type)
    start, end = rng
    headers["Content-Range"] = f"bytes {start}-{end - 1}/{rec.size}"
    return await rt.send_body(
        request, rec.data.slice(start, end), status=206, headers=headers,
        content_type=rec.content_type,
    )


def _http_date(rfc: str) -> str:
    return format_datetime(datetime.fromisoformat(rfc.replace("Z", "+00:00")), usegmt=True)


def _check_part_hash(request: web.BaseRequest, data: Rope) -> tuple[int, bytes | None]:
    crc = data.crc32c()
    sent = parse_goog_hash(request.headers.get("x-goog-hash"))
    md5 = verify_hashes(
        data, crc, sent.get("crc32c"), sent.get("md5") or request.headers.get("Content-MD5")
    )
    return crc, md5


def _user_metadata(request: web.BaseRequest) -> dict[str, str]:
    return {
        k[len("x-goog-meta-") :]: v
        for k, v in request.headers.items()
        if k.lower().startswith("x-goog-meta-")
    }


async def _put(rt: Runtime, request: web.BaseRequest, bucket: str, key: str) -> web.StreamResponse:
    await rt.first_byte_delay()
    data = await rt.read_pieces(request)
    rt.store.bucket(bucket)
    crc, md5 = _check_part_hash(request, data)
    rec = rt.store.put(
        bucket,
        key,
        data,
        content_type=request.headers.get("Content-Type"),
        metadata=_user_metadata(request) or None,
        preconditions=_preconditions(request),
        crc32c=crc,
        md5=md5,
        content_encoding=request.headers.get("Content-Encoding"),
    )
    headers = media_headers(rec)
    del headers["Accept-Ranges"]
    return web.Response(status=200, headers=headers)


async def _initiate(
    rt: Runtime, request: web.BaseRequest, bucket: str, key: str
) -> web.StreamResponse:
    await rt.first_byte_delay()
    await rt.read_body(request)
    up = rt.store.create_multipart(
        bucket,
        key,
        request.headers.get("Content-Type") or "application/octet-stream",
        _user_metadata(request),
    )
    body = _xml(
        "InitiateMultipartUploadResult",
        [("Bucket", bucket), ("Key", key), ("UploadId", up.upload_id)],
    )
    return web.Response(body=body, content_type="application/xml")


async def _put_part(
    rt: Runtime, request: web.BaseRequest, bucket: str, key: str, upload_id: str
) -> web.StreamResponse:
    await rt.first_byte_delay()
    number = query_int(request.query, "partNumber")
    if number is None or not 1 <= number <= _MAX_PARTS:
        raise err.invalid(
            f"Part number must be an integer between 1 and {_MAX_PARTS}, inclusive",
            details=str(number),
        )
    data = await rt.read_pieces(request)
    up = rt.store.multipart(bucket, key, upload_id)
    crc, md5 = _check_part_hash(request, data)
    # hashlib releases the GIL on large buffers: hashing a 16 MiB part in a
    # thread keeps the loop serving the other parts meanwhile.
    digest = md5 if md5 is not None else await asyncio.to_thread(data.md5)
    etag = digest.hex()
    up.parts[number] = (etag, data, _now())
    # Clients (google-resumable-media) check each part against x-goog-hash.
    goog_hash = f"crc32c={b64_crc32c(crc)},md5={b64_md5(digest)}"
    return web.Response(status=200, headers={"ETag": f'"{etag}"', "x-goog-hash": goog_hash})


def _now() -> str:
    return rfc3339(time.time_ns())


def _malformed() -> err.ApiError:
    return err.invalid("The XML you provided was not well-formed.", xml_code="MalformedXML")


def _parse_complete(body: bytes) -> list[tuple[int, str]]:
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        raise err.invalid(
            "The XML you provided was not well-formed.", xml_code="MalformedXML"
        ) from None
    parts = []
    for el in root.iter():
        if el.tag.rsplit("}", 1)[-1] != "Part":
            continue
        fields = {child.tag.rsplit("}", 1)[-1]: (child.text or "").strip() for child in el}
        try:
            parts.append((int(fields["PartNumber"]), fields.get("ETag", "").strip('"')))
        except (KeyError, ValueError):
            raise err.invalid(
                "The XML you provided was not well-formed.", xml_code="MalformedXML"
            ) from None
    return parts


async def _complete(
    rt: Runtime, request: web.BaseRequest, bucket: str, key: str, upload_id: str
) -> web.StreamResponse:
    await rt.first_byte_delay()
    body = await rt.read_body(request)
    store = rt.store
    up = store.multipart(bucket, key, upload_id)
    listed = _parse_complete(body)
    if not listed:
        raise _malformed()
    # Structure first (order, existence, ETags), then sizes, as S3 and GCS do.
    chosen: list[Rope] = []
    previous = 0
    for number, etag in listed:
        if number <= previous:
            raise err.invalid(
                "The list of parts was not in ascending order.", xml_code="InvalidPartOrder"
            )
        previous = number
        part = up.parts.get(number)
        if part is None or (etag and etag != part[0]):
            raise err.invalid(
                "One or more of the specified parts could not be found.",
                xml_code="InvalidPart",
                details=f"part {number}",
            )
        chosen.append(part[1])
    for (number, _), data in zip(listed[:-1], chosen[:-1], strict=True):
        if len(data) < _MIN_PART:
            raise err.invalid(
                "Your proposed upload is smaller than the minimum allowed object size.",
                xml_code="EntityTooSmall",
                details=f"part {number}",
            )
    # The object keeps the parts as they are (a Rope): no join, so no second
    # copy of a 1 GiB checkpoint in fresh memory.
    rec = store.put(
        bucket,
        key,
        Rope(chosen),
        content_type=up.content_type,
        metadata=up.metadata or None,
        preconditions=_preconditions(request),
        with_md5=False,  # multipart results are composite objects on GCS
        component_count=len(chosen),
    )
    del store.uploads[upload_id]
    digests = b"".join(bytes.fromhex(up.parts[n][0]) for n, _ in listed)
    etag = f'"{hashlib.md5(digests).hexdigest()}-{len(listed)}"'
    location = f"{request.scheme}://{request.host}/{quote(bucket)}/{quote(key)}"
    out = _xml(
        "CompleteMultipartUploadResult",
        [("Location", location), ("Bucket", bucket), ("Key", key), ("ETag", etag)],
    )
    headers = {
        "x-goog-hash": f"crc32c={rec.crc32c_b64}",
        "x-goog-generation": str(rec.generation),
        "ETag": etag,
    }
    return web.Response(body=out, content_type="application/xml", headers=headers)


def _list_parts(
    rt: Runtime, request: web.BaseRequest, bucket: str, key: str, upload_id: str
) -> web.StreamResponse:
    q = request.query
    up = rt.store.multipart(bucket, key, upload_id)
    marker = query_int(q, "part-number-marker") or 0
    max_parts = min(query_int(q, "max-parts") or 1000, 1000)
    numbers = sorted(n for n in up.parts if n > marker)
    page, truncated = numbers[:max_parts], len(numbers) > max_parts
    parts = "".join(
        f"<Part><PartNumber>{n}</PartNumber><LastModified>{up.parts[n][2]}</LastModified>"
        f'<ETag>"{up.parts[n][0]}"</ETag><Size>{len(up.parts[n][1])}</Size></Part>'
        for n in page
    )
    fields = [
        ("Bucket", bucket),
        ("Key", key),
        ("UploadId", upload_id),
        ("PartNumberMarker", str(marker)),
        ("NextPartNumberMarker", str(page[-1] if page else marker)),
        ("MaxParts", str(max_parts)),
        ("IsTruncated", "true" if truncated else "false"),
    ]
    return web.Response(body=_xml("ListPartsResult", fields, parts), content_type="application/xml")


def _list_uploads(rt: Runtime, request: web.BaseRequest, bucket: str) -> web.StreamResponse:
    rt.store.bucket(bucket)
    q = request.query
    prefix = q.get("prefix", "")
    key_marker, id_marker = q.get("key-marker", ""), q.get("upload-id-marker", "")
    max_uploads = max(1, min(query_int(q, "max-uploads") or 1000, 1000))
    # The dict keeps creation order, and sorting is stable: by key, then by age.
    ups = sorted(
        (u for u in rt.store.uploads.values() if u.bucket == bucket and u.name.startswith(prefix)),
        key=lambda u: u.name,
    )
    if key_marker:
        ids = [(u.name, u.upload_id) for u in ups]
        if id_marker and (key_marker, id_marker) in ids:
            ups = ups[ids.index((key_marker, id_marker)) + 1 :]
        else:
            ups = [u for u in ups if u.name > key_marker]
    page, truncated = ups[:max_uploads], len(ups) > max_uploads
    entries = "".join(
        f"<Upload><Key>{escape(u.name)}</Key><UploadId>{u.upload_id}</UploadId>"
        f"<Initiated>{u.initiated}</Initiated></Upload>"
        for u in page
    )
    fields = [("Bucket", bucket), ("Prefix", prefix), ("MaxUploads", str(max_uploads))]
    if truncated:
        fields += [("NextKeyMarker", page[-1].name), ("NextUploadIdMarker", page[-1].upload_id)]
    fields.append(("IsTruncated", "true" if truncated else "false"))
    return web.Response(
        body=_xml("ListMultipartUploadsResult", fields, entries), content_type="application/xml"
    )
