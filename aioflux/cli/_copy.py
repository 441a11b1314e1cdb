"""``aioflux cp``: local <-> gs:// and gs:// -> gs://, parallel, with progress.

Files above ``STREAM_THRESHOLD`` stream through the multipart writer or the
ranged parallel reader (bounded memory); smaller ones go in one request.
``-j`` files are copied at once.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .._errors import InvalidArgument, NotFound
from .._open import open as gs_open
from .._sync import Client
from .._urls import GcsURL, parse_url
from . import command
from ._common import Progress, add_client_arguments, make_client

__all__: list[str] = []

STREAM_THRESHOLD = 16 * 1024 * 1024
_COPY_BUFFER = 8 * 1024 * 1024


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="local path or gs://bucket/name")
    parser.add_argument("dst", help="local path or gs://bucket/name")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="copy a directory or every object under a prefix")
    parser.add_argument("-j", "--jobs", type=int, default=8, help="files copied at once")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")
    add_client_arguments(parser)


def _is_gs(path: str) -> bool:
    return path.startswith("gs://")


def _plan(client: Client, src: str, dst: str, recursive: bool) -> list[tuple[str, str, int]]:
    """(source, destination, size) for every file or object to copy."""
    if _is_gs(src):
        bucket, name = parse_url(src)
        if recursive:
            prefix = name if not name or name.endswith("/") else name + "/"
            objs = list(client.list_objects(bucket, prefix))
            if not objs:
                raise NotFound(f"cp {src}: no objects under it", operation="cp",
                               bucket=bucket, name=name)
            return [(o.url, _join(dst, o.name[len(prefix):]), o.size) for o in objs]
        if not name:
            raise InvalidArgument(f"cp {src}: names a bucket; use -r")
        size = client.stat(bucket, name).size
        return [(src, _into(dst, name.rsplit("/", 1)[-1]), size)]
    path = Path(src)
    if not path.exists():
        raise NotFound(f"cp {src}: no such file or directory", operation="cp")
    if path.is_dir():
        if not recursive:
            raise InvalidArgument(f"cp {src}: is a directory; use -r")
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return [(str(p), _join(dst, p.relative_to(path).as_posix()), p.stat().st_size)
                for p in files]
    return [(src, _into(dst, path.name), path.stat().st_size)]


def _join(base: str, rel: str) -> str:
    if _is_gs(base):
        return str(parse_url(base).join(rel))
    return str(Path(base) / rel)


def _into(dst: str, basename: str) -> str:
    # "cp x gs://b/dir/" and "cp gs://b/x localdir" keep the source's base name.
    if _is_gs(dst):
        return dst + basename if dst.endswith("/") or not parse_url(dst).name else dst
    return str(Path(dst) / basename) if Path(dst).is_dir() or dst.endswith(os.sep) else dst


def _copy_one(client: Client, src: str, dst: str, size: int, progress: Progress) -> None:
    if _is_gs(src) and _is_gs(dst):
        s, d = parse_url(src, require_object=True), parse_url(dst, require_object=True)
        _server_copy(client, s, d)
        progress.add(size)
    elif _is_gs(dst):
        bucket, name = parse_url(dst, require_object=True)
        if size <= STREAM_THRESHOLD:
            client.write(bucket, name, Path(src).read_bytes())
            progress.add(size)
        else:
            with open(src, "rb") as f, gs_open(dst, "wb", client=client) as out:
                while chunk := f.read(_COPY_BUFFER):
                    out.write(chunk)
                    progress.add(len(chunk))
    else:
        bucket, name = parse_url(src, require_object=True)
        target = Path(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".aioflux-partial")
        try:
            # Written under a temporary name and renamed when complete, so an
            # interrupted copy never leaves a truncated file at the target.
            if size <= STREAM_THRESHOLD:
                data = client.read(bucket, name)
                assert isinstance(data, bytes)
                partial.write_bytes(data)
                progress.add(len(data))
            else:
                with gs_open(src, "rb", client=client) as f, open(partial, "wb") as out:
                    while chunk := f.read(_COPY_BUFFER):
                        out.write(chunk)
                        progress.add(len(chunk))
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)


def _server_copy(client: Client, src: GcsURL, dst: GcsURL) -> None:
    from .._bridge import call

    call(client.aio.copy(src.bucket, src.name, dst.bucket, dst.name))


@command("cp", "Copy files and objects (local <-> gs://, gs:// -> gs://).", _args)
def _cp(args: argparse.Namespace) -> int:
    if not (_is_gs(args.src) or _is_gs(args.dst)):
        raise InvalidArgument("cp: one side must be a gs:// URL")
    with make_client(args) as client:
        plan = _plan(client, args.src, args.dst, args.recursive)
        total = sum(size for _, _, size in plan)
        progress = Progress(total, "cp", enabled=args.progress)
        try:
            with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                futures = [pool.submit(_copy_one, client, s, d, n, progress) for s, d, n in plan]
                for future in futures:
                    future.result()
        finally:
            progress.close()
    print(f"copied {len(plan)} file(s), {total} bytes")
    return 0

