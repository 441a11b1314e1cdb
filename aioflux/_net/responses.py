"""What the transport and the backends' handlers read of an HTTP response:
the part of aiohttp's ``ClientResponse`` a mock response also provides
(:class:`aioflux.testing.MockTransport`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from multidict import CIMultiDictProxy

__all__ = ["HttpBody", "HttpResponse"]


class HttpBody(Protocol):
    """The part of ``aiohttp.StreamReader`` the transport reads of a body."""

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all when -1)."""
        ...

    def iter_any(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive."""
        ...


class HttpResponse(Protocol):
    """What the transport and the backends' response handlers read of an answer.

    ``aiohttp.ClientResponse`` satisfies it, and so does the response of
    :class:`aioflux.testing.MockTransport`'s session, which is how the
    client's logic runs in tests without sockets: handlers use nothing
    else of a response. It has no ``read()`` of the whole body: handlers
    read one through :func:`~aioflux._net.failures.read_metadata` or
    :func:`~aioflux._net.failures.drain`, which cap it.
    """

    @property
    def status(self) -> int:
        """The HTTP status."""
        ...

    @property
    def reason(self) -> str | None:
        """The status line's reason phrase."""
        ...

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        """Response headers (case-insensitive, repeated ones kept)."""
        ...

    @property
    def content_length(self) -> int | None:
        """``Content-Length``, if sent."""
        ...

    @property
    def content(self) -> HttpBody:
        """The body, as a stream."""
        ...
