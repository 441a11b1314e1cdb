"""``aioflux cp``: local <-> gs:// and gs:// -> gs://, parallel, with progress.

Files above ``STREAM_THRESHOLD`` stream through the multipart writer or
parallel ranged reads (bounded memory); smaller ones go in one request.
``-j`` files are copied at once. Everything runs on one event loop, so
Ctrl-C cancels every transfer at once: open multipart uploads and resumable
sessions are aborted, ``*.aioflux-partial`` files removed, and nothing is
published but files that had finished (exit 130).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .._core.crc import crc32c, crc32c_combine, encode_crc32c
from .._core.errors import ChecksumMismatch, NotFound
from .._core.types import ObjectInfo
from .._core.urls import GcsURL, parse_url
from .._core.window import gather_bounded
from .._engines.async_writer import AsyncObjectWriter
from ..gcs._client import AsyncClient
from ._common import (
    Progress,
    add_client_arguments,
    async_client,
    folder_prefix,
    int_at_least,
    list_named,
    scheme_of,
)
from ._registry import UsageError, command

__all__: list[str] = []

STREAM_THRESHOLD = 16 * 1024 * 1024
_CHUNK = 8 * 1024 * 1024
# Ranged GETs in flight per large download: 8 x 8 MiB bounds the memory of
# one file at 64 MiB while keeping several connections busy.
_RANGES_IN_FLIGHT = 8
PARTIAL_SUFFIX = ".aioflux-partial"


def _location(value: str) -> str:
    """argparse type: a local path or a valid gs:// URL; other schemes are usage errors."""
    scheme = scheme_of(value)
    if scheme is None:
        return value
    if scheme != "gs":
        raise argparse.ArgumentTypeError(
            f"unsupported URL scheme {scheme}:// in {value!r}: only gs:// and local paths")
    try:
        parse_url(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", type=_location, help="local path or gs://bucket/name")
    parser.add_argument("dst", type=_location, help="local path or gs://bucket/name")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="copy a directory, or the folder a URL names: gs://b/a copies "
                             "everything under 'a/' (never 'a2' or 'acopy/'), or the object "
                             "'a' when there is no such folder")
    parser.add_argument("-j", "--jobs", type=int_at_least(1), default=8,
                        help="files copied at once (default 8)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")
    add_client_arguments(parser)


@dataclass(frozen=True)
class _Item:
    src: str
    dst: str
    size: int
    info: ObjectInfo | None = None  # the source object, when it is one


def _is_gs(path: str) -> bool:
    return path.startswith("gs://")


async def _plan(client: AsyncClient, src: str, dst: str, recursive: bool) -> list[_Item]:
    """What to copy: every file or object with its destination and size."""
    if _is_gs(src):
        url = parse_url(src)
        if recursive:
            return await _plan_objects(client, url, dst)
        if not url.name or url.name.endswith("/"):
            raise UsageError(f"{src} names a bucket or folder; use -r")
        info = await client.stat(url.bucket, url.name)
        return [_Item(src, _into(dst, url.name.rsplit("/", 1)[-1]), info.size, info)]
    path = Path(src)
    if not path.exists():
        raise NotFound(f"cp {src}: no such file or directory", operation="cp")
    if path.is_dir():
        if not recursive:
            raise UsageError(f"{src} is a directory; use -r")
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return [_Item(str(p), _join(dst, p.relative_to(path).as_posix()), p.stat().st_size)
                for p in files]
    return [_Item(src, _into(dst, path.name), path.stat().st_size)]


async def _plan_objects(client: AsyncClient, url: GcsURL, dst: str) -> list[_Item]:
    prefix = folder_prefix(url.name)
    exact: ObjectInfo | None = None
    items: list[_Item] = []
    async for obj in list_named(client, url):
        if obj.name == url.name:
            exact = obj
        else:
            items.append(_Item(obj.url, _join(dst, obj.name[len(prefix):]), obj.size, obj))
    if exact is not None:
        if not items:
            return [_Item(exact.url, _into(dst, url.name.rsplit("/", 1)[-1]), exact.size, exact)]
        # The folder's contents land in dst itself: the object 'a' has no
        # place there that could not collide with them.
        print(f"aioflux cp: skipped {exact.url}: an object and a folder share the name; "
              "copy it without -r", file=sys.stderr)
    if not items:
        raise NotFound(f"cp {url}: nothing matches (no object {url.name!r} and no folder "
                       f"{prefix!r})", operation="cp", bucket=url.bucket, name=url.name)
    return items


