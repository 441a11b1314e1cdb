"""Azure credentials, from the Azure SDK's own code (the ``azure`` extra).

Nothing here signs by hand. An account key signs an account SAS with
``azure-storage-blob``'s public :func:`generate_account_sas` (blob
service; read, write, delete, list, add, create; one hour), kept and
renewed ten minutes before it expires by the wall clock (the service
checks its ``se`` against its own clock; a monotonic clock stops while
the machine sleeps or its VM is paused), and after a 403 that refused it:
a request pays a string lookup, not an HMAC. azure-core's Shared Key
policy lives in a private module of azure-storage-blob
(``_shared.authentication``) and signs every request (an HMAC over a
canonical string of headers): a public function and a
cached token are both steadier to depend on and cheaper. Measured here
(CPU time, CPython 3.11): signing one account SAS takes 48 us, once per
50 minutes; a request then pays 0.9 us (the origin check and the query
appended), a cached bearer token 0.6 us, where S3's SigV4 signer (awscrt)
takes 38 us a request. A SAS token given
is used as is. A bearer token comes from an azure-identity (or azure-core)
``TokenCredential`` or ``AsyncTokenCredential`` for the scope
``https://storage.azure.com/.default``, over HTTPS only.

A SAS travels in the query string (:mod:`._transport` appends it, to the
endpoint's origin only); a token in ``Authorization``. :func:`redact`
keeps each out of error messages, even where a hostile server echoes it.
"""

from __future__ import annotations

import datetime
import inspect
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from .._core.auth import AuthRequest, SharedCall
from .._core.errors import PermissionDenied, StorageError
from .._core.secrets import scrub
from ._xml import missing_extra

__all__ = ["SCOPE", "KeySas", "Secrets", "StaticSas", "TokenAuth", "load_blob_sas", "redact"]

#: The OAuth scope of Azure Storage.
SCOPE = "https://storage.azure.com/.default"
#: How long a SAS signed from the account key lives, and how long before its
#: end it is renewed (a request retried for minutes still carries a live one).
SAS_LIFETIME = 3600.0
SAS_RENEW_BEFORE = 600.0
#: A token is renewed this long before azure-identity says it expires.
TOKEN_RENEW_BEFORE = 300.0


def load_blob_sas() -> Any:
    """``azure.storage.blob``'s SAS functions, imported on first use.

    Raises:
        InvalidArgument: azure-storage-blob is not installed.
    """
    try:
        import azure.storage.blob as blob
    except ImportError as exc:
        raise missing_extra("azure-storage-blob", "signing SAS tokens with the account "
                                                  "key") from exc
    return blob


class Secrets(Protocol):
    """What :func:`redact` must keep out of a message."""

    def secrets(self) -> list[str]:
        """The credential strings in use (keys, SAS tokens, signatures, tokens)."""
        ...


def redact(exc: StorageError, source: Secrets) -> StorageError:
    """``exc`` with every credential of ``source`` (and anything shaped like
    a SAS signature or a bearer token) cut out of its message, in place.

    Args:
        exc: the error.
        source: the credentials in use.

    Returns:
        ``exc``.
    """
    message = str(exc)
    cleaned = scrub(message)
    for secret in source.secrets():
        if len(secret) >= 8:
            cleaned = cleaned.replace(secret, "<redacted>")
    if cleaned != message:
        exc.args = (cleaned,)
    return exc


def _signature(sas: str) -> list[str]:
    """A SAS token and its signature, raw and percent-decoded."""
    from urllib.parse import unquote

    sig = next((p[4:] for p in sas.split("&") if p.lower().startswith("sig=")), "")
    return [s for s in (sas, sig, unquote(sig)) if s]


class StaticSas:
    """A SAS token given as is (``?`` stripped); adds no header."""

    def __init__(self, token: str) -> None:
        self._token = token.lstrip("?")

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """No headers: the SAS goes in the query."""
        return {}

    def query(self) -> str:
        """The SAS query string."""
        return self._token

    def secrets(self) -> list[str]:
        """The token and its signature."""
        return _signature(self._token)

    def __repr__(self) -> str:
        return "StaticSas(<redacted>)"


