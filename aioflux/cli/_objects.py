"""Object commands: ``ls``, ``stat``, ``cat``, ``rm``, ``du``.

Each takes URLs of any store (``gs://``, ``s3://``, ``az://``, ``http(s)://``,
``file://``, local paths; ``rm`` none of a web server, which takes no writes) and
reads them the same way (see ``_common``): ``gs://b/a`` names the object
``a`` and the folder ``a/``, never ``a2`` or ``acopy/``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

from .._core.concurrency.portal import get_portal
from .._core.concurrency.window import window
from .._core.errors import InvalidArgument, NotFound, PreconditionFailed
from .._core.records.types import ListPage, ObjectInfo
from .._core.records.urls import StoreURL, folder_prefix, format_url
from .._core.storage.protocol import ObjectStore, ShownEtags, delete_all
from ._common import (
    Stores,
    add_client_arguments,
    emit_json,
    first_under,
    folder_not_object,
    has_folders,
    human,
    is_folder,
    linked_directory,
    list_named,
    portal_store,
    require_match,
    scheme_of,
    url_arg,
)
from ._registry import UsageError, command
from ._signals import run_command
from ._text import missing, one_line, shell_quoted

__all__: list[str] = []

_ANY_URL = ("gs://bucket[/name], s3://bucket[/key], az://container[/blob], "
            "http(s)://host/path, file:///path or a path")
_ONE_URL = ("gs://bucket/name, s3://bucket/key, az://container/blob, http(s)://host/path, "
            "file:///path or a path")
# The listing fields of ls: what a listing asks for (LIST_FIELDS) and the
# ``updated`` that -l and --json show.
_LS_FIELDS = "nextPageToken,prefixes,items(name,size,generation,crc32c,updated)"
# The -l column of generations: GCS's have 16 digits, a file's nanoseconds
# 19, an S3 ETag 32 hex digits and "-<parts>" (up to 10,000) after a
# multipart upload; a wider one widens it from its row on.
_VERSION_WIDTH = 16
_VERSION_WIDTHS = {"file": 19, "s3": 38}
# Deletes in flight for rm: enough to hide latency, well under GCS's
# per-bucket write rate.
_RM_CONCURRENCY = 32


def _ls_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", type=url_arg, help=_ANY_URL)
    parser.add_argument("-l", "--long", action="store_true",
                        help="columns: size, generation (a file's: its mtime in ns; on S3 the "
                             "ETag), updated, URL")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="every object under the folder (no '/' grouping)")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    add_client_arguments(parser)


def _etag(store: ObjectStore, info: ObjectInfo) -> str | None:
    """An S3 object's ETag as S3 tools show it (unquoted; ``<md5>-<parts>``
    after a multipart upload), None on other stores.

    ``info.generation`` is the ETag as a number, 43 digits that no S3 tool
    shows; an MD5 ETag is decoded from it, any other the store recalls from
    the listing or stat that returned it.
    """
    if not isinstance(store, ShownEtags):
        return None
    etag = store._known_etag(info.generation)
    return etag.strip('"') if etag else None


def _row(store: ObjectStore, o: ObjectInfo) -> dict[str, object]:
    row: dict[str, object] = {"url": o.url, "size": o.size, "generation": o.generation,
                              "updated": o.updated}
    etag = _etag(store, o)
    if etag is not None:
        row["etag"] = etag
    return row


def _pages(store: ObjectStore, bucket: str, prefix: str,
           delimiter: str | None) -> AsyncIterator[ListPage]:
    # GCS lists lean fields unless asked: -l and --json show ``updated`` too.
    return store.list(bucket, prefix, delimiter=delimiter, fields=_LS_FIELDS)


async def _ls_pages(store: ObjectStore, url: StoreURL,
                    recursive: bool) -> AsyncIterator[list[dict[str, object]]]:
    """The rows of ``ls``, a page of the listing at a time, in name order.

    Rows are handed on as the pages come rather than gathered and sorted:
    a listing of 10 M objects held every row (~400 bytes each, GBs) and
    printed nothing until its last page. Only the folders of one level
    wait, until no object can come before them: a page lists its prefixes
    apart from its objects, and the objects of every page come in name
    order.
    """
    bucket, name = url
    exact: ObjectInfo | None = None
    if name and not name.endswith("/") and not has_folders(url):
        yield [_row(store, await store.stat(bucket, name))]  # the object, or its 404
        return
    if name and not name.endswith("/"):
        # A listing of prefix "a" would also return "a2" and "acopy/x": look
        # up the exact name, then list the folder.
        try:
            exact = await store.stat(bucket, name)
        except NotFound:
            pass  # only a folder by that name, or nothing (a missing bucket fails below)
    found = exact is not None
    if exact is not None:
        yield [_row(store, exact)]
    folders: list[str] = []  # a heap of the prefixes listed and not yet shown
    seen: set[str] = set()

    def folder(prefix: str) -> dict[str, object]:
        return {"prefix": format_url(url.scheme, bucket, prefix)}

    async for page in _pages(store, bucket, folder_prefix(name), None if recursive else "/"):
        found = found or bool(page.objects or page.prefixes)
        for prefix in page.prefixes:
            if prefix not in seen:
                seen.add(prefix)
                heapq.heappush(folders, prefix)
        rows: list[dict[str, object]] = []
        for obj in page.objects:
            while folders and folders[0] < obj.name:
                rows.append(folder(heapq.heappop(folders)))
            rows.append(_row(store, obj))
        if rows:
            yield rows
    if folders:
        yield [folder(prefix) for prefix in sorted(folders)]
    require_match("ls", url, found)


class _Listing:
    """Prints the rows of ``ls`` as they come: one URL a line, ``-l``
    columns or one JSON document (written a row at a time). A URL holding a
    control character is quoted (:func:`shell_quoted`), so that each row is
    one line; ``--json`` has every name as it is."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._json = args.json
        self._long = args.long
        self._rows = 0
        # The version column fits the widest version seen so far (an S3
        # ETag: 32 hex digits, and "-<parts>" after a multipart upload).
        self._width = _VERSION_WIDTHS.get(args.url.scheme, _VERSION_WIDTH)

    def show(self, rows: list[dict[str, object]]) -> None:
        if self._json:
            for row in rows:
                print("[" if not self._rows else ", ", json.dumps(row, sort_keys=True),
                      sep="", end="")
                self._rows += 1
        elif self._long:
            versions = [str(r.get("etag", r.get("generation", ""))) for r in rows]
            self._width = max([self._width, *map(len, versions)])
            width = self._width
            for row, version in zip(rows, versions, strict=True):
                if "prefix" in row:
                    print(f"{'':>12}  {'':>{width}}  {'':>24}  "
                          f"{shell_quoted(str(row['prefix']))}")
                else:
                    print(f"{row['size']:>12}  {version:>{width}}  "
                          f"{row['updated'] or '':>24}  {shell_quoted(str(row['url']))}")
        else:
            for row in rows:
                print(shell_quoted(str(row.get("prefix") or row["url"])))

    def close(self) -> None:
        if self._json:
            print("]" if self._rows else "[]")


