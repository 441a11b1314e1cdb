"""fsspec paths to and from a store's buckets and object names.

fsspec passes paths without their protocol: ``bucket/key`` for an object
store, ``/abs/path`` for files (as its ``LocalFileSystem`` does). A path
of a bucket alone names its root folder.
"""

from __future__ import annotations

import re

from .._core.errors import InvalidURL
from .._core.urls import parse_url

__all__ = ["join", "split", "strip_protocol"]

_PROTOCOL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def strip_protocol(path: str) -> str:
    """``gs://b/k`` (any protocol, ours or one registered for us) to ``b/k``.

    A file path keeps its leading ``/``; trailing slashes go, as fsspec's
    filesystems strip them.
    """
    local = path.startswith("file://") or path.startswith("aioflux-file://")
    path = _PROTOCOL.sub("", path)
    if local:
        return "/" + path.strip("/")
    return path.strip("/") if not path.startswith("/") else "/" + path.strip("/")


def split(scheme: str, path: str, *, folder: bool = False) -> tuple[str, str]:
    """``(bucket, name)`` of a path on ``scheme``'s store.

    Args:
        scheme: ``gs``, ``s3`` or ``file``.
        path: a path as fsspec passes it (protocol stripped or not).
        folder: the path may be a bucket alone (name ``""``).

    Returns:
        The bucket and object name.

    Raises:
        InvalidURL: no bucket, or a name the store cannot hold.
    """
    path = strip_protocol(path)
    if scheme != "file" and not path.strip("/"):
        # gcsfs and s3fs list the account's buckets there; a store here is
        # reached through one bucket (its credentials may see no other).
        raise InvalidURL(f"{scheme}:// names no bucket: aioflux.fsspec does not list "
                         f"buckets; give one ({scheme}://BUCKET/...)")
    if scheme == "file":
        parsed = parse_url("file://" + (path if path.startswith("/") else "/" + path))
    else:
        parsed = parse_url(f"{scheme}://{path.lstrip('/')}")
    if not folder and not parsed.name:
        raise InvalidURL(f"{scheme}://{path}: names a bucket, not an object")
    return parsed.bucket, parsed.name


def join(scheme: str, bucket: str, name: str = "") -> str:
    """The fsspec path of ``name`` in ``bucket`` (the bucket's own without a name)."""
    head = f"/{bucket}" if scheme == "file" else bucket
    return f"{head}/{name}".rstrip("/") if name else head
