"""Storage URLs: ``gs://bucket/name``, ``s3://bucket/key``,
``az://container/blob`` (also adlfs's ``abfs://`` and ``abfss://`` forms),
``file:///path`` or a plain path (a ``str`` or an ``os.PathLike``).

Every backend addresses an object as (bucket, name). For the local
filesystem the bucket is the first directory of the absolute path and the
name the rest (``file:///mnt/nfs/run1/x`` is bucket ``mnt``, name
``nfs/run1/x``), so the engines above the backends see one shape.

A local path follows one rule whether it is given plain or as a
``file://`` URL: it is made absolute (a plain path against the working
directory) and normalized by name as ``os.path.abspath`` does: ``.``
segments and repeated ``/`` dropped, each ``..`` removing the segment
before it, without asking the filesystem (so ``link/..`` is the directory
holding ``link``, not the parent of the link's target); one trailing ``/``
(a folder) is kept. ``/home/me/a/sub/../x.txt`` and
``file:///home/me/a/sub/../x.txt`` both name ``file:///home/me/a/x.txt``.
Only the names of the store's own API (``LocalStore.read(bucket, name)``)
refuse ``.``, ``..`` and empty segments: there a name is an object's, never
a path to resolve. Errors about a local path quote the whole path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import InvalidURL
from ..secrets import REDACTED, query_names
from .hub_paths import hub_repo, split_hub_url
from .store_plugins import plugin_scheme

__all__ = [
    "ROOT_FILE",
    "SCHEMES",
    "StoreURL",
    "WEB_SCHEMES",
    "folder_prefix",
    "format_url",
    "parse_url",
    "validate_bucket",
    "validate_object_name",
]

# The schemes a URL may name; a plain path means "file".
SCHEMES = ("gs", "s3", "az", "file", "http", "https", "hf")
# The read-only web schemes (``aioflux.http``).
WEB_SCHEMES = ("http", "https")
# adlfs's names for Azure Blob URLs: the same container and blob as az://.
AZURE_ALIASES = ("abfs", "abfss")
# "gs:/b/x", "S3:b", "file:/tmp/x": a known scheme and a colon but not "://";
# "gs//b/x": the "//" without the colon. Taken as a path either would be a
# relative directory ("./gs:/b/x", "./gs/b/x"), and a checkpoint meant for
# the bucket would land on local disk; it is far more often
# ``Path("gs://b") / "x"`` (which collapses the "//") or a typo.
_SCHEME_TYPO_RE = re.compile(rf"^({'|'.join(SCHEMES + AZURE_ALIASES)})(:(?!//)|//)",
                             re.IGNORECASE)

# GCS bucket naming: 3-63 chars (up to 222 with dots), lowercase letters,
# digits, dashes, underscores and dots, starting and ending alphanumeric.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
# S3 bucket naming: 3-63 lowercase letters, digits, dots and dashes.
_S3_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# Azure container naming: 3-63 lowercase letters, digits and single dashes,
# starting and ending with a letter or digit; or the root container.
_AZ_CONTAINER_RE = re.compile(r"^(?:[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]|\$root)$")
# An account in adlfs's long form (container@account.dfs.core.windows.net).
_AZ_ACCOUNT_RE = re.compile(r"^[a-z0-9]{3,24}$")
# A web origin's host and port: a DNS name or IPv4 address, or an IPv6
# address in brackets, then an optional port (1-65535, checked apart).
_WEB_ORIGIN_RE = re.compile(r"^(?:[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?|\[[0-9a-f:.]+\])"
                            r"(?::(?P<port>[0-9]{1,5}))?$")
_MAX_PORT = 65535
# What a refusal of credentials in a URL says to do instead.
_WEB_CREDENTIALS = "give a bearer token (HttpStore(token=...) or AIOFLUX_HTTP_TOKEN)"
_STORE_CREDENTIALS = "give the store its credentials (its arguments or environment)"
# hf://: the token's variable; and a revision's "@" comes after org/name.
_HUB_CREDENTIALS = "set HF_TOKEN (a Hub repo is org/name[@revision])"
_MAX_OBJECT_NAME_BYTES = 1024


def validate_bucket(bucket: str, *, arg: str = "bucket", scheme: str = "gs") -> str:
    """Check a bucket name against the naming rules of ``scheme``'s store.

    Args:
        bucket: the bucket name.
        arg: the argument's name, for the message.
        scheme: ``gs`` (GCS rules), ``s3`` (S3 rules), ``az`` (Azure
            container rules) or ``file`` (a directory name).

    Returns:
        The same name.

    Raises:
        InvalidURL: the name cannot be a bucket there (or is not a string).
    """
    if not isinstance(bucket, str):
        raise InvalidURL(f"{arg} must be a bucket name string, got {type(bucket).__name__}")
    if scheme == "file":
        if not bucket or "/" in bucket or "\0" in bucket or bucket in (".", ".."):
            raise InvalidURL(f"{arg}: {bucket!r} is not a directory name")
        return bucket
    if scheme == "hf":
        hub_repo(bucket)  # the Hub's repo ids (hub_paths.py)
        return bucket
    if scheme in WEB_SCHEMES:
        if "@" in bucket:
            raise InvalidURL(f"{arg}: credentials in a URL ({scheme}://user@host) are refused: "
                             f"{_WEB_CREDENTIALS}")
        origin = _WEB_ORIGIN_RE.match(bucket)
        if not origin:
            raise InvalidURL(f"{arg}: {bucket!r} is not a host[:port] of an {scheme}:// URL")
        port = origin.group("port")
        if port is not None and not 0 < int(port) <= _MAX_PORT:
            raise InvalidURL(f"{arg}: port {port} of {bucket!r} is not one of 1-{_MAX_PORT}")
        return bucket
    if scheme == "az":
        if not _AZ_CONTAINER_RE.match(bucket):
            raise InvalidURL(f"{arg}: invalid Azure container name {bucket!r}: use 3-63 "
                             "lowercase letters, digits or single '-', starting and ending "
                             "with a letter or digit")
        return bucket
    if scheme == "s3":
        if not _S3_BUCKET_RE.match(bucket) or ".." in bucket:
            raise InvalidURL(f"{arg}: invalid S3 bucket name {bucket!r}: use 3-63 lowercase "
                             "letters, digits, '-' or '.'")
        return bucket
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise InvalidURL(f"{arg}: invalid bucket name {bucket!r}: use 3-63 lowercase letters, "
                         "digits, '-', '_' or '.', starting and ending with a letter or digit")
    if "." not in bucket and len(bucket) > 63:
        raise InvalidURL(f"{arg}: invalid bucket name {bucket!r}: longer than 63 characters")
    return bucket


_AZ_NOT_KEPT = re.compile(r"[\\\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _quoted(name: str, path: str | None) -> str:
    """How a message names a refused object name (or the path it ends)."""
    return f"object name {name!r}" if path is None else f"path {path!r}"


def _plain_at_a_glance(name: str) -> bool:
    """Whether a local name is surely a plain relative path, by four
    substring tests: no NUL, no empty segment ("//", a leading "/"), and no
    segment starting with "." (so none is "." or ".."). Every name a
    dataset reads passes here; splitting it into segments is half the
    check's cost, and each local read checks its name. The rest get the
    exact test."""
    return "\0" not in name and "//" not in name and "/." not in name \
        and not name.startswith(("/", "."))


def validate_object_name(name: str, *, arg: str = "name", scheme: str = "gs",
                         path: str | None = None) -> str:
    """Check an object name against GCS naming rules (and, for ``file``,
    that it is a relative path without ``.``/``..`` or empty segments).

    Args:
        name: the object name.
        arg: the argument's name, for the message.
        scheme: the store's scheme.
        path: the whole local path the name is the end of, which the
            messages quote instead of the name (that lacks the path's
            first directory).

    Returns:
        The same name.

    Raises:
        InvalidURL: not a string, empty, too long, not encodable as UTF-8
            (a lone surrogate), ``.``/``..``, or containing CR/LF.
    """
    if scheme == "file" and type(name) is str and name.isascii() \
            and 0 < len(name) <= _MAX_OBJECT_NAME_BYTES and _plain_at_a_glance(name) \
            and "\r" not in name and "\n" not in name:
        return name  # what every rule below passes, tested without encoding it
    if not isinstance(name, str):
        raise InvalidURL(f"{arg} must be an object name string, got {type(name).__name__}")
    if not name:
        raise InvalidURL(f"{arg}: object name is empty")
    # A web name's query values are cut from what is quoted (a signature).
    shown = query_names(name) if scheme in WEB_SCHEMES else name
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        # GCS names are UTF-8; a lone surrogate (from a bad os.fsdecode) has none.
        at = exc.start + (0 if path is None else len(path) - len(name))  # in what is quoted
        raise InvalidURL(f"{arg}: {_quoted(shown, path)} is not valid UTF-8 ({exc.reason} at "
                         f"position {at})") from None
    if len(encoded) > _MAX_OBJECT_NAME_BYTES:
        raise InvalidURL(
            f"{arg}: object name longer than {_MAX_OBJECT_NAME_BYTES} bytes: {shown[:40]!r}..."
            if path is None else f"{arg}: path {path[:60]!r}... is longer than "
            f"{_MAX_OBJECT_NAME_BYTES} bytes after its first directory")
    if name in (".", ".."):
        raise InvalidURL(f"{arg}: object name {name!r} is not allowed")
    if "\r" in name or "\n" in name:
        raise InvalidURL(f"{arg}: {_quoted(shown, path)} contains a line break")
    if scheme == "file" and not _plain_at_a_glance(name):
        # One trailing "/" is a folder's name (refused where a file is
        # written); "a//" is a second spelling of it, as "a//b" is of "a/b".
        segments = name.removesuffix("/").split("/")
        if "\0" in name or any(seg in ("", ".", "..") for seg in segments):
            if path is not None:
                raise InvalidURL(f"{arg}: {_quoted(name, path)} is not a plain path (no '.', "
                                 "'..', empty segments or NUL)")
            raise InvalidURL(f"{arg}: {name!r} is not a plain relative path (no '.', '..', "
                             "empty segments or NUL)")
    if scheme == "az" and (_AZ_NOT_KEPT.search(name)
                           or {".", ".."} & set(name.split("/"))):
        # The service reads "\" as "/" and resolves "." and ".." segments
        # (another blob's name), and its XML listings cannot carry these
        # control characters nor the noncharacters U+FFFE and U+FFFF, which
        # XML 1.0 excludes too (Azurite answers 500).
        raise InvalidURL(f"{arg}: Azure cannot keep the blob name {name!r} as written (no "
                         "'\\', '.' or '..' segments, control characters but tab, "
                         "U+FFFE or U+FFFF)")
    return name


def folder_prefix(name: str) -> str:
    """The listing prefix of the folder a URL's name denotes: ``data`` (and
    ``data/``) is the folder ``data/``, never ``data2/``; ``""`` the bucket.

    Args:
        name: the object-name part of a URL (may be empty).

    Returns:
        ``name`` with one trailing ``/`` (empty stays empty).
    """
    return name if not name or name.endswith("/") else name + "/"


def format_url(scheme: str, bucket: str, name: str = "") -> str:
    """The URL of ``name`` in ``bucket`` on ``scheme``'s store.

    Args:
        scheme: ``gs``, ``s3``, ``az`` or ``file``.
        bucket: bucket (for ``file``, the first directory).
        name: object name (may be empty).

    Returns:
        ``gs://bucket/name``, ``s3://bucket/name`` or ``file:///bucket/name``.
    """
    if scheme == "file":
        return f"file:///{bucket}/{name}"
    return f"{scheme}://{bucket}/{name}"


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed storage URL (``name`` may be empty for a bucket or folder).

    It unpacks as ``bucket, name = parse_url(url)``, as it did when every
    URL was ``gs://``; ``scheme`` says which store it is on.

    Attributes:
        bucket: bucket name (on the local store: the path's first directory;
            on Azure: the container).
        name: object name (on the local store: the rest of the path).
        scheme: ``gs``, ``s3``, ``az`` or ``file``.
        account: the Azure storage account an ``abfs://container@account.dfs...``
            URL names (empty otherwise: the store's configured account).
    """

    bucket: str
    name: str
    scheme: str = "gs"
    account: str = ""

    def __iter__(self) -> Iterator[str]:
        return iter((self.bucket, self.name))

    def __str__(self) -> str:
        return format_url(self.scheme, self.bucket, self.name)

    def join(self, *parts: str) -> StoreURL:
        """Append path parts with ``/``.

        Args:
            *parts: path segments.

        Returns:
            A new StoreURL.
        """
        name = "/".join(p.strip("/") for p in (self.name, *parts) if p.strip("/"))
        return StoreURL(self.bucket, name, self.scheme, self.account)