@command("ls", _ls_args)
def _ls(args: argparse.Namespace) -> int:
    listing = _Listing(args)

    async def run() -> None:
        async with Stores(args) as stores:
            async for rows in _ls_pages(stores(args.url), args.url, args.recursive):
                listing.show(rows)

    run_command(run())
    listing.close()
    return 0


def _one_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", type=url_arg, help=_ONE_URL)
    add_client_arguments(parser)


@command("stat", _one_url)
def _stat(args: argparse.Namespace) -> int:
    bucket, name = args.url
    if not name or name.endswith("/"):
        raise UsageError(f"{args.url} names no object")

    async def run() -> dict[str, object]:
        async with Stores(args) as stores:
            store = stores(args.url)
            try:
                info = await store.stat(bucket, name)
            except NotFound:
                await _not_a_folder("stat", store, args.url)
                raise
            row = _row(store, info)
        return {**row, "crc32c": info.crc32c, "md5": info.md5,
                "content_type": info.content_type, "metadata": dict(info.metadata)}

    emit_json(run_command(run()))
    return 0


@command("cat", _one_url)
def _cat(args: argparse.Namespace) -> int:
    from .._api.open import open as open_url

    if not args.url.name or args.url.name.endswith("/"):
        raise UsageError(f"{args.url} names no object")
    if sys.stdout is None:
        # Started with stdout closed (``>&-``): sys.stdout.buffer would be an
        # AttributeError traceback.
        raise InvalidArgument(f"cat {args.url}: stdout is closed; nothing was read")
    out = sys.stdout.buffer
    with portal_store(args, args.url) as store:
        try:
            f = open_url(str(args.url), "rb", client=store)
        except NotFound:
            get_portal().call(_not_a_folder("cat", store, args.url))
            raise
        with f:
            while chunk := f.read(8 * 1024 * 1024):
                out.write(chunk)
            out.flush()
    return 0


async def _not_a_folder(op: str, store: ObjectStore, url: StoreURL) -> None:
    """Raise, where ``url`` named no object, that it names a folder if it does."""
    if await is_folder(store, url):
        raise folder_not_object(op, url, f"{op} takes one object (aioflux ls {url}/ lists "
                                         "the folder)") from None


