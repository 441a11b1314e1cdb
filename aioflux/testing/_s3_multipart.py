"""S3 multipart uploads: create, upload part (and part copy), complete, abort.

Uploads live in the same store as the GCS XML API's, so either API can see
them (ListMultipartUploads, ``aioflux clean``). Part checksums are verified
as they arrive; the upload remembers the checksum it was created with
(:class:`UploadChecksum`) to answer with it.

Checksums as S3 reports them: an upload created with CRC32C and
``x-amz-checksum-type: COMPOSITE`` (S3's default for CRC32C) completes into
an object whose checksum is ``base64(crc32c(part crc32c bytes...))-N``, type
COMPOSITE (in CompleteMultipartUpload's answer, GET/HEAD with checksum mode
and listings); a ``FULL_OBJECT`` upload, or one created without a checksum
algorithm, gets the whole object's CRC32C (S3 would use CRC64NVME for the
latter, which the emulator does not compute).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time

import google_crc32c
from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._rope import Rope
from aioflux.testing._runtime import parse_range
from aioflux.testing._s3_body import decode_body, verify_checksums
from aioflux.testing._s3_common import (
    S3State,
    UploadChecksum,
    malformed_xml,
    parse_xml,
    read_conditions,
    user_metadata,
    write_conditions,
    xml_doc,
    xml_response,
)
from aioflux.testing._s3_objects import copy_source
from aioflux.testing._store import b64_crc32c, rfc3339

__all__ = ["abort", "complete", "create", "upload_part"]

MIN_PART = 5 * 1024 * 1024
MAX_PARTS = 10000


async def create(st: S3State, request: web.BaseRequest, bucket: str,
                 key: str) -> web.StreamResponse:
    """CreateMultipartUpload (``POST /bucket/key?uploads``)."""
    rt = st.rt
    await rt.first_byte_delay()
    await rt.read_body(request)
    algorithm = request.headers.get("x-amz-checksum-algorithm")
    kind = request.headers.get("x-amz-checksum-type", "COMPOSITE").upper()
    if kind not in ("COMPOSITE", "FULL_OBJECT"):
        raise err.invalid(f"Invalid x-amz-checksum-type: {kind}", xml_code="InvalidRequest")
    up = st.store.create_multipart(
        bucket, key, request.headers.get("Content-Type") or "application/octet-stream",
        user_metadata(request))
    checksum = UploadChecksum(algorithm.upper() if algorithm else None, kind)
    st.uploads[up.upload_id] = checksum
    headers = {}
    if checksum.algorithm:
        headers["x-amz-checksum-algorithm"] = checksum.algorithm
        headers["x-amz-checksum-type"] = checksum.kind
    body = xml_doc("InitiateMultipartUploadResult",
                   [("Bucket", bucket), ("Key", key), ("UploadId", up.upload_id)])
    return xml_response(body, headers)


def _part_number(request: web.BaseRequest) -> int:
    raw = request.query.get("partNumber", "")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PARTS:
        raise err.invalid(f"Part number must be an integer between 1 and {MAX_PARTS}, "
                          "inclusive", xml_code="InvalidArgument")
    return int(raw)


async def upload_part(st: S3State, request: web.BaseRequest, bucket: str, key: str,
                      upload_id: str) -> web.StreamResponse:
    """UploadPart, or UploadPartCopy with ``x-amz-copy-source``."""
    rt = st.rt
    await rt.first_byte_delay()
    number = _part_number(request)
    raw = await rt.read_pieces(request)
    up = st.store.multipart(bucket, key, upload_id)
    source = request.headers.get("x-amz-copy-source")
    if source is not None:
        src_bucket, src_key = copy_source(source)
        src = st.store.get(src_bucket, src_key)
        read_conditions(request, src, prefix="x-amz-copy-source-")
        data = src.data
        rng_header = request.headers.get("x-amz-copy-source-range")
        if rng_header:
            rng = parse_range(rng_header, src.size)
            if rng is not None:
                data = data.slice(*rng)
        crc = data.crc32c()
        md5: bytes | None = None
    else:
        decoded = decode_body(request.headers, raw)
        data = decoded.data
        crc = data.crc32c()
        md5 = verify_checksums(decoded, content_md5=request.headers.get("Content-MD5"),
                               crc32c=crc)
    # hashlib releases the GIL on large buffers: hashing a 16 MiB part in a
    # thread keeps the loop serving the other parts meanwhile.
    digest = md5 if md5 is not None else await asyncio.to_thread(data.md5)
    now = rfc3339(time.time_ns())
    up.parts[number] = (digest.hex(), data, now)
    headers = {"ETag": f'"{digest.hex()}"'}
    checksum = st.uploads.get(upload_id, UploadChecksum())
    if checksum.algorithm == "CRC32C" or "x-amz-checksum-crc32c" in request.headers:
        headers["x-amz-checksum-crc32c"] = b64_crc32c(crc)
    if source is not None:
        fields = [("LastModified", now), ("ETag", f'"{digest.hex()}"')]
        if checksum.algorithm == "CRC32C":
            fields.append(("ChecksumCRC32C", b64_crc32c(crc)))
        return xml_response(xml_doc("CopyPartResult", fields), headers)
    return web.Response(status=200, headers=headers)


def _listed_parts(body: bytes) -> list[tuple[int, str, str | None]]:
    """``(number, etag, ChecksumCRC32C or None)`` of a CompleteMultipartUpload document."""
    parts = []
    for el in parse_xml(body).iter():
        if el.tag.rsplit("}", 1)[-1] != "Part":
            continue
        fields = {c.tag.rsplit("}", 1)[-1]: (c.text or "").strip() for c in el}
        try:
            number = int(fields["PartNumber"])
        except (KeyError, ValueError):
            raise malformed_xml() from None
        parts.append((number, fields.get("ETag", "").strip('"'), fields.get("ChecksumCRC32C")))
    if not parts:
        raise malformed_xml()
    return parts


def _invalid_part(number: int, why: str) -> err.ApiError:
    return err.invalid(f"One or more of the specified parts could not be found. {why}",
                       xml_code="InvalidPart", details=f"part {number}")


async def complete(st: S3State, request: web.BaseRequest, bucket: str, key: str,
                   upload_id: str) -> web.StreamResponse:
    """CompleteMultipartUpload, with ``If-None-Match: *`` / ``If-Match``."""
    rt = st.rt
    await rt.first_byte_delay()
    body = await rt.read_body(request)
    store = st.store
    up = store.multipart(bucket, key, upload_id)
    listed = _listed_parts(body)
    chosen: list[Rope] = []
    crcs: list[int] = []
    previous = 0
    for number, etag, sent_crc in listed:
        if number <= previous:
            raise err.invalid("The list of parts was not in ascending order. The parts list "
                              "must be specified in order by part number.",
                              xml_code="InvalidPartOrder")
        previous = number
        part = up.parts.get(number)
        if part is None or (etag and etag != part[0]):
            raise _invalid_part(number, "The part may not have been uploaded, or the "
                                "specified entity tag may not match the part's entity tag.")
        crc = part[1].crc32c()
        if sent_crc is not None and sent_crc != b64_crc32c(crc):
            raise _invalid_part(number, "The checksum of the part does not match.")
        chosen.append(part[1])
        crcs.append(crc)
    for (number, _, _), data in zip(listed[:-1], chosen[:-1], strict=True):
        if len(data) < MIN_PART:
            raise err.invalid("Your proposed upload is smaller than the minimum allowed "
                              "object size.", xml_code="EntityTooSmall", details=f"part {number}")
    digests = b"".join(bytes.fromhex(up.parts[n][0]) for n, _, _ in listed)
    etag = f"{hashlib.md5(digests).hexdigest()}-{len(listed)}"
    rec = store.put(
        bucket, key, Rope(chosen),
        content_type=up.content_type, metadata=up.metadata or None,
        preconditions=write_conditions(request, store, bucket, key),
        with_md5=False, component_count=len(chosen), etag=etag,
    )  # fmt: skip
    del store.uploads[upload_id]
    checksum = st.uploads.pop(upload_id, UploadChecksum())
    if checksum.algorithm == "CRC32C" and checksum.kind == "COMPOSITE":
        joined = b"".join(c.to_bytes(4, "big") for c in crcs)
        composite = base64.b64encode(google_crc32c.value(joined).to_bytes(4, "big")).decode()
        # Noted before the next await, so no reader or lister sees the
        # record without it.
        st.composite[(bucket, key)] = (rec.generation, f"{composite}-{len(crcs)}")
    else:
        st.composite.pop((bucket, key), None)
    fields = [("Location", f"{request.scheme}://{request.host}/{bucket}/{key}"),
              ("Bucket", bucket), ("Key", key), ("ETag", f'"{etag}"')]
    if checksum.algorithm == "CRC32C":
        value, kind = st.checksum_of(rec)
        fields += [("ChecksumCRC32C", value), ("ChecksumType", kind)]
    return xml_response(xml_doc("CompleteMultipartUploadResult", fields))


async def abort(st: S3State, bucket: str, key: str, upload_id: str) -> web.StreamResponse:
    """AbortMultipartUpload: 204; 404 NoSuchUpload for an unknown id."""
    await st.rt.first_byte_delay()
    st.store.multipart(bucket, key, upload_id)
    del st.store.uploads[upload_id]
    st.uploads.pop(upload_id, None)
    return web.Response(status=204)
