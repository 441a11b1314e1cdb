"""Small helpers shared by the JSON and XML handlers."""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from aioflux.testing import _errors as err
from aioflux.testing._rope import Rope
from aioflux.testing._store import ObjectRecord, Preconditions, b64_crc32c, b64_md5

__all__ = [
    "TRANSCODED_HEADERS",
    "accepts_gzip",
    "check_object_name",
    "json_response",
    "media_headers",
    "parse_fields",
    "parse_goog_hash",
    "preconditions_from",
    "query_int",
    "transcoded",
    "trim_fields",
    "verify_hashes",
]

TRANSCODED_HEADERS = {
    "X-GUploader-Response-Body-Transformations": "gunzipped",
    "Warning": "214 UploadServer gunzipped",
}
"""What GCS adds to an answer it decompressed (the stored hashes stay)."""

Fields = dict[str, "Fields | None"]


def json_response(doc: Mapping[str, Any], status: int = 200) -> web.Response:
    """Serialize ``doc`` compactly as an ``application/json`` response."""
    return web.Response(
        status=status,
        body=json.dumps(doc, separators=(",", ":")).encode(),
        content_type="application/json",
        charset="UTF-8",
    )


MAX_NAME_BYTES = 1024


def check_object_name(name: str) -> str:
    """Refuse an object name GCS refuses (1-1024 bytes of UTF-8, no CR or LF,
    not ``.`` or ``..``, not under ``.well-known/acme-challenge/``).

    Returns:
        ``name``.

    Raises:
        ApiError: 400 invalid.
    """
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise err.invalid(f"The maximum object length is {MAX_NAME_BYTES} characters, but got a "
                          f"name with {size} characters: ''{name[:64]}...''")
    if "\r" in name or "\n" in name or name in (".", "..") or name.startswith(
            ".well-known/acme-challenge/"):
        raise err.invalid(f"Invalid object name: {name[:64]!r}")
    return name


def query_int(query: Mapping[str, str], key: str) -> int | None:
    """Return an integer query parameter or ``None``.

    Raises:
        ApiError: 400 if present but not an integer.
    """
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise err.invalid(f"Invalid value for {key}: {raw}") from None


def preconditions_from(query: Mapping[str, str], prefix: str = "if") -> Preconditions:
    """Read ``ifGenerationMatch`` & co. (or ``ifSource...`` with ``prefix='ifSource'``).

    Raises:
        ApiError: 400 on a non-integer value.
    """
    return Preconditions(
        query_int(query, f"{prefix}GenerationMatch"),
        query_int(query, f"{prefix}GenerationNotMatch"),
        query_int(query, f"{prefix}MetagenerationMatch"),
        query_int(query, f"{prefix}MetagenerationNotMatch"),
    )


def parse_goog_hash(value: str | None) -> dict[str, str]:
    """Parse ``x-goog-hash: crc32c=...,md5=...`` (the header may repeat, comma-joined)."""
    out: dict[str, str] = {}
    for item in (value or "").split(","):
        key, sep, val = item.strip().partition("=")  # base64 padding follows the first '='
        if sep:
            out[key.strip().lower()] = val.strip()
    return out


def verify_hashes(
    data: bytes | Rope, crc32c: int, sent_crc32c: str | None, sent_md5: str | None
) -> bytes | None:
    """Check client-sent hashes against the received bytes.

    Args:
        data: the received bytes.
        crc32c: their CRC32C (already computed by the caller).
        sent_crc32c: base64 CRC32C the client sent, if any.
        sent_md5: base64 MD5 the client sent, if any.

    Returns:
        The MD5 digest if it was computed (so the store need not redo it).

    Raises:
        ApiError: 400 (XML code BadDigest) on a mismatch.
    """
    if sent_crc32c and sent_crc32c != b64_crc32c(crc32c):
        raise err.bad_digest("CRC32C", sent_crc32c, b64_crc32c(crc32c))
    if sent_md5:
        digest = data.md5() if isinstance(data, Rope) else hashlib.md5(data).digest()
        if sent_md5 != b64_md5(digest):
            raise err.bad_digest("MD5", sent_md5, b64_md5(digest))
        return digest
    return None


