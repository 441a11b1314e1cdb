"""Remove what interrupted aioflux processes leave in a bucket: composites
under :data:`COMPOSED_PREFIX` (only names of the shape the planner gives
them, see :func:`is_composite`) and open XML multipart uploads.

A process that exits normally deletes its own composites (``finally`` plus
the exit registry); one that is killed cannot, and an aborted checkpoint
writer may leave an upload open, which GCS keeps (and bills) until aborted.

Neither carries the id of a process that could be asked whether it is
still alive, so age is the only safe test: by default only leftovers at
least :data:`DEFAULT_OLDER_THAN` old are touched, and one whose age is
unknown is never touched unless the caller opts in with ``older_than=0``.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

from .._core.checks.pages import UploadListingCheck
from .._core.concurrency.window import gather_bounded
from .._core.errors import InvalidRequest, NotFound, StorageError
from .._core.records.types import MultipartUploadInfo, ObjectInfo
from .._core.records.urls import folder_prefix, format_url
from .._core.storage.protocol import ObjectStore
from .compose import COMPOSED_PREFIX, is_composite

__all__ = ["DEFAULT_OLDER_THAN", "CleanReport", "Skipped", "clean_bucket"]

# Deletes and aborts in flight; small, because clean is rare and write-heavy
# traffic counts against the bucket's write rate.
_CLEAN_CONCURRENCY = 16

DEFAULT_OLDER_THAN = 24 * 3600.0
"""Seconds: the default minimum age of what ``clean`` removes. A composite
lives for the seconds a download takes, and a multipart upload for as long
as its writer streams: a 1 TB checkpoint at 100 MB/s takes about 3 h. A
day is far beyond any live writer, and leftovers only cost storage, so
removing them a day late costs little, while removing a live one fails a
checkpoint (``NoSuchUpload``)."""


@dataclass(frozen=True)
class Skipped:
    """A leftover candidate that :func:`clean_bucket` left alone.

    Attributes:
        what: ``gs://`` URL of the composite, or ``upload ID of gs://...``.
        age: seconds since it was created (``None``: unknown).
    """

    what: str
    age: float | None


@dataclass
class CleanReport:
    """What :func:`clean_bucket` did (or, with ``dry_run``, would do).

    Attributes:
        bucket: the bucket.
        dry_run: nothing was changed.
        older_than: the minimum age applied, in seconds.
        composites: URLs of composites deleted (or to delete); one whose
            delete failed is in ``errors`` instead.
        uploads: multipart uploads aborted (or to abort); one whose abort
            failed is in ``errors`` instead.
        skipped: candidates too young (or of unknown age) to be abandoned.
        uploads_unlisted: why open multipart uploads could not be listed
            (the server has no XML multipart listing), or ``""``.
        errors: one line per failed delete or abort.
    """

    bucket: str
    dry_run: bool = False
    older_than: float = DEFAULT_OLDER_THAN
    composites: list[str] = field(default_factory=list)
    uploads: list[MultipartUploadInfo] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    uploads_unlisted: str = ""
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No delete or abort failed."""
        return not self.errors


def _age_of_generation(obj: ObjectInfo, now: float) -> float | None:
    # GCS generations are the creation time in microseconds since the epoch.
    return now - obj.generation / 1e6 if obj.generation > 10**15 else None


def _age_of_upload(upload: MultipartUploadInfo, now: float) -> float | None:
    try:
        started = dt.datetime.fromisoformat(upload.initiated.replace("Z", "+00:00"))
    except ValueError:
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=dt.timezone.utc)
    return now - started.timestamp()


def _named(candidate: str, name: str) -> bool:
    """Whether ``name`` names ``candidate`` under the URL rule of ``rm``,
    ``ls`` and ``du``: ``run1`` is the object ``run1`` and the folder
    ``run1/``, never ``run10/``, whose uploads may be another run's live
    checkpoint; ``""`` is the whole bucket."""
    return candidate == name or candidate.startswith(folder_prefix(name))


async def _named_uploads(client: ObjectStore, bucket: str, name: str,
                         report: CleanReport) -> list[MultipartUploadInfo]:
    """The open uploads ``name`` names (the listing's reason for failing,
    if the store cannot list them, goes to ``report``)."""
    try:
        # Listed by the raw prefix: S3, GCS's XML API and the filesystem
        # have no lookup of one key's uploads, so those of ``run1`` itself
        # come with those of ``run10/``, dropped below.
        listed = await client.list_multipart_uploads(bucket, name)
    except InvalidRequest as exc:
        report.uploads_unlisted = str(exc)
        return []
    # The backends check their upload listings as they read them; the same
    # check here holds for any ObjectStore: clean never aborts an upload the
    # caller did not name (nothing is deleted or aborted before it passes).
    check = UploadListingCheck(client.features.scheme, bucket, name)
    for upload in listed:
        check.upload(upload.name, upload.upload_id)
    return [upload for upload in listed if _named(upload.name, name)]


