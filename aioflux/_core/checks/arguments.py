"""Argument checks shared by the public API, run before any request is sent.

A wrong type caught here raises :class:`~aioflux.InvalidArgument` (or
:class:`~aioflux.InvalidURL` for names and URLs) naming the call and the
argument, instead of a ``TypeError`` deep in aiohttp or a server error after
retries. ``bool`` is refused where an ``int`` is expected: ``True`` as a
step or an offset is always a bug.
"""

from __future__ import annotations

import operator
import re
from typing import TYPE_CHECKING, Any, SupportsIndex, TypeAlias
from urllib.parse import urlsplit

from ..errors import InvalidArgument, InvalidURL, describe
from ..records.types import ObjectInfo
from ..records.urls import validate_bucket, validate_object_name

# Control characters a header value must not hold (HTAB may).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# What an endpoint URL never holds: whitespace and control characters.
_SPACE_OR_CONTROL = re.compile(r"[\x00-\x20\x7f]")

if TYPE_CHECKING:
    from google.auth.credentials import Credentials as GoogleCredentials

    from ..auth import Auth

__all__ = [
    "Credentials",
    "as_int",
    "check_bool",
    "check_buffer",
    "check_bytes",
    "check_content_type",
    "check_contiguous",
    "check_credentials",
    "check_endpoint",
    "check_int",
    "check_instance",
    "check_metadata",
    "check_object",
    "check_str",
    "compose_args",
    "delete_args",
    "endpoint_url",
    "list_args",
    "read_args",
    "write_args",
]

Credentials: TypeAlias = "str | Auth | GoogleCredentials | None"
"""What ``credentials=`` takes: ``None`` (Application Default Credentials;
anonymous against an emulator), ``"anonymous"``, a bearer-token string, an
``Auth`` (``async headers() -> dict``) or a google-auth ``Credentials``."""


def _kind(value: object) -> str:
    return type(value).__name__


def check_object(op: str, bucket: object, name: object, *, bucket_arg: str = "bucket",
                 name_arg: str = "name", scheme: str = "gs") -> None:
    """Check a bucket and an object name.

    Args:
        op: the operation, for the message.
        bucket: the bucket argument.
        name: the object name argument.
        bucket_arg: the bucket argument's name.
        name_arg: the name argument's name.
        scheme: the store's scheme (its naming rules apply).

    Raises:
        InvalidURL: either is not a valid name there.
    """
    try:
        validate_bucket(bucket, arg=bucket_arg, scheme=scheme)  # type: ignore[arg-type]
        validate_object_name(name, arg=name_arg, scheme=scheme)  # type: ignore[arg-type]
    except InvalidURL as exc:
        raise InvalidURL(f"{op}: {exc}") from None


