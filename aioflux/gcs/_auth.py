"""GCS authentication: Application Default Credentials through google-auth.

google-auth's ``refresh`` does blocking HTTP, so it runs in a thread of its
own, never on the event loop; the token is cached until shortly before
expiry. One refresh serves every request that needs a token meanwhile, its
failure included: a burst of requests on a host without credentials probes
the metadata server once, not once per request.

The headers are the ones google-auth's ``credentials.apply`` would set: the
bearer token, and the credentials' quota project (``quota_project_id``: a
user's ADC from ``gcloud auth application-default login``, or
``GOOGLE_CLOUD_QUOTA_PROJECT`` which ADC applies) as
``x-goog-user-project``, unless the client names a user project of its own.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import ipaddress
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .._core.auth import AnonymousAuth, Auth, AuthRequest, SharedCall, StaticTokenAuth
from .._core.checks.arguments import endpoint_url
from .._core.errors import PermissionDenied, TransportError
from .._core.settings.config import Timeouts

__all__ = ["USER_PROJECT_HEADER", "GoogleAuth", "emulator_endpoint", "local_endpoint",
           "resolve_auth"]

SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
# The project a request bills and counts quota against: google-auth's header
# of a credential's quota project, and the XML API's of a requester-pays
# bucket's payer.
USER_PROJECT_HEADER = "x-goog-user-project"
# Refresh this long before the token expires, so a request that starts with a
# valid token does not reach the server with an expired one.
REFRESH_MARGIN = _dt.timedelta(minutes=5)
# A failed refresh is the answer for this long: requests that were queued
# behind the client's semaphore while it ran (more than max_concurrency in
# flight) fail with it instead of each starting another lookup.
FAILURE_HOLD = 2.0


class GoogleAuth:
    """google-auth credentials (ADC by default), refreshed off the loop.

    Pickles by its settings (DataLoader ``spawn`` workers): the credentials
    given, or none for ADC, which the worker then looks up itself.

    Args:
        credentials: a ``google.auth.credentials.Credentials``; ``None`` loads
            Application Default Credentials lazily on first use. Ones that
            require scopes and carry none (a service account's key loaded
            with ``from_service_account_file``) get the storage scope, as
            google-cloud-storage gives it.
        timeouts: bound each HTTP call of a lookup or refresh by
            ``connect`` and ``read_stall`` (google-auth's own default is
            120 s), and a request's wait for it by ``total`` if set.
        quota_project: send the credentials' quota project as
            ``x-goog-user-project``, as ``credentials.apply`` does; False
            where the client names its own user project (it wins).
    """

    def __init__(self, credentials: Any = None, *, timeouts: Timeouts | None = None,
                 quota_project: bool = True) -> None:
        self._given = credentials
        self._quota_project = quota_project
        if credentials is not None:
            # Google's token endpoint refuses a grant that asks for no scope
            # (invalid_scope): unscoped service account keys failed every
            # request. google-auth scopes only credentials that need it.
            import google.auth.credentials

            credentials = google.auth.credentials.with_scopes_if_required(  # type: ignore[no-untyped-call]
                credentials, list(SCOPES))
        self._credentials = credentials
        self._timeouts = timeouts or Timeouts()
        self._refresh = SharedCall(self._fresh_token, name="aioflux-gcs-token",
                                   hold=FAILURE_HOLD)
        # A token the server answered 401 to: refreshed before it is sent again.
        self._rejected: str | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"credentials": self._given, "timeouts": self._timeouts,
                "quota_project": self._quota_project}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["credentials"], timeouts=state["timeouts"],  # type: ignore[misc]
                      quota_project=state.get("quota_project", True))

    def _valid_token(self) -> str | None:
        creds = self._credentials
        if creds is None or not creds.valid or _expires_soon(creds.expiry):
            return None
        token = str(creds.token)
        return None if token == self._rejected else token

    def _fresh_token(self) -> str:
        """Look up or refresh the credentials (blocking: a thread's work)."""
        import google.auth
        import google.auth.exceptions

        try:
            request = _bounded_request(self._timeouts)
            if self._credentials is None:
                self._credentials, _ = google.auth.default(scopes=list(SCOPES), request=request)
            creds = self._credentials
            if not creds.valid or _expires_soon(creds.expiry) or \
                    str(creds.token) == self._rejected:
                creds.refresh(request)
        except google.auth.exceptions.GoogleAuthError as exc:
            # The message of google-auth errors names files and causes,
            # never the token itself.
            hint = ""
            if isinstance(exc, google.auth.exceptions.DefaultCredentialsError):
                hint = ("; for an emulator, pass credentials='anonymous' or set "
                        "STORAGE_EMULATOR_HOST")
            raise PermissionDenied(f"authenticate failed: {type(exc).__name__}: {exc}{hint}",
                                   operation="authenticate") from exc
        self._rejected = None
        return str(creds.token)

    async def _refreshed(self) -> str:
        total = self._timeouts.total
        if total is None:
            return await self._refresh()
        try:
            return await asyncio.wait_for(self._refresh(), total)
        except asyncio.TimeoutError:
            raise TransportError(f"authenticate: no token within Timeouts.total={total}s "
                                 "(token endpoint or metadata server slow)",
                                 operation="authenticate") from None

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """Return a Bearer header, refreshing the token in a thread if needed,
        and the credentials' quota project as ``x-goog-user-project`` (unless
        the client names its own user project).

        Raises:
            PermissionDenied: credentials could not be found or refreshed.
            TransportError: no token within ``Timeouts.total``.
        """
        token = self._valid_token()
        if token is None:
            token = await self._refreshed()
        headers = {"Authorization": f"Bearer {token}"}
        if self._quota_project:
            # Read each time: ADC is looked up at the first request, and a
            # refresh may hand over other credentials.
            quota = getattr(self._credentials, "quota_project_id", None)
            if quota:
                headers[USER_PROJECT_HEADER] = str(quota)
        return headers

    def invalidate(self, sent: Mapping[str, str]) -> bool:
        """The server answered 401 to a request sent with ``sent``: refresh
        its token before the next request (only if it is still the current
        one, so many such answers at once cause one refresh).

        Returns:
            True: a retry gets a refreshed token.
        """
        creds = self._credentials
        if creds is not None and sent.get("Authorization") == f"Bearer {creds.token}":
            self._rejected = str(creds.token)
        return True

    def __repr__(self) -> str:
        return "GoogleAuth(<credentials>)"


def _bounded_request(timeouts: Timeouts) -> Any:
    """google-auth's requests transport with the client's connect and read
    timeouts on every call that does not set its own (a metadata probe does)."""
    import google.auth.transport.requests

    class BoundedRequest(google.auth.transport.requests.Request):  # type: ignore[misc]
        def __call__(self, url: str, method: str = "GET", body: Any = None,
                     headers: Any = None, timeout: Any = None, **kwargs: Any) -> Any:
            if timeout is None:
                timeout = (timeouts.connect, timeouts.read_stall)
            return super().__call__(url, method, body, headers,  # type: ignore[no-untyped-call]
                                    timeout, **kwargs)

    return BoundedRequest()


def _expires_soon(expiry: _dt.datetime | None) -> bool:
    if expiry is None:
        return False
    # google-auth keeps naive UTC datetimes.
    now = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    return expiry - REFRESH_MARGIN <= now


def emulator_endpoint() -> str | None:
    """The emulator URL from ``STORAGE_EMULATOR_HOST``, or None.

    Returns:
        The URL (``host:port`` means ``http://host:port``, as for any
        endpoint: :func:`~aioflux._core.checks.arguments.endpoint_url`), or None.

    Raises:
        InvalidURL: the variable holds no endpoint (named in the message).
    """
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    return endpoint_url("STORAGE_EMULATOR_HOST", host) if host else None


def local_endpoint(endpoint: str) -> bool:
    """Whether ``endpoint`` is an emulator's by its URL: plain ``http://``,
    or ``https://`` on a loopback host (a local emulator or test server with
    TLS). Google serves every endpoint of its own (default, regional, mTLS,
    Private Service Connect) over https from a routable host.

    Args:
        endpoint: an http(s) URL (as ``endpoint_url`` returns it).

    Returns:
        True if no credentials are sent to it unless given explicitly.
    """
    parts = urlsplit(endpoint)
    if parts.scheme.lower() != "https":
        return True
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_auth(credentials: Any, *, use_emulator: bool,
                 timeouts: Timeouts | None = None, quota_project: bool = True) -> Auth:
    """Choose the auth for a client.

    Args:
        credentials: ``None`` (ADC, or anonymous against an emulator),
            ``"anonymous"``, a bearer-token string, an :class:`Auth`, or a
            google-auth credentials object.
        use_emulator: the endpoint is an emulator (no auth header is sent).
        timeouts: the client's, for the refreshes of google-auth credentials.
        quota_project: google-auth credentials send their quota project
            (False: the client names its own user project).

    Returns:
        An Auth implementation.
    """
    if credentials == "anonymous" or (credentials is None and use_emulator):
        return AnonymousAuth()
    if credentials is None:
        return GoogleAuth(timeouts=timeouts, quota_project=quota_project)
    if isinstance(credentials, str):
        return StaticTokenAuth(credentials)
    if isinstance(credentials, Auth) and not hasattr(credentials, "refresh"):
        return credentials
    return GoogleAuth(credentials, timeouts=timeouts, quota_project=quota_project)
