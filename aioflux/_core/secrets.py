"""Credentials cut out of text bound for an error message.

What reaches an error's text from outside may carry a credential: an
exception of aiohttp names the whole URL (a SAS signature, a resumable
upload's session id and a signed URL's signature ride in its query) or a
proxy's password; a server's error body may echo the request (a proxy's
error page, Azure's "string to sign") or a token. :func:`scrub` cuts each
such shape out and keeps hosts, paths and the rest; :func:`query_names`
shows a web object's name (its query included) with the query's values cut.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "query_names", "scrub"]

#: what replaces a secret
REDACTED = "<redacted>"

_URL_QUERY = re.compile(r"(://[^\s?#'\"<>]*)[?#](?!<redacted>)[^\s'\"<>]*")
_USERINFO = re.compile(r"(://)[^/\s@'\"<>]*@")
_PASSWORD = re.compile(r"(?i)(password=)(?:'[^']*'|\"[^\"]*\"|[^\s,)>]*)")
_SIG = re.compile(r"(?i)(sig(?:=|%3D))[^&\s\"'<>]+")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")
# A head echoed whole: "Authorization: AWS4-HMAC-SHA256 Credential=...".
_AUTHORIZATION = re.compile(r"(?i)((?:proxy-)?authorization\s*:\s*)[^\r\n]*")
# Which of them may be in a text at all (most texts have none).
_ANY = re.compile(r"(?i)://|password|sig(?:=|%3D)|bearer|authorization")


def scrub(text: str) -> str:
    """``text`` with what may be a credential cut out: every URL's query
    and userinfo, ``password=``, ``sig=`` and bearer token values, and an
    ``Authorization`` header's value.

    Args:
        text: an exception's text or a server's message.

    Returns:
        The text, host names, paths and the rest kept. Idempotent: what
        replaces a secret is left as it is by a second pass.
    """
    if not _ANY.search(text):
        return text
    text = _URL_QUERY.sub(rf"\1?{REDACTED}", text)
    text = _USERINFO.sub(r"\1", text)
    text = _PASSWORD.sub(rf"\1'{REDACTED}'", text)
    text = _SIG.sub(rf"\1{REDACTED}", text)
    text = _BEARER.sub(rf"\1{REDACTED}", text)
    return _AUTHORIZATION.sub(rf"\1{REDACTED}", text)


def query_names(name: str) -> str:
    """``name`` (a web object's path, its query included) with each value of
    its query cut: ``x.bin?X-Amz-Signature=<redacted>``. A presigned URL's
    signature and credential ride there; the parameters' names stay, to
    tell which URL failed, and a parameter without ``=`` (a bare token) is
    cut whole.

    Args:
        name: the path after the origin, as the URL wrote it.

    Returns:
        The path as written, then the query's parameter names.
    """
    path, mark, query = name.partition("?")
    if not mark:
        return name
    return f"{path}?{'&'.join(_parameter_name(part) for part in query.split('&'))}"


def _parameter_name(parameter: str) -> str:
    key, eq, _ = parameter.partition("=")
    return f"{key}={REDACTED}" if eq else REDACTED if parameter else ""
