"""``aioflux cp``: copy between any two stores (``gs://``, ``s3://``, ``file://`` and
local paths, which are the same filesystem store), parallel, with progress.

Within GCS or S3 the server copies. Otherwise objects up to ``STREAM_THRESHOLD``
go in one read and one write (a file copy, within the filesystem), and
larger ones stream: ranged reads of ``_CHUNK`` bytes, ``_RANGES_IN_FLIGHT``
at once and in order, into the destination's streaming writer
(:class:`~aioflux._engines.async_writer.AsyncObjectWriter`), so one file
holds about 136 MiB at most (parts grow only past 80 GB, to stay within
the store's part count), and the crc32c of what was read is checked against
the source's before anything is published.

A copy between stores keeps the object's content type and custom metadata
where both stores have them: GCS and S3 do, files have neither (a file
uploads as ``application/octet-stream``, and a download drops both). Within
GCS or S3 the server's copy keeps both.

``-j`` files are copied at once, all on one event loop, so Ctrl-C (or
SIGTERM) cancels every transfer at once: multipart uploads and resumable
sessions are aborted, the destination's temporary files removed, and
nothing is published but files that had finished (exit 130, or 143).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from dataclasses import dataclass

from .._core.crc import crc32c_combine, encode_crc32c
from .._core.errors import ChecksumMismatch, InvalidArgument, NotFound
from .._core.options import WriterOptions
from .._core.store import Fetched, ObjectStore, StoreFeatures
from .._core.types import ObjectInfo
from .._core.urls import StoreURL, folder_prefix, validate_object_name
from .._core.window import gather_bounded, window
from .._engines.async_writer import AsyncObjectWriter
from ..local._files import path_of
from ._common import (
    Progress,
    Stores,
    add_client_arguments,
    int_at_least,
    list_named,
    require_match,
    url_arg,
)
from ._registry import UsageError, command
from ._signals import run_command

__all__: list[str] = []

STREAM_THRESHOLD = 16 * 1024 * 1024
_CHUNK = 8 * 1024 * 1024
# Ranged reads in flight per streamed file: 8 x 8 MiB keeps several
# connections busy and bounds the reads of one file at 64 MiB; the writer
# adds its parts (8 MiB x 9: as many uploading as reads in flight, and the
# one filling).
_RANGES_IN_FLIGHT = 8
_PARTS_IN_FLIGHT = 8
# The content type of a copy whose source has none (a file): the one the
# stores' own write defaults to.
_DEFAULT_CONTENT_TYPE = "application/octet-stream"


def _copy_url_arg(value: str) -> StoreURL:
    """argparse type of SRC and DST: :func:`url_arg`, but never ``-``, which
    gsutil and ``aws s3 cp`` take for stdin or stdout: ``cp gs://b/x - |
    tar x`` wrote a file named ``-`` and piped "copied 1 file(s)" to tar."""
    if value == "-":
        raise argparse.ArgumentTypeError(
            "'-': cp copies files and objects, not stdin or stdout (to write an object to "
            "stdout: aioflux cat URL; a file named '-': ./-)")
    return url_arg(value)


def _args(parser: argparse.ArgumentParser) -> None:
    where = "gs://bucket/name, s3://bucket/key, az://container/blob, file:///path or a local path"
    parser.add_argument("src", type=_copy_url_arg, help=where)
    parser.add_argument("dst", type=_copy_url_arg, help=where)
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="copy the folder a URL names: gs://b/a (or the directory a) "
                             "copies everything under 'a/' (never 'a2' or 'acopy/'), or the "
                             "object 'a' when there is no such folder")
    parser.add_argument("-j", "--jobs", type=int_at_least(1), default=8,
                        help="files copied at once (default 8)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")
    add_client_arguments(parser)


@dataclass(frozen=True)
class _Item:
    src: ObjectInfo  # the source object, as stat or the listing saw it
    dst: StoreURL
    # From a listing, which names no content type or custom metadata (S3's
    # has no place for them, and GCS's is asked for only the fields that
    # every listing needs).
    listed: bool = False

    @property
    def src_url(self) -> StoreURL:
        return StoreURL(self.src.bucket, self.src.name, self.src.scheme)


async def _plan(stores: Stores, src: StoreURL, dst: StoreURL, recursive: bool) -> list[_Item]:
    """What to copy: every source object with its destination."""
    store = stores(src)
    if recursive:
        return await _plan_folder(store, src, dst)
    if not src.name or src.name.endswith("/"):
        raise UsageError(f"{src} names a bucket or folder; use -r")
    try:
        info = await store.stat(src.bucket, src.name)
    except NotFound as missing:
        try:
            folder = await _first(store, src)
        except NotFound:
            raise missing from None
        if folder:  # a directory, or a folder of objects
            raise UsageError(f"{src} names a folder; use -r") from None
        raise
    return [_Item(info, _into(dst, src.name.rsplit("/", 1)[-1]))]


async def _first(store: ObjectStore, url: StoreURL) -> list[ObjectInfo]:
    async for page in store.list(url.bucket, folder_prefix(url.name), page_size=1):
        return page.objects[:1]
    return []


async def _plan_folder(store: ObjectStore, url: StoreURL, dst: StoreURL) -> list[_Item]:
    prefix = folder_prefix(url.name)
    exact: ObjectInfo | None = None
    items: list[_Item] = []
    into = folder_prefix(dst.name)
    placeholders = False
    async for obj in list_named(store, url):
        if obj.name == url.name and not url.name.endswith("/"):
            exact = obj
            continue
        # The name under the folder, exactly: StoreURL.join drops empty
        # segments, and "src//a" and "src/a" (or "src/d/" and "src/d")
        # overwrote one destination. The folder's own placeholder ("src/",
        # listed for "src/") is the destination folder's: it was taken for
        # an object "src" and copied to an empty file.
        name = into + obj.name[len(prefix):]
        if not name:
            continue  # a bucket's root has no placeholder to copy
        if dst.scheme == "file" and name.endswith("/"):
            # A folder placeholder is no file (as gcloud storage skips them).
            print(f"aioflux cp: skipped {obj.url}: a folder placeholder is no file",
                  file=sys.stderr)
            placeholders = True
            continue
        # Before any copy: a name the destination cannot hold (on disk
        # "a//b" or "./a") fails the whole command, as a bad URL does.
        validate_object_name(name, arg=f"destination of {obj.url}", scheme=dst.scheme)
        items.append(_Item(obj, StoreURL(dst.bucket, name, dst.scheme), listed=True))
    if exact is not None:
        if not items:
            return [_Item(exact, _into(dst, url.name.rsplit("/", 1)[-1]))]
        # The folder's contents land in dst itself: the object 'a' has no
        # place there that could not collide with them.
        print(f"aioflux cp: skipped {exact.url}: an object and a folder share the name; "
              "copy it without -r", file=sys.stderr)
    # An empty bucket or directory copies nothing; so does a folder of placeholders alone.
    require_match("cp", url, bool(items) or placeholders)
    return items


def _refuse_copies_onto_themselves(plan: list[_Item]) -> None:
    """Fail before any copy if an object would be copied onto itself, as S3
    refuses and ``gcloud storage cp`` does ("Source URL matches destination
    URL"): GCS would rewrite it as a new generation and the filesystem
    replace it, and either reported a copy that made nothing new."""
    for item in plan:
        if item.src_url == item.dst:
            raise InvalidArgument(f"cp {item.src_url}: the source and destination are the "
                                  "same object; nothing was copied")
    # A destination that is another source of the same copy (``cp -r a
    # a/b`` once a/b/ holds objects) was overwritten while, or before, it
    # was read: with a/x and a/b/x, a/b/x took a/x's bytes and so did
    # a/b/b/x, and a/b/x's own were lost (exit 0). Refused, as GNU cp
    # refuses to copy a directory into itself.
    sources = {item.src_url for item in plan if item.dst.bucket == item.src.bucket
               and item.dst.scheme == item.src.scheme}  # none other can be overwritten
    for item in plan:
        if item.dst in sources:
            raise InvalidArgument(f"cp {item.src_url}: its destination {item.dst} is also a "
                                  "source of this copy (a folder copied into itself), and "
                                  "could be overwritten before it is read; nothing was copied")


def _refuse_special_destinations(plan: list[_Item]) -> None:
    """Fail before any copy if a local destination is there and is not a
    regular file or a directory: a file is written beside it and renamed
    over it, so a device, FIFO or symbolic link (``/dev/null``, ``/dev/stdout``)
    was replaced by a regular file holding the data, and exit 0."""
    for item in plan:
        if item.dst.scheme != "file":
            continue
        path = path_of(item.dst.bucket, item.dst.name)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            raise InvalidArgument(f"cp {item.src_url}: the destination {path} is a symbolic "
                                  "link, which cp would replace, not write through; name "
                                  f"its target ({os.path.realpath(path)}); nothing was copied")
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InvalidArgument(f"cp {item.src_url}: the destination {path} is not a regular "
                                  "file (a device or FIFO), which cp would replace; use "
                                  "'aioflux cat' to write into it; nothing was copied")


def _into(dst: StoreURL, basename: str) -> StoreURL:
    # "cp x gs://b", "cp x gs://b/dir/" and "cp gs://b/x localdir" keep the
    # source's base name.
    if not dst.name or dst.name.endswith("/"):
        return dst.join(basename)
    if dst.scheme == "file" and os.path.isdir(f"/{dst.bucket}/{dst.name}"):
        return dst.join(basename)
    return dst


def _writer_options(size: int, features: StoreFeatures) -> WriterOptions:
    """Parts of ``_CHUNK`` (one ranged read each), larger where the store's
    smallest part or its part count limit needs it, on its granularity;
    ``_PARTS_IN_FLIGHT`` of them uploading. The writer's default of 16 held
    8 MiB x 17 beside the reads: a streamed copy peaked at ~245 MiB, not
    the 136 MiB cli.md states (and 8 files at once, -j 8, near 2 GB)."""
    part = max(_CHUNK, features.min_part_size, -(-size // features.max_parts))
    part = -(-part // features.part_granularity) * features.part_granularity
    return WriterOptions(part_size=part, max_in_flight=_PARTS_IN_FLIGHT)


def _keeps_attributes(source: ObjectStore, target: ObjectStore) -> bool:
    """Whether a copy from ``source`` to ``target`` carries a content type
    and custom metadata: not from or to files, which have neither."""
    return "file" not in (source.features.scheme, target.features.scheme)


async def _stream(source: ObjectStore, info: ObjectInfo, target: ObjectStore, dst: StoreURL,
                  content_type: str, metadata: dict[str, str] | None,
                  progress: Progress) -> None:
    """Copy a large object between two stores in bounded memory."""
    ranges = [(start, min(start + _CHUNK, info.size)) for start in range(0, info.size, _CHUNK)]

    async def read(span: tuple[int, int]) -> Fetched:
        # The generation is pinned: an overwrite mid-copy fails instead of
        # mixing two versions.
        return await source.fetch(info.bucket, info.name, start=span[0], end=span[1],
                                  generation=info.generation or None, size=info.size,
                                  want_crc=True)

    whole: int | None = None
    # On any exception, cancellation included, the writer aborts its upload
    # (or removes its temporary file): nothing is published.
    async with AsyncObjectWriter(target, dst.bucket, dst.name,
                                 options=_writer_options(info.size, target.features),
                                 content_type=content_type, metadata=metadata) as out:
        async for (start, end), fetched in window(ranges, read, limit=_RANGES_IN_FLIGHT):
            assert fetched.data is not None and fetched.crc is not None
            whole = fetched.crc if whole is None else crc32c_combine(whole, fetched.crc,
                                                                     end - start)
            await out.write(fetched.data)
            progress.add(len(fetched.data))
        if info.crc32c is not None and whole != info.crc32c:
            raise ChecksumMismatch(
                f"cp {info.url}: the {info.size} bytes read have crc32c "
                f"{encode_crc32c(whole or 0)}, the object's is {encode_crc32c(info.crc32c)}",
                operation="read", bucket=info.bucket, name=info.name)


async def _copy_one(stores: Stores, item: _Item, progress: Progress) -> None:
    info, dst = item.src, item.dst
    source, target = stores(item.src_url), stores(dst)
    limit = source.features.copy_limit
    if source is target and (info.size <= STREAM_THRESHOLD or source.features.scheme != "file") \
            and (not limit or info.size <= limit):
        # Object stores copy on the server (past a store's declared
        # copy_limit, the object streams). A filesystem copy runs in a thread that Ctrl-C cannot
        # stop, so a large file streams instead, in ranges the cancellation
        # can stop between (its temporary file is removed).
        await source.copy(info.bucket, info.name, dst.bucket, dst.name)
        progress.add(info.size)
        return
    keeps = _keeps_attributes(source, target)
    if keeps and item.listed:
        # A listed record lacks the content type and metadata; the copy then
        # pins the version this stat describes.
        info = await source.stat(info.bucket, info.name)
    content_type = info.content_type or _DEFAULT_CONTENT_TYPE
    metadata = dict(info.metadata) if keeps and info.metadata else None
    if info.size <= STREAM_THRESHOLD:
        data = await source.read(info.bucket, info.name, generation=info.generation or None)
        # One request: cancelled mid-body, the server publishes nothing.
        await target.write(dst.bucket, dst.name, data, content_type=content_type,
                           metadata=metadata, resumable=False)
        progress.add(info.size)
    else:
        await _stream(source, info, target, dst, content_type, metadata, progress)


@command("cp", "Copy files and objects between any two stores (gs://, s3://, az://, file://, "
         "local paths).", _args)
def _cp(args: argparse.Namespace) -> int:
    async def run() -> tuple[int, int]:
        async with Stores(args) as stores:
            stores(args.dst)  # a destination without a store fails before any read
            plan = await _plan(stores, args.src, args.dst, args.recursive)
            _refuse_copies_onto_themselves(plan)
            _refuse_special_destinations(plan)
            total = sum(item.src.size for item in plan)
            progress = Progress(total, "cp", enabled=args.progress)
            try:
                # On the first failure, or on Ctrl-C or SIGTERM (asyncio.run or run_command
                # cancels this task), the copies still running are cancelled
                # and drained.
                await gather_bounded((_copy_one(stores, item, progress) for item in plan),
                                     args.jobs)
            finally:
                progress.close()
            return len(plan), total

    count, total = run_command(run())
    print(f"copied {count} file(s), {total} bytes")
    return 0
