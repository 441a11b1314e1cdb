"""fsspec paths to and from a store's buckets and object names.

fsspec passes paths without their protocol: ``bucket/key`` for an object
store, ``/abs/path`` for files (as its ``LocalFileSystem`` does). A path
of a bucket alone names its root folder.
"""

from __future__ import annotations

import os
import re

from .._api.stores import check_account
from .._core.errors import InvalidURL
from .._core.records.urls import ROOT_FILE, parse_url
from .._core.storage.protocol import ObjectStore

__all__ = ["SCHEME_OF", "join", "local_path", "split", "strip_protocol"]

#: the store each protocol aioflux serves is (``aioflux-<scheme>`` aside)
SCHEME_OF = {"gs": "gs", "gcs": "gs", "s3": "s3", "s3a": "s3", "az": "az", "abfs": "az",
             "abfss": "az", "file": "file", "local": "file", "http": "http", "https": "https",
             "hf": "hf"}

_PROTOCOL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def strip_protocol(path: str, *, local: bool = False, scheme: str | None = None) -> str:
    """``gs://b/k`` (a protocol of ours or one registered for us) to ``b/k``.

    A file path keeps its leading ``/``; trailing slashes go, as fsspec's
    filesystems strip them.

    Args:
        path: a path or URL.
        local: the path is a file's even without ``file://`` (a file
            filesystem's): see :func:`local_path`.
        scheme: the store of the filesystem the path is given to, whose
            protocols alone it takes; None takes any.

    Raises:
        InvalidURL: a URL of another store's protocol (a ``gs://``
            filesystem given ``s3://b/k`` read ``gs://b/k``, and one given
            ``file:///tmp/x`` wrote to a bucket named ``tmp``).
    """
    found = _PROTOCOL.match(path)
    given = found[1].lower().removeprefix("aioflux-") if found else None
    if given is not None and scheme is not None and SCHEME_OF.get(given, given) != scheme:
        raise InvalidURL(f"{path}: not a path of this filesystem's store ({scheme}://); "
                         f"open it with fsspec.url_to_fs or a filesystem of its own")
    local = local or (given is not None and SCHEME_OF.get(given) == "file")
    path = _PROTOCOL.sub("", path)
    if local:
        return local_path(path)
    return path.strip("/") if not path.startswith("/") else "/" + path.strip("/")


def local_path(path: str) -> str:
    """A file's path as fsspec's ``LocalFileSystem`` makes it: ``~`` expanded,
    a relative path taken from the working directory (it was taken from
    ``/``: a write to ``out/x`` went to ``/out/x``), trailing slashes dropped."""
    if not path.startswith("/"):
        path = os.path.abspath(os.path.expanduser(path))
    return "/" + path.strip("/")


def split(scheme: str, path: str, *, folder: bool = False,
          store: ObjectStore | None = None) -> tuple[str, str]:
    """``(bucket, name)`` of a path on ``scheme``'s store.

    Args:
        scheme: ``gs``, ``s3`` or ``file``.
        path: a path as fsspec passes it (protocol stripped or not).
        folder: the path may be a bucket alone (name ``""``).
        store: the store the path is for, whose account a path naming one
            (``abfs://container@account...``) must be.

    Returns:
        The bucket and object name.

    Raises:
        InvalidURL: no bucket, or a name the store cannot hold.
        InvalidArgument: a path naming another storage account than ``store``'s.
    """
    path = strip_protocol(path, local=scheme == "file", scheme=scheme)
    if scheme != "file" and not path.strip("/"):
        # gcsfs and s3fs list the account's buckets there; a store here is
        # reached through one bucket (its credentials may see no other).
        raise InvalidURL(f"{scheme}:// names no bucket: aioflux.fsspec does not list "
                         f"buckets; give one ({scheme}://BUCKET/...)")
    if scheme == "file":
        parsed = parse_url("file://" + path)
        if not parsed.name and not (folder and _folder_or_missing(path)):
            # A file there is no object: said so, not called missing.
            raise InvalidURL(f"file://{path}: names a bucket, not an object{ROOT_FILE}")
    else:
        parsed = parse_url(f"{scheme}://{path.lstrip('/')}")
    if not folder and not parsed.name:
        raise InvalidURL(f"{scheme}://{path}: names a bucket, not an object")
    if store is not None:
        check_account(path, parsed, store)
    return parsed.bucket, parsed.name


def _folder_or_missing(path: str) -> bool:
    return os.path.isdir(path) or not os.path.lexists(path)


def join(scheme: str, bucket: str, name: str = "") -> str:
    """The fsspec path of ``name`` in ``bucket`` (the bucket's own without a name)."""
    head = f"/{bucket}" if scheme == "file" else bucket
    return f"{head}/{name}".rstrip("/") if name else head
