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

``cp -r`` holds no plan of the whole folder: copies start on the first
listing page, ``-j`` at a time, and the listing is read only as they make
room, so what waits is one page and the copies in flight, however many
objects the folder holds (``_copy_plan`` says what is checked before).

``-j`` files are copied at once, all on one event loop, so Ctrl-C (or
SIGTERM) cancels every transfer at once: multipart uploads and resumable
sessions are aborted, the destination's temporary files removed, and
nothing is published but files that had finished (exit 130, or 143).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
from collections.abc import AsyncIterator, Iterable

from .._core.concurrency.window import window
from .._core.errors import ChecksumMismatch
from .._core.integrity.crc import crc32c_combine, encode_crc32c
from .._core.integrity.md5 import md5_update
from .._core.records.types import ObjectInfo
from .._core.records.urls import StoreURL
from .._core.settings.options import WriterOptions
from .._core.storage.protocol import Fetched, ObjectStore, StoreFeatures
from .._engines.async_writer import AsyncObjectWriter
from ._common import Stores, add_client_arguments, int_at_least, url_arg
from ._copy_plan import Folder, Item, refuse, single
from ._progress import Progress, throttling
from ._registry import command
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
    parser.add_argument("src", type=_copy_url_arg,
                        help=where.replace(", file:", ", http(s)://host/path, file:"))
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
    # Where the store keeps no crc32c, the MD5 a plain S3 ETag is: of the
    # ranges in order, as they come (window() yields them in order).
    md5 = hashlib.md5(usedforsecurity=False) \
        if info.crc32c is None and info.md5 is not None else None
    # On any exception, cancellation included, the writer aborts its upload
    # (or removes its temporary file): nothing is published.
    async with AsyncObjectWriter(target, dst.bucket, dst.name,
                                 options=_writer_options(info.size, target.features),
                                 content_type=content_type, metadata=metadata) as out:
        async for (start, end), fetched in window(ranges, read, limit=_RANGES_IN_FLIGHT):
            assert fetched.data is not None and fetched.crc is not None
            whole = fetched.crc if whole is None else crc32c_combine(whole, fetched.crc,
                                                                     end - start)
            if md5 is not None:
                await md5_update(md5, fetched.data)
            await out.write(fetched.data)
            progress.add(len(fetched.data))
        _check_whole(info, whole, md5)


def _check_whole(info: ObjectInfo, crc: int | None, md5: hashlib._Hash | None) -> None:
    """The bytes streamed are the object's, by its crc32c or its MD5."""
    if info.crc32c is not None and crc != info.crc32c:
        raise ChecksumMismatch(
            f"cp {info.url}: the {info.size} bytes read have crc32c "
            f"{encode_crc32c(crc or 0)}, the object's is {encode_crc32c(info.crc32c)}",
            operation="read", bucket=info.bucket, name=info.name)
    if md5 is not None and (digest := base64.b64encode(md5.digest()).decode()) != info.md5:
        raise ChecksumMismatch(
            f"cp {info.url}: the {info.size} bytes read have MD5 {digest}, the object's "
            f"ETag says {info.md5}", operation="read", bucket=info.bucket, name=info.name)


async def _copy_one(stores: Stores, item: Item, progress: Progress) -> None:
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
    unchecked = info.size > STREAM_THRESHOLD and info.crc32c is None and info.md5 is None
    if item.listed and (keeps or unchecked):
        # A listed record lacks the content type and metadata, and on S3
        # the MD5 its ETag is, which checks a stream without a crc32c; the
        # copy then pins the version this stat describes.
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


@command("cp", _args)
def _cp(args: argparse.Namespace) -> int:
    async def run() -> tuple[int, int, int]:
        async with Stores(args) as stores:
            target = stores(args.dst)  # a destination without a store fails before any read
            source = stores(args.src)
            items: Iterable[Item] | AsyncIterator[Item]
            if args.recursive:
                folder = Folder(source, args.src, args.dst, same_store=source is target)
                await folder.check()
                items, total = folder.items(), 0  # the total is not known before the end
            else:
                item = await single(source, args.src, args.dst)
                refuse(item)
                folder, items, total = None, [item], item.src.size
            # The line says when the service throttles the copy, and the pace.
            progress = Progress(total, "cp", enabled=args.progress,
                                note=lambda: throttling(stores.stats()))
            copied = size = 0
            finished = False
            try:
                # Copies start as the listing brings their objects, --jobs at
                # once, each slot refilled as its copy ends (in order, one
                # large file held the slots of the small ones done after it).
                # On the first failure, or on Ctrl-C or SIGTERM (run_command
                # cancels this task), the copies still running are cancelled
                # and drained.
                async for done, _ in window(items, lambda item: _copy_one(stores, item, progress),
                                            limit=args.jobs, ordered=False):
                    copied += 1
                    size += done.src.size
                finished = True
            finally:
                progress.close()
                if not finished and copied:
                    # Copying as the listing comes, a failure (or Ctrl-C)
                    # can stop cp with much already copied: say how much.
                    print(f"aioflux cp: copied {copied} file(s), {size} bytes before stopping",
                          file=sys.stderr)
            return copied, size, folder.refused if folder is not None else 0

    count, total, refused = run_command(run())
    print(f"copied {count} file(s), {total} bytes")
    return 1 if refused else 0
