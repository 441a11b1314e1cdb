"""``GcsStore`` (``AsyncClient``): the GCS backend (JSON API, XML multipart, resumable uploads).

:class:`~._service.GcsService`, which the client builds on, holds the
endpoint and the authenticated transport with the objects' URLs, their
metadata and their delete. Listings are :mod:`._listing`'s; writes and
composes :mod:`._write`'s, copies :mod:`._copy`'s, streaming uploads
:mod:`._upload`'s.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

from .._core.checks.arguments import (
    Credentials,
    check_credentials,
    check_instance,
    check_str,
    endpoint_url,
)
from .._core.errors import InvalidURL
from .._core.records.types import ListPage, ObjectInfo
from .._core.records.urls import validate_bucket
from .._core.settings.config import ClientConfig
from .._core.storage.protocol import (
    Fetched,
    SourceSpec,
    StoreFeatures,
    arguments_state,
    from_arguments,
)
from .._engines.compose import MAX_COMPOSE_SOURCES, delete_leftovers
from .._engines.store_stream import StreamingStore
from .._net.checked_reads import read_media
from .._net.failures import drain
from .._net.transport import Op, Transport
from ._copy import rewrite_object
from ._listing import list_pages
from ._resumable import CHUNK_GRANULARITY
from ._service import GcsService, user_project_of
from ._upload import GcsUpload
from ._write import compose_object, write_object
from ._xml import MAX_PARTS, MIN_PART_SIZE, XmlMultipart
from ._xml_calls import XmlMultipartCalls

__all__ = ["AsyncClient", "FEATURES", "GcsStore"]

FEATURES = StoreFeatures(scheme="gs", compose=MAX_COMPOSE_SOURCES, end_offset=True,
                         multipart=True, min_part_size=MIN_PART_SIZE,
                         part_granularity=CHUNK_GRANULARITY, max_parts=MAX_PARTS)


class GcsStore(GcsService, XmlMultipartCalls, StreamingStore):
    """The GCS store (``gs://``), asynchronous. One instance can serve many
    concurrent tasks; ``AsyncClient`` is another name for it, kept for good.

    Every request goes through one semaphore of ``config.max_concurrency``
    permits and is retried per ``config.retry``. It pickles as its arguments,
    ``credentials`` included (treat the pickle like the key), not ``transport``.

    Args:
        config: client settings (concurrency, timeouts, retries).
        endpoint: API root, e.g. ``http://127.0.0.1:4443`` (or
            ``127.0.0.1:4443``, as ``STORAGE_EMULATOR_HOST`` takes it) for
            an emulator. Defaults to ``STORAGE_EMULATOR_HOST`` if set, else
            real GCS.
        credentials: ``None``: Application Default Credentials, except for
            an emulator (``STORAGE_EMULATOR_HOST``, an ``http://`` endpoint,
            or an ``https://`` one on a loopback host), which gets none;
            ``"anonymous"``, a bearer token string, an ``Auth`` or a
            google-auth credentials object (one that requires scopes and
            has none, as a service account key loads, gets the storage scope).
        transport: a ready ``Transport`` (tests inject one); overrides
            ``config`` and ``credentials``.
        project: project for bucket creation.
        user_project: the project every request bills, as requester-pays
            buckets require (``userProject`` on JSON API requests,
            ``x-goog-user-project`` on XML API ones). None: google-auth
            credentials send their quota project (a user's ADC, or
            ``GOOGLE_CLOUD_QUOTA_PROJECT`` with Application Default
            Credentials) as ``x-goog-user-project``; one given overrides it.

    Raises:
        InvalidArgument: a setting of the wrong type, or a ``user_project``
            that is no project ID.
        InvalidURL: ``endpoint`` is not an http(s) URL, or carries
            ``user:password@``.
    """

    _kind = "GCS"
    features = FEATURES
    __getstate__ = arguments_state
    __setstate__ = from_arguments

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        endpoint: str | None = None,
        credentials: Credentials = None,
        transport: Transport | None = None,
        project: str = "aioflux",
        user_project: str | None = None,
    ) -> None:
        check_instance("GcsStore", "config", config, ClientConfig, optional=True)
        endpoint = endpoint_url("GcsStore", endpoint)
        check_credentials("GcsStore", credentials)
        check_str("GcsStore", "project", project)
        user_project = user_project_of("GcsStore", user_project)
        super().__init__(config, endpoint, credentials, transport, user_project)
        # A transport belongs to this process (its sessions, its loops).
        self._arguments = {"config": self.config, "endpoint": endpoint,
                           "credentials": credentials, "project": project,
                           "user_project": user_project}
        self.project = project
        self._xml = XmlMultipart(self._transport, self.endpoint, user_project)

    async def aclose(self) -> None:
        """Close the client: its connections of the current event loop now,
        and for good: a later call raises instead of reopening them
        (connections nothing would close). Closing again does nothing.

        Raises:
            InvalidArgument: (from later calls) the client is closed.
        """
        if not self._transport.closed:
            await delete_leftovers(self)  # the exit clean-up cannot use a closed client
        await self._transport.aclose(owner="client")

    # -- listing ------------------------------------------------------------------

    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None, page_size: int,
               fields: str | None) -> AsyncIterator[ListPage]:
        # The JSON API's ``fields`` selector: LIST_FIELDS unless asked.
        return list_pages(self._transport, self._json_url(bucket), bucket, prefix, delimiter,
                          start_offset, end_offset, page_size, fields, self._json_params)

    # -- reads ----------------------------------------------------------------

    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        # The query goes into the URL string: yarl's extend_query costs ~5%
        # of a small read's client CPU. Made once: "?alt=media" and the
        # user project, if any.
        url = self._json_url(bucket, name) + self._media_query
        if generation is not None:
            url += f"&generation={generation}"
        return await read_media(self._transport, Op("read", bucket, name), url, start=start,
                                end=end, into=into, size=size, crc=crc,
                                verify=self.config.verify_crc32c, want_crc=want_crc,
                                version=generation)

    # -- writes ---------------------------------------------------------------

    async def _write(self, bucket: str, name: str, data: memoryview, content_type: str,
                     if_generation_match: int | None, metadata: dict[str, str] | None,
                     resumable: bool | None) -> ObjectInfo:
        # A single or resumable upload (by size: SIMPLE_UPLOAD_LIMIT), its
        # crc32c checked by the server and the result checked here.
        return await write_object(self, bucket, name, data, content_type, if_generation_match,
                                  metadata, resumable)

    def _start_upload(self, bucket: str, name: str, content_type: str, part_size: int,
                      metadata: dict[str, str] | None,
                      if_generation_match: int | None) -> GcsUpload:
        # XML multipart, or a resumable session where the server has none
        # or a precondition is set (XML multipart uploads take none).
        return GcsUpload(self, bucket, name, content_type, part_size, metadata,
                         if_generation_match)

    async def _compose(self, bucket: str, destination: str, sources: Sequence[SourceSpec],
                       if_generation_match: int | None, content_type: str) -> ObjectInfo:
        # A known source generation becomes an ifGenerationMatch precondition.
        return await compose_object(self, bucket, destination, sources, if_generation_match,
                                    content_type)

    async def _copy(self, bucket: str, name: str, dest_bucket: str,
                    dest_name: str) -> ObjectInfo:
        # JSON rewriteTo: no bytes pass through us.
        return await rewrite_object(self, bucket, name, dest_bucket, dest_name)

    # -- buckets --------------------------------------------------------------

    async def create_bucket(self, bucket: str) -> None:
        """Create a bucket in ``self.project``.

        Args:
            bucket: bucket name.

        Raises:
            Conflict: it exists already.
            StorageError: any other failure.
        """
        try:
            validate_bucket(bucket)
        except InvalidURL as exc:
            raise InvalidURL(f"create_bucket: {exc}") from None

        await self._transport.request(
            Op("create_bucket", bucket), "POST", f"{self.endpoint}/storage/v1/b", drain,
            params={"project": self.project, **self._billing},
            headers={"Content-Type": "application/json"},
            data=json.dumps({"name": bucket}).encode())


# The name from before the other stores: kept for good (too much code uses it).
AsyncClient = GcsStore