def check_int(op: str, arg: str, value: object, *, minimum: int | None = 0,
              optional: bool = False) -> None:
    """Check an integer argument (``bool`` is not an integer here).

    Args:
        op: the operation.
        arg: the argument's name.
        value: its value.
        minimum: smallest allowed value, or None for no bound.
        optional: ``None`` is allowed.

    Raises:
        InvalidArgument: wrong type or below ``minimum``.
    """
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        what = "an int or None" if optional else "an int"
        raise InvalidArgument(f"{op}: {arg} must be {what}, got {_kind(value)} {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidArgument(f"{op}: {arg} must be >= {minimum}, got {value}")


def as_int(op: str, arg: str, value: object, *, minimum: int | None = 0) -> int:
    """An integer argument as a plain ``int``.

    Whatever stands for an integer (``operator.index``: numpy's integers, a
    0-d integer tensor) is taken, as ``range`` takes it: a training step
    often comes out of a tensor or an array. ``bool`` is not an integer here.

    Args:
        op: the operation.
        arg: the argument's name.
        value: its value.
        minimum: the smallest allowed value, or None for no bound.

    Returns:
        The value as an ``int``.

    Raises:
        InvalidArgument: not an integer, or below ``minimum``.
    """
    try:
        if isinstance(value, bool) or not isinstance(value, SupportsIndex):
            raise TypeError(value)
        number = operator.index(value)  # a float tensor has __index__, and raises
    except TypeError:
        raise InvalidArgument(f"{op}: {arg} must be an int, got {_kind(value)} "
                              f"{value!r}") from None
    check_int(op, arg, number, minimum=minimum)
    return number


def check_bool(op: str, arg: str, value: object, *, optional: bool = False) -> None:
    """Check a ``bool`` argument.

    Args:
        op: the operation.
        arg: the argument's name.
        value: its value.
        optional: ``None`` is allowed.

    Raises:
        InvalidArgument: not a bool.
    """
    if not (isinstance(value, bool) or (optional and value is None)):
        raise InvalidArgument(f"{op}: {arg} must be a bool, got {_kind(value)} {value!r}")


def check_str(op: str, arg: str, value: object, *, optional: bool = False,
              choices: tuple[str, ...] | None = None) -> None:
    """Check a string argument.

    Args:
        op: the operation.
        arg: the argument's name.
        value: its value.
        optional: ``None`` is allowed.
        choices: the allowed values, if limited.

    Raises:
        InvalidArgument: not a string, or not one of ``choices``.
    """
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise InvalidArgument(f"{op}: {arg} must be a str, got {_kind(value)} {value!r}")
    if choices is not None and value not in choices:
        raise InvalidArgument(f"{op}: {arg} must be one of {', '.join(map(repr, choices))}, "
                              f"got {value!r}")


def check_instance(op: str, arg: str, value: object, cls: type | tuple[type, ...], *,
                   optional: bool = False) -> None:
    """Check that an argument is an instance of ``cls``.

    Args:
        op: the operation.
        arg: the argument's name.
        value: its value.
        cls: the expected class(es).
        optional: ``None`` is allowed.

    Raises:
        InvalidArgument: wrong type.
    """
    if value is None and optional:
        return
    if not isinstance(value, cls):
        names = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
        raise InvalidArgument(f"{op}: {arg} must be a {names}, got {_kind(value)} {value!r:.60}")


def check_bytes(op: str, arg: str, value: object) -> None:
    """Check a bytes-like argument (``bytes``, ``bytearray``, ``memoryview``).

    Args:
        op: the operation.
        arg: the argument's name.
        value: its value.

    Raises:
        InvalidArgument: not bytes-like (a ``str`` needs ``.encode()``).
    """
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"{op}: {arg} must be bytes, bytearray or memoryview, "
                              f"got {_kind(value)}")
    check_contiguous(op, arg, value)


def check_contiguous(op: str, arg: str, value: object) -> None:
    """Check that a buffer is one run of bytes (not a strided view).

    Args:
        op: the operation.
        arg: the argument's name.
        value: a buffer.

    Raises:
        InvalidArgument: a strided view (memoryview's own TypeError, "casts
            are restricted to C-contiguous views", named neither).
    """
    if isinstance(value, memoryview) and not value.c_contiguous:
        raise InvalidArgument(f"{op}: {arg} must be contiguous, got a strided memoryview "
                              "(copy it first: bytes(view), or numpy's ascontiguousarray)")


def check_buffer(op: str, arg: str, value: object) -> None:
    """Check a writable buffer argument (``bytearray`` or writable ``memoryview``).

    Args:
        op: the operation.
        arg: the argument's name.
        value: its value.

    Raises:
        InvalidArgument: not a buffer, or read-only (``bytes``).
    """
    if isinstance(value, bytearray):
        return
    if isinstance(value, memoryview) and not value.readonly:
        check_contiguous(op, arg, value)
        return
    raise InvalidArgument(f"{op}: {arg} must be a writable bytearray or memoryview, got "
                          f"{'a read-only ' if isinstance(value, (bytes, memoryview)) else ''}"
                          f"{_kind(value)}")


def check_content_type(op: str, value: object) -> None:
    """Check a ``content_type`` argument: a string a ``Content-Type`` header
    can carry (served back as one, and sent as one by XML uploads).

    Args:
        op: the operation.
        value: its value.

    Raises:
        InvalidArgument: not a string, or one holding a control character.
    """
    check_str(op, "content_type", value)
    if isinstance(value, str) and _CONTROL.search(value):
        raise InvalidArgument(f"{op}: content_type {value!r:.60} holds a control character")


def check_metadata(op: str, arg: str, value: object) -> None:
    """Check a custom-metadata argument: ``None`` or a ``dict[str, str]``.

    Args:
        op: the operation.
        arg: the argument's name.
        value: its value.

    Raises:
        InvalidArgument: not a dict of strings.
    """
    if value is None:
        return
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidArgument(f"{op}: {arg} must be a dict[str, str] or None, got {value!r:.60}")


def _endpoint_shown(endpoint: str) -> str:
    """``endpoint`` quoted for a message, cut at its query or fragment: a
    query may hold a key (a SAS pasted with the account's URL)."""
    cut = min((i for i in (endpoint.find("?"), endpoint.find("#")) if i >= 0), default=-1)
    return repr(endpoint if cut < 0 else endpoint[:cut] + "...")