#: what a local path of one segment is: a bucket, never a file
ROOT_FILE = (" (a local path's first directory is its bucket: a file directly under / is "
             "no object aioflux can reach)")


def parse_url(url: str | os.PathLike[str], *, require_object: bool = False) -> StoreURL:
    """Parse ``gs://bucket[/name]``, ``s3://bucket[/name]``,
    ``az://container[/blob]``, ``file:///path`` or a plain filesystem path
    (it means ``file``).

    A local path, plain or ``file://``, is made absolute and its ``.``,
    ``..`` and empty segments resolved by name, as ``os.path.abspath``
    does (see the module's docstring): ``file:///a/sub/../x`` is
    ``file:///a/x``, as the path ``/a/sub/../x`` is.

    Azure URLs also come in adlfs's forms: ``abfs://`` and ``abfss://``
    are ``az://``, and ``container@account.dfs.core.windows.net`` (or
    ``.blob.``) in place of the container names the account too
    (``StoreURL.account``), which the store serving it must have.

    A path may be a ``str`` or an ``os.PathLike`` (``pathlib.Path``). A
    string that starts with ``gs:``, ``s3:`` or ``file:`` but not ``://``
    (``gs:/bucket/x``), or with ``gs//``, ``s3//`` or ``file//``, is refused
    rather than read as a relative path; a local directory of that name is
    ``./gs:/...`` (``./gs//...``).

    Args:
        url: the URL or path.
        require_object: reject URLs that name only a bucket.

    Returns:
        StoreURL(bucket, name, scheme).

    Raises:
        InvalidURL: an unknown scheme, a scheme without ``//`` or without
            ``:``, a ``user:password@`` (never quoted: nor is a web URL's
            query values), a bad bucket or name, a web port outside
            1-65535, a missing object name, or a local path that is the
            root or holds NUL or a line break.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        raise InvalidURL(f"expected a URL string or a path, got {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    userinfo = _userinfo(scheme, rest) if sep else ""
    shown = _shown(url, scheme, rest, userinfo) if sep else url
    if not sep:
        if not url:
            raise InvalidURL("empty URL")
        _refuse_scheme_typo(url)
        scheme, rest = "file", _absolute(url)
    elif scheme == "file":
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost") or not slash:
            raise InvalidURL(f"a file URL names a local absolute path (file:///path), "
                             f"got {shown!r}")
        rest = _absolute("/" + path)  # the rule of a plain path: one rule for both
    elif scheme in AZURE_ALIASES:
        scheme = "az"
    elif scheme.lower() in WEB_SCHEMES:
        scheme = scheme.lower()
    elif scheme not in SCHEMES and not plugin_scheme(scheme):
        raise InvalidURL(f"unknown scheme {scheme!r} in {shown!r}: use gs://, s3://, az://, "
                         "file://, http(s):// or a path")
    if userinfo and scheme in SCHEMES:
        hint = (_WEB_CREDENTIALS if scheme in WEB_SCHEMES else
                _HUB_CREDENTIALS if scheme == "hf" else _STORE_CREDENTIALS)
        raise InvalidURL(f"{shown!r}: credentials in a URL ({scheme}://user:password@...) are "
                         f"refused: {hint}")
    bucket, _, name = rest.partition("/")
    if scheme in WEB_SCHEMES:
        bucket, name = _web_parts(url, bucket, name, shown)
    elif scheme == "hf":
        bucket, name = split_hub_url(rest, shown)
    account = ""
    if scheme == "az" and "@" in bucket:
        bucket, account = _azure_account(bucket, shown)
    if scheme == "file":
        _check_local(url, bucket, name)
    if scheme not in SCHEMES:
        # Another package's backend (store_plugins.py): its store checks its names.
        if not bucket or not url.isprintable():
            raise InvalidURL(f"{shown!r} names no {scheme}:// bucket, or holds a control "
                             "character")
    else:
        validate_bucket(bucket, arg=f"bucket of {shown!r}", scheme=scheme)
        if name:
            validate_object_name(name, arg=f"name in {shown!r}", scheme=scheme)
    if not name and require_object:
        raise InvalidURL(f"URL names no object: {shown!r}{ROOT_FILE if scheme == 'file' else ''}")
    return StoreURL(bucket, name, scheme, account)


def _userinfo(scheme: str, rest: str) -> str:
    """The ``user[:password]`` before an ``@`` in the authority of
    ``scheme://`` + ``rest``, or ``""``. adlfs's ``container@account.<host>``
    is none: a container name holds no ``:``."""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    userinfo, at, _ = authority.rpartition("@")
    if not at or (scheme in ("az", *AZURE_ALIASES) and ":" not in userinfo):
        return ""
    return userinfo


def _shown(url: str, scheme: str, rest: str, userinfo: str) -> str:
    """How messages quote ``url``: its ``user[:password]@`` cut, and a web
    URL's query values (a signed URL's signature rides there)."""
    if userinfo:
        url = f"{scheme}://{REDACTED}{rest[len(userinfo):]}"
    return query_names(url) if scheme.lower() in WEB_SCHEMES else url


def _web_parts(url: str, netloc: str, rest: str, shown: str) -> tuple[str, str]:
    """``(host[:port], name)`` of an http(s) URL: the host lowercased (DNS
    names are case-blind), the default port dropped (one origin, one
    spelling), a fragment refused (it is never sent to a server); ``shown``
    is the URL as messages quote it."""
    if "#" in rest or "#" in netloc:
        raise InvalidURL(f"{shown!r}: a URL fragment ('#...') names no object on a server")
    if "?" in netloc:  # https://host?x: an empty path with a query
        netloc, query = netloc.split("?", 1)
        rest = "?" + query
    host = netloc.lower()
    default = ":443" if url[:5].lower() == "https" else ":80"
    return host.removesuffix(default), rest


def _azure_account(netloc: str, url: str) -> tuple[str, str]:
    """``(container, account)`` of adlfs's ``container@account.<host>``."""
    container, _, host = netloc.partition("@")
    account = host.split(".", 1)[0]
    if not _AZ_ACCOUNT_RE.match(account) or "." not in host:
        raise InvalidURL(f"{url!r}: after '@' comes the storage account's host "
                         "(container@account.dfs.core.windows.net)")
    return container, account


