"""S3 listings: ListObjectsV2 (and V1), ListParts, ListMultipartUploads, ListBuckets.

Object listings page through the store's sorted names (O(log n + page) per
page, like the JSON API's), so a 100,000-object listing costs what it
would on a real service per page, not per bucket. ``MaxKeys`` counts keys
and common prefixes together, as on S3. Each item's XML is cached on its
record (the record is immutable), so listing a large bucket again costs a
join per page.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._s3_body import checksum as checksum_value
from aioflux.testing._s3_common import S3State, UploadChecksum, maybe_url, xml_doc, xml_response
from aioflux.testing._store import ObjectRecord
from aioflux.testing._util import query_int

__all__ = ["list_buckets", "list_objects", "list_parts", "list_uploads"]

_MAX_KEYS = 1000


def _contents(st: S3State | None, rec: ObjectRecord, encode: bool) -> bytes:
    # An S3 listing names the algorithm an object was written with, never a value.
    stored = st.checksum_of(rec) if st is not None else None
    checksum = ("" if stored is None else f"<ChecksumAlgorithm>{stored.algorithm}"
                f"</ChecksumAlgorithm><ChecksumType>{stored.kind}</ChecksumType>")
    return (
        f"<Contents><Key>{escape(maybe_url(rec.name, encode))}</Key>"
        f"<LastModified>{rec.updated}</LastModified>"
        f"<ETag>&quot;{rec.etag}&quot;</ETag>{checksum}"
        f"<Size>{rec.size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
    ).encode()


def _max_keys(request: web.BaseRequest) -> int:
    value = query_int(request.query, "max-keys")
    if value is None:
        return _MAX_KEYS
    if value < 0:
        raise err.invalid("Argument maxKeys must be an integer between 0 and 2147483647",
                          xml_code="InvalidArgument")
    return min(value, _MAX_KEYS)


def _after(key: str) -> str:
    # The smallest string greater than ``key``: list_page's start offset is
    # inclusive, S3's start-after / marker exclusive.
    return key + "\x00"


def _start_offset(start: str, prefix: str, delimiter: str, v2: bool) -> str:
    """Where a listing resumes: after the key ``start``, or, for a V1 marker
    that is a common prefix of this listing (the NextMarker of a page that
    ended on one), after every key in that group."""
    if not start:
        return ""
    group = (bool(delimiter) and not v2 and start.startswith(prefix)
             and start.find(delimiter, len(prefix)) == len(start) - len(delimiter))
    # A key that only ends in the delimiter ("dir/" listed under prefix
    # "dir/") is an object of this level: the keys below it still follow.
    stem = start.rstrip(chr(0x10FFFF)) if group else ""
    if not stem:
        return _after(start)
    # Every key of the group sorts below the group with its last character
    # (past any U+10FFFF) incremented.
    return stem[:-1] + chr(ord(stem[-1]) + 1)


async def list_objects(st: S3State, request: web.BaseRequest, bucket: str, *,
                       checksums: bool = True) -> web.StreamResponse:
    """ListObjectsV2 (``list-type=2``) or V1: prefix, delimiter, start-after /
    marker, continuation-token, max-keys, ``encoding-type=url``.

    Args:
        checksums: name each object's checksum algorithm (S3's listing);
            GCS's XML API lists none.
    """
    rt = st.rt
    await rt.first_byte_delay()
    q = request.query
    v2 = q.get("list-type") == "2"
    encoding = q.get("encoding-type")
    if encoding not in (None, "url"):
        raise err.invalid("Invalid Encoding Method specified in Request",
                          xml_code="InvalidArgument")
    encode = encoding == "url"
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    max_keys = _max_keys(request)
    token = q.get("continuation-token", "") if v2 else ""
    if v2 and "continuation-token" in q and not token:
        raise err.invalid("The continuation token provided is incorrect",
                          xml_code="InvalidArgument")
    start = q.get("start-after", "") if v2 else q.get("marker", "")
    start_offset = _start_offset(start, prefix, delimiter, v2)
    items: list[ObjectRecord] = []
    prefixes: list[str] = []
    next_token: str | None = None
    if max_keys:
        items, prefixes, next_token = st.store.list_page(
            bucket, prefix=prefix, delimiter=delimiter, start_offset=start_offset,
            page_token=token, max_results=max_keys)
    fields = [("Name", bucket), ("Prefix", maybe_url(prefix, encode))]
    if v2:
        fields.append(("KeyCount", str(len(items) + len(prefixes))))
        if token:
            fields.append(("ContinuationToken", token))
        if start:
            fields.append(("StartAfter", maybe_url(start, encode)))
    else:
        fields.append(("Marker", maybe_url(start, encode)))
    fields.append(("MaxKeys", str(max_keys)))
    if delimiter:
        fields.append(("Delimiter", maybe_url(delimiter, encode)))
    if encode:
        fields.append(("EncodingType", "url"))
    fields.append(("IsTruncated", "true" if next_token else "false"))
    if next_token and v2:
        fields.append(("NextContinuationToken", next_token))
    elif next_token and delimiter:
        # V1 names its next marker only with a delimiter; without one the
        # client continues from its last key.
        last = max([*(r.name for r in items[-1:]), *prefixes[-1:]])
        fields.append(("NextMarker", maybe_url(last, encode)))
    cache_key = ("s3" if checksums else "gcs-xml") + ("-url" if encode else "")
    lister = st if checksums else None
    # A record's checksum is fixed when it is stored (every S3 write notes it
    # before the next await, so before anything can list it): the cached XML
    # stays right. GCS's XML listing, which names none, caches apart.
    body = b"".join(rec.encoded(cache_key, lambda r: _contents(lister, r, encode))
                    for rec in items).decode()
    body += "".join(
        f"<CommonPrefixes><Prefix>{escape(maybe_url(p, encode))}</Prefix></CommonPrefixes>"
        for p in prefixes)
    return xml_response(xml_doc("ListBucketResult", fields, body))


def list_parts(st: S3State, request: web.BaseRequest, bucket: str, key: str,
               upload_id: str) -> web.StreamResponse:
    """ListParts: part-number-marker, max-parts, each part's checksum under
    the algorithm the upload was created with."""
    q = request.query
    up = st.store.multipart(bucket, key, upload_id)
    checksum = st.records.uploads.get(upload_id, UploadChecksum())
    marker = query_int(q, "part-number-marker") or 0
    max_parts = max(1, min(query_int(q, "max-parts") or 1000, 1000))
    numbers = sorted(n for n in up.parts if n > marker)
    page, truncated = numbers[:max_parts], len(numbers) > max_parts
    entries = []
    for n in page:
        etag, data, modified = up.parts[n]
        value = checksum_value(checksum.algorithm, data) if checksum.algorithm else None
        crc = (f"<Checksum{checksum.algorithm}>{value}</Checksum{checksum.algorithm}>"
               if value is not None else "")
        entries.append(f"<Part><PartNumber>{n}</PartNumber><LastModified>{modified}"
                       f"</LastModified><ETag>&quot;{etag}&quot;</ETag>{crc}"
                       f"<Size>{len(data)}</Size></Part>")
    fields = [("Bucket", bucket), ("Key", key), ("UploadId", upload_id),
              ("PartNumberMarker", str(marker)),
              ("NextPartNumberMarker", str(page[-1] if page else marker)),
              ("MaxParts", str(max_parts)), ("IsTruncated", "true" if truncated else "false"),
              ("StorageClass", "STANDARD")]
    if checksum.algorithm:
        fields += [("ChecksumAlgorithm", checksum.algorithm), ("ChecksumType", checksum.kind)]
    return xml_response(xml_doc("ListPartsResult", fields, "".join(entries)))


def list_uploads(st: S3State, request: web.BaseRequest, bucket: str) -> web.StreamResponse:
    """ListMultipartUploads: prefix, key-marker / upload-id-marker, max-uploads."""
    st.store.bucket(bucket)
    q = request.query
    prefix = q.get("prefix", "")
    key_marker, id_marker = q.get("key-marker", ""), q.get("upload-id-marker", "")
    max_uploads = max(1, min(query_int(q, "max-uploads") or 1000, 1000))
    encode = q.get("encoding-type") == "url"
    # The dict keeps creation order and sorting is stable: by key, then by age.
    ups = sorted((u for u in st.store.uploads.values()
                  if u.bucket == bucket and u.name.startswith(prefix)), key=lambda u: u.name)
    if key_marker:
        ids = [(u.name, u.upload_id) for u in ups]
        if id_marker and (key_marker, id_marker) in ids:
            ups = ups[ids.index((key_marker, id_marker)) + 1:]
        else:
            ups = [u for u in ups if u.name > key_marker]
    page, truncated = ups[:max_uploads], len(ups) > max_uploads
    entries = "".join(
        f"<Upload><Key>{escape(maybe_url(u.name, encode))}</Key><UploadId>{u.upload_id}"
        f"</UploadId><StorageClass>STANDARD</StorageClass><Initiated>{u.initiated}"
        f"</Initiated></Upload>" for u in page)
    fields = [("Bucket", bucket), ("KeyMarker", maybe_url(key_marker, encode)),
              ("UploadIdMarker", id_marker), ("Prefix", maybe_url(prefix, encode)),
              ("MaxUploads", str(max_uploads))]
    if truncated:
        fields += [("NextKeyMarker", maybe_url(page[-1].name, encode)),
                   ("NextUploadIdMarker", page[-1].upload_id)]
    if encode:
        fields.append(("EncodingType", "url"))
    fields.append(("IsTruncated", "true" if truncated else "false"))
    return xml_response(xml_doc("ListMultipartUploadsResult", fields, entries))


def list_buckets(st: S3State) -> web.StreamResponse:
    """ListBuckets (``GET /``)."""
    entries = "".join(
        f"<Bucket><Name>{escape(b.name)}</Name><CreationDate>{b.time_created}</CreationDate>"
        f"<BucketRegion>{st.region_of(b.name)}</BucketRegion></Bucket>"
        for b in sorted(st.store.buckets.values(), key=lambda b: b.name))
    owner = "<Owner><ID>aioflux</ID><DisplayName>aioflux</DisplayName></Owner>"
    return xml_response(xml_doc("ListAllMyBucketsResult", [],
                                f"{owner}<Buckets>{entries}</Buckets>"))
