"""Where a bucket and a name are on disk: the one place a ``LocalStore`` path is made.

An object name is a path below the bucket's directory, so a name such as
``../x/secret.txt`` or ``/etc/passwd`` would reach files outside it, and
``a//b`` or ``a/./b`` would be a second spelling of ``a/b`` (an object
listed once but readable under several names). Every filesystem path of the
store is built here, from a name checked by the same rule
(:func:`aioflux._core.records.urls.validate_object_name`, scheme ``file``: no
``.``, ``..`` or empty segments, no NUL): the store checks its arguments
with :func:`check_name` and :func:`check_prefix` before it starts, and the
worker-thread functions (``_files.py``, ``_listing.py``, ``_writes.py``)
reach the filesystem only through :func:`path_of` (:func:`paths_of`, a
batch's) and :func:`folder_of`, which check again, so no method can skip
the rule. Listing offsets are never paths (only compared with names) and
take any string: the parallel listers split ranges at midpoints such as
``a//`` that are no names.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core.errors import InvalidURL
from .._core.records.urls import validate_bucket, validate_object_name

__all__ = ["check_name", "check_prefix", "folder_of", "path_of", "paths_of"]


def _where(op: str, bucket: str, name: str) -> str:
    # Not describe(): the bucket may be the argument being refused.
    return f"{op} file:///{bucket}/{name}" if isinstance(bucket, str) and isinstance(
        name, str) else op


def check_name(op: str, bucket: str, name: str, *, name_arg: str = "name") -> None:
    """Check a bucket and an object name of the local store.

    Args:
        op: the operation, for the message.
        bucket: the first directory of the path.
        name: the rest of the path.
        name_arg: the name argument's name (``dest_name`` for a copy's).

    Raises:
        InvalidURL: the bucket is no directory name, or the name is not a
            plain relative path below it.
    """
    try:
        validate_bucket(bucket, scheme="file")
        validate_object_name(name, arg=name_arg, scheme="file")
    except InvalidURL as exc:
        raise InvalidURL(f"{_where(op, bucket, name)}: {exc}") from None


def check_prefix(op: str, bucket: str, prefix: str) -> None:
    """Check a bucket and a listing prefix of the local store.

    A prefix's last segment is a name's beginning (``a/.`` matches
    ``a/.hidden``, ``..`` matches ``..notes``) and only its directory part,
    up to the last ``/``, is walked: that part must be a plain relative path.

    Args:
        op: the operation, for the message.
        bucket: the first directory of the path.
        prefix: only names starting with this.

    Raises:
        InvalidURL: the bucket is no directory name, or the prefix's
            directory part is not a plain relative path (``../``, ``./``,
            ``a//``, ``/etc/``) or it holds NUL.
    """
    try:
        validate_bucket(bucket, scheme="file")
    except InvalidURL as exc:
        raise InvalidURL(f"{_where(op, bucket, '')}: {exc}") from None
    if not isinstance(prefix, str):
        raise InvalidURL(f"{op}: prefix must be a str, got {type(prefix).__name__}")
    folder = prefix.rpartition("/")[0]
    if "\0" in prefix or (folder and any(s in ("", ".", "..") for s in folder.split("/"))):
        raise InvalidURL(f"{_where(op, bucket, prefix)}: prefix {prefix!r} does not start "
                         "with a plain relative path (no '.', '..', empty segments or NUL)")


def path_of(bucket: str, name: str, *, op: str = "access") -> str:
    """The absolute path of object ``name`` in ``bucket`` (``""``: the
    bucket's directory), checked as :func:`check_name` does.

    Args:
        bucket: the first directory of the path.
        name: the rest of the path, or ``""``.
        op: the operation, for the message.

    Returns:
        ``/<bucket>/<name>`` (``/<bucket>`` for ``""``).

    Raises:
        InvalidURL: see :func:`check_name`.
    """
    if not name:
        check_prefix(op, bucket, "")
        return f"/{bucket}"
    check_name(op, bucket, name)
    return f"/{bucket}/{name}"


def paths_of(bucket: str, names: Sequence[str], *, op: str = "access") -> list[str]:
    """The absolute paths of objects ``names`` in ``bucket`` (a batch's),
    each checked as :func:`path_of` checks it, the bucket once.

    Raises:
        InvalidURL: see :func:`check_name`, for the first name refused.
    """
    try:
        validate_bucket(bucket, scheme="file")
    except InvalidURL as exc:
        raise InvalidURL(f"{_where(op, bucket, '')}: {exc}") from None
    paths = []
    for name in names:
        try:
            validate_object_name(name, scheme="file")
        except InvalidURL as exc:
            raise InvalidURL(f"{_where(op, bucket, name)}: {exc}") from None
        paths.append(f"/{bucket}/{name}")
    return paths


def folder_of(bucket: str, prefix: str, *, op: str = "list") -> str:
    """The directory a listing of ``prefix`` walks (its part up to the last
    ``/``), checked as :func:`check_prefix` does.

    Args:
        bucket: the first directory of the path.
        prefix: the listing's prefix.
        op: the operation, for the message.

    Returns:
        The directory's absolute path.

    Raises:
        InvalidURL: see :func:`check_prefix`.
    """
    check_prefix(op, bucket, prefix)
    folder = prefix.rpartition("/")[0]
    return f"/{bucket}/{folder}" if folder else f"/{bucket}"
