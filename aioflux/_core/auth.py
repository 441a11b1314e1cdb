"""How a request is authenticated: the ``Auth`` protocol every backend uses.

Auth sees the request it authenticates (method, URL, query, headers and,
on demand, the payload's SHA-256), so a bearer token and a signing scheme
such as S3's SigV4 plug into the same place. The transport calls it once per
attempt, and only for URLs on the endpoint's origin.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["AnonymousAuth", "Auth", "AuthRequest", "StaticTokenAuth"]

Payload = bytes | bytearray | memoryview


@dataclass(frozen=True)
class AuthRequest:
    """The request an :class:`Auth` is asked to authenticate.

    Attributes:
        method: HTTP method (``GET``, ``PUT``...).
        url: absolute URL, without the ``params`` below.
        params: query parameters sent beside ``url``.
        headers: the request's own headers (before authentication).
        payload: the body, or None for none.
    """

    method: str
    url: str
    params: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    payload: Payload | None = field(default=None, repr=False)

    def payload_sha256(self) -> str:
        """Hex SHA-256 of the body: computed only when a signer asks (a
        bearer token never does, so large uploads pay nothing for it)."""
        return hashlib.sha256(self.payload if self.payload is not None else b"").hexdigest()


@runtime_checkable
class Auth(Protocol):
    """Supplies the headers that authenticate one request."""

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """Headers to add to ``request`` (empty for anonymous)."""
        ...


class AnonymousAuth:
    """No credentials: for emulators, public buckets and local files."""

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """Return no headers."""
        return {}

    def __repr__(self) -> str:
        return "AnonymousAuth()"


class StaticTokenAuth:
    """A fixed bearer token (tests, short jobs with a token from elsewhere)."""

    def __init__(self, token: str) -> None:
        self._header = {"Authorization": f"Bearer {token}"}

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """Return the Authorization header."""
        return dict(self._header)

    def __repr__(self) -> str:
        return "StaticTokenAuth(<redacted>)"
