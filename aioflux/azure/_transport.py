"""The Azure store's transport: every request names the API version, a SAS
rides in the query string of requests to the endpoint's origin only, and no
error leaves with a credential in its message.

A SAS the service refuses with a 403 naming its authentication
(``AuthenticationFailed``, ``AuthorizationFailure``, or a HEAD's bodiless
403) is renewed, where it can be (one signed from the account key), and
the request sent once more with the new one, as a bearer token refused with
a 401 is: a SAS expired by the service's clock (the machine slept, its
clock stepped) would otherwise fail every request until its renewal time.
Once only, so a wrong key costs one request more, not a loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from .._core.auth import Auth
from .._core.errors import PermissionDenied, StorageError
from .._core.settings.config import ClientConfig
from .._net.failures import auth_failure
from .._net.transport import MediaResponse, Op, Transport
from ._auth import Secrets, redact

__all__ = ["API_VERSION", "AzureTransport"]

#: The Blob service REST version every request asks for (Azurite 3.35
#: serves up to 2025-11-05).
API_VERSION = "2023-11-03"
T = TypeVar("T")
# The codes of a 403 that refused the credential itself ("" : a HEAD's
# answer has no body to name one). AuthorizationPermissionMismatch (a SAS
# without the permission) is not among them: a new one would not help.
_REFUSED = frozenset({"AuthenticationFailed", "AuthorizationFailure", ""})


class AzureTransport(Transport):
    """:class:`~aioflux._net.transport.Transport` with Azure's request rules.

    Args:
        config: client configuration.
        auth: adds the ``Authorization`` header (a bearer token), or none.
        sas: the SAS query string of the moment, or None (no SAS).
        secrets: the credentials errors must not show.
        renew: told the SAS a 403 refused (see the module doc); True if a
            request sent again would carry a new one. None: not renewable.
        **kwargs: the other :class:`~aioflux._net.transport.Transport` arguments.
    """

    # A blob's bytes are read as stored: its Content-MD5 and aioflux's crc32c
    # are of them, and the service serves a gzip-coded blob coded whatever
    # the request accepts.
    stored_bytes = True

    def __init__(self, config: ClientConfig, auth: Auth, *, sas: Callable[[], str] | None,
                 secrets: Secrets, renew: Callable[[str], bool] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(config, auth, **kwargs)
        self._sas = sas
        self._secrets = secrets
        self._renew = renew

    def _signed(self, url: str, sas: str) -> str:
        if not sas or not self.same_origin(url):
            return url
        return f"{url}{'&' if '?' in url else '?'}{sas}"

    def _current_sas(self, op: Op) -> str:
        """The SAS to send now ("" for none).

        Raises:
            StorageError: it cannot be signed (an account key that is not
                base64), as ``op``'s error: signed here, not in the auth's
                headers, the failure would otherwise name no call.
        """
        if self._sas is None:
            return ""
        try:
            return self._sas()
        except StorageError as exc:
            raise auth_failure(exc, op) from exc

    async def _sent(self, op: Op, call: Callable[[str], Awaitable[T]], url: str) -> T:
        """``call`` of ``url`` signed, once more with a renewed SAS after a
        403 that refused it; errors redacted."""
        try:
            sas = self._current_sas(op)
            try:
                return await call(self._signed(url, sas))
            except PermissionDenied as exc:
                if not (sas and self._renew is not None and exc.reason in _REFUSED
                        and self.same_origin(url) and self._renew(sas)):
                    raise
                self.stats.count_retry(type(exc).__name__)
            return await call(self._signed(url, self._current_sas(op)))
        except StorageError as exc:
            raise redact(exc, self._secrets) from exc.__cause__

    async def request(self, op: Op, method: str, url: str, handler: Any, *,
                      params: Mapping[str, str] | None = None,
                      headers: Mapping[str, str] | None = None,
                      data: bytes | bytearray | memoryview | None = None,
                      ok: tuple[int, ...] = (200,)) -> Any:
        """:meth:`Transport.request` with the version header and the SAS.

        Raises:
            StorageError: as :meth:`Transport.request`, credentials redacted.
        """
        versioned = _versioned(headers)
        return await self._sent(
            op, lambda signed: super(AzureTransport, self).request(
                op, method, signed, handler, params=params, headers=versioned, data=data,
                ok=ok), url)

    async def get_media_once(self, op: Op, url: str, handler: Callable[[MediaResponse], T], *,
                             headers: Mapping[str, str] | None = None,
                             into: memoryview | None = None, limit: int | None = None,
                             keep_partial: bool = True, summed: bool = False) -> T:
        """:meth:`Transport.get_media_once` with the version header and the SAS.

        Raises:
            StorageError: as :meth:`Transport.get_media_once`, credentials redacted.
        """
        versioned = _versioned(headers)
        return await self._sent(
            op, lambda signed: super(AzureTransport, self).get_media_once(
                op, signed, handler, headers=versioned, into=into, limit=limit,
                keep_partial=keep_partial, summed=summed), url)


def _versioned(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {"x-ms-version": API_VERSION, **(headers or {})}
