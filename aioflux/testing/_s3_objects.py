"""S3 object operations: GetObject / HeadObject, PutObject (checksums,
conditional writes), CopyObject, DeleteObject and DeleteObjects."""

from __future__ import annotations

from urllib.parse import unquote
from xml.sax.saxutils import escape

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._runtime import parse_range
from aioflux.testing._s3_body import (
    CHECKSUM_HEADERS,
    checksum,
    decode_body,
    sent_algorithm,
    verify_checksums,
)
from aioflux.testing._s3_common import (
    S3State,
    checksum_headers,
    content_encoding,
    malformed_xml,
    object_headers,
    parse_xml,
    read_conditions,
    stored_headers,
    user_metadata,
    write_conditions,
    xml_doc,
    xml_response,
)

__all__ = [
    "copy_object", "copy_source", "delete_object", "delete_objects", "get_object", "put_object",
]

_MAX_DELETE = 1000


async def get_object(st: S3State, request: web.BaseRequest, bucket: str,
                     key: str) -> web.StreamResponse:
    """GetObject / HeadObject: whole or one range, with conditions.

    ``x-amz-checksum-mode: ENABLED`` adds the object's checksum (that of
    the algorithm it was written with, :meth:`S3State.checksum_of`) and
    ``x-amz-checksum-type`` to a whole-object answer; a ranged answer
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
    headers.update(st.headers_of(rec))
    rng = parse_range(request.headers.get("Range"), rec.size)
    if rng is None:
        if request.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED":
            headers.update(checksum_headers(st.checksum_of(rec)))
        return await rt.send_body(request, rec.data, headers=headers,
                                  content_type=rec.content_type)
    start, end = rng
    headers["Content-Range"] = f"bytes {start}-{end - 1}/{rec.size}"
    return await rt.send_body(request, rec.data.slice(start, end), status=206, headers=headers,
                              content_type=rec.content_type)


async def put_object(st: S3State, request: web.BaseRequest, bucket: str,
                     key: str) -> web.StreamResponse:
    """PutObject: checksums verified, ``If-None-Match: *`` / ``If-Match`` honoured.

    The object keeps the checksum it was sent with (one algorithm at most),
    or CRC64NVME where none was, as S3 does since 2025: a later read asking
    for its checksum gets that one, never a CRC32C it was not written with.
    """
    rt = st.rt
    await rt.first_byte_delay()
    raw = await rt.read_pieces(request)
    st.store.bucket(bucket)
    decoded = decode_body(request.headers, raw)
    algorithm = sent_algorithm(decoded) or "CRC64NVME"
    crc = decoded.data.crc32c()
    md5 = verify_checksums(decoded, content_md5=request.headers.get("Content-MD5"), crc32c=crc)
    # A value sent was just verified: it is the data's.
    value = (decoded.checksums.get(f"x-amz-checksum-{algorithm.lower()}")
             or checksum(algorithm, decoded.data, crc))
    # No await from here to the write: the condition and the put are atomic.
    rec = st.store.put(
        bucket, key, decoded.data,
        content_type=request.headers.get("Content-Type"),
        metadata=user_metadata(request) or None,
        preconditions=write_conditions(request, st.store, bucket, key),
        crc32c=crc, md5=md5, content_encoding=content_encoding(request),
    )  # fmt: skip
    st.keep_headers(rec, stored_headers(request))
    # S3 echoes the checksum it verified (or computed).
    headers = {"ETag": f'"{rec.etag}"', **checksum_headers(st.remember(rec, algorithm, value))}
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
    """CopyObject (``x-amz-copy-source``): the source's content type, coding,
    custom metadata and ``STORED_HEADERS`` copied (``x-amz-metadata-directive:
    COPY``, the default) or all taken from the request (``REPLACE``)."""
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
    # The copy keeps the source's algorithm unless the request names another;
    # its checksum is of the whole copy (a COMPOSITE source's is not).
    algorithm = (request.headers.get("x-amz-checksum-algorithm", "").upper()
                 or st.checksum_of(src).algorithm)
    if f"x-amz-checksum-{algorithm.lower()}" not in CHECKSUM_HEADERS:
        raise err.ApiError(400, "invalid", "Checksum algorithm provided is unsupported. "
                           "Please try again with any of the valid types: [CRC32, CRC32C, "
                           "CRC64NVME, SHA1, SHA256]", xml_code="InvalidRequest")
    value = checksum(algorithm, src.data, src.crc32c)
    kept = stored_headers(request) if replace else st.headers_of(src)
    rec = st.store.put(
        bucket, key, src.data,
        content_type=request.headers.get("Content-Type") if replace else src.content_type,
        metadata=user_metadata(request) if replace else src.metadata,
        preconditions=write_conditions(request, st.store, bucket, key),
        # A copy is one new object: its ETag is the MD5 of its data, also
        # for a multipart source (whose parts count it does not keep).
        crc32c=src.crc32c, md5=src.md5,
        content_encoding=content_encoding(request) if replace else src.content_encoding,
    )  # fmt: skip
    stored = st.remember(rec, algorithm, value)
    st.keep_headers(rec, kept)
    fields = [("LastModified", rec.updated), ("ETag", f'"{rec.etag}"')]
    if stored.value is not None:
        fields += [(f"Checksum{algorithm}", stored.value), ("ChecksumType", stored.kind)]
    return xml_response(xml_doc("CopyObjectResult", fields))


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
    """DeleteObjects (``POST /bucket?delete``): up to 1000 keys, ``Quiet`` honoured.

    S3 refuses a request without a checksum of its body (``Content-MD5`` or
    an ``x-amz-checksum-*``) with 400 InvalidRequest.
    """
    rt = st.rt
    await rt.first_byte_delay()
    raw = await rt.read_pieces(request)
    decoded = decode_body(request.headers, raw)
    content_md5 = request.headers.get("Content-MD5")
    if not content_md5 and not any(name in CHECKSUM_HEADERS for name in decoded.checksums):
        raise err.ApiError(400, "invalid", "Missing required header for this request: "
                           "Content-Md5.", xml_code="InvalidRequest")
    verify_checksums(decoded, content_md5=content_md5)
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