def _rm_url_arg(value: str) -> StoreURL:
    """argparse type of rm's URLs: :func:`url_arg`, but never a local path
    whose last part is ``.`` or ``..``, which POSIX and GNU ``rm`` refuse.
    A path is made absolute before it is a URL, so ``rm -r d/..`` would name
    the current directory and delete every file in it and under it. A
    ``file://`` URL's path is resolved the same way, so it is refused too."""
    scheme = scheme_of(value)
    path = value.partition("://")[2] if scheme == "file" else value
    if scheme in (None, "file") and os.path.basename(path.rstrip("/")) in (".", ".."):
        raise argparse.ArgumentTypeError(
            f"{value!r}: rm refuses to remove '.' or '..' (name the directory itself)")
    return url_arg(value)


def _rm_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("urls", type=_rm_url_arg, nargs="+",
                        help="gs://bucket/name, s3://bucket/key, az://container/blob, "
                             "file:///path or a path, ...")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="also delete the folder each URL names (gs://b/a: the object 'a' "
                             "and everything under 'a/', never 'a2/')")
    add_client_arguments(parser)


_Target = tuple[ObjectStore, str, str, int | None]


@dataclass(frozen=True)
class _Named:
    """What one URL of ``rm`` names: its folder too (``listed``), or one
    object (an object named without ``-r``, or a symbolic link)."""

    store: ObjectStore
    url: StoreURL
    listed: bool

    def covers(self, store: ObjectStore, bucket: str, name: str) -> bool:
        """Whether ``name`` is one of the objects this URL names."""
        if store is not self.store or bucket != self.url.bucket:
            return False
        if name == self.url.name:
            return True
        return self.listed and name.startswith(folder_prefix(self.url.name))


@dataclass(frozen=True)
class _Batch:
    """Listed objects of one bucket, deleted in one request (S3's DeleteObjects)."""

    store: ObjectStore
    bucket: str
    names: tuple[str, ...]


def _named(stores: Stores, urls: list[StoreURL], recursive: bool) -> list[_Named]:
    """What each URL names, or the usage error of one: before any request."""
    named = []
    for url in urls:
        store = stores(url)
        target = linked_directory(url)
        if target is not None:
            _link(url, target)
            named.append(_Named(store, url, listed=False))
        elif recursive:
            named.append(_Named(store, url, listed=True))
        elif not url.name or url.name.endswith("/"):
            raise UsageError(f"{url} names a bucket or folder; use -r")
        else:
            named.append(_Named(store, url, listed=False))
    return named


async def _require_matches(named: list[_Named]) -> None:
    """Fail before any delete if a URL after the first matches nothing (the
    first's listing finds it out before it deletes anything): ``rm -r a
    nothing`` deleted a's objects, then failed."""
    for entry in named[1:]:
        if not entry.listed:
            continue
        bucket, name = entry.url
        found = False
        if name and not name.endswith("/"):
            try:
                await entry.store.stat(bucket, name)
                found = True
            except NotFound:
                pass
        if not found:
            found = await first_under(entry.store, bucket, folder_prefix(name)) is not None
        require_match("rm", entry.url, found)


async def _targets(named: list[_Named]) -> AsyncIterator[_Target]:
    """The objects to delete, as the listings bring them.

    An object two URLs name (rm -r d d/sub, rm x x) is deleted once, for
    the first URL naming it: its second delete found it gone, and rm exited
    1 after deleting everything (or not, where a batch counts a missing key
    as deleted). Which URL names an object is told by the URLs themselves,
    so nothing listed is kept to find the repeats."""
    for at, entry in enumerate(named):
        earlier = named[:at]
        bucket, name = entry.url
        if not entry.listed:
            if not any(e.covers(entry.store, bucket, name) for e in earlier):
                yield entry.store, bucket, name, None
            continue
        found = False
        async for obj in list_named(entry.store, entry.url):
            found = True
            if not any(e.covers(entry.store, bucket, obj.name) for e in earlier):
                yield entry.store, bucket, obj.name, obj.generation or None
        if at == 0:
            # An empty bucket or local directory matches (as for ls and du,
            # and as cli.md says): nothing to delete, not "nothing matches".
            require_match("rm", entry.url, found)


def _link(url: StoreURL, target: str) -> None:
    """Refuse a symbolic link ``url`` names that rm cannot remove by itself,
    as GNU rm does: rm never deletes through a link to a directory (see
    ``_common``)."""
    if not url.name:
        raise UsageError(f"{url} is a symbolic link to the directory {target} at the top of "
                         f"the filesystem, which rm neither removes nor deletes through: "
                         f"name {target} to delete its files")
    if url.name.endswith("/"):
        raise UsageError(f"{url} names the directory {target} through a symbolic link, "
                         "which rm does not delete through: drop the trailing '/' to remove "
                         f"the link, or name {target} to delete its files")


