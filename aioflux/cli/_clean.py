"""``aioflux clean gs://bucket[/prefix]``: delete leftover composites and
abort open multipart uploads that interrupted processes left behind."""

from __future__ import annotations

import argparse
import asyncio

from .._clean import CleanReport, clean_bucket
from .._client import AsyncClient
from .._urls import parse_url
from . import command

__all__: list[str] = []


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="gs://bucket or gs://bucket/prefix")
    parser.add_argument("--dry-run", action="store_true", help="report, change nothing")
    parser.add_argument("--older-than", type=float, default=None, metavar="SECONDS",
                        help="only touch composites and uploads at least this old")


async def _clean(url: str, dry_run: bool, older_than: float | None) -> CleanReport:
    parsed = parse_url(url)
    async with AsyncClient() as client:
        return await clean_bucket(client, parsed.bucket, parsed.name, dry_run=dry_run,
                                  older_than=older_than)


@command("clean", "Delete leftover composed objects and abort open multipart uploads.",
         _configure)
def _run(args: argparse.Namespace) -> int:
    report = asyncio.run(_clean(args.url, args.dry_run, args.older_than))
    verb = ("would delete", "would abort") if report.dry_run else ("deleted", "aborted")
    for url in report.composites:
        print(f"{verb[0]} {url}")
    for upload in report.uploads:
        print(f"{verb[1]} upload {upload.upload_id} of gs://{upload.bucket}/{upload.name}")
    for error in report.errors:
        print(f"error: {error}")
    print(f"{len(report.composites)} composed objects, {len(report.uploads)} multipart uploads"
          f"{' (dry run)' if report.dry_run else ''}, {len(report.errors)} errors")
    return 0 if report.ok else 1
