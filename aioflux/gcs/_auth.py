"""GCS authentication: Application Default Credentials through google-auth.

google-auth's ``refresh`` does blocking HTTP, so it runs in a worker thread,
never on the event loop; the token is cached until shortly before expiry and
one refresh is shared by all concurrent requests.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import os
import threading
from typing import Any

from .._core.auth import AnonymousAuth, Auth, AuthRequest, StaticTokenAuth
from .._core.errors import PermissionDenied

__all__ = ["GoogleAuth", "emulator_endpoint", "resolve_auth"]

SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
# Refresh this long before the token expires, so a request that starts with a
# valid token does not reach the server with an expired one.
REFRESH_MARGIN = _dt.timedelta(minutes=5)


class GoogleAuth:
    """google-auth credentials (ADC by default), refreshed off the loop.

    Args:
        credentials: a ``google.auth.credentials.Credentials``; ``None`` loads
            Application Default Credentials lazily on first use.
    """

    def __init__(self, credentials: Any = None) -> None:
        self._credentials = credentials
        self._lock = threading.Lock()  # refreshes may come from several loops

    def _fresh_token(self) -> str:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests

        with self._lock:
            try:
                if self._credentials is None:
                    self._credentials, _ = google.auth.default(scopes=list(SCOPES))
                creds = self._credentials
                if not creds.valid or _expires_soon(creds.expiry):
                    creds.refresh(google.auth.transport.requests.Request())
            except google.auth.exceptions.GoogleAuthError as exc:
                # The message of google-auth errors names files and causes,
                # never the token itself.
                raise PermissionDenied(
                    f"authenticate failed: {type(exc).__name__}: {exc}", operation="authenticate"
                ) from exc
            return str(creds.token)

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """Return a Bearer header, refreshing the token in a thread if needed.

        Raises:
            PermissionDenied: credentials could not be found or refreshed.
        """
        creds = self._credentials
        if creds is not None and creds.valid and not _expires_soon(creds.expiry):
            return {"Authorization": f"Bearer {creds.token}"}
        token = await asyncio.to_thread(self._fresh_token)
        return {"Authorization": f"Bearer {token}"}

    def __repr__(self) -> str:
        return "GoogleAuth(<credentials>)"


def _expires_soon(expiry: _dt.datetime | None) -> bool:
    if expiry is None:
        return False
    # google-auth keeps naive UTC datetimes.
    now = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    return expiry - REFRESH_MARGIN <= now


def emulator_endpoint() -> str | None:
    """The emulator URL from ``STORAGE_EMULATOR_HOST``, with a scheme, or None."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if not host:
        return None
    return host if "://" in host else f"http://{host}"


def resolve_auth(credentials: Any, *, use_emulator: bool) -> Auth:
    """Choose the auth for a client.

    Args:
        credentials: ``None`` (ADC, or anonymous against an emulator),
            ``"anonymous"``, a bearer-token string, an :class:`Auth`, or a
            google-auth credentials object.
        use_emulator: the endpoint is an emulator (no auth header is sent).

    Returns:
        An Auth implementation.
    """
    if credentials == "anonymous" or (credentials is None and use_emulator):
        return AnonymousAuth()
    if credentials is None:
        return GoogleAuth()
    if isinstance(credentials, str):
        return StaticTokenAuth(credentials)
    if isinstance(credentials, Auth) and not hasattr(credentials, "refresh"):
        return credentials
    return GoogleAuth(credentials)
