"""Response heads and request headers of the lean HTTP/1.1 client.

A head is parsed as strictly as llhttp (aiohttp's parser): a status line
``HTTP/1.x DDD reason``, header names that are tokens, values without
control characters, one ASCII-digit ``Content-Length``. The checks are
C-level passes over the whole head (counts, ``bytes.translate``, one
regex), which cost less than checking every line in Python (see
:mod:`aioflux._net.http` for the measurements).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .._core.errors import InvalidArgument

__all__ = ["MalformedResponse", "check_header", "content_length", "parse_head"]

# RFC 9112 status line; the reason phrase may be empty or absent (llhttp).
_STATUS_LINE = re.compile(r"HTTP/1\.([01]) ([1-9][0-9]{2})(?: [^\x00-\x08\x0a-\x1f\x7f]*)?")
# Control characters a head must not hold anywhere (HTAB may; a CR or LF
# outside a CRLF line end is found by counting them).
_CONTROL_BYTES = bytes([*range(9), 11, 12, *range(14, 32), 127])
# A header line not starting with a token and a colon (also obsolete folding).
_BAD_LINE = re.compile(r"\r\n(?![!#$%&'*+.^_`|~0-9A-Za-z-]+:)")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class MalformedResponse(ConnectionError):
    """The response broke HTTP/1.1 framing; the connection is dropped.

    A ``ConnectionError``: the transport retries it as a ``TransportError``
    (a proxy or server that garbled one response may not garble the next).
    """


def parse_head(raw: bytes) -> tuple[int, dict[str, str], bool] | None:
    """Status, headers and keep-alive of a head; None for obsolete line
    folding, which a user agent may unfold (RFC 9112 5.2): aiohttp does.

    Args:
        raw: the head, status line to the last header line (no final CRLF).

    Returns:
        ``(status, lower-cased headers, keep_alive)``, or None (folding).

    Raises:
        MalformedResponse: the head breaks HTTP/1.1's rules.
    """
    # C-level passes over the whole head cost less than checking every line
    # and value in Python (see the module docstring).
    crlf = raw.count(b"\r\n")
    if (raw.count(b"\r") != crlf or raw.count(b"\n") != crlf
            or len(raw.translate(None, _CONTROL_BYTES)) != len(raw)):
        raise MalformedResponse("control character, bare CR or bare LF in the response head")
    text = raw.decode("latin-1")
    if "\r\n " in text or "\r\n\t" in text:
        return None
    bad = _BAD_LINE.search(text)
    if bad is not None:
        raise MalformedResponse(f"malformed header line at byte {bad.start()}")
    lines = text.split("\r\n")
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None:
        raise MalformedResponse(f"malformed status line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.lower()
        value = value.strip(" \t")
        if name in headers:
            if name == "content-length":
                # llhttp (aiohttp's parser) refuses any repeat, identical or not.
                raise MalformedResponse("repeated Content-Length")
            value = f"{headers[name]},{value}"
        headers[name] = value
    tokens = {t.strip(" \t") for t in headers.get("connection", "").lower().split(",")}
    # HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only when asked.
    keep_alive = "close" not in tokens and (status_line[1] == "1" or "keep-alive" in tokens)
    return int(status_line[2]), headers, keep_alive


def content_length(headers: Mapping[str, str]) -> int | None:
    """The declared body length, if any.

    Args:
        headers: the parsed head's headers.

    Returns:
        The length, or None without a ``Content-Length``.

    Raises:
        MalformedResponse: a value that is not a plain ASCII number.
    """
    value = headers.get("content-length")
    if value is None:
        return None
    # str.isdigit alone takes "²" and other Unicode digits int() refuses.
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise MalformedResponse(f"malformed Content-Length {value[:40]!r}")
    return int(value)


def check_header(name: str, value: str) -> None:
    """Refuse a header a request must not carry (it would split the request).

    Args:
        name: header name.
        value: header value.

    Raises:
        InvalidArgument: the name is not a token or the value holds a
            control character (CR, LF, NUL...; HTAB is allowed).
    """
    if not _TOKEN.fullmatch(name):
        raise InvalidArgument(f"header name {name[:40]!r} is not an HTTP token")
    if _CONTROL.search(value):
        raise InvalidArgument(f"header {name!r} contains a control character")
