"""S3 request bodies: ``aws-chunked`` decoding and ``x-amz-checksum-*`` checks.

SigV4 streaming uploads (botocore's trailing checksums, the AWS CRT client
under s3torchconnector) frame the payload as ``aws-chunked``::

    <hex size>[;chunk-signature=<sig>]\\r\\n<bytes>\\r\\n ... 0[;...]\\r\\n
    x-amz-checksum-crc32c:<b64>\\r\\n[x-amz-trailer-signature:<sig>\\r\\n]\\r\\n

on top of whatever HTTP framing (Content-Length or chunked) carries it.
Signatures are not verified (the emulator accepts any credentials), but
the framing is decoded exactly, so a malformed body is a 400, never a
stored object with the framing inside, and a trailing checksum is checked
like the header form.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Mapping

from aioflux.testing import _errors as err
from aioflux.testing._rope import Buffer, Rope

__all__ = [
    "ALGORITHMS", "CHECKSUM_HEADERS", "Decoded", "checksum", "composite", "decode_body",
    "sent_algorithm", "verify_checksums",
]

# The algorithms S3 accepts, by their x-amz-checksum-* header. CRC64NVME (S3's
# default for an object written without a checksum) is computed with awscrt
# (the s3 extra's, botocore[crt]'s) where it is installed; without it a value
# sent is refused rather than accepted unchecked, and none is reported.
ALGORITHMS = ("CRC32C", "CRC32", "SHA1", "SHA256", "CRC64NVME")
CHECKSUM_HEADERS = tuple(f"x-amz-checksum-{a.lower()}" for a in ALGORITHMS)


class Decoded:
    """A request payload with the checksums sent for it.

    Attributes:
        data: the payload (framing removed).
        checksums: lower-cased ``x-amz-checksum-*`` name -> base64 value,
            from the headers and from an aws-chunked trailer.
        chunked: whether the body was aws-chunked.
    """

    __slots__ = ("checksums", "chunked", "data")

    def __init__(self, data: Rope, checksums: dict[str, str], chunked: bool) -> None:
        self.data = data
        self.checksums = checksums
        self.chunked = chunked


def _is_aws_chunked(headers: Mapping[str, str]) -> bool:
    encodings = [e.strip().lower() for e in headers.get("Content-Encoding", "").split(",")]
    sha = headers.get("x-amz-content-sha256", "")
    return "aws-chunked" in encodings or sha.startswith("STREAMING-")


def decode_body(headers: Mapping[str, str], body: Rope) -> Decoded:
    """Strip aws-chunked framing (if any) and collect the checksums sent.

    Args:
        headers: the request headers.
        body: the body as received.

    Returns:
        The payload and the checksums to verify.

    Raises:
        ApiError: 400 IncompleteBody / InvalidRequest on malformed framing or a
            payload whose length differs from ``x-amz-decoded-content-length``.
    """
    sums = {k.lower(): v.strip() for k, v in headers.items()
            if k.lower().startswith("x-amz-checksum-") and k.lower() != "x-amz-checksum-mode"
            and k.lower() not in ("x-amz-checksum-algorithm", "x-amz-checksum-type")}
    if not _is_aws_chunked(headers):
        return Decoded(body, sums, False)
    data, trailers = _unchunk(bytes(body))
    for name, value in trailers.items():
        if name.startswith("x-amz-checksum-"):
            sums[name] = value
    declared = headers.get("x-amz-decoded-content-length")
    if declared is not None and declared.strip() != str(data.size):
        raise err.ApiError(
            400, "invalid",
            f"aws-chunked payload is {data.size} bytes, x-amz-decoded-content-length says "
            f"{declared}", xml_code="IncompleteBody")
    return Decoded(data, sums, True)


def _framing_error(why: str) -> err.ApiError:
    return err.ApiError(400, "invalid", f"Malformed aws-chunked body: {why}",
                        xml_code="InvalidRequest")


def _unchunk(raw: bytes) -> tuple[Rope, dict[str, str]]:
    view = memoryview(raw)
    pieces: list[Buffer] = []
    pos = 0
    while True:
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            raise _framing_error("chunk header without CRLF")
        size_field = raw[pos:eol].split(b";", 1)[0].strip()
        try:
            size = int(size_field, 16)
        except ValueError:
            raise _framing_error(f"bad chunk size {size_field[:20]!r}") from None
        pos = eol + 2
        if size == 0:
            break
        if pos + size + 2 > len(raw) or raw[pos + size:pos + size + 2] != b"\r\n":
            raise _framing_error("chunk shorter than its declared size")
        pieces.append(view[pos:pos + size])
        pos += size + 2
    trailers: dict[str, str] = {}
    # Trailer lines up to an empty line (or the end: some senders omit it).
    while pos < len(raw):
        eol = raw.find(b"\r\n", pos)
        line = raw[pos:] if eol < 0 else raw[pos:eol]
        pos = len(raw) if eol < 0 else eol + 2
        if not line:
            break
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise _framing_error(f"bad trailer line {line[:40]!r}")
        trailers[name.strip().lower()] = value.strip()
    return Rope(pieces), trailers


def _crc64nvme(data: Rope) -> bytes | None:
    try:
        from awscrt import checksums
    except ImportError:
        return None
    value = 0
    for piece in data.pieces:
        value = checksums.crc64nvme(bytes(piece), value)
    return value.to_bytes(8, "big")


def _digest(algorithm: str, data: Rope, crc32c: int | None = None) -> bytes | None:
    """The raw checksum of ``data`` (None: CRC64NVME without awscrt)."""
    if algorithm == "CRC32C":
        return (data.crc32c() if crc32c is None else crc32c).to_bytes(4, "big")
    if algorithm == "CRC32":
        value = 0
        for piece in data.pieces:
            value = zlib.crc32(piece, value)
        return value.to_bytes(4, "big")
    if algorithm == "CRC64NVME":
        return _crc64nvme(data)
    digest = hashlib.sha1() if algorithm == "SHA1" else hashlib.sha256()
    for piece in data.pieces:
        digest.update(piece)
    return digest.digest()


def checksum(algorithm: str, data: Rope, crc32c: int | None = None) -> str | None:
    """``data``'s checksum under ``algorithm`` (``CRC32C``...) in base64, as S3
    reports it; None for CRC64NVME when awscrt is not installed.

    Args:
        crc32c: the payload's CRC32C if already computed.
    """
    raw = _digest(algorithm, data, crc32c)
    return None if raw is None else base64.b64encode(raw).decode()


def composite(algorithm: str, parts: list[Rope]) -> str | None:
    """A COMPOSITE multipart checksum: the checksum of the parts' raw
    checksums, then ``-N`` (None where a part's cannot be computed)."""
    raws = [_digest(algorithm, part) for part in parts]
    if any(raw is None for raw in raws):
        return None
    value = checksum(algorithm, Rope([raw for raw in raws if raw is not None]))
    return None if value is None else f"{value}-{len(parts)}"


def sent_algorithm(decoded: Decoded) -> str | None:
    """The algorithm of the one checksum a request carries, or None.

    Raises:
        ApiError: 400 InvalidRequest for more than one, as S3 answers.
    """
    names = [name for name in decoded.checksums if name in CHECKSUM_HEADERS]
    if len(names) > 1:
        raise err.ApiError(400, "invalid", "Expecting a single x-amz-checksum- header. Multiple "
                           "checksum Types are not allowed.", xml_code="InvalidRequest")
    return names[0].removeprefix("x-amz-checksum-").upper() if names else None


def verify_checksums(decoded: Decoded, *, content_md5: str | None,
                     crc32c: int | None = None) -> bytes | None:
    """Check every checksum the client sent against the payload, as S3 does.

    Args:
        decoded: the payload and the checksums sent with it.
        content_md5: the ``Content-MD5`` header, if any.
        crc32c: the payload's CRC32C if already computed.

    Returns:
        The MD5 digest if ``Content-MD5`` made it necessary to compute it.

    Raises:
        ApiError: 400 BadDigest on a mismatch, 400 InvalidRequest for a value
            that is not base64 of the algorithm's size or an unsupported one,
            400 InvalidDigest for a Content-MD5 that is not base64 of 16 bytes.
    """
    for name, sent in decoded.checksums.items():
        want = (checksum(name.removeprefix("x-amz-checksum-").upper(), decoded.data, crc32c)
                if name in CHECKSUM_HEADERS else None)
        if want is None:
            raise err.ApiError(400, "invalid", f"{name} is not supported by this emulator",
                               xml_code="InvalidRequest")
        try:
            raw = base64.b64decode(sent, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != len(base64.b64decode(want)):
            raise err.ApiError(400, "invalid", f"Value for {name} header is invalid.",
                               xml_code="InvalidRequest")
        if sent != want:
            algo = name.removeprefix("x-amz-checksum-").upper()
            raise err.ApiError(
                400, "invalid", f"The {algo} you specified did not match the calculated "
                f"checksum.", xml_code="BadDigest")
    if content_md5:
        try:
            sent_md5 = base64.b64decode(content_md5.strip(), validate=True)
        except (binascii.Error, ValueError):
            sent_md5 = b""
        if len(sent_md5) != 16:
            raise err.ApiError(400, "invalid", "The Content-MD5 you specified was invalid.",
                               xml_code="InvalidDigest")
        digest = decoded.data.md5()
        if digest != sent_md5:
            raise err.ApiError(400, "invalid",
                               "The Content-MD5 you specified did not match what we received.",
                               xml_code="BadDigest")
        return digest
    return None
