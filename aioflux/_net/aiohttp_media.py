"""Media GETs through aiohttp: the responses the lean client
(:mod:`aioflux._net.http`) leaves to it (chunked, compressed, proxied), or
every one where lean reads are off, received into the same
:class:`~aioflux._net.http.MediaResponse` the lean client hands over, with
the same caps, the same pace rule and the same keeping of a body cut short.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import yarl

from .._core.errors import ProtocolError, describe
from .failures import Op, error_from_response
from .http import MediaResponse
from .slow_drip import Pace, SlowTransfer, timed_out_early

__all__ = ["get_with_aiohttp"]

_TRANSFORMED = "x-guploader-response-body-transformations"
# DEFLATE's greatest ratio (zlib's technical notes): a gzip-stored object
# served decompressed is at most this many times its stored size.
_MAX_INFLATION = 1032
# What a media handler looks at (the aiohttp fallback keeps only these).
_MEDIA_HEADERS = ("x-goog-hash", _TRANSFORMED,
                  "content-range", "x-goog-stored-content-length", "x-goog-generation",
                  "etag", "x-amz-checksum-crc32c", "x-amz-checksum-type",
                  "x-ms-meta-aioflux_crc32c", "x-ms-blob-content-md5", "content-md5")


async def get_with_aiohttp(session: aiohttp.ClientSession, op: Op, url: str | yarl.URL,
                           headers: Mapping[str, str], into: memoryview | None,
                           limit: int | None, keep_partial: bool, *, stored_bytes: bool,
                           tls: ssl.SSLContext | bool, read_stall: float,
                           clock: Callable[[], float]) -> MediaResponse:
    """One media GET on ``session``, as :meth:`Transport.get_media_once` sends it.

    Args:
        session: the loop's aiohttp session.
        op: operation, bucket and object, for errors.
        url: the URL as the transport sends it.
        headers: the request's headers, authentication included.
        into: receive the body here (see :meth:`Transport.get_media`).
        limit: most body bytes accepted without ``into``.
        keep_partial: hand over a body cut short (else raise).
        stored_bytes: keep a coded body as stored (``Transport.stored_bytes``).
        tls: what aiohttp verifies the server with.
        read_stall: the pace rule's window.
        clock: the loop's clock.

    Returns:
        The response, its body or how much of it arrived.

    Raises:
        StorageError: an error status, or a decompressed body past its cap.
        SlowTransfer: the body moved too little (not ``keep_partial``).
        aiohttp.ClientError: the connection failed (mapped by the attempt).
    """
    # Only where the body is kept as stored: a session_factory's session
    # (MockTransport's) need not know the keyword.
    raw: dict[str, Any] = {"auto_decompress": False} if stored_bytes else {}
    async with session.get(url, headers=headers, allow_redirects=False, ssl=tls,
                           **raw) as resp:
        if resp.status >= 300:
            raise await error_from_response(resp, op)
        found = {name: ",".join(resp.headers.getall(name)) for name in _MEDIA_HEADERS
                 if name in resp.headers}
        # A decoded (gzip) body is not Content-Length bytes long.
        coded = not stored_bytes and \
            resp.headers.get("Content-Encoding", "identity").lower() != "identity"
        if coded:
            # Decoded here, as GCS decodes what it transcodes: its
            # x-goog-hash and stored length are of the coded bytes, and
            # the coding's own check (gzip's CRC32) covers the decoding.
            found.setdefault(_TRANSFORMED, "decoded by the client")
        expected = None if coded else resp.content_length
        if into is not None and expected is not None and expected > len(into):
            return MediaResponse(resp.status, found, None, 0, expected)
        cap = len(into) if into is not None else limit
        inflated = into is None and _TRANSFORMED in found
        if inflated:
            # A range asked of a transcoded object is answered whole: its
            # length is no base for the cap, the stored size is.
            cap = _inflation_cap(None if "Range" in headers else limit,
                                 resp.headers.get("x-goog-stored-content-length"))
        body = bytearray() if into is None else None
        received = 0
        speed = Pace(read_stall, clock())
        try:
            async for chunk in resp.content.iter_any():
                end = received + len(chunk)
                if cap is not None and end > cap:
                    if inflated:
                        raise ProtocolError(
                            f"{describe(op.operation, op.bucket, op.name, op.scheme)} "
                            f"failed: the body served decompressed passed {cap} bytes, "
                            f"{_MAX_INFLATION} times its stored size", status=resp.status,
                            operation=op.operation, bucket=op.bucket, name=op.name)
                    # More than fits or was asked for: report the length
                    # without buffering it.
                    return MediaResponse(resp.status, found, None, received, end)
                if into is not None:
                    into[received:end] = chunk
                else:
                    body += chunk  # type: ignore[operator]
                received = end
                speed.check(received, clock(), "response bytes")
        except SlowTransfer:
            if not keep_partial or expected is None:
                raise
            # As the lean client does: what arrived is kept, but a drip's
            # bytes are no progress.
            return MediaResponse(resp.status, found, body, received, expected, slow=True)
        except (aiohttp.ClientPayloadError, aiohttp.ServerTimeoutError,
                asyncio.TimeoutError, aiohttp.ClientConnectionError) as exc:
            if not keep_partial or expected is None or received >= expected:
                raise
            # Cut mid-body: hand over what arrived so a read resumes
            # from there; received < expected tells the handler.
            return MediaResponse(resp.status, found, body, received, expected,
                                 slow=isinstance(exc, asyncio.TimeoutError)
                                 and timed_out_early(received))
        return MediaResponse(resp.status, found, body, received,
                             expected if expected is not None else received)


def _inflation_cap(stored: int | None, header: str | None) -> int | None:
    """The most bytes a body served decompressed may have, from the stored
    size the caller knows, else the one the answer reports (None: unknown)."""
    if stored is None and header is not None and header.isascii() and header.isdigit():
        stored = int(header)
    return None if stored is None else stored * _MAX_INFLATION
