"""The Azure store's transport: every request names the API version, a SAS
rides in the query string of requests to the endpoint's origin only, and no
error leaves with a credential in its message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .._core.auth import Auth
from .._core.config import ClientConfig
from .._core.errors import StorageError
from .._net.transport import MediaResponse, Op, Transport
from ._auth import Secrets, redact

__all__ = ["API_VERSION", "AzureTransport"]

#: The Blob service REST version every request asks for (Azurite 3.35
#: serves up to 2025-11-05).
API_VERSION = "2023-11-03"
T = TypeVar("T")


class AzureTransport(Transport):
    """:class:`~aioflux._net.transport.Transport` with Azure's request rules.

    Args:
        config: client configuration.
        auth: adds the ``Authorization`` header (a bearer token), or none.
        sas: the SAS query string of the moment, or None (no SAS).
        secrets: the credentials errors must not show.
        **kwargs: the other :class:`~aioflux._net.transport.Transport` arguments.
    """

    # A blob's bytes are read as stored: its Content-MD5 and aioflux's crc32c
    # are of them, and the service serves a gzip-coded blob coded whatever
    # the request accepts.
    stored_bytes = True

    def __init__(self, config: ClientConfig, auth: Auth, *, sas: Callable[[], str] | None,
                 secrets: Secrets, **kwargs: Any) -> None:
        super().__init__(config, auth, **kwargs)
        self._sas = sas
        self._secrets = secrets

    def _signed(self, url: str) -> str:
        if self._sas is None or not self.same_origin(url):
            return url
        return f"{url}{'&' if '?' in url else '?'}{self._sas()}"

    async def request(self, op: Op, method: str, url: str, handler: Any, *,
                      params: Mapping[str, str] | None = None,
                      headers: Mapping[str, str] | None = None,
                      data: bytes | bytearray | memoryview | None = None,
                      ok: tuple[int, ...] = (200,)) -> Any:
        """:meth:`Transport.request` with the version header and the SAS.

        Raises:
            StorageError: as :meth:`Transport.request`, credentials redacted.
        """
        try:
            return await super().request(op, method, self._signed(url), handler,
                                         params=params, headers=_versioned(headers),
                                         data=data, ok=ok)
        except StorageError as exc:
            raise redact(exc, self._secrets) from exc.__cause__

    async def get_media_once(self, op: Op, url: str, handler: Callable[[MediaResponse], T], *,
                             headers: Mapping[str, str] | None = None,
                             into: memoryview | None = None, limit: int | None = None,
                             keep_partial: bool = True) -> T:
        """:meth:`Transport.get_media_once` with the version header and the SAS.

        Raises:
            StorageError: as :meth:`Transport.get_media_once`, credentials redacted.
        """
        try:
            return await super().get_media_once(op, self._signed(url), handler,
                                                headers=_versioned(headers), into=into,
                                                limit=limit, keep_partial=keep_partial)
        except StorageError as exc:
            raise redact(exc, self._secrets) from exc.__cause__


def _versioned(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {"x-ms-version": API_VERSION, **(headers or {})}
