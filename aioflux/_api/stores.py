"""Which store serves a URL: the scheme picks the backend.

``gs://`` is the GCS client, ``s3://`` the S3 store, ``http://`` and
``https://`` the read-only web store, ``file://`` and plain paths the local
filesystem. A caller's client serves its own scheme; a URL
on another scheme gets the process-wide default store for it, built lazily
(and again after fork) from the environment, so ``STORAGE_EMULATOR_HOST``
or ``AWS_ENDPOINT_URL_S3``/``AWS_REGION`` set before first use apply. The
filesystem needs no settings, so a ``file://`` URL is served whatever client
was given; a ``gs://`` or ``s3://`` URL with a client of another store is an
error rather than a silently different endpoint.

A store is often built on a running event loop (the async URL API, a
checkpoint on the loop): an S3 store built there resolves the AWS credential
chain at its first request, in a thread, so a credential_process or an
instance-metadata lookup does not freeze the loop.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from typing import Any

from .._core.checks.arguments import Credentials
from .._core.errors import InvalidArgument, InvalidURL, PermissionDenied
from .._core.records.store_plugins import StoreBuilder, plugin_builder
from .._core.records.urls import StoreURL, parse_url
from .._core.settings.config import ClientConfig
from .._core.storage.protocol import ObjectStore
from .._net.failures import Op, auth_failure
from ..azure._store import AzureStore
from ..gcs._client import GcsStore
from ..hf import HfStore
from ..http._store import HttpStore
from ..local._store import LocalStore
from ..s3._store import S3Store
from .sync import Client
from .sync_store import SyncStore

__all__ = [
    "BACKENDS",
    "AnyClient",
    "AnyStore",
    "builder_of",
    "check_account",
    "default_store",
    "new_store",
    "resolve_store",
    "store_for_url",
]

# What public functions accept as ``client=``: a store, or any store's
# blocking face (``Client`` is GCS's). AnyClient: what the torch ones do.
AnyStore = ObjectStore | SyncStore[Any]
AnyClient = ObjectStore | Client

_lock = threading.Lock()
_defaults: dict[str, tuple[int, ObjectStore]] = {}


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def default_store(scheme: str) -> ObjectStore:
    """The process-wide store for ``scheme`` (built on first use).

    Args:
        scheme: ``gs``, ``s3``, ``az``, ``http``, ``https`` or ``file``.

    Returns:
        The store.

    Raises:
        InvalidArgument: no backend serves ``scheme`` (or, for ``s3``,
            botocore is not installed).
    """
    with _lock:
        known = _defaults.get(scheme)
        if known is None or known[0] != os.getpid():
            known = (os.getpid(), new_store(scheme))
            _defaults[scheme] = known
        return known[1]


def _gcs(scheme: str, config: ClientConfig | None, *, endpoint: str | None = None,
         credentials: Credentials = None, user_project: str | None = None) -> ObjectStore:
    return GcsStore(config, endpoint=endpoint, credentials=credentials,
                    user_project=user_project)


def _s3(scheme: str, config: ClientConfig | None, *, endpoint: str | None = None,
        region: str | None = None, requester_pays: bool | None = None) -> ObjectStore:
    return S3Store(config, endpoint=endpoint, region=region,
                   defer_credentials=_on_event_loop(), requester_pays=bool(requester_pays))


def _azure(scheme: str, config: ClientConfig | None, *,
           endpoint: str | None = None) -> ObjectStore:
    # The Azure settings of the environment (AZURE_STORAGE_CONNECTION_STRING...).
    return AzureStore(config, endpoint=endpoint)


def _local(scheme: str, config: ClientConfig | None, *, endpoint: str | None = None,
           credentials: Credentials = None, region: str | None = None) -> ObjectStore:
    # Files have no server, account or region: the settings a job gives all
    # its stores (an emulator's endpoint for its gs:// URLs) pass them by.
    del endpoint, credentials, region
    return LocalStore(config)


def _hub(scheme: str, config: ClientConfig | None, *,
         endpoint: str | None = None) -> ObjectStore:
    # Read-only; the endpoint and token from $HF_ENDPOINT and $HF_TOKEN.
    return HfStore(config, endpoint=endpoint)


def _web(scheme: str, config: ClientConfig | None) -> ObjectStore:
    # Read-only; a bearer token from $AIOFLUX_HTTP_TOKEN.
    return HttpStore(config, scheme=scheme)


# The one table of schemes and the stores that serve them: open, the
# iterables, the datasets, checkpoints, fsspec and the CLI all build
# through new_store. Another package's schemes come from its
# ``aioflux.stores`` entry point (_core/records/store_plugins.py).
BACKENDS: dict[str, StoreBuilder] = {
    "gs": _gcs, "s3": _s3, "az": _azure, "file": _local, "http": _web, "https": _web,
    "hf": _hub,
}

# What to say of a setting the scheme's store does not take.
_ELSEWHERE = {
    "user_project": "a GCS setting (on S3, requester_pays=True accepts a requester-pays "
                    "bucket's charges)",
    "requester_pays": "an S3 setting (on GCS, user_project= names the project to bill)",
    "region": "an S3 setting",
    "credentials": "not taken here: S3 takes the AWS chain (environment, profile, instance "
                   "metadata); Azure its settings (connection string, account key, SAS or "
                   "Entra ID); a web URL's bearer token comes from $AIOFLUX_HTTP_TOKEN",
    "endpoint": "not taken here: a web URL names its own server",
}


def builder_of(scheme: str) -> StoreBuilder:
    """The builder of ``scheme``'s stores: aioflux's own, else an installed
    package's (its ``aioflux.stores`` entry point, imported now).

    Args:
        scheme: a URL scheme.

    Returns:
        ``builder(scheme, config, **settings)``.

    Raises:
        InvalidArgument: no backend serves ``scheme``.
    """
    builder = BACKENDS.get(scheme) or plugin_builder(scheme)
    if builder is None:
        raise InvalidArgument(f"no storage backend serves {scheme}:// URLs in this version of "
                              "aioflux (gs://, s3://, az://, http(s)://, file:// and plain "
                              "paths do; a package can add one: the aioflux.stores entry "
                              "points)")
    return builder


def new_store(scheme: str, config: ClientConfig | None = None, *,
              endpoint: str | None = None, credentials: Credentials = None,
              region: str | None = None, user_project: str | None = None,
              requester_pays: bool | None = None) -> ObjectStore:
    """A new store for ``scheme``'s URLs, owned by the caller.

    Args:
        scheme: ``gs``, ``s3``, ``az``, ``http``, ``https``, ``hf``
            (read-only), ``file``, or one an installed package serves.
        config: its settings (default: ``ClientConfig()``).
        endpoint: the API root (``gs``: default the environment's; ``s3``: an
            S3-compatible store, default ``AWS_ENDPOINT_URL_S3`` or AWS;
            ``az``: default the account's).
        credentials: GCS credentials (``gs`` only; S3 takes the AWS chain).
        region: the S3 region (``s3`` only; default the environment's, else
            discovered per bucket).
        user_project: the project GCS requests bill, as requester-pays
            buckets require (``gs`` only).
        requester_pays: S3 requests accept requester-pays buckets' charges
            (``s3`` only; default no).

    Returns:
        The store.

    Raises:
        InvalidArgument: no backend serves ``scheme``, a setting its
            backend does not take, or (``s3``) botocore is not installed.
    """
    given = {key: value for key, value in (
        ("endpoint", endpoint), ("credentials", credentials), ("region", region),
        ("user_project", user_project), ("requester_pays", requester_pays))
        if value is not None}
    builder = builder_of(scheme)
    taken = inspect.signature(builder).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in taken.values()):
        for key in given:
            if key not in taken:
                raise InvalidArgument(f"new_store({scheme!r}): {key} is "
                                      f"{_ELSEWHERE.get(key, 'not taken here')}")
    store = builder(scheme, config, **given)
    if not isinstance(store, ObjectStore):
        raise InvalidArgument(f"the {scheme}:// backend built a {type(store).__name__}, "
                              "not a store (aioflux.ObjectStore)")
    return store


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def resolve_store(client: AnyStore | None, scheme: str = "gs") -> ObjectStore:
    """The store that serves ``scheme`` given the caller's ``client``.

    Args:
        client: a store (``GcsStore``, ``LocalStore``...), a blocking one
            (``SyncStore``, ``Client``), or None for the default store of ``scheme``.
        scheme: the URL's scheme.

    Returns:
        The store.

    Raises:
        InvalidArgument: ``client`` serves another scheme than a ``gs://``
            or ``s3://`` URL's.
    """
    store = client.aio if isinstance(client, SyncStore) else client
    if store is None:
        return default_store(scheme)
    if store.features.scheme == scheme:
        return store
    if scheme == "file":
        return default_store("file")
    raise InvalidArgument(f"the client given serves {store.features.scheme}:// URLs, "
                          f"not {scheme}://")


def check_account(url: str | os.PathLike[str], parsed: StoreURL, store: ObjectStore) -> None:
    """Refuse a URL naming another storage account than ``store`` serves
    (adlfs's ``abfs://container@account...``): served, a container of the
    same name in the store's account was read, and written.

    Raises:
        InvalidArgument: the accounts differ.
    """
    account = getattr(store, "account", "")
    if parsed.account and parsed.account != account:
        raise InvalidArgument(f"{url!s}: names the storage account {parsed.account!r}, "
                              f"the az:// store serves {account!r}; give a store "
                              f"(client=) of that account")


def store_for_url(url: str | os.PathLike[str], client: AnyStore | None = None, *,
                  require_object: bool = False,
                  writing: bool = False) -> tuple[ObjectStore, StoreURL]:
    """Parse ``url`` and pick its store.

    Args:
        url: ``gs://bucket/name``, ``s3://bucket/key``, ``file:///path`` or a
            path (``str`` or ``os.PathLike``).
        client: the caller's client, if any (see :func:`resolve_store`).
        require_object: the URL must name an object.
        writing: the URL names a file to write (implies ``require_object``):
            a name ending in ``/`` is refused.

    Returns:
        ``(store, parsed URL)``.

    Raises:
        InvalidURL: a malformed URL, or a folder's to write.
        InvalidArgument: no backend for its scheme, or a client of another one.
        PermissionDenied: the default ``s3://`` store, built off an event
            loop, found the AWS configuration broken (named with the URL).
    """
    parsed = parse_url(url, require_object=require_object or writing)
    if writing and parsed.name.endswith("/"):
        # A file's URL cannot end in "/" (on disk it is a directory). On GCS
        # and S3 the write would make a folder placeholder: an object that
        # listings, datasets and `cp -r` to files skip, so what was written
        # could not be found the way it was meant. Client.write still takes
        # such a name: it is the stores' API, which makes placeholders.
        raise InvalidURL(f"write {parsed}: the name ends in '/', a folder's; name an object "
                         f"in it (such as {parsed}data.bin)")
    try:
        store = resolve_store(client, parsed.scheme)
        check_account(url, parsed, store)
    except PermissionDenied as exc:
        # Off a loop the default S3 store resolves the credential chain as it
        # is built, before any request: its failure names the URL it was
        # built for, as a request's does (see auth_failure).
        op = Op("authenticate", parsed.bucket, parsed.name, parsed.scheme)
        raise auth_failure(exc, op) from exc
    return store, parsed
