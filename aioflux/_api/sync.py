"""``Client``: GCS's blocking store, ``SyncStore(GcsStore(...))`` built from settings.

A Client can be pickled (DataLoader workers under ``spawn``): it is rebuilt
from its settings on the other side, and after ``fork`` it rebuilds its
connections lazily, because the portal and the transport both check the
process id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._core.checks.arguments import (
    Credentials,
    check_credentials,
    check_instance,
    check_str,
    endpoint_url,
)
from .._core.concurrency.portal import close_soon, running_portal
from .._core.metrics import RequestStats
from .._core.records.types import LIST_FIELDS, ListPage, ObjectInfo
from .._core.settings.config import ClientConfig
from .._net.transport import Transport
from ..gcs._client import GcsStore
from .sync_store import SyncStore, blocking, mirror_methods

__all__ = ["Client"]


class Client(SyncStore[GcsStore]):
    """GCS's blocking store: ``SyncStore(GcsStore(...))``, from its settings.

    It has a blocking method for each of ``GcsStore``'s, with the same
    parameters (``aclose`` is ``close``).

    Args:
        config: client settings (concurrency, timeouts, retries).
        endpoint: API root (defaults to ``STORAGE_EMULATOR_HOST`` or GCS).
        credentials: ``None`` (Application Default Credentials, anonymous on
            an emulator), ``"anonymous"``, a bearer-token string, an ``Auth``
            or google-auth credentials (must pickle to cross to ``spawn``
            workers).
        project: project for bucket creation.
        user_project: the project every request bills, as requester-pays
            buckets require (see ``aioflux.GcsStore``).

    Raises:
        InvalidArgument: a setting of the wrong type, or a ``user_project``
            that is no project ID.
        InvalidURL: ``endpoint`` is not an http(s) URL.
    """

    def __init__(self, config: ClientConfig | None = None, *, endpoint: str | None = None,
                 credentials: Credentials = None, project: str = "aioflux",
                 user_project: str | None = None) -> None:
        check_instance("Client", "config", config, ClientConfig, optional=True)
        endpoint = endpoint_url("Client", endpoint)
        check_credentials("Client", credentials)
        check_str("Client", "project", project)
        super().__init__(GcsStore(config, endpoint=endpoint, credentials=credentials,
                                  project=project, user_project=user_project))
        # The project travels with a pickle: a spawned worker bills the same one.
        self._settings = {"config": config, "endpoint": endpoint, "credentials": credentials,
                          "project": project, "user_project": self.aio.user_project}

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._settings)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __del__(self) -> None:
        # A forgotten close() must not leak a connector warning at GC time:
        # close on the portal loop without waiting. The connections only:
        # ``aio`` may live on without this wrapper
        # (CheckpointManager(client=Client(...)) keeps it). Nothing when no
        # portal runs: at interpreter exit its shutdown closed them, and
        # module globals (``os``, which ``idle`` asks) may be None by now.
        aio = getattr(self, "aio", None)
        if aio is None:
            return
        try:
            if running_portal() is not None and not aio.transport.idle:
                close_soon(aio.transport)
        except Exception:  # interpreter shutdown: nothing left to close with
            return

    @property
    def transport(self) -> Transport:
        """The store's transport (its ``stats`` count requests and retries)."""
        return self.aio.transport

    @property
    def stats(self) -> RequestStats:
        """What this client's requests did: counts, retries by cause, bytes,
        and latency per operation (``stats.summary()`` for p50/p95/p99)."""
        return self.aio.stats

    # What GCS has beyond the protocol, declared so that it is typed.
    if TYPE_CHECKING:
        # mypy types an attribute its base declares by that declaration:
        # GCS's ``fields`` is spelt out for it.
        def list(self, bucket: str, prefix: str = "", *, delimiter: str | None = None,
                 start_offset: str | None = None, end_offset: str | None = None,
                 page_size: int = 1000,
                 fields: str | None = LIST_FIELDS) -> Iterator[ListPage]: ...

        def list_objects(self, bucket: str, prefix: str = "", *,
                         start_offset: str | None = None, end_offset: str | None = None,
                         fields: str | None = LIST_FIELDS) -> Iterator[ObjectInfo]: ...
    else:
        list = blocking(GcsStore.list)
        list_objects = blocking(GcsStore.list_objects)
    stream = blocking(GcsStore.stream)
    create_bucket = blocking(GcsStore.create_bucket)
    initiate_multipart = blocking(GcsStore.initiate_multipart)
    upload_part = blocking(GcsStore.upload_part)
    complete_multipart = blocking(GcsStore.complete_multipart)


mirror_methods(Client, GcsStore)