def check_endpoint(op: str, endpoint: object) -> None:
    """Check an API root URL (``http(s)://host[:port][/path]``).

    Args:
        op: the operation.
        endpoint: the endpoint argument.

    Raises:
        InvalidURL: not a string, no http(s) scheme, no host, or a
            ``user:password@`` in it (never repeated in the message).
    """
    if endpoint is None:
        return
    if not isinstance(endpoint, str):
        raise InvalidURL(f"{op}: endpoint must be a URL string, got {_kind(endpoint)}")
    try:
        # urlsplit itself raises ValueError on a bracket left open
        # ("http://[::1"), before any port is looked at.
        parts = urlsplit(endpoint)
        netloc = parts.netloc
    except ValueError as exc:
        raise InvalidURL(f"{op}: endpoint is not a URL ({exc})") from None
    if "@" in netloc:
        # aiohttp refuses userinfo beside an Authorization header, and a
        # message must not repeat a password.
        raise InvalidURL(f"{op}: the endpoint must not carry user:password@ "
                         "(pass the credentials to the store instead)")
    try:
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError as exc:
        raise InvalidURL(f"{op}: endpoint {_endpoint_shown(endpoint)} is not a URL "
                         f"({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidURL(f"{op}: endpoint must be an http:// or https:// URL with a host, "
                         f"got {_endpoint_shown(endpoint)}")
    if parts.query or parts.fragment or "?" in endpoint or "#" in endpoint:
        # Paths are appended to the endpoint: a query would swallow them
        # ("http://h/?x=1" + "/storage/v1/b/..." asks for "/" with a query).
        # Not repeated: a query may hold a key.
        raise InvalidURL(f"{op}: endpoint must be an API root without '?' or '#' "
                         f"(http(s)://host[:port][/path]), got {parts.scheme}://{netloc}...")
    if _SPACE_OR_CONTROL.search(endpoint):
        # Pasted text with a newline or space inside: aiohttp would drop
        # or keep it in the host name and fail DNS eight times over.
        raise InvalidURL(f"{op}: endpoint {_endpoint_shown(endpoint)} holds a space or "
                         "control character")


def endpoint_url(op: str, endpoint: object) -> str | None:
    """The API root an ``endpoint=`` argument names, checked.

    One rule for every place a user names an endpoint (``endpoint=`` of the
    clients, stores and datasets, ``STORAGE_EMULATOR_HOST``, the CLI's
    ``--endpoint``): an ``http(s)://`` URL as :func:`check_endpoint` takes
    it, or ``host[:port]``, meaning ``http://host[:port]`` (the form
    emulators print). Without a scheme the host must look like one (a dotted
    name, an IP address, ``localhost``) or come with a port: a bare word is
    a typo more often than a host. The AWS configuration's endpoint
    variables are botocore's, which wants a scheme: they are checked with
    :func:`check_endpoint` alone.

    Args:
        op: the operation (or the variable), for the message.
        endpoint: the argument, or None.

    Returns:
        The URL without a trailing ``/``, or None for None.

    Raises:
        InvalidURL: neither form (see :func:`check_endpoint`).
    """
    if endpoint is None:
        return None
    if not isinstance(endpoint, str):
        raise InvalidURL(f"{op}: endpoint must be a URL string, got {_kind(endpoint)}")
    bare = "://" not in endpoint
    url = f"http://{endpoint}" if bare else endpoint
    check_endpoint(op, url)
    if bare:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if not ("." in host or ":" in host or host == "localhost" or parts.port is not None):
            raise InvalidURL(f"{op}: endpoint must be an http:// or https:// URL or "
                             f"host:port, got {endpoint!r}")
    return url.rstrip("/")


def check_credentials(op: str, credentials: Any) -> None:
    """Check a ``credentials=`` argument (see :data:`Credentials`).

    Args:
        op: the operation.
        credentials: the argument.

    Raises:
        InvalidArgument: none of the accepted kinds.
    """
    if credentials is None or isinstance(credentials, str):
        if credentials == "":
            raise InvalidArgument(f"{op}: credentials must not be an empty string")
        return
    if callable(getattr(credentials, "headers", None)):
        return  # an Auth
    if hasattr(credentials, "refresh") and hasattr(credentials, "token"):
        return  # google-auth Credentials (duck-typed: importing google.auth costs ~0.1 s)
    raise InvalidArgument(f"{op}: credentials must be None, 'anonymous', a token string, an "
                          f"Auth or google-auth Credentials, got {_kind(credentials)}")


