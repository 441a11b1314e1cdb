"""What the S3 face's handlers share: its state, XML documents, S3 error
bodies, object headers and ETag / date conditions."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import quote_plus
from xml.sax.saxutils import escape

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._runtime import Runtime
from aioflux.testing._store import ObjectRecord, Preconditions, Store

__all__ = [
    "S3_NS",
    "STORED_HEADERS",
    "S3Records",
    "S3State",
    "StoredChecksum",
    "StoredHeaders",
    "UploadChecksum",
    "UploadHeaders",
    "checksum_headers",
    "content_encoding",
    "error_response",
    "http_date",
    "malformed_xml",
    "maybe_url",
    "object_headers",
    "parse_xml",
    "read_conditions",
    "stored_headers",
    "user_metadata",
    "write_conditions",
    "xml_doc",
    "xml_response",
]

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
# Headers S3 stores with an object as its writer sent them and returns with
# every GetObject and HeadObject (ranged ones too), besides Content-Type,
# Content-Encoding and x-amz-meta-*, which the shared store's record keeps.
# PutObject and CreateMultipartUpload take them from the request; CopyObject
# copies the source's (x-amz-metadata-directive COPY, the default) or takes
# the request's (REPLACE). UploadPartCopy copies bytes only: the object a
# multipart upload completes into has what its CreateMultipartUpload
# carried, nothing of its parts' sources.
STORED_HEADERS = ("Cache-Control", "Content-Disposition", "Content-Language", "Expires")


@dataclass(frozen=True)
class UploadChecksum:
    """The checksum an S3 multipart upload was created with.

    Attributes:
        algorithm: ``x-amz-checksum-algorithm`` (``CRC32C``...), upper case, or None.
        kind: ``x-amz-checksum-type``: ``COMPOSITE`` (S3's default for every
            algorithm but CRC64NVME) or ``FULL_OBJECT``.
    """

    algorithm: str | None = None
    kind: str = "COMPOSITE"


@dataclass(frozen=True)
class StoredChecksum:
    """The checksum S3 keeps with one object generation written through the S3 face.

    Attributes:
        generation: the generation it belongs to; valid only while that
            generation is live (a later write replaces the record).
        algorithm: ``CRC32C``, ``CRC32``, ``SHA1``, ``SHA256`` or ``CRC64NVME``
            (what S3 computes for an object written without a checksum).
        value: base64, ``-N`` ended for a COMPOSITE multipart one; None where
            the emulator cannot compute it (CRC64NVME without awscrt).
        kind: ``FULL_OBJECT`` or ``COMPOSITE``.
    """

    generation: int
    algorithm: str
    value: str | None
    kind: str = "FULL_OBJECT"


@dataclass(frozen=True)
class StoredHeaders:
    """The :data:`STORED_HEADERS` S3 keeps with one object generation.

    Attributes:
        generation: the generation they belong to; valid only while that
            generation is live (a later write replaces the record).
        values: header name (as in :data:`STORED_HEADERS`) -> value.
    """

    generation: int
    values: Mapping[str, str]


@dataclass(frozen=True)
class UploadHeaders:
    """What a CreateMultipartUpload carried for the object it completes into
    that the shared store's upload record does not keep.

    Attributes:
        stored: :data:`STORED_HEADERS` sent, by name.
        content_encoding: as :func:`content_encoding` keeps it, or None.
    """

    stored: Mapping[str, str]
    content_encoding: str | None


@dataclass
class S3Records:
    """What S3 knows of a store's objects and GCS does not. Kept with the
    :class:`Store` (``store.s3``), so an emulator restarted on that store
    keeps it with the objects.

    Attributes:
        bucket_regions: bucket -> the LocationConstraint it was created with.
        uploads: upload id -> its checksum settings (uploads started through
            the GCS XML API have none and use the defaults).
        checksums: ``(bucket, key)`` -> the checksum of the object written
            there through the S3 face (see :meth:`S3State.checksum_of`).
        headers: ``(bucket, key)`` -> the :data:`STORED_HEADERS` of the
            object written there through the S3 face (see :meth:`S3State.headers_of`).
        upload_headers: upload id -> what its CreateMultipartUpload carried.
    """

    bucket_regions: dict[str, str] = field(default_factory=dict)
    uploads: dict[str, UploadChecksum] = field(default_factory=dict)
    checksums: dict[tuple[str, str], StoredChecksum] = field(default_factory=dict)
    headers: dict[tuple[str, str], StoredHeaders] = field(default_factory=dict)
    upload_headers: dict[str, UploadHeaders] = field(default_factory=dict)


@dataclass
class S3State:
    """The S3 face's view of one emulator: the shared runtime, the region it
    reports, and the store's :class:`S3Records`.

    Attributes:
        rt: the runtime shared with the GCS APIs (store, profile, faults, stats).
        region: what HeadBucket answers in ``x-amz-bucket-region`` for a
            bucket not created through the S3 face with a LocationConstraint.
        records: the store's S3 records (created with the first S3State
            over that store).
    """

    rt: Runtime
    region: str = "us-east-1"
    records: S3Records = field(init=False)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1), init=False)

    def __post_init__(self) -> None:
        store = self.rt.store
        if store.s3 is None:
            store.s3 = S3Records()
        self.records = store.s3

    def region_of(self, bucket: str) -> str:
        """The region S3 reports for ``bucket``."""
        return self.records.bucket_regions.get(bucket, self.region)

    def checksum_of(self, rec: ObjectRecord) -> StoredChecksum:
        """The object's S3 checksum.

        S3 keeps the checksum of the algorithm an object was written with
        (CRC32 for botocore's default, CRC64NVME where none was sent, a
        COMPOSITE one for a multipart upload of that type), and reports no
        other: a reader asking for CRC32C gets none for those. An object
        written through the GCS APIs reports its CRC32C (GCS keeps one for
        every object).
        """
        known = self.records.checksums.get((rec.bucket, rec.name))
        if known is not None and known.generation == rec.generation:
            return known
        return StoredChecksum(rec.generation, "CRC32C", rec.crc32c_b64)

    def remember(self, rec: ObjectRecord, algorithm: str, value: str | None,
                 kind: str = "FULL_OBJECT") -> StoredChecksum:
        """Note the checksum of ``rec`` (call before the next await, so no
        reader or lister sees the record without it)."""
        stored = StoredChecksum(rec.generation, algorithm, value, kind)
        self.records.checksums[(rec.bucket, rec.name)] = stored
        return stored

    def headers_of(self, rec: ObjectRecord) -> dict[str, str]:
        """The :data:`STORED_HEADERS` the object was written with (none for
        an object written through the GCS APIs)."""
        known = self.records.headers.get((rec.bucket, rec.name))
        if known is not None and known.generation == rec.generation:
            return dict(known.values)
        return {}

    def keep_headers(self, rec: ObjectRecord, values: Mapping[str, str]) -> None:
        """Note the :data:`STORED_HEADERS` of ``rec`` (call before the next
        await, as :meth:`remember`)."""
        key = (rec.bucket, rec.name)
        if values:
            self.records.headers[key] = StoredHeaders(rec.generation, dict(values))
        else:
            self.records.headers.pop(key, None)

    def request_id(self) -> str:
        """A fresh ``x-amz-request-id``."""
        return f"{next(self._ids):016X}"

    @property
    def store(self) -> Store:
        """The object store shared with the GCS APIs."""
        return self.rt.store


def xml_doc(root: str, children: Iterable[tuple[str, str]], raw: str = "") -> bytes:
    """An S3 XML document: escaped ``children`` elements, then ``raw`` markup."""
    inner = "".join(f"<{tag}>{escape(value)}</{tag}>" for tag, value in children)
    return f'{_XML_HEAD}<{root} xmlns="{S3_NS}">{inner}{raw}</{root}>'.encode()


def xml_response(body: bytes, headers: Mapping[str, str] | None = None) -> web.Response:
    """A 200 ``application/xml`` response."""
    return web.Response(body=body, content_type="application/xml", headers=headers)


def maybe_url(value: str, encode: bool) -> str:
    """A key or prefix as sent with ``encoding-type=url`` (else unchanged).

    S3 encodes as an HTML form does: a space is ``+`` (a literal ``+`` is
    ``%2B``), so a client must decode with ``unquote_plus``; one decoding
    with ``unquote`` reads "a+b" for "a b" on S3.
    """
    return quote_plus(value, safe="/") if encode else value


def malformed_xml() -> err.ApiError:
    """The 400 MalformedXML S3 answers a request document it cannot use."""
    return err.invalid("The XML you provided was not well-formed or did not validate "
                       "against our published schema", xml_code="MalformedXML")


def parse_xml(body: bytes) -> ET.Element:
    """Parse a request document.

    Raises:
        ApiError: 400 MalformedXML.
    """
    try:
        return ET.fromstring(body)
    except ET.ParseError:
        raise malformed_xml() from None


def error_response(exc: err.ApiError, *, bucket: str, key: str, request_id: str,
                   head: bool) -> web.Response:
    """Render an emulator error as S3 does.

    Throttling is 503 ``SlowDown`` on S3 (it never answers 429), so the
    emulator's injected 429s, QPS-cap refusals and injected 503s all become
    that; ``Emulator.stats`` still tells them apart.
    """
    status, code, message = exc.status, exc.xml_code, exc.xml_message
    if status in (429, 503):
        status, code, message = 503, "SlowDown", "Please reduce your request rate."
    headers = {k: v for k, v in exc.headers.items() if k != "Retry-After"}
    headers["x-amz-request-id"] = request_id
    if status == 304 or head:
        return web.Response(status=status, headers=headers)
    fields = [("Code", code), ("Message", message)]
    if key and code in ("NoSuchKey", "PreconditionFailed", "InvalidRange"):
        fields.append(("Key", key))
    if bucket and code in ("NoSuchBucket", "BucketNotEmpty", "BucketAlreadyOwnedByYou"):
        fields.append(("BucketName", bucket))
    if code == "NoSuchUpload" and exc.details:
        fields.append(("UploadId", exc.details))
    resource = f"/{bucket}/{key}" if key else f"/{bucket}"
    fields += [("Resource", resource), ("RequestId", request_id)]
    body = _XML_HEAD + "<Error>" + "".join(
        f"<{t}>{escape(v)}</{t}>" for t, v in fields) + "</Error>"
    return web.Response(status=status, body=body.encode(), content_type="application/xml",
                        headers=headers)


def http_date(rfc: str) -> str:
    """An RFC 3339 store timestamp as an HTTP date (``Last-Modified``)."""
    return format_datetime(datetime.fromisoformat(rfc.replace("Z", "+00:00")), usegmt=True)


def checksum_headers(stored: StoredChecksum) -> dict[str, str]:
    """``x-amz-checksum-<algorithm>`` and ``x-amz-checksum-type`` of a checksum
    (none where its value is not known)."""
    if stored.value is None:
        return {}
    return {f"x-amz-checksum-{stored.algorithm.lower()}": stored.value,
            "x-amz-checksum-type": stored.kind}


def object_headers(rec: ObjectRecord) -> dict[str, str]:
    """The headers S3 sends with an object (checksums only when asked for)."""
    headers = {
        "ETag": f'"{rec.etag}"',
        "Last-Modified": http_date(rec.updated),
        "Accept-Ranges": "bytes",
    }
    if rec.content_encoding is not None:
        # S3 never transforms an object: its coding is only named.
        headers["Content-Encoding"] = rec.content_encoding
    for name, value in (rec.metadata or {}).items():
        headers[f"x-amz-meta-{name}"] = value
    if rec.component_count:
        headers["x-amz-mp-parts-count"] = str(rec.component_count)
    return headers


def content_encoding(request: web.BaseRequest) -> str | None:
    """The ``Content-Encoding`` S3 keeps with an object written by ``request``:
    the header without ``aws-chunked`` (that one frames the request body only)."""
    codings = [c.strip() for c in request.headers.get("Content-Encoding", "").split(",")]
    kept = [c for c in codings if c and c.lower() != "aws-chunked"]
    return ", ".join(kept) or None


def stored_headers(request: web.BaseRequest) -> dict[str, str]:
    """The :data:`STORED_HEADERS` a write request carries."""
    return {name: request.headers[name] for name in STORED_HEADERS if name in request.headers}


def user_metadata(request: web.BaseRequest) -> dict[str, str]:
    """``x-amz-meta-*`` headers (S3 keeps the names lower case)."""
    return {k.lower()[len("x-amz-meta-"):]: v for k, v in request.headers.items()
            if k.lower().startswith("x-amz-meta-")}


def _etags(value: str) -> list[str]:
    return [t.strip().removeprefix("W/").strip('"') for t in value.split(",") if t.strip()]


def _date(value: str) -> datetime | None:
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # an unparseable date is ignored, as HTTP says


def read_conditions(request: web.BaseRequest, rec: ObjectRecord, *,
                    prefix: str = "") -> None:
    """Apply ``If-Match`` / ``If-None-Match`` / ``If-(Un)Modified-Since``.

    Args:
        prefix: ``x-amz-copy-source-`` for a copy's source conditions.

    Raises:
        ApiError: 412 PreconditionFailed, or 304 for a read whose
            ``If-None-Match`` / ``If-Modified-Since`` says unchanged.
    """
    h = request.headers
    modified = datetime.fromisoformat(rec.updated.replace("Z", "+00:00")).replace(microsecond=0)
    if_match, if_none = h.get(prefix + "If-Match"), h.get(prefix + "If-None-Match")
    if if_match is not None and "*" not in _etags(if_match) and rec.etag not in _etags(if_match):
        raise err.precondition_failed()
    since = _date(h.get(prefix + "If-Unmodified-Since", ""))
    if if_match is None and since is not None and modified > since:
        raise err.precondition_failed()
    unchanged = err.precondition_failed() if prefix else err.not_modified()
    if if_none is not None and ("*" in _etags(if_none) or rec.etag in _etags(if_none)):
        raise unchanged
    since = _date(h.get(prefix + "If-Modified-Since", ""))
    if if_none is None and since is not None and modified <= since:
        raise unchanged


def write_conditions(request: web.BaseRequest, store: Store, bucket: str,
                     key: str) -> Preconditions | None:
    """S3's conditional writes as a store precondition on the live generation.

    ``If-None-Match: *`` -> the object must not exist; ``If-Match: ETAG`` ->
    the live object must have that ETag (404 NoSuchKey if there is none, as
    S3 answers). Call this and ``store.put`` without awaiting in between, so
    the check and the write are one atomic step on the loop.

    Raises:
        ApiError: 412 PreconditionFailed, 404 NoSuchKey, 501 for an
            ``If-None-Match`` other than ``*`` (S3 accepts only that).
    """
    h = request.headers
    if_none, if_match = h.get("If-None-Match"), h.get("If-Match")
    if if_none is None and if_match is None:
        return None
    live = store.bucket(bucket).objects.get(key)
    if if_none is not None:
        if if_none.strip() != "*":
            raise err.ApiError(501, "invalid", "A header you provided implies functionality "
                               "that is not implemented", xml_code="NotImplemented")
        if live is not None:
            raise err.precondition_failed(f"{bucket}/{key}")
        return Preconditions(if_generation_match=0)
    assert if_match is not None
    if live is None:
        raise err.no_such_object(bucket, key)
    if live.etag not in _etags(if_match) and "*" not in _etags(if_match):
        raise err.precondition_failed(f"{bucket}/{key}")
    return Preconditions(if_generation_match=live.generation)
