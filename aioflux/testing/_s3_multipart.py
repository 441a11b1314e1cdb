"""S3 multipart uploads: create, upload part (and part copy), complete, abort.

Uploads live in the same store as the GCS XML API's, so either API can see
them (ListMultipartUploads, ``aioflux clean``). Part checksums are verified
as they arrive; the upload remembers the checksum it was created with
(:class:`UploadChecksum`) to hold its parts and its completion to it.

Checksums as S3 reports them: an upload created with an algorithm and
``x-amz-checksum-type: COMPOSITE`` (S3's default for CRC32, CRC32C, SHA1 and
SHA256) completes into an object whose checksum is the checksum of its
parts' checksums with ``-N``, type COMPOSITE (in CompleteMultipartUpload's
answer, GET/HEAD with checksum mode and listings); a ``FULL_OBJECT`` upload
gets the whole object's checksum, and one created without an algorithm
S3's default CRC64NVME (FULL_OBJECT).

The object's headers are what CreateMultipartUpload carried (content type,
coding, ``x-amz-meta-*``, the other ``STORED_HEADERS``), never a part's:
UploadPartCopy copies bytes only, as on S3, so a copy made of part copies
has its source's headers only if its creation sent them.

S3's rules the emulator holds a client to: the checksum type needs an
algorithm, and SHA1 / SHA256 cannot be FULL_OBJECT (nor CRC64NVME
COMPOSITE); a part's checksum is of the upload's algorithm; the completion
of an upload with an algorithm lists parts 1..N with no gap, and of a
COMPOSITE one names each part's checksum; a whole-object checksum sent with
the completion must be the object's (400 BadDigest), so a completion
assembling other bytes than the writer sent never publishes them.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._rope import Rope
from aioflux.testing._s3_body import (
    ALGORITHMS,
    checksum,
    composite,
    decode_body,
    sent_algorithm,
    verify_checksums,
)
from aioflux.testing._s3_common import (
    S3State,
    UploadChecksum,
    UploadHeaders,
    content_encoding,
    malformed_xml,
    parse_xml,
    read_conditions,
    stored_headers,
    user_metadata,
    write_conditions,
    xml_doc,
    xml_response,
)
from aioflux.testing._s3_objects import copy_source
from aioflux.testing._store import rfc3339

__all__ = ["abort", "complete", "create", "upload_part"]

MIN_PART = 5 * 1024 * 1024
MAX_PARTS = 10000


def _invalid_request(message: str) -> err.ApiError:
    return err.ApiError(400, "invalid", message, xml_code="InvalidRequest")


def _upload_checksum(request: web.BaseRequest) -> UploadChecksum:
    """The checksum settings of a CreateMultipartUpload, refused as S3 refuses them.

    Raises:
        ApiError: 400 InvalidRequest.
    """
    h = request.headers
    algorithm = h.get("x-amz-checksum-algorithm", "").strip().upper() or None
    kind = h.get("x-amz-checksum-type", "").strip().upper() or None
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise _invalid_request("Checksum algorithm provided is unsupported. Please try again "
                               "with any of the valid types: [CRC32, CRC32C, CRC64NVME, SHA1, "
                               "SHA256]")
    if kind is not None and kind not in ("COMPOSITE", "FULL_OBJECT"):
        raise _invalid_request("Value for x-amz-checksum-type header is invalid.")
    if kind is not None and algorithm is None:
        raise _invalid_request("The x-amz-checksum-type header can only be used with the "
                               "x-amz-checksum-algorithm header.")
    if algorithm is None:
        return UploadChecksum(None, "FULL_OBJECT")  # S3 then computes CRC64NVME
    if kind is None:
        kind = "FULL_OBJECT" if algorithm == "CRC64NVME" else "COMPOSITE"
    if ((kind == "FULL_OBJECT" and algorithm in ("SHA1", "SHA256"))
            or (kind == "COMPOSITE" and algorithm == "CRC64NVME")):
        raise _invalid_request(f"The {kind} checksum type cannot be used with the "
                               f"{algorithm.lower()} checksum algorithm.")
    return UploadChecksum(algorithm, kind)


async def create(st: S3State, request: web.BaseRequest, bucket: str,
                 key: str) -> web.StreamResponse:
    """CreateMultipartUpload (``POST /bucket/key?uploads``)."""
    rt = st.rt
    await rt.first_byte_delay()
    await rt.read_body(request)
    checksum_settings = _upload_checksum(request)
    up = st.store.create_multipart(
        bucket, key, request.headers.get("Content-Type") or "application/octet-stream",
        user_metadata(request))
    st.records.uploads[up.upload_id] = checksum_settings
    st.records.upload_headers[up.upload_id] = UploadHeaders(stored_headers(request),
                                                            content_encoding(request))
    headers = {}
    if checksum_settings.algorithm:
        headers["x-amz-checksum-algorithm"] = checksum_settings.algorithm
        headers["x-amz-checksum-type"] = checksum_settings.kind
    body = xml_doc("InitiateMultipartUploadResult",
                   [("Bucket", bucket), ("Key", key), ("UploadId", up.upload_id)])
    return xml_response(body, headers)


_COPY_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


def _copy_range(value: str, size: int) -> tuple[int, int]:
    """``x-amz-copy-source-range``: ``bytes=first-last`` only, inside the source.

    Raises:
        ApiError: 400 InvalidArgument for another form (``bytes=0-``, a
            suffix) or a range the source does not hold, as S3 answers.
    """
    match = _COPY_RANGE.fullmatch(value.strip())
    if match is None:
        raise err.invalid("The x-amz-copy-source-range value must be of the form bytes=first-"
                          "last where first and last are the zero-based offsets of the first "
                          "and last bytes to copy", xml_code="InvalidArgument")
    first, last = int(match[1]), int(match[2])
    if first > last or last >= size:
        raise err.invalid(f"Range specified is not valid for source object of size: {size}",
                          xml_code="InvalidArgument")
    return first, last + 1


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
    settings = st.records.uploads.get(upload_id, UploadChecksum())
    source = request.headers.get("x-amz-copy-source")
    sent: str | None = None
    verified: str | None = None
    if source is not None:
        src_bucket, src_key = copy_source(source)
        src = st.store.get(src_bucket, src_key)
        read_conditions(request, src, prefix="x-amz-copy-source-")
        data = src.data
        rng_header = request.headers.get("x-amz-copy-source-range")
        if rng_header is not None:
            data = data.slice(*_copy_range(rng_header, src.size))
        crc = data.crc32c()
        md5: bytes | None = None
    else:
        decoded = decode_body(request.headers, raw)
        sent = sent_algorithm(decoded)
        if sent is not None and settings.algorithm is not None and sent != settings.algorithm:
            raise _invalid_request("Checksum Type mismatch occurred, expected checksum Type: "
                                   f"{settings.algorithm.lower()}, actual checksum Type: "
                                   f"{sent.lower()}")
        data = decoded.data
        crc = data.crc32c()
        md5 = verify_checksums(decoded, content_md5=request.headers.get("Content-MD5"),
                               crc32c=crc)
        verified = decoded.checksums.get(f"x-amz-checksum-{sent.lower()}") if sent else None
    # hashlib releases the GIL on large buffers: hashing a 16 MiB part in a
    # thread keeps the loop serving the other parts meanwhile.
    digest = md5 if md5 is not None else await asyncio.to_thread(data.md5)
    now = rfc3339(time.time_ns())
    up.parts[number] = (digest.hex(), data, now)
    headers = {"ETag": f'"{digest.hex()}"'}
    # The part's checksum under the upload's algorithm (else the one it was sent with).
    algorithm = settings.algorithm or sent
    value = None
    if algorithm:
        value = (verified if sent == algorithm else None) or checksum(algorithm, data, crc)
    if algorithm and value is not None:
        headers[f"x-amz-checksum-{algorithm.lower()}"] = value
    if source is not None:
        fields = [("LastModified", now), ("ETag", f'"{digest.hex()}"')]
        if algorithm and value is not None:
            fields.append((f"Checksum{algorithm}", value))
        return xml_response(xml_doc("CopyPartResult", fields), headers)
    return web.Response(status=200, headers=headers)


def _listed_parts(body: bytes) -> list[tuple[int, str, dict[str, str]]]:
    """``(number, etag, {algorithm: checksum})`` of each part a
    CompleteMultipartUpload document lists."""
    parts = []
    for el in parse_xml(body).iter():
        if el.tag.rsplit("}", 1)[-1] != "Part":
            continue
        fields = {c.tag.rsplit("}", 1)[-1]: (c.text or "").strip() for c in el}
        try:
            number = int(fields["PartNumber"])
        except (KeyError, ValueError):
            raise malformed_xml() from None
        sums = {name.removeprefix("Checksum"): value for name, value in fields.items()
                if name.removeprefix("Checksum") in ALGORITHMS}
        parts.append((number, fields.get("ETag", "").strip('"'), sums))
    if not parts:
        raise malformed_xml()
    return parts


def _invalid_part(number: int, why: str) -> err.ApiError:
    return err.invalid(f"One or more of the specified parts could not be found. {why}",
                       xml_code="InvalidPart", details=f"part {number}")


def _invalid_order(why: str) -> err.ApiError:
    return err.invalid(f"The list of parts was not in ascending order. {why}",
                       xml_code="InvalidPartOrder")


def _chosen_parts(up_parts: dict[int, tuple[str, Rope, str]], settings: UploadChecksum,
                  listed: list[tuple[int, str, dict[str, str]]]) -> list[Rope]:
    """The parts a completion lists, held to S3's rules (see the module docstring).

    Raises:
        ApiError: 400 InvalidPartOrder, InvalidPart, InvalidRequest or EntityTooSmall.
    """
    algorithm = settings.algorithm
    chosen: list[Rope] = []
    previous = 0
    for number, etag, sums in listed:
        if number <= previous:
            raise _invalid_order("The parts list must be specified in order by part number.")
        if algorithm is not None and number != previous + 1:
            # S3: with a checksum on each part, the parts are 1..N, consecutive.
            raise _invalid_order("Part numbers must start at 1 and be consecutive when the "
                                 "upload was created with a checksum algorithm.")
        previous = number
        part = up_parts.get(number)
        if part is None or (etag and etag != part[0]):
            raise _invalid_part(number, "The part may not have been uploaded, or the "
                                "specified entity tag may not match the part's entity tag.")
        for name, sent in sums.items():
            if algorithm is not None and name != algorithm:
                raise _invalid_request("Checksum Type mismatch occurred, expected checksum "
                                       f"Type: {algorithm.lower()}, actual checksum Type: "
                                       f"{name.lower()}")
            if sent != checksum(name, part[1]):
                raise _invalid_part(number, "The checksum of the part does not match.")
        if algorithm is not None and settings.kind == "COMPOSITE" and algorithm not in sums:
            raise _invalid_request(f"The upload was created using a {algorithm.lower()} "
                                   "checksum. The complete request must include the checksum "
                                   f"for each part. It was missing for part {number} in the "
                                   "request.")
        chosen.append(part[1])
    for (number, _, _), data in zip(listed[:-1], chosen[:-1], strict=True):
        if len(data) < MIN_PART:
            raise err.invalid("Your proposed upload is smaller than the minimum allowed "
                              "object size.", xml_code="EntityTooSmall", details=f"part {number}")
    return chosen


def _object_checksum(settings: UploadChecksum, data: Rope, parts: list[Rope],
                     crc32c: int) -> tuple[str, str | None, str]:
    """``(algorithm, value, type)`` of the object a completion publishes."""
    if settings.algorithm is None:
        return "CRC64NVME", checksum("CRC64NVME", data), "FULL_OBJECT"
    if settings.kind == "COMPOSITE":
        return settings.algorithm, composite(settings.algorithm, parts), "COMPOSITE"
    return settings.algorithm, checksum(settings.algorithm, data, crc32c), "FULL_OBJECT"


def _check_whole(request: web.BaseRequest, settings: UploadChecksum, data: Rope,
                 parts: list[Rope], crc32c: int) -> None:
    """Hold the completion to the whole-object checksum it sends (``x-amz-checksum-*``).

    Raises:
        ApiError: 400 BadDigest when it is not the object's, InvalidRequest
            for another algorithm than the upload's or more than one.
    """
    sent = {k.lower(): v.strip() for k, v in request.headers.items()
            if k.lower().startswith("x-amz-checksum-") and k.lower().removeprefix(
                "x-amz-checksum-").upper() in ALGORITHMS}
    if not sent:
        return
    if len(sent) > 1:
        raise _invalid_request("Expecting a single x-amz-checksum- header. Multiple checksum "
                               "Types are not allowed.")
    ((name, value),) = sent.items()
    algorithm = name.removeprefix("x-amz-checksum-").upper()
    if settings.algorithm is not None and algorithm != settings.algorithm:
        raise _invalid_request("Checksum Type mismatch occurred, expected checksum Type: "
                               f"{settings.algorithm.lower()}, actual checksum Type: "
                               f"{algorithm.lower()}")
    if settings.algorithm is not None and settings.kind == "COMPOSITE":
        want = composite(algorithm, parts)
    else:
        want = checksum(algorithm, data, crc32c)
    if want is None:
        raise _invalid_request(f"{name} is not supported by this emulator")
    if value.split("-", 1)[0] != want.split("-", 1)[0]:
        raise err.ApiError(400, "invalid", f"The {algorithm} you specified did not match the "
                           "calculated checksum.", xml_code="BadDigest")


async def complete(st: S3State, request: web.BaseRequest, bucket: str, key: str,
                   upload_id: str) -> web.StreamResponse:
    """CompleteMultipartUpload, with ``If-None-Match: *`` / ``If-Match`` and the
    whole object's checksum (``x-amz-checksum-*``) checked."""
    rt = st.rt
    await rt.first_byte_delay()
    body = await rt.read_body(request)
    store = st.store
    up = store.multipart(bucket, key, upload_id)
    settings = st.records.uploads.get(upload_id, UploadChecksum())
    created = st.records.upload_headers.get(upload_id, UploadHeaders({}, None))
    listed = _listed_parts(body)
    chosen = _chosen_parts(up.parts, settings, listed)
    data = Rope(chosen)
    crc = data.crc32c()
    _check_whole(request, settings, data, chosen, crc)
    algorithm, value, kind = _object_checksum(settings, data, chosen, crc)
    digests = b"".join(bytes.fromhex(up.parts[n][0]) for n, _, _ in listed)
    etag = f"{hashlib.md5(digests).hexdigest()}-{len(listed)}"
    rec = store.put(
        bucket, key, data,
        content_type=up.content_type, metadata=up.metadata or None,
        preconditions=write_conditions(request, store, bucket, key),
        crc32c=crc, with_md5=False, component_count=len(chosen), etag=etag,
        content_encoding=created.content_encoding,
    )  # fmt: skip
    # Noted before the next await, so no reader or lister sees the record without it.
    stored = st.remember(rec, algorithm, value, kind)
    st.keep_headers(rec, created.stored)
    del store.uploads[upload_id]
    st.records.uploads.pop(upload_id, None)
    st.records.upload_headers.pop(upload_id, None)
    fields = [("Location", f"{request.scheme}://{request.host}/{bucket}/{key}"),
              ("Bucket", bucket), ("Key", key), ("ETag", f'"{etag}"')]
    if stored.value is not None:
        fields += [(f"Checksum{algorithm}", stored.value), ("ChecksumType", kind)]
    return xml_response(xml_doc("CompleteMultipartUploadResult", fields))


async def abort(st: S3State, bucket: str, key: str, upload_id: str) -> web.StreamResponse:
    """AbortMultipartUpload: 204; 404 NoSuchUpload for an unknown id."""
    await st.rt.first_byte_delay()
    st.store.multipart(bucket, key, upload_id)
    del st.store.uploads[upload_id]
    st.records.uploads.pop(upload_id, None)
    st.records.upload_headers.pop(upload_id, None)
    return web.Response(status=204)
