"""The GCS JSON API of one endpoint, as a client's requests reach it.

:class:`GcsService` is what the client's operations and its helpers
(:mod:`._published`, :mod:`._copy`, :mod:`._upload`, :mod:`._resumable`)
share: the endpoint (Google's, or an emulator's), the transport with the
credential that authenticates each request (:mod:`._auth`: Application
Default Credentials, a token or none); the objects' JSON API URLs; and
the two requests every write, copy and compose is checked with: an
object's metadata and its delete. :class:`~._client.AsyncClient` is the
storage protocol on it.

It also holds the user project, the project a requester-pays bucket's
requests bill: every JSON API request names it in its query
(``userProject``, as google-cloud-storage sends it), the part of the query
made once here (:attr:`GcsService._json_params`, the media URL's suffix),
and :class:`~._xml.XmlMultipart` sends it in the ``x-goog-user-project``
header, the XML API's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from urllib.parse import quote

from .._core.auth import Auth
from .._core.checks.arguments import Credentials
from .._core.errors import InvalidArgument, NotFound
from .._core.metrics import RequestStats
from .._core.records.types import COMPACT_JSON, ObjectInfo
from .._core.settings.config import ClientConfig
from .._core.storage.base import StoreBase
from .._net.failures import drain
from .._net.transport import Op, Transport
from ._auth import emulator_endpoint, local_endpoint, resolve_auth
from ._json import object_handler, quote_name

__all__ = ["DEFAULT_ENDPOINT", "GcsService", "user_project_of"]

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
# A project ID (my-project-123), a project number, or a domain-scoped ID
# (example.com:my-project): it goes into a query and a header as is.
_PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")


def user_project_of(what: str, user_project: object) -> str | None:
    """The user project a client bills, checked.

    Args:
        what: who asks, for the message (``AsyncClient``).
        user_project: the argument, or None.

    Returns:
        The project ID, or None for none.

    Raises:
        InvalidArgument: not a project ID (nor a project number).
    """
    if user_project is None:
        return None
    if not isinstance(user_project, str) or not _PROJECT.fullmatch(user_project):
        raise InvalidArgument(f"{what}: user_project must be the ID of the project to bill "
                              f"(such as 'my-project'), got {user_project!r:.80}")
    return user_project


class GcsService(StoreBase):
    """One GCS endpoint's JSON API: authenticated requests, object URLs,
    an object's metadata and its delete.

    Args:
        config: client settings (concurrency, timeouts, retries); None:
            the transport's, else the defaults.
        endpoint: API root; None: ``STORAGE_EMULATOR_HOST`` if set, else
            real GCS.
        credentials: as :class:`~._client.AsyncClient` takes them.
        transport: a ready transport (tests inject one), used instead of
            one authenticating with ``credentials``.
        user_project: the project requests bill (checked by
            :func:`user_project_of`), or None.
    """

    def __init__(self, config: ClientConfig | None, endpoint: str | None,
                 credentials: Credentials, transport: Transport | None,
                 user_project: str | None = None) -> None:
        env_endpoint = emulator_endpoint() if endpoint is None else None
        self.endpoint = endpoint or env_endpoint or DEFAULT_ENDPOINT
        # As google-cloud-storage: STORAGE_EMULATOR_HOST gets no credentials,
        # any other https endpoint (Google's, however spelled, regional,
        # mTLS, Private Service Connect) gets ADC; plain http and loopback
        # hosts are emulators.
        use_emulator = local_endpoint(endpoint) if endpoint is not None else (
            env_endpoint is not None)
        self.config = config or (transport.config if transport else ClientConfig())
        #: The project requests bill (a requester-pays bucket's payer), or None.
        self.user_project = user_project
        billing: dict[str, str] = {"userProject": user_project} if user_project else {}
        #: The query parameters every JSON API request carries.
        self._billing: Mapping[str, str] = MappingProxyType(billing)
        #: ... with ``prettyPrint=false``, for the requests that read a document.
        self._json_params: Mapping[str, str] = MappingProxyType({**COMPACT_JSON, **billing})
        self._billing_query = f"userProject={quote(user_project, safe='')}" if user_project \
            else ""
        # A media URL's query, made once: a read adds at most its generation.
        self._media_query = "?alt=media" + (
            f"&{self._billing_query}" if user_project else "")
        # An explicit user project wins over the credentials' quota project
        # (google-auth's rule): the requests name it themselves.
        auth: Auth = resolve_auth(credentials, use_emulator=use_emulator,
                                  timeouts=self.config.timeouts,
                                  quota_project=user_project is None)
        self._transport = transport or Transport(self.config, auth, endpoint=self.endpoint)

    @property
    def transport(self) -> Transport:
        """The transport (its ``stats`` count requests and retries)."""
        return self._transport

    @property
    def stats(self) -> RequestStats:
        """What this client's requests did: counts, retries by cause, bytes,
        and latency per operation (``stats.summary()`` for p50/p95/p99)."""
        return self._transport.stats

    def _json_url(self, bucket: str, name: str | None = None) -> str:
        base = f"{self.endpoint}/storage/v1/b/{bucket}/o"
        return base if name is None else f"{base}/{quote_name(name)}"

    def _billed(self, url: str) -> str:
        """``url`` (a resumable session's, as the server gave it) naming the
        user project: GCS's repeats the query the session was opened with,
        another server's may not."""
        if not self._billing_query or "userProject=" in url:
            return url
        return f"{url}{'&' if '?' in url else '?'}{self._billing_query}"

    # -- metadata -------------------------------------------------------------

    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        return await self._transport.request(
            Op("stat", bucket, name), "GET", self._json_url(bucket, name),
            object_handler(Op("stat", bucket, name)), params=self._json_params)

    # -- delete ---------------------------------------------------------------

    async def _delete(self, bucket: str, name: str, generation: int | None,
                      if_generation_match: int | None, missing_ok: bool) -> None:
        params = dict(self._billing)
        if generation is not None:
            params["generation"] = str(generation)
        if if_generation_match is not None:
            params["ifGenerationMatch"] = str(if_generation_match)

        try:
            # A plain JSON-API DELETE on our transport (once gcloud-aio-storage's
            # ``Storage.delete``, the last call through it): the same request,
            # and like every other one it runs through the transport's
            # session seam, so tests can answer it without sockets.
            await self._transport.request(Op("delete", bucket, name), "DELETE",
                                          self._json_url(bucket, name), drain, params=params,
                                          ok=(200, 204))
        except NotFound as exc:
            # A 404 to a retry: the attempt before it (whose answer was lost
            # or failed) may have deleted the object; gone is what was asked.
            if not missing_ok and exc.attempts < 2:
                raise
