"""``aioflux clean URL``: delete leftover composites and abort open multipart
uploads that interrupted processes left behind, on any store: on the local
filesystem the open uploads are the temporary files of writes that never
finished (a killed ``torch.save``), which the store reports as such.

Only leftovers older than ``--older-than`` (default 24 h, see
:data:`aioflux._engines.clean.DEFAULT_OLDER_THAN`) are touched, so a checkpoint
upload another process is streaming right now survives; each one left
alone is printed with the reason.
"""

from __future__ import annotations

import argparse
import re
import sys

from .._core.records.urls import format_url
from .._engines.clean import DEFAULT_OLDER_THAN, CleanReport, clean_bucket
from ._common import Stores, add_client_arguments, url_arg
from ._registry import command
from ._signals import run_command
from ._text import one_line, shell_quoted

__all__: list[str] = []

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_arg(value: str) -> float:
    """argparse type: seconds, or a number with s, m, h or d (``90m``, ``24h``)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*", value.lower())
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 3600, 90m, 24h or 0, got {value!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _show(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", type=url_arg,
                        help="gs://bucket[/name], s3://bucket[/name], az://container[/name], "
                             "file:///path or a local path: uploads of the object name and "
                             "under name/, never of name2/")
    parser.add_argument("--dry-run", action="store_true", help="report, change nothing")
    parser.add_argument("--older-than", type=duration_arg, default=DEFAULT_OLDER_THAN,
                        metavar="AGE",
                        help="only touch composites and uploads at least this old: seconds or "
                             f"30m, 6h, 2d (default {_show(DEFAULT_OLDER_THAN)}, longer than any "
                             "live upload runs); 0 also aborts uploads of processes still "
                             "running")
    add_client_arguments(parser)


def _print(report: CleanReport, scheme: str) -> None:
    verb = ("would delete", "would abort") if report.dry_run else ("deleted", "aborted")
    for url in report.composites:
        print(f"{verb[0]} {shell_quoted(url)}")
    for upload in report.uploads:
        print(f"{verb[1]} upload {upload.upload_id} of "
              f"{shell_quoted(format_url(scheme, upload.bucket, upload.name))}")
    for skipped in report.skipped:
        age = "of unknown age" if skipped.age is None else f"{_show(round(skipped.age))} old"
        print(f"skipped {one_line(skipped.what)}: {age}, younger than --older-than "
              f"{_show(report.older_than)} (may belong to a running process)")
    if report.uploads_unlisted:
        print(f"skipped multipart uploads: {report.uploads_unlisted}")
    for error in report.errors:
        # A failure is one line on stderr, as for every command: on stdout,
        # "error: ..." went into what a script parses and left stderr empty.
        print(f"aioflux clean: {one_line(error)}", file=sys.stderr)
    print(f"{len(report.composites)} composed objects, {len(report.uploads)} multipart uploads"
          f"{' (dry run)' if report.dry_run else ''}, {len(report.skipped)} skipped, "
          f"{len(report.errors)} errors")


@command("clean", _configure)
def _run(args: argparse.Namespace) -> int:
    async def run() -> CleanReport:
        async with Stores(args) as stores:
            return await clean_bucket(stores(args.url), args.url.bucket, args.url.name,
                                      dry_run=args.dry_run, older_than=args.older_than)

    report = run_command(run())
    _print(report, args.url.scheme)
    return 0 if report.ok else 1
