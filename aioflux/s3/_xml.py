"""S3's XML bodies and headers: parsing, the version token, checksums.

Version token: S3 has no generation number. ``ObjectInfo.generation`` is
the object's ETag as a number, so preconditions and pinned reads map back
to ``If-Match`` without asking the server: an ETag of 32 hex digits (the
MD5 of a single PUT, or ``<md5>-<parts>`` of a multipart upload, which is
what AWS, MinIO and moto send) becomes ``int(md5, 16) << 16 | parts``,
which is exact and reversible (and > 2**64, so it never meets the next
kind). Any other ETag becomes a 63-bit hash, which the store maps back
through the ETags it has seen (else a HEAD). Equal ETags mean equal
generations: writing the same bytes again keeps the token, as S3 keeps the
ETag.
"""

from __future__ import annotations

import base64
import hashlib
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from .._core.checks.stated_counts import count_of
from .._core.errors import (
    NotFound,
    PreconditionFailed,
    ProtocolError,
    ServerError,
    StorageError,
    describe,
    error_for_status,
)
from .._core.integrity.crc import decode_crc32c
from .._net.checked_reads import Answers
from .._net.failures import Op
from .._net.pinned import gone as pinned_gone
from .._net.xml_answers import fail, rfc3339
from .._net.xml_doctype import refuse_doctype

__all__ = [
    "ANSWERS",
    "NOT_XML",
    "answer_crc32c",
    "answered_version",
    "children",
    "content_md5",
    "content_md5_base64",
    "error_of",
    "etag_of",
    "fail",
    "full_object_crc32c",
    "generation_of",
    "gone",
    "head_size",
    "parse",
    "pin",
    "precondition_failed",
    "query",
    "raise_if_error",
    "reversible",
    "rfc3339",
    "text",
]

# Characters XML 1.0 cannot carry, that an S3 key may hold: C0 controls but
# tab, LF and CR (which are refused in names), U+FFFE and U+FFFF.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# The same in an answer's bytes, raw or as character references: AWS answers
# CreateMultipartUpload (and moto every answer naming the key) with the key
# as given (botocore#3496), which no XML parser takes.
_NOT_XML_BYTES = re.compile(
    rb"[\x00-\x08\x0b\x0c\x0e-\x1f]|\xef\xbf[\xbe\xbf]"
    rb"|&#(?:0*(?:[0-8]|1[124-9]|2[0-9]|3[01])|[xX]0*(?:[0-8bcefBCEF]|1[0-9a-fA-F]|[fF]{3}[eEfF]));")

_HEX = re.compile(r"[0-9a-fA-F]{32}")
# The HTTP status S3 answers these error codes with, for an <Error> a 200
# carries (CompleteMultipartUpload, CopyObject, DeleteObjects): only codes
# whose class error_for_status takes from the status (S3's error-code list);
# it classes the others by code. InternalError and SlowDown keep 500, the
# status these documents have always been given here.
_STATUS_OF_CODE = {
    "AccessDenied": 403,
    "AccountProblem": 403,
    "AllAccessDisabled": 403,
    "InvalidObjectState": 403,
    "RequestTimeTooSkewed": 403,
    "MethodNotAllowed": 405,
    "OperationAborted": 409,
    "InternalError": 500,
    "SlowDown": 500,
    "NotImplemented": 501,
    "ServiceUnavailable": 503,
}
_MD5_ETAG = re.compile(r'(?:W/)?"?([0-9a-fA-F]{32})(?:-(\d{1,5}))?"?')
_REVERSIBLE = 1 << 64
_HASH_MASK = (1 << 63) - 1