def _old_enough(age: float | None, older_than: float) -> bool:
    # An unknown age is never "old enough" unless everything is asked for:
    # a live writer's upload must survive.
    return older_than <= 0 or (age is not None and age >= older_than)


async def clean_bucket(client: ObjectStore, bucket: str, name: str = "", *,
                       dry_run: bool = False, older_than: float = DEFAULT_OLDER_THAN,
                       composed_prefix: str = COMPOSED_PREFIX) -> CleanReport:
    """Delete leftover composites and abort open multipart uploads.

    Args:
        client: the client.
        bucket: bucket name.
        name: what to clean, under the URL rule of ``rm``, ``ls`` and
            ``du``: uploads of the object ``name`` and of names under
            ``name/`` (never of ``name2/``); ``""`` names the whole bucket.
            Composites always live under ``composed_prefix`` at the bucket
            root: all of them are candidates unless ``name`` lies inside
            ``composed_prefix``, where the same rule picks them. Only names
            of a composite's shape (``<pid>-<32 hex digits>`` right under
            ``composed_prefix``) are composites: any other object there is
            left alone, whatever its age.
        dry_run: report, change nothing.
        older_than: only touch composites and uploads at least this many
            seconds old, so those of processes still running survive
            (default :data:`DEFAULT_OLDER_THAN`); ``0`` touches everything,
            live uploads included.
        composed_prefix: where composites live.

    Returns:
        CleanReport. A server without an XML multipart listing
        (fake-gcs-server) is not an error: ``uploads_unlisted`` says why
        no upload was looked at.

    Raises:
        NotFound: no such bucket.
        ProtocolError: the store listed an upload outside the prefix
            ``name`` (nothing is then deleted or aborted).
        StorageError: listing failed (individual delete/abort failures are
            reported in ``CleanReport.errors`` instead).
    """
    report = CleanReport(bucket, dry_run, older_than)
    now = time.time()
    comp_prefix = name if name.startswith(composed_prefix) else composed_prefix
    composites: list[ObjectInfo] = []
    # A store that cannot compose has no composites (and generations that
    # are not GCS's microsecond timestamps): nothing to look for.
    if client.features.compose:
        async for obj in client.list_objects(bucket, comp_prefix):
            # Only what the planner names a composite: any other object under
            # the prefix is a user's (a composed_prefix may be "tmp/").
            if not _named(obj.name, comp_prefix) or not is_composite(obj.name, composed_prefix):
                continue
            age = _age_of_generation(obj, now)
            if _old_enough(age, older_than):
                composites.append(obj)
            else:
                report.skipped.append(Skipped(obj.url, age))
    uploads: list[MultipartUploadInfo] = []
    for upload in await _named_uploads(client, bucket, name, report):
        age = _age_of_upload(upload, now)
        if _old_enough(age, older_than):
            uploads.append(upload)
        else:
            report.skipped.append(
                Skipped(f"upload {upload.upload_id} of "
                        f"{format_url(client.features.scheme, bucket, upload.name)}", age))
    report.composites = [o.url for o in composites]
    report.uploads = uploads
    if dry_run:
        return report

    failed: set[str] = set()

    async def delete(obj: ObjectInfo) -> None:
        try:
            await client.delete(bucket, obj.name, if_generation_match=obj.generation or None,
                                missing_ok=True)
        except StorageError as exc:
            report.errors.append(str(exc))
            failed.add(obj.url)

    async def abort(upload: MultipartUploadInfo) -> None:
        try:
            await client.abort_multipart(bucket, upload.name, upload.upload_id)
        except NotFound:
            pass
        except StorageError as exc:
            report.errors.append(str(exc))
            failed.add(upload.upload_id)

    await gather_bounded([*(delete(o) for o in composites), *(abort(u) for u in uploads)],
                         _CLEAN_CONCURRENCY)
    # What failed is in errors only: listed as deleted too, `aioflux clean`
    # said "deleted" of an object still there, and counted it.
    report.composites = [url for url in report.composites if url not in failed]
    report.uploads = [u for u in report.uploads if u.upload_id not in failed]
    return report
