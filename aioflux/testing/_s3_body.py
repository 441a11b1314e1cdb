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
from aioflux.testing._store import b64_crc32c

__all__ = ["CHECKSUM_HEADERS", "Decoded", "decode_body", "verify_checksums"]

# The checksum headers S3 accepts; crc64nvme needs a library the emulator
# does not depend on, so it is refused rather than accepted unchecked.
CHECKSUM_HEADERS = (
    "x-amz-checksum-crc32c",
    "x-amz-checksum-crc32",
    "x-amz-checksum-sha1",
    "x-amz-checksum-sha256",
    "x-amz-checksum-crc64nvme",
)


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


def _compute(name: str, data: Rope, crc32c: int | None) -> str:
    if name == "x-amz-checksum-crc32c":
        return b64_crc32c(data.crc32c() if crc32c is None else crc32c)
    if name == "x-amz-checksum-crc32":
        value = 0
        for piece in data.pieces:
            value = zlib.crc32(piece, value)
        return base64.b64encode(value.to_bytes(4, "big")).decode()
    digest = hashlib.sha1() if name == "x-amz-checksum-sha1" else hashlib.sha256()
    for piece in data.pieces:
        digest.update(piece)
    return base64.b64encode(digest.digest()).decode()


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
            that is not base64 of the algorithm's size or an unsupported one.
    """
    for name, sent in decoded.checksums.items():
        if name not in CHECKSUM_HEADERS or name == "x-amz-checksum-crc64nvme":
            raise err.ApiError(400, "invalid", f"{name} is not supported by this emulator",
                               xml_code="InvalidRequest")
        want = _compute(name, decoded.data, crc32c)
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
        digest = decoded.data.md5()
        if base64.b64encode(digest).decode() != content_md5.strip():
            raise err.ApiError(400, "invalid",
                               "The Content-MD5 you specified did not match what we received.",
                               xml_code="BadDigest")
        return digest
    return None