# -- per-method checks of AsyncClient (and so of Client, which calls them) ------


def list_args(op: str, bucket: object, prefix: object, *, delimiter: object = None,
              start_offset: object = None, end_offset: object = None, page_size: object = 1000,
              fields: object = None, scheme: str = "gs") -> None:
    """Arguments of ``list`` / ``list_objects`` / ``stream``.

    Raises:
        InvalidURL: a bad bucket.
        InvalidArgument: a wrong type.
    """
    try:
        validate_bucket(bucket, scheme=scheme)  # type: ignore[arg-type]
    except InvalidURL as exc:
        raise InvalidURL(f"{op}: {exc}") from None
    check_str(op, "prefix", prefix)
    for arg, value in (("delimiter", delimiter), ("start_offset", start_offset),
                       ("end_offset", end_offset), ("fields", fields)):
        check_str(op, arg, value, optional=True)
    check_int(op, "page_size", page_size, minimum=1)


def read_args(bucket: object, name: object, start: object, end: object, into: object,
              generation: object,
              scheme: str = "gs") -> None:
    """Arguments of ``read``.

    Raises:
        InvalidURL: a bad bucket or name.
        InvalidArgument: a wrong type, a bad range, or a read-only ``into``.
    """
    check_object("read", bucket, name, scheme=scheme)
    op = describe("read", str(bucket), str(name), scheme)  # each message names the object
    check_int(op, "start", start)
    check_int(op, "end", end, optional=True)
    if end is not None and end < start:  # type: ignore[operator]
        raise InvalidArgument(f"{op}: bad range [{start}, {end}): end before start")
    if into is not None:
        check_buffer(op, "into", into)
    check_int(op, "generation", generation, minimum=1, optional=True)


def write_args(bucket: object, name: object, data: object, content_type: object,
               if_generation_match: object, metadata: object, resumable: object,
              scheme: str = "gs") -> None:
    """Arguments of ``write``.

    Raises:
        InvalidURL: a bad bucket or name.
        InvalidArgument: a wrong type.
    """
    check_object("write", bucket, name, scheme=scheme)
    op = describe("write", str(bucket), str(name), scheme)
    check_bytes(op, "data", data)
    check_content_type(op, content_type)
    check_int(op, "if_generation_match", if_generation_match, optional=True)
    check_metadata(op, "metadata", metadata)
    check_bool(op, "resumable", resumable, optional=True)


def compose_args(bucket: object, destination: object, sources: object,
                 if_generation_match: object, content_type: object) -> None:
    """Arguments of ``compose`` (each source is a name, ObjectInfo or (name, generation)).

    Raises:
        InvalidURL: a bad bucket or name.
        InvalidArgument: a wrong type or count of sources.
    """
    check_object("compose", bucket, destination, name_arg="destination")
    if isinstance(sources, (str, bytes)) or not hasattr(sources, "__len__"):
        raise InvalidArgument(f"compose: sources must be a sequence, got {_kind(sources)}")
    for source in sources:  # type: ignore[attr-defined]
        # ObjectInfo is a NamedTuple: test it before the (name, generation) pair.
        pair = isinstance(source, tuple) and not isinstance(source, ObjectInfo)
        name = source.name if isinstance(source, ObjectInfo) else source[0] if pair else source
        try:
            validate_object_name(name, arg="sources")
        except InvalidURL as exc:
            raise InvalidURL(f"compose: {exc}") from None
        if pair:
            if len(source) != 2:
                raise InvalidArgument(f"compose: sources items must be (name, generation), got "
                                      f"{source!r}")
            check_int("compose", "sources generation", source[1])
    check_int("compose", "if_generation_match", if_generation_match, optional=True)
    check_content_type("compose", content_type)


def delete_args(bucket: object, name: object, generation: object, if_generation_match: object,
                missing_ok: object,
              scheme: str = "gs") -> None:
    """Arguments of ``delete``.

    Raises:
        InvalidURL: a bad bucket or name.
        InvalidArgument: a wrong type.
    """
    check_object("delete", bucket, name, scheme=scheme)
    op = describe("delete", str(bucket), str(name), scheme)
    check_int(op, "generation", generation, minimum=1, optional=True)
    check_int(op, "if_generation_match", if_generation_match, optional=True)
    check_bool(op, "missing_ok", missing_ok)
