"""Object commands: ``ls``, ``stat``, ``cat``, ``rm``, ``du``."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

from .._errors import InvalidArgument, NotFound
from . import command
from ._common import add_client_arguments, emit_json, human, make_client, url_arg

__all__: list[str] = []


def _ls_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", type=url_arg, help="gs://bucket[/prefix]")
    parser.add_argument("-l", "--long", action="store_true", help="size, generation, updated")
    parser.add_argument("-r", "--recursive", action="store_true", help="no '/' grouping")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    add_client_arguments(parser)


@command("ls", "List objects (and prefixes) under gs://bucket[/prefix].", _ls_args)
def _ls(args: argparse.Namespace) -> int:
    bucket, prefix = args.url
    with make_client(args) as client:
        rows: list[dict[str, object]] = []
        for page in client.list(bucket, prefix, delimiter=None if args.recursive else "/",
                                fields=None):
            rows.extend({"prefix": f"gs://{bucket}/{p}"} for p in page.prefixes)
            rows.extend({"url": o.url, "size": o.size, "generation": o.generation,
                         "updated": o.updated} for o in page.objects)
    if args.json:
        emit_json(rows)
        return 0
    for row in rows:
        if "prefix" in row:
            print(f"{'':>12}  {'':>18}  {row['prefix']}" if args.long else row["prefix"])
        elif args.long:
            print(f"{row['size']:>12}  {row['updated'] or '':>18}  {row['url']}")
        else:
            print(row["url"])
    return 0


def _one_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", type=url_arg, help="gs://bucket/name")
    add_client_arguments(parser)


@command("stat", "Show an object's metadata as JSON.", _one_url)
def _stat(args: argparse.Namespace) -> int:
    bucket, name = args.url
    if not name:
        raise InvalidArgument(f"stat gs://{bucket}: the URL names no object")
    with make_client(args) as client:
        info = client.stat(bucket, name)
    emit_json({"url": info.url, "size": info.size, "generation": info.generation,
               "crc32c": info.crc32c, "md5": info.md5, "content_type": info.content_type,
               "updated": info.updated, "metadata": dict(info.metadata)})
    return 0


@command("cat", "Write an object's bytes to stdout.", _one_url)
def _cat(args: argparse.Namespace) -> int:
    from .._open import open as gs_open

    bucket, name = args.url
    if not name:
        raise InvalidArgument(f"cat gs://{bucket}: the URL names no object")
    with make_client(args) as client, gs_open(str(args.url), "rb", client=client) as f:
        out = sys.stdout.buffer
        while chunk := f.read(8 * 1024 * 1024):
            out.write(chunk)
        out.flush()
    return 0


def _rm_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("urls", type=url_arg, nargs="+", help="gs://bucket/name ...")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="delete everything under each URL as a prefix")
    add_client_arguments(parser)


@command("rm", "Delete objects (-r: everything under a prefix).", _rm_args)
def _rm(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        targets: list[tuple[str, str]] = []
        for bucket, name in args.urls:
            if args.recursive:
                found = [(bucket, o.name) for o in client.list_objects(bucket, name)]
                if not found:
                    raise NotFound(f"rm gs://{bucket}/{name}: nothing matches",
                                   operation="rm", bucket=bucket, name=name)
                targets.extend(found)
            elif not name:
                raise InvalidArgument(f"rm gs://{bucket}: names a bucket; use -r with a prefix")
            else:
                targets.append((bucket, name))
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(targets)))) as pool:
            list(pool.map(lambda t: client.delete(*t), targets))
    print(f"removed {len(targets)} object(s)")
    return 0


def _du_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", type=url_arg, help="gs://bucket[/prefix]")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    add_client_arguments(parser)


@command("du", "Total size and object count under gs://bucket[/prefix].", _du_args)
def _du(args: argparse.Namespace) -> int:
    bucket, prefix = args.url
    count = total = 0
    with make_client(args) as client:
        for obj in client.list_objects(bucket, prefix):
            count += 1
            total += obj.size
    if args.json:
        emit_json({"url": str(args.url), "objects": count, "bytes": total})
    else:
        print(f"{total}\t{human(total)}\t{count} objects\t{args.url}")
    return 0
