"""S3 object operations: GetObject / HeadObject, PutObject (checksums,
conditional writes), CopyObject, DeleteObject and DeleteObjects."""

from __future__ import annotations

from urllib.parse import unquote
from xml.sax.saxutils import escape

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._runtime import parse_range
from aioflux.testing._s3_body import decode_body, verify_checksums
from aioflux.testing._s3_common import (
    S3State,
    malformed_xml,
    object_headers,
    parse_xml,
    read_conditions,
    user_metadata,
    write_conditions,
    xml_doc,
    xml_response,
)
from aioflux.testing._store import ObjectRecord

__all__ = [
    "copy_object", "copy_source", "delete_object", "delete_objects", "get_object", "put_object",
]

_MAX_DELETE = 1000


def _checksum_headers(st: S3State, rec: ObjectRecord) -> dict[str, str]:
    value, kind = st.checksum_of(rec)
    return {"x-amz-checksum-crc32c": value, "x-amz-checksum-type": kind}


async def get_object(st: S3State, request: web.BaseRequest, bucket: str,
                     key: str) -> web.StreamResponse:
    """GetObject / HeadObject: whole or one range, with conditions.

    ``x-amz-checksum-mode: ENABLED`` adds ``x-amz-checksum-crc32c`` (and
    ``x-amz-checksum-type``) to a whole-object answer; a ranged answer
    carries none, as on S3 (a client validating a range against the
    object's checksum would fail).
    """
    rt = st.rt
    await rt.first_byte_delay()
    rec = st.store.get(bucket, key)
    read_conditions(request, rec)
    if "partNumber" in request.query:
        raise err.ApiError(501, "invalid", "GetObject by partNumber is not implemented by this "
                           "emulator", xml_code="NotImplemented")
    headers = object_headers(rec)
    rng = parse_range(request.headers.get("Range"), rec.size)
    if rng is None:
        if request.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED":
            headers.update(_checksum_headers(st, rec))
        return await rt.send_body(request, rec.data, headers=headers,
                                  content_type=rec.content_type)
    start, end = rng
    headers["Content-Range"] = f"bytes {start}-{end - 1}/{rec.size}"
    return await rt.send_body(request, rec.data.slice(start, end), status=206, headers=headers,
                              content_type=rec.content_type)


async def put_object(st: S3State, request: web.BaseRequest, bucket: str,
                     key: str) -> web.StreamResponse:
    """PutObject: checksums verified, ``If-None-Match: *`` / ``If-Match`` honoured."""
    rt = st.rt
    await rt.first_byte_delay()
    raw = await rt.read_pieces(request)
    st.store.bucket(bucket)
    decoded = decode_body(request.headers, raw)
    crc = decoded.data.crc32c()
    md5 = verify_checksums(decoded, content_md5=request.headers.get("Content-MD5"), crc32c=crc)
    # No await from here to the write: the condition and the put are atomic.
    rec = st.store.put(
        bucket, key, decoded.data,
        content_type=request.headers.get("Content-Type"),
        metadata=user_metadata(request) or None,
        preconditions=write_conditions(request, st.store, bucket, key),
        crc32c=crc, md5=md5,
    )  # fmt: skip
    headers = {"ETag": f'"{rec.etag}"'}
    # S3 echoes the checksums it verified.
    headers.update(decoded.checksums)
    if decoded.checksums:
        headers["x-amz-checksum-type"] = "FULL_OBJECT"
    return web.Response(status=200, headers=headers)


def copy_source(value: str) -> tuple[str, str]:
    """``(bucket, key)`` of an ``x-amz-copy-source`` header (``[/]bucket/key[?versionId=]``).

    Raises:
        ApiError: 400 InvalidArgument if either is missing.
    """
    path = unquote(value.split("?", 1)[0]).lstrip("/")
    src_bucket, _, src_key = path.partition("/")
    if not src_bucket or not src_key:
        raise err.ApiError(400, "invalid", "Copy Source must mention the source bucket and key: "
                           "sourcebucket/sourcekey", xml_code="InvalidArgument")
    return src_bucket, src_key


async def copy_object(st: S3State, request: web.BaseRequest, bucket: str,
                      key: str) -> web.StreamResponse:
    """CopyObject (``x-amz-copy-source``), metadata copied or replaced."""
    rt = st.rt
    await rt.first_byte_delay()
    await rt.read_body(request)
    src_bucket, src_key = copy_source(request.headers["x-amz-copy-source"])
    src = st.store.get(src_bucket, src_key)
    read_conditions(request, src, prefix="x-amz-copy-source-")
    replace = request.headers.get("x-amz-metadata-directive", "COPY").upper() == "REPLACE"
    if (src_bucket, src_key) == (bucket, key) and not replace:
        raise err.ApiError(
            400, "invalid", "This copy request is illegal because it is trying to copy an "
            "object to itself without changing the object's metadata, storage class, website "
            "redirect location or encryption attributes.", xml_code="InvalidRequest")
    st.store.bucket(bucket)
    rec = st.store.put(
        bucket, key, src.data,
        content_type=request.headers.get("Content-Type") if replace else src.content_type,
        metadata=user_metadata(request) if replace else src.metadata,
        preconditions=write_conditions(request, st.store, bucket, key),
        crc32c=src.crc32c, md5=src.md5, with_md5=src.md5 is not None,
        component_count=src.component_count, etag=src.etag,
    )  # fmt: skip
    body = xml_doc("CopyObjectResult", [
        ("LastModified", rec.updated), ("ETag", f'"{rec.etag}"'),
        ("ChecksumCRC32C", rec.crc32c_b64), ("ChecksumType", "FULL_OBJECT")])
    return xml_response(body)


async def delete_object(st: S3State, request: web.BaseRequest, bucket: str,
                        key: str) -> web.StreamResponse:
    """DeleteObject: 204 whether or not the key existed, as S3 answers."""
    await st.rt.first_byte_delay()
    b = st.store.bucket(bucket)
    live = b.objects.get(key)
    if_match = request.headers.get("If-Match")
    if if_match is not None:
        if live is None:
            raise err.no_such_object(bucket, key)
        read_conditions(request, live)
    if live is not None:
        st.store.delete(bucket, key)
    return web.Response(status=204)


async def delete_objects(st: S3State, request: web.BaseRequest,
                         bucket: str) -> web.StreamResponse:
    """DeleteObjects (``POST /bucket?delete``): up to 1000 keys, ``Quiet`` honoured."""
    rt = st.rt
    await rt.first_byte_delay()
    raw = await rt.read_pieces(request)
    decoded = decode_body(request.headers, raw)
    verify_checksums(decoded, content_md5=request.headers.get("Content-MD5"))
    root = parse_xml(bytes(decoded.data))
    quiet = False
    keys: list[str] = []
    for el in root:
        tag = el.tag.rsplit("}", 1)[-1]
        if tag == "Quiet":
            quiet = (el.text or "").strip().lower() == "true"
        elif tag == "Object":
            name = next((c.text or "" for c in el if c.tag.rsplit("}", 1)[-1] == "Key"), None)
            if name is None:
                raise malformed_xml()
            keys.append(name)
    if not keys or len(keys) > _MAX_DELETE:
        raise malformed_xml()
    b = st.store.bucket(bucket)
    done = []
    for name in keys:
        if name in b.objects:
            st.store.delete(bucket, name)
        done.append(name)  # S3 reports a missing key as deleted too
    entries = "" if quiet else "".join(
        f"<Deleted><Key>{escape(name)}</Key></Deleted>" for name in done)
    return xml_response(xml_doc("DeleteResult", [], entries))