def media_headers(rec: ObjectRecord) -> dict[str, str]:
    """Return the headers GCS sends with object bytes (full-object hashes)."""
    goog_hash = f"crc32c={rec.crc32c_b64}"
    if rec.md5_b64 is not None:
        goog_hash += f",md5={rec.md5_b64}"
    return {
        "x-goog-hash": goog_hash,
        "x-goog-generation": str(rec.generation),
        "x-goog-metageneration": str(rec.metageneration),
        "x-goog-stored-content-length": str(rec.size),
        "x-goog-stored-content-encoding": rec.content_encoding or "identity",
        "x-goog-storage-class": "STANDARD",
        "ETag": f'"{rec.etag}"',
        "Accept-Ranges": "bytes",
    }


def accepts_gzip(value: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header names gzip with a non-zero weight.

    GCS serves an object stored with ``Content-Encoding: gzip`` as stored
    only to such a request; to any other it decompresses the bytes
    (decompressive transcoding). A wildcard does not count: GCS looks for
    gzip itself.
    """
    for item in (value or "").split(","):
        coding, _, params = item.partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip"):
            continue
        weight = params.strip().lower()
        if not weight.startswith("q="):
            return True
        try:
            return float(weight[2:]) > 0
        except ValueError:
            return True
    return False


def transcoded(headers: Mapping[str, str], rec: ObjectRecord) -> Rope | None:
    """The bytes GCS serves when it decompresses ``rec`` on the way, or ``None``.

    GCS decompresses an object stored with ``Content-Encoding: gzip`` for a
    request that does not accept gzip, and then ignores ``Range`` (the whole
    object, 200), sends neither ``Content-Encoding`` nor ``Content-Length``,
    and its ``x-goog-hash`` stays that of the stored (compressed) bytes.
    Stored bytes that are not gzip are served as they are.

    Args:
        headers: the request headers (``Accept-Encoding``).
        rec: the object.
    """
    if rec.content_encoding != "gzip" or accepts_gzip(headers.get("Accept-Encoding")):
        return None
    try:
        return Rope((gzip.decompress(bytes(rec.data)),))
    except (OSError, EOFError, zlib.error):
        return None


def parse_fields(spec: str) -> Fields:
    """Parse a ``fields`` selector such as ``items(name,size),nextPageToken``.

    ``a/b`` is read as ``a(b)``.

    Raises:
        ApiError: 400 on unbalanced parentheses.
    """
    pos = 0

    def parse_list() -> Fields:
        nonlocal pos
        out: Fields = {}
        while pos < len(spec):
            start = pos
            while pos < len(spec) and spec[pos] not in ",()":
                pos += 1
            path = [p for p in spec[start:pos].strip().split("/") if p]
            sub: Fields | None = None
            if pos < len(spec) and spec[pos] == "(":
                pos += 1
                sub = parse_list()
                if pos >= len(spec) or spec[pos] != ")":
                    raise err.invalid(f"Invalid field selection {spec}")
                pos += 1
            for key in reversed(path[1:]):
                sub = {key: sub}
            if path:
                out[path[0]] = sub
            if pos < len(spec) and spec[pos] == ",":
                pos += 1
            elif pos < len(spec) and spec[pos] == ")":
                break
        return out

    result = parse_list()
    if pos != len(spec):
        raise err.invalid(f"Invalid field selection {spec}")
    return result


def trim_fields(value: Any, fields: Fields | None) -> Any:
    """Keep only the selected keys of ``value`` (recursing into lists)."""
    if fields is None:
        return value
    if isinstance(value, list):
        return [trim_fields(v, fields) for v in value]
    if isinstance(value, dict):
        return {k: trim_fields(value[k], sub) for k, sub in fields.items() if k in value}
    return value