async def _jobs(targets: AsyncIterator[_Target]) -> AsyncIterator[_Target | _Batch]:
    """The deletes of ``targets``: listed objects in batches where the store
    has batch deletes, each filled to the most one request takes (or
    until the bucket changes, or the listing ends), every other object alone."""
    store: ObjectStore | None = None
    bucket = ""
    names: list[str] = []
    async for target in targets:
        size = target[0].features.batch_delete
        if target[3] is None or not size:
            yield target
            continue
        if names and (target[0] is not store or target[1] != bucket):
            assert store is not None
            yield _Batch(store, bucket, tuple(names))
            names = []
        store, bucket = target[0], target[1]
        names.append(target[2])
        if len(names) >= size:
            yield _Batch(store, bucket, tuple(names))
            names = []
    if names:
        assert store is not None
        yield _Batch(store, bucket, tuple(names))


async def _named_folder(named: list[_Named], store: ObjectStore, bucket: str,
                        name: str) -> NotFound | None:
    """The error of a URL given without ``-r`` that names a folder, as GNU
    rm's "Is a directory" (the other URLs' objects are still deleted)."""
    for entry in named:
        if entry.store is store and tuple(entry.url) == (bucket, name) and not entry.listed:
            if await is_folder(store, entry.url):
                return folder_not_object("rm", entry.url,
                                         "use rm -r to delete it and everything under it")
            return None
    return None


async def _delete(named: list[_Named], targets: AsyncIterator[_Target]) -> tuple[int, int]:
    """Delete what ``_targets`` lists of ``named``, as it lists it; returns how many
    objects were removed and how many could not be. Listed objects go in
    batches where the store has batch deletes (S3: 1000 keys a request);
    elsewhere each is deleted only at the generation listed, since one
    rewritten since was not what the user looked at. A named object goes
    alone, so that a missing one fails (a batch counts it as deleted).

    The deletes start on the listing's first page, ``_RM_CONCURRENCY`` at
    once (a batch takes them all: one DeleteObjects request at a time, as
    S3 is asked for, while the next page is listed); the listing is read
    only as they make room. rm -r held every object of a listing before
    its first delete: a bucket of millions took GBs.

    An object missing, or rewritten since it was listed, fails alone: one
    line on stderr, and the others are still deleted, as GNU rm and gsutil
    do. Stopping at it cancelled the deletes under way and never sent the
    rest, so what survived was chance (``rm -r`` of 200 objects, one
    rewritten meanwhile, deleted none of them). Any other failure
    (permission, network, a listing page that breaks its promise) stops
    ``rm`` at once."""
    removed = failed = 0

    async def delete(job: _Target | _Batch) -> None:
        nonlocal removed, failed
        if isinstance(job, _Batch):
            await delete_all(job.store, job.bucket, job.names, concurrency=_RM_CONCURRENCY)
            removed += len(job.names)
            return
        store, bucket, name, generation = job
        try:
            await store.delete(bucket, name, if_generation_match=generation)
        except (NotFound, PreconditionFailed) as exc:
            if generation is None and isinstance(exc, NotFound):
                exc = await _named_folder(named, store, bucket, name) or exc
            print(f"aioflux rm: {one_line(missing(str(exc), name))}", file=sys.stderr)
            failed += 1
        else:
            removed += 1

    def weight(job: _Target | _Batch) -> int:
        return _RM_CONCURRENCY if isinstance(job, _Batch) else 1

    # In order, as gather_bounded ran them: deletes take alike.
    try:
        async for _ in window(_jobs(targets), delete, limit=_RM_CONCURRENCY, weight=weight):
            pass
    except BaseException:
        # Deleting as the listing comes, a failure (or Ctrl-C) can stop rm
        # with much already gone: say how much, beside the error.
        if removed:
            print(f"aioflux rm: removed {removed} object(s) before stopping", file=sys.stderr)
        raise
    return removed, failed


@command("rm", _rm_args)
def _rm(args: argparse.Namespace) -> int:
    async def run() -> tuple[int, int]:
        async with Stores(args) as stores:
            named = _named(stores, args.urls, args.recursive)
            await _require_matches(named)
            return await _delete(named, _targets(named))

    removed, failed = run_command(run())
    if removed or not failed:  # a failure that removed nothing prints only itself
        print(f"removed {removed} object(s)")
    return 1 if failed else 0


def _du_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", type=url_arg, help=_ANY_URL)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    add_client_arguments(parser)


@command("du", _du_args)
def _du(args: argparse.Namespace) -> int:
    async def run() -> tuple[int, int]:
        count = total = 0
        async with Stores(args) as stores:
            async for obj in list_named(stores(args.url), args.url):
                count += 1
                total += obj.size
        require_match("du", args.url, count > 0)
        return count, total

    count, total = run_command(run())
    if args.json:
        emit_json({"url": str(args.url), "objects": count, "bytes": total})
    else:
        print(f"{total}\t{human(total)}\t{count} objects\t{shell_quoted(str(args.url))}")
    return 0
