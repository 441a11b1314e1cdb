"""Helpers shared by CLI commands: stores, argument types, output,
and the URL rule every command follows.

A URL is ``gs://bucket/name``, ``s3://bucket/key``, ``az://container/blob``,
``http(s)://host/path`` (a web server's file: read only, no listing, so no
folders), ``file:///path`` or a plain path (the local filesystem, the same
store as ``file://``); its scheme
picks the store (:func:`aioflux._api.stores.store_for_url`). ``--endpoint``
is the GCS API root; S3-compatible stores take ``--s3-endpoint`` (default
``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``, else AWS) and
``--region`` (default the AWS environment's or profile's, else discovered
per bucket). Requester-pays buckets take ``--user-project`` (the project
``gs://`` requests bill) and ``--requester-pays`` (``s3://`` requests
accept the charges).

The URL rule (``gcloud storage`` / ``gsutil``): ``gs://bucket/a`` names the
object ``a`` and the "folder" ``a/`` (every object whose name starts with
``a/``), never ``a2`` or ``acopy/x``. ``gs://bucket/a/`` names only the
folder, and ``gs://bucket`` the whole bucket. On the filesystem ``dir``
names the file ``dir`` or everything under the directory ``dir/``.

A symbolic link to a directory that a listing meets is not walked through.
One a URL names is followed by the commands that only read (``ls``, ``du``,
``cp -r`` from it: a dataset is often a link), but never by ``rm``
(:func:`linked_directory`): ``rm -r runs`` does not reach the files of
``runs/latest -> runs/2024-06-01`` through the link, so ``rm -r
runs/latest`` must not either. As GNU ``rm``, ``rm [-r] link`` removes the
link itself, and ``rm -r link/`` is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from .._api.stores import BACKENDS, builder_of, new_store, store_for_url
from .._api.sync import Client
from .._core.concurrency.portal import get_portal
from .._core.errors import InvalidArgument, NotFound
from .._core.metrics import RequestStats
from .._core.records.store_plugins import plugin_scheme
from .._core.records.types import ObjectInfo
from .._core.records.urls import AZURE_ALIASES, WEB_SCHEMES, StoreURL, folder_prefix, parse_url
from .._core.settings.config import DEFAULT_MAX_CONCURRENCY, ClientConfig
from .._core.storage.protocol import ObjectStore
from ..gcs._service import user_project_of
from ..local._files import path_of
from ..s3._endpoints import check_region

__all__ = ["SERVED_SCHEMES", "Stores", "add_client_arguments", "emit_json",
           "endpoint_arg", "first_under", "folder_not_object", "gs_url_arg", "has_folders", "human",
           "int_at_least", "is_folder", "linked_directory", "list_named", "nothing_matches",
           "portal_store", "region_arg", "require_match", "scheme_of", "url_arg",
           "user_project_arg"]

# Schemes with a backend in this version (aioflux._api.stores builds one for
# each): every one of SCHEMES.
# new_store's table of schemes, and adlfs's names of Azure's.
SERVED_SCHEMES = (*BACKENDS, *AZURE_ALIASES)
_USE = "use gs://, s3://, az://, http(s):// (read only), file:// or a local path"

# "s3://x", "https://x": a URL with a scheme, as opposed to a local path.
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def scheme_of(value: str) -> str | None:
    """The URL scheme of ``value`` (``"gs"``, ``"s3"``), or None for a local path."""
    match = _SCHEME_RE.match(value)
    return match.group(1).lower() if match else None


def int_at_least(low: int) -> Callable[[str], int]:
    """argparse type: an integer >= ``low`` (anything else is a usage error, exit 2).

    Args:
        low: the smallest accepted value.

    Returns:
        The converter.
    """

    def convert(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if number < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {number}")
        return number

    return convert


def endpoint_arg(value: str) -> str:
    """argparse type for ``--endpoint``: the same forms ``STORAGE_EMULATOR_HOST``
    takes (``host:port`` means ``http://host:port``).

    Raises:
        argparse.ArgumentTypeError: not an http(s) URL with a host.
    """
    url = value.strip() if "://" in value else f"http://{value.strip()}"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid endpoint {value!r}: {exc}") from None
    host = parts.hostname or ""
    # A bare word is not a host anyone means ("notaurl"): require a dotted
    # name, an IP literal, localhost, or an explicit port.
    plausible = "." in host or ":" in host or host == "localhost" or port is not None
    if parts.scheme not in ("http", "https") or not host or not plausible \
            or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(
            f"invalid endpoint {value!r}: expected http(s)://host[:port] or host:port")
    return url.rstrip("/")


def region_arg(value: str) -> str:
    """argparse type for ``--region``: a region name (``us-east-1``); a
    typo is a usage error (exit 2), as a bad ``--endpoint`` is.

    Raises:
        argparse.ArgumentTypeError: not a region name.
    """
    return _usage_checked(lambda: check_region("region", value), value)


def user_project_arg(value: str) -> str:
    """argparse type for ``--user-project``: a project ID; a typo is a
    usage error (exit 2), as a bad ``--endpoint`` is.

    Raises:
        argparse.ArgumentTypeError: not a project ID.
    """
    return _usage_checked(lambda: user_project_of("--user-project", value), value)


def _usage_checked(check: Callable[[], object], value: str) -> str:
    """``value``, once ``check()`` passes; its InvalidArgument is a usage error."""
    try:
        check()
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags every storage command takes.

    Args:
        parser: the subcommand parser.
    """
    parser.add_argument("--endpoint", type=endpoint_arg, metavar="URL",
                        help="API root for gs:// URLs, e.g. http://127.0.0.1:9023 or "
                             "127.0.0.1:9023 (default: STORAGE_EMULATOR_HOST, else GCS)")
    parser.add_argument("--s3-endpoint", type=endpoint_arg, metavar="URL",
                        help="API root for s3:// URLs of an S3-compatible store (MinIO, R2, "
                             "Ceph), e.g. http://127.0.0.1:9000 (default: AWS_ENDPOINT_URL_S3, "
                             "then AWS_ENDPOINT_URL, else AWS)")
    parser.add_argument("--region", type=region_arg, metavar="REGION",
                        help="AWS region of s3:// buckets (default: AWS_REGION, "
                             "AWS_DEFAULT_REGION or the profile's, else asked of the bucket)")
    parser.add_argument("--user-project", type=user_project_arg, metavar="PROJECT",
                        help="Google Cloud project that gs:// requests bill, as requester-pays "
                             "buckets require (default: none)")
    parser.add_argument("--requester-pays", action="store_true",
                        help="accept the charges of requester-pays s3:// buckets "
                             "(x-amz-request-payer)")
    parser.add_argument("--concurrency", type=int_at_least(1), default=DEFAULT_MAX_CONCURRENCY,
                        help=f"requests (or file operations) in flight (default "
                             f"{DEFAULT_MAX_CONCURRENCY})")


def _config(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(max_concurrency=args.concurrency)


def _own_store(args: argparse.Namespace, scheme: str) -> ObjectStore | None:
    """The store the common flags make for ``scheme`` (None: no backend, so
    that :func:`store_for_url` names what is missing)."""
    try:
        builder_of(scheme)
    except InvalidArgument:
        return None
    # Which flags are which scheme's: the stores themselves are new_store's.
    settings: dict[str, Any] = {}
    if scheme == "gs":
        settings = {"endpoint": args.endpoint, "user_project": args.user_project}
    elif scheme == "s3":
        settings = {"endpoint": args.s3_endpoint, "region": args.region,
                    "requester_pays": args.requester_pays or None}
    return new_store(scheme, _config(args), **settings)


class Stores:
    """The stores a command's URLs are on, one per scheme, built from the
    common flags when a URL first needs one (``ls /tmp`` never builds a GCS
    client). Use it as an async context manager on the command's event loop.

    Args:
        args: parsed arguments (``--endpoint``, ``--concurrency``).
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._made: dict[str, ObjectStore] = {}

    def __call__(self, url: StoreURL) -> ObjectStore:
        """The store serving ``url``.

        Args:
            url: a parsed URL.

        Returns:
            The store.

        Raises:
            InvalidArgument: no backend serves its scheme.
        """
        store = self._made.get(url.scheme)
        if store is None:
            store, _ = store_for_url(str(url), _own_store(self._args, url.scheme))
            self._made[url.scheme] = store
        return store

    def stats(self) -> list[RequestStats]:
        """The request counters of every store built so far."""
        counters = (getattr(store, "stats", None) for store in self._made.values())
        return [c for c in counters if isinstance(c, RequestStats)]

    async def __aenter__(self) -> Stores:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for store in self._made.values():
            await store.aclose()


@contextlib.contextmanager
def portal_store(args: argparse.Namespace, url: StoreURL) -> Iterator[ObjectStore]:
    """The store serving ``url`` for blocking engines that drive it on the
    portal loop (``aioflux.open``, ``CheckpointStore``); closed on exit.

    Args:
        args: parsed arguments.
        url: a parsed URL.

    Yields:
        The store.
    """
    if url.scheme == "gs":
        with Client(_config(args), endpoint=args.endpoint,
                    user_project=args.user_project) as client:
            yield store_for_url(str(url), client)[0]
        return
    store = store_for_url(str(url), _own_store(args, url.scheme))[0]
    try:
        yield store
    finally:
        # Its connections live on the portal loop, where it was driven.
        get_portal().call(store.aclose())


def url_arg(value: str) -> StoreURL:
    """argparse type: a URL of a store this version serves (``gs://``,
    ``s3://``, ``az://``, ``http(s)://``, ``file://`` or a local path);
    anything else is a usage error
    (exit 2)."""
    scheme = scheme_of(value)
    if scheme is not None and scheme not in SERVED_SCHEMES and not plugin_scheme(scheme):
        raise argparse.ArgumentTypeError(f"{value!r}: unknown URL scheme {scheme}:// ({_USE})")
    try:
        return parse_url(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def gs_url_arg(value: str) -> StoreURL:
    """argparse type for commands that run only against GCS: a ``gs://`` URL."""
    if scheme_of(value) != "gs":
        raise argparse.ArgumentTypeError(f"expected a gs:// URL, got {value!r}")
    return url_arg(value)


def linked_directory(url: StoreURL) -> str | None:
    """The directory a symbolic link named by ``url`` points to: a file
    URL whose path, without its trailing ``/``, is such a link.

    Args:
        url: a parsed URL.

    Returns:
        The link's resolved target, or None (not a file URL, or no link to
        a directory).
    """
    if url.scheme != "file":
        return None
    path = path_of(url.bucket, url.name.rstrip("/"))
    return os.path.realpath(path) if os.path.islink(path) and os.path.isdir(path) else None


def has_folders(url: StoreURL) -> bool:
    """Whether ``url``'s store has folders, which a listing finds: a web
    server has no listing, so an ``http(s)://`` URL names one object or
    nothing, and its 404 is the answer (a listing asked whether a missing
    object was a folder: "a web server has no listing", for a typo).

    Args:
        url: a parsed URL.

    Returns:
        False for a web server's URL.
    """
    return url.scheme not in WEB_SCHEMES


async def list_named(store: ObjectStore, url: StoreURL, *,
                     leave_out: str | None = None) -> AsyncIterator[ObjectInfo]:
    """Every object ``url`` names under the URL rule: the object ``name``
    itself (unless the name ends in ``/``) and everything under ``name/``.

    Args:
        store: the store of ``url``.
        url: the URL.
        leave_out: a folder (ending in ``/``) under ``name/`` whose objects
            are left out.

    Yields:
        ObjectInfo, the exact object first, then the folder in name order.
    """
    bucket, name = url
    if name and not name.endswith("/") and not has_folders(url):
        yield await store.stat(bucket, name)
        return
    if name and not name.endswith("/"):
        # A listing of prefix "a" would also return "a2" and "acopy/x": look
        # up the exact name, then list the folder.
        try:
            yield await store.stat(bucket, name)
        except NotFound:
            pass  # no such object (a missing bucket fails the listing below)
    # What is left out is skipped here, not listed around with offsets: a
    # directory bucket (S3 Express) lists in no order, and one that stopped
    # at an end offset would have missed the names after it.
    async for obj in store.list_objects(bucket, folder_prefix(name)):
        if leave_out is None or not obj.name.startswith(leave_out):
            yield obj


async def first_under(store: ObjectStore, bucket: str, prefix: str, *,
                      but_placeholder: bool = False) -> ObjectInfo | None:
    """The first object whose name starts with ``prefix``, from a listing of
    pages of one (or two): whether a folder holds anything, without listing it.

    Args:
        store: the store.
        bucket: the bucket.
        prefix: a name prefix (a folder's ends in ``/``).
        but_placeholder: the object named ``prefix`` itself (a folder's
            placeholder, as consoles create "New folder") does not count.

    Returns:
        The object, or None when there is none.

    Raises:
        NotFound: no such bucket.
    """
    pages = store.list(bucket, prefix, page_size=2 if but_placeholder else 1)
    try:
        async for page in pages:
            # A page may come empty with a token (GCS ends one on a time limit).
            for obj in page.objects:
                if not (but_placeholder and obj.name == prefix):
                    return obj
        return None
    finally:
        close = getattr(pages, "aclose", None)
        if close is not None:
            await close()


async def is_folder(store: ObjectStore, url: StoreURL) -> bool:
    """Whether ``url``, which names no object, names a folder: a local
    directory (an empty one too, as for GNU ``rm``), or on a store objects
    under ``name/``.

    Args:
        store: the store of ``url``.
        url: a URL naming an object (no trailing ``/``).

    Returns:
        True if it is a folder; False where nothing is there, the bucket
        included, and on a web server.
    """
    if not has_folders(url):
        return False
    if url.scheme == "file":
        return os.path.isdir(path_of(url.bucket, url.name))
    try:
        return await first_under(store, url.bucket, folder_prefix(url.name)) is not None
    except NotFound:
        return False  # no bucket: the command's own error says so


def folder_not_object(op: str, url: StoreURL, hint: str) -> NotFound:
    """The error of a command that takes one object given a folder, as GNU
    ``rm`` and ``cat`` say "Is a directory": the 404 alone ("No such
    object") hid that the name was right and only ``-r`` was missing.

    Args:
        op: the command (``rm``, ``cat``, ``stat``).
        url: the folder's URL.
        hint: what to do instead.

    Returns:
        The NotFound to raise, naming the URL's bucket and name.
    """
    return NotFound(f"{op} {url}: it is a folder, not an object: {hint}", operation=op,
                    bucket=url.bucket, name=url.name)


def nothing_matches(op: str, url: StoreURL) -> NotFound:
    """The error of a URL that names no object and no folder holding one
    (``gcloud storage``: "One or more URLs matched no objects", exit 1).

    Args:
        op: the command (``ls``, ``du``, ``rm``, ``cp``).
        url: the URL.

    Returns:
        The NotFound to raise, naming the URL's bucket and name.
    """
    bucket, name = url
    folder = f"no folder {folder_prefix(name)!r}"
    what = ("no object in the bucket" if not name else folder if name.endswith("/")
            else f"no object {name!r} and {folder}")
    return NotFound(f"{op} {url}: nothing matches ({what})", operation=op, bucket=bucket,
                    name=name)


def require_match(op: str, url: StoreURL, found: bool) -> None:
    """Fail, as ``gcloud storage ls`` and ``du`` do, when ``url`` matched
    nothing. A bucket matches even empty (its listing, which would have
    failed on a missing bucket, proved it exists), and so does a local
    directory, as for GNU ``ls``; a name or folder matches only objects.

    Args:
        op: the command.
        url: the URL the command listed.
        found: whether the listing found an object or a folder.

    Raises:
        NotFound: nothing matched.
    """
    if found or not url.name:
        return
    if url.scheme == "file" and os.path.isdir(path_of(url.bucket, url.name.rstrip("/"))):
        return
    raise nothing_matches(op, url)


def human(n: float) -> str:
    """Bytes as a short human string (1.5 MiB)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def emit_json(value: Any) -> None:
    """Print one JSON document to stdout."""
    print(json.dumps(value, indent=None, sort_keys=True))