def _refuse_scheme_typo(url: str) -> None:
    """Raise if ``url`` is a gs/s3/file scheme without ``//`` or without
    ``:`` (see ``_SCHEME_TYPO_RE``)."""
    match = _SCHEME_TYPO_RE.match(url)
    if match is None:
        return
    scheme, no_colon = match.group(1).lower(), match.group(2) == "//"
    tail = url[match.end():]
    rest = tail.lstrip("/")
    if "@" in rest.split("/", 1)[0]:
        # A user:password@ after the typo: neither the URL nor the hint is quoted.
        raise InvalidURL(f"a {scheme}:// URL lacking its {':' if no_colon else '//'!r} and "
                         f"carrying <redacted>@ is refused (credentials in a URL are refused; "
                         "each store takes its own)")
    if scheme == "file":
        hint = (f"did you mean file:///{rest}?" if rest and (no_colon or tail.startswith("/"))
                else "use file:///absolute/path or a plain path")
    else:
        hint = f"did you mean {scheme}://{rest}?" if rest else f"use {scheme}://bucket/name"
    raise InvalidURL(f"{url!r} lacks the {':' if no_colon else '//'!r} of a {scheme}:// URL; "
                     f"{hint} (a local path: ./{url})")


def _check_local(url: str, bucket: str, name: str) -> None:
    """Check a local path (``/bucket/name``, normalized), every message
    quoting the whole path: its bucket and name alone are no path a user
    wrote (``me/dl/x.txt`` of ``/home/me/dl/x.txt``)."""
    path = f"/{bucket}/{name}" if name else f"/{bucket}"
    if not bucket:
        raise InvalidURL(f"{url!r} names the filesystem root, not a directory under it")
    if "\0" in bucket:
        raise InvalidURL(f"{url!r}: path {path!r} holds a NUL character")
    if name:
        shown = repr(url) if len(url) <= 200 else f"{url[:60]!r}..."  # a path too long, too
        validate_object_name(name, arg=shown, scheme="file", path=path)


def _absolute(path: str) -> str:
    """``path`` made absolute without its leading ``/``; a trailing ``/``
    (a folder) is kept."""
    full = os.path.abspath(path).lstrip("/")
    return full + "/" if path.endswith("/") and not full.endswith("/") else full