def _join(base: str, rel: str) -> str:
    if _is_gs(base):
        return str(parse_url(base).join(rel))
    return str(Path(base) / rel)


def _into(dst: str, basename: str) -> str:
    # "cp x gs://b", "cp x gs://b/dir/" and "cp gs://b/x localdir" keep the
    # source's base name.
    if _is_gs(dst):
        url = parse_url(dst)
        return str(url.join(basename)) if not url.name or url.name.endswith("/") else dst
    return str(Path(dst) / basename) if Path(dst).is_dir() or dst.endswith(os.sep) else dst


async def _upload(client: AsyncClient, item: _Item, progress: Progress) -> None:
    bucket, name = parse_url(item.dst, require_object=True)
    if item.size <= STREAM_THRESHOLD:
        # One request: cancelled mid-body, the server publishes nothing.
        await client.write(bucket, name, Path(item.src).read_bytes(), resumable=False)
        progress.add(item.size)
        return
    # On any exception, cancellation included, the writer aborts its upload.
    async with AsyncObjectWriter(client, bucket, name) as out:
        with open(item.src, "rb") as f:
            while chunk := f.read(_CHUNK):
                await out.write(chunk)
                progress.add(len(chunk))


async def _download(client: AsyncClient, item: _Item, progress: Progress) -> None:
    assert item.info is not None
    info = item.info
    target = Path(item.dst)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + PARTIAL_SUFFIX)
    try:
        # Written under a temporary name and renamed when complete, so an
        # interrupted copy never leaves a truncated file at the target.
        if info.size <= STREAM_THRESHOLD:
            data = await client.read(info.bucket, info.name)
            partial.write_bytes(data)
            progress.add(len(data))
        else:
            await _download_ranged(client, info, partial, progress)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


async def _download_ranged(client: AsyncClient, info: ObjectInfo, partial: Path,
                           progress: Progress) -> None:
    ranges = [(start, min(start + _CHUNK, info.size)) for start in range(0, info.size, _CHUNK)]
    crcs = [0] * len(ranges)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        async def fetch(i: int, start: int, end: int) -> None:
            # The generation is pinned: an overwrite mid-copy fails instead
            # of mixing two versions.
            data = await client.read(info.bucket, info.name, start=start, end=end,
                                     generation=info.generation or None)
            crcs[i] = crc32c(data)
            os.pwrite(fd, data, start)
            progress.add(len(data))

        await gather_bounded((fetch(i, s, e) for i, (s, e) in enumerate(ranges)),
                             _RANGES_IN_FLIGHT)
    finally:
        os.close(fd)
    whole = crcs[0]
    for (start, end), crc in zip(ranges[1:], crcs[1:], strict=True):
        whole = crc32c_combine(whole, crc, end - start)
    if info.crc32c is not None and whole != info.crc32c:
        raise ChecksumMismatch(
            f"cp {info.url}: the {info.size} bytes read have crc32c {encode_crc32c(whole)}, "
            f"the object's is {encode_crc32c(info.crc32c)}",
            operation="read", bucket=info.bucket, name=info.name)


async def _copy_one(client: AsyncClient, item: _Item, progress: Progress) -> None:
    if _is_gs(item.src) and _is_gs(item.dst):
        s, d = parse_url(item.src, require_object=True), parse_url(item.dst, require_object=True)
        await client.copy(s.bucket, s.name, d.bucket, d.name)
        progress.add(item.size)
    elif _is_gs(item.dst):
        await _upload(client, item, progress)
    else:
        await _download(client, item, progress)


@command("cp", "Copy files and objects (local <-> gs://, gs:// -> gs://).", _args)
def _cp(args: argparse.Namespace) -> int:
    if not (_is_gs(args.src) or _is_gs(args.dst)):
        raise UsageError("one side must be a gs:// URL")

    async def run() -> tuple[int, int]:
        async with async_client(args) as client:
            plan = await _plan(client, args.src, args.dst, args.recursive)
            total = sum(item.size for item in plan)
            progress = Progress(total, "cp", enabled=args.progress)
            try:
                # On the first failure, or on Ctrl-C (asyncio.run cancels this
                # task), the copies still running are cancelled and drained.
                await gather_bounded((_copy_one(client, item, progress) for item in plan),
                                     args.jobs)
            finally:
                progress.close()
            return len(plan), total

    count, total = asyncio.run(run())
    print(f"copied {count} file(s), {total} bytes")
    return 0