class KeySas:
    """Account SAS tokens signed from the account key, renewed before expiry.

    Args:
        account: the storage account.
        key: its key (base64).

    Raises:
        InvalidArgument: azure-storage-blob is not installed.
    """

    def __init__(self, account: str, key: str) -> None:
        self._blob = load_blob_sas()
        self._account = account
        self._key = key
        self._lock = threading.Lock()
        self._token = ""
        # Wall-clock time (time.time()) to sign anew: SAS_RENEW_BEFORE before
        # the token's own expiry. Not time.monotonic(): it stands still
        # while the machine is suspended, and a SAS kept by it would have
        # expired on waking (every request 403 for up to 50 minutes).
        self._renew_at = 0.0

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """No headers: the SAS goes in the query."""
        return {}

    def query(self) -> str:
        """The current SAS query string (signed anew when it nears expiry)."""
        if time.time() < self._renew_at:
            return self._token
        with self._lock:  # the loops of several threads share one store
            if time.time() >= self._renew_at:
                expiry = _utc_in(SAS_LIFETIME)
                self._token = self._sign(expiry)
                self._renew_at = expiry.timestamp() - SAS_RENEW_BEFORE
        return self._token

    def renew(self, sent: str) -> bool:
        """The server refused the SAS ``sent`` (403): sign anew next time.

        Args:
            sent: the SAS query string the refused request carried.

        Returns:
            True: a request sent again carries a SAS signed after the refusal.
        """
        with self._lock:
            if sent == self._token:
                self._renew_at = 0.0
        return True

    def _sign(self, expiry: datetime.datetime) -> str:
        blob = self._blob
        try:
            return str(blob.generate_account_sas(
                self._account, self._key,
                resource_types=blob.ResourceTypes(service=True, container=True, object=True),
                permission=blob.AccountSasPermissions(read=True, write=True, delete=True,
                                                      list=True, add=True, create=True),
                expiry=expiry))
        except (ValueError, TypeError) as exc:  # binascii.Error is a ValueError
            # The SDK's message may quote the key: its class only.
            raise PermissionDenied(f"az: the account key of {self._account!r} cannot sign a "
                                   f"SAS ({type(exc).__name__}: it is not base64)",
                                   operation="sign", reason="InvalidKey") from None

    def source_sas(self, container: str, blob_name: str) -> str:
        """A read-only SAS for one blob, for 15 minutes: a copy's source
        URL carries it (and the copy keeps it in ``x-ms-copy-source``, so
        nothing broader)."""
        blob = self._blob
        return str(blob.generate_blob_sas(self._account, container, blob_name,
                                          account_key=self._key,
                                          permission=blob.BlobSasPermissions(read=True),
                                          expiry=_utc_in(900.0)))

    def secrets(self) -> list[str]:
        """The key, the current token and its signature."""
        return [self._key, *_signature(self._token)]

    def __repr__(self) -> str:
        return f"KeySas({self._account!r}, <redacted>)"


def _utc_in(seconds: float) -> datetime.datetime:
    # The clock query() compares the renewal time with.
    return datetime.datetime.fromtimestamp(time.time() + seconds, datetime.timezone.utc)


class TokenAuth:
    """Bearer tokens from a ``TokenCredential`` or ``AsyncTokenCredential``.

    A synchronous credential (``DefaultAzureCredential`` by default, which
    may run the Azure CLI or ask a metadata endpoint) is called in a
    thread of its own, once for all the requests that wait meanwhile; an
    asynchronous one is awaited. The token is kept until five minutes
    before its expiry, or until the server answers 401.

    Args:
        credential: the credential; None builds azure-identity's
            ``DefaultAzureCredential`` at the first request.

    Raises:
        InvalidArgument: no credential given and azure-identity is not installed.
    """

    def __init__(self, credential: Any = None) -> None:
        if credential is None:
            _load_identity()  # named now, not at the first request
        self._credential = credential
        self._token = ""
        self._expires = 0.0
        self._fetch = SharedCall(self._get_sync, name="aioflux-azure-token")

    def _get_sync(self) -> Any:
        credential = self._credential
        if credential is None:
            credential = self._credential = _load_identity().DefaultAzureCredential()
        return credential.get_token(SCOPE)

    async def _get(self) -> Any:
        getter = getattr(self._credential, "get_token", None)
        if getter is not None and inspect.iscoroutinefunction(getter):
            return await getter(SCOPE)
        return await self._fetch()

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """``Authorization: Bearer <token>``, and for a Copy Blob (a request
        with ``x-ms-copy-source``) ``x-ms-copy-source-authorization`` with
        the same token: added here, on each attempt, so that a copy sent
        again after a 401 authorizes its source with the renewed token.

        Raises:
            PermissionDenied: the credential found no token.
        """
        if time.time() >= self._expires - TOKEN_RENEW_BEFORE:
            try:
                token = await self._get()
            except StorageError:
                raise
            except Exception as exc:  # azure-identity's errors, of many kinds
                raise PermissionDenied(f"az: no Microsoft Entra ID token for {SCOPE} "
                                       f"({type(exc).__name__}); sign in (az login), set "
                                       "AZURE_CLIENT_ID and its secret or certificate, or "
                                       "give an account key or SAS",
                                       operation="authenticate",
                                       reason=type(exc).__name__) from None
            self._token, self._expires = str(token.token), float(token.expires_on)
        bearer = f"Bearer {self._token}"
        if "x-ms-copy-source" in request.headers:
            return {"Authorization": bearer, "x-ms-copy-source-authorization": bearer}
        return {"Authorization": bearer}

    def invalidate(self, sent: Mapping[str, str]) -> bool:
        """The server refused the token ``sent``: fetch another next time.

        Returns:
            True: the next request asks the credential again.
        """
        if sent.get("Authorization") == f"Bearer {self._token}":
            self._expires = 0.0
        return True

    def secrets(self) -> list[str]:
        """The current token."""
        return [self._token] if self._token else []

    def __repr__(self) -> str:
        return "TokenAuth(<redacted>)"


def _load_identity() -> Any:
    try:
        import azure.identity as identity
    except ImportError as exc:
        raise missing_extra("azure-identity", "Microsoft Entra ID tokens") from exc
    return identity