def generation_of(etag: str) -> int:
    """The generation number of an ETag (see the module doc); 0 for none."""
    if not etag:
        return 0
    etag = etag.strip()
    # A listing reads the common shape, "<md5 hex>", without this call (see
    # s3._page.read_page).
    match = _MD5_ETAG.fullmatch(etag)
    if match is not None:
        return int(match.group(1), 16) << 16 | int(match.group(2) or 0)
    digest = hashlib.blake2b(etag.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") & _HASH_MASK) or 1


def reversible(generation: int) -> bool:
    """Whether ``generation`` carries its ETag (an MD5 one) rather than a hash of it."""
    return generation >= _REVERSIBLE


def etag_of(generation: int) -> str | None:
    """The ETag a reversible generation stands for, or None for a hashed one."""
    if not reversible(generation):
        return None
    md5, parts = generation >> 16, generation & 0xFFFF
    return f'"{md5:032x}-{parts}"' if parts else f'"{md5:032x}"'


def full_object_crc32c(headers: Mapping[str, str]) -> int | None:
    """The object's crc32c from ``x-amz-checksum-crc32c``, only when it is
    the checksum of the whole content: a composite one (``...-N``, or
    ``x-amz-checksum-type: COMPOSITE``) is a checksum of part checksums."""
    value = headers.get("x-amz-checksum-crc32c", "")
    if not value or "-" in value:
        return None
    if headers.get("x-amz-checksum-type", "FULL_OBJECT").upper() != "FULL_OBJECT":
        return None
    try:
        return decode_crc32c(value.strip())
    except ValueError:
        return None  # malformed: treated as absent, the length checks still hold


def head_size(headers: Mapping[str, str], op: Op) -> int:
    """The object's size a HEAD states: its ``Content-Length`` (headers
    lower-cased).

    A HEAD has no body to count, so nothing else says how large the object
    is: a missing or malformed length read as 0 made a stat call the object
    empty (a reader of it then read nothing, or failed its checksum as
    corrupt).

    Raises:
        ProtocolError: no ``Content-Length``, or not a count of bytes.
    """
    value = headers.get("content-length", "")
    size = count_of(value)
    if size is None:
        shown = "no Content-Length" if not value else f"Content-Length {value[:40]!r}"
        raise ProtocolError(f"{describe(op.operation, op.bucket, op.name, 's3')} failed: the "
                            f"HEAD answered {shown}, not the object's size",
                            operation=op.operation, bucket=op.bucket, name=op.name,
                            status=200)
    return size


def answer_crc32c(root: ET.Element) -> int | None:
    """The ``<ChecksumCRC32C>`` an answer reports (a completion's, a part
    copy's); None where it reports none, a composite one (``...-N``) or a
    malformed one."""
    reported = text(root, "ChecksumCRC32C")
    if not reported or "-" in reported:
        return None
    try:
        return decode_crc32c(reported)
    except ValueError:
        return None


def query(*pairs: tuple[str, str | None]) -> str:
    """``?k=v&k2`` with SigV4's encoding (what the signer sees is what is sent);
    a None value gives a bare key (``?uploads``)."""
    items = [quote(k, safe="-_.~") if v is None else
             f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in pairs]
    return "?" + "&".join(items) if items else ""


def local(tag: str) -> str:
    """An element's name without its namespace."""
    return tag.rsplit("}", 1)[-1]


def children(root: ET.Element, tag: str) -> list[ET.Element]:
    """Direct children named ``tag`` (any namespace)."""
    return [el for el in root if local(el.tag) == tag]


def text(root: ET.Element, tag: str, default: str = "") -> str:
    """Text of the first direct child named ``tag``."""
    for el in root:
        if local(el.tag) == tag:
            return el.text or ""
    return default


def parse(raw: bytes, op: Op, *, kept_alive: bool = False) -> ET.Element:
    """Parse an XML answer; an ``<Error>`` inside a 200 (CopyObject and
    CompleteMultipartUpload may report one so) raises.

    Args:
        raw: the body.
        op: operation, bucket and object, for the error.
        kept_alive: an answer S3 sends 200 at once and keeps alive with
            whitespace while it works (complete, copy, part copy): one that
            ends unparsable failed after its 200 (botocore retries it as a
            500); a completion retried so is checked against what it
            published.

    Returns:
        The document's root element.

    Raises:
        ServerError: ``kept_alive`` and unparsable (retried).
        ProtocolError: the document declares a DTD (see :mod:`aioflux._net.xml_doctype`).
        StorageError: unparsable XML, or an error document.
    """
    # A key's characters that XML cannot carry are dropped (they are in
    # no other field; a Key read back is compared without them). The
    # whitespace S3 (and MinIO) keep a completion or copy alive with
    # comes before the document's XML declaration, where XML allows
    # nothing: a completion that published would read as a failure.
    raw = _NOT_XML_BYTES.sub(b"", raw.lstrip(b" \t\r\n"))
    refuse_doctype(raw, op)
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        what = f"unparsable XML response ({exc})"
        if kept_alive:
            raise ServerError(f"{describe(op.operation, op.bucket, op.name, 's3')} failed: "
                              f"{what} after HTTP 200", operation=op.operation,
                              bucket=op.bucket, name=op.name, status=200) from exc
        fail(op, what, exc)
    raise_if_error(root, op)
    return root


def raise_if_error(root: Any, op: Op) -> None:
    """Raise the error an ``<Error>`` document reports (ElementTree's or lxml's root).

    Raises:
        StorageError: ``root`` is an error document.
    """
    if local(root.tag) == "Error":
        raise error_of(text(root, "Code"), text(root, "Message"), op)


def error_of(code: str, message: str, op: Op, name: str | None = None) -> StorageError:
    """The error an S3 ``<Error>`` (``code``) stands for, as a 200 carries
    it (CompleteMultipartUpload, CopyObject, each key of DeleteObjects):
    classed as the same code answered with its own status would be
    (error_for_status classes the codes it knows whatever the status, so
    InternalError and SlowDown are retried; the rest by the status S3
    gives them). ``name`` stands for ``op``'s object (a batch's key)."""
    return error_for_status(_STATUS_OF_CODE.get(code, 400), message, operation=op.operation,
                            bucket=op.bucket, name=op.name if name is None else name,
                            reason=code, scheme="s3")


def pin(headers: Mapping[str, str]) -> dict[str, str]:
    """A resumed read continues the version its first response came from."""
    etag = headers.get("etag")
    return {"If-Match": etag} if etag else {}


def content_md5(headers: Mapping[str, str]) -> str | None:
    """The MD5 (hex) an answer's ETag promises: only a single part's ETag
    of an object stored plain or with SSE-S3 is its MD5 (AWS documents
    others, KMS or a customer key, as not). Headers lower-cased."""
    etag = headers.get("etag", "").strip()
    if len(etag) != 34 or etag[0] != '"' or etag[33] != '"' \
            or not _HEX.fullmatch(etag, 1, 33):
        return None
    if headers.get("x-amz-server-side-encryption", "AES256") != "AES256" \
            or "x-amz-server-side-encryption-customer-algorithm" in headers:
        return None
    return etag[1:33].lower()


def content_md5_base64(headers: Mapping[str, str]) -> str | None:
    """:func:`content_md5` as ``ObjectInfo.md5`` holds it (base64, as GCS's)."""
    digest = content_md5(headers)
    return None if digest is None else base64.b64encode(bytes.fromhex(digest)).decode()


def answered_version(headers: Mapping[str, str]) -> int | None:
    """The generation (ETag) an answer came from, if it names one."""
    return generation_of(headers.get("etag", "")) or None


#: How a GET's answers are read (aioflux._net.checked_reads).
ANSWERS = Answers(crc32c=full_object_crc32c, md5=content_md5, version=answered_version,
                  pin=pin)


def gone(op: Op, generation: int) -> NotFound:
    """A pinned generation (ETag) that is no longer the object's: gone, as
    an overwritten generation is on GCS."""
    return pinned_gone(op, generation, what="object", reason="PreconditionFailed")


def precondition_failed(op: Op, generation: int) -> PreconditionFailed:
    """An ``if_generation_match`` that did not hold."""
    return PreconditionFailed(f"{describe(op.operation, op.bucket, op.name, 's3')} failed: "
                              f"the object is not generation {generation}",
                              operation=op.operation, bucket=op.bucket, name=op.name,
                              status=412, reason="PreconditionFailed")
