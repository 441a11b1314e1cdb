"""Remove what interrupted aioflux processes leave in a bucket: composites
under :data:`COMPOSED_PREFIX` and open XML multipart uploads.

A process that exits normally deletes its own composites (``finally`` plus
the exit registry); one that is killed cannot, and an aborted checkpoint
writer may leave an upload open, which GCS keeps (and bills) until aborted.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

from ._client import AsyncClient
from ._download import gather_bounded
from ._errors import NotFound, StorageError
from ._listing import COMPOSED_PREFIX
from ._types import MultipartUploadInfo, ObjectInfo

__all__ = ["CleanReport", "clean_bucket"]

# Deletes and aborts in flight; small, because clean is rare and write-heavy
# traffic counts against the bucket's write rate.
_CLEAN_CONCURRENCY = 16


@dataclass
class CleanReport:
    """What :func:`clean_bucket` did (or, with ``dry_run``, would do).

    Attributes:
        bucket: the bucket.
        dry_run: nothing was changed.
        composites: URLs of composites deleted (or to delete).
        uploads: multipart uploads aborted (or to abort).
        errors: one line per failed delete or abort.
    """

    bucket: str
    dry_run: bool = False
    composites: list[str] = field(default_factory=list)
    uploads: list[MultipartUploadInfo] = field(default_factory=list)
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


def _old_enough(age: float | None, older_than: float | None) -> bool:
    # An unknown age is never "old enough": a live writer's upload must survive.
    return older_than is None or (age is not None and age >= older_than)


async def clean_bucket(client: AsyncClient, bucket: str, prefix: str = "", *,
                       dry_run: bool = False, older_than: float | None = None,
                       composed_prefix: str = COMPOSED_PREFIX) -> CleanReport:
    """Delete leftover composites and abort open multipart uploads.

    Args:
        client: the client.
        bucket: bucket name.
        prefix: abort only uploads of names under this, and delete only
            composites under ``composed_prefix + prefix`` when ``prefix``
            starts with ``composed_prefix``; composites always live under
            ``composed_prefix`` at the bucket root.
        dry_run: report, change nothing.
        older_than: only touch composites and uploads at least this many
            seconds old (keeps those of processes still running).
        composed_prefix: where composites live.

    Returns:
        CleanReport.

    Raises:
        NotFound: no such bucket.
        StorageError: listing failed (individual delete/abort failures are
            reported in ``CleanReport.errors`` instead).
    """
    report = CleanReport(bucket, dry_run)
    now = time.time()
    comp_prefix = prefix if prefix.startswith(composed_prefix) else composed_prefix
    composites = [o async for o in client.list_objects(bucket, comp_prefix)
                  if _old_enough(_age_of_generation(o, now), older_than)]
    uploads = [u for u in await client.list_multipart_uploads(bucket, prefix)
               if _old_enough(_age_of_upload(u, now), older_than)]
    report.composites = [o.url for o in composites]
    report.uploads = uploads
    if dry_run:
        return report

    async def delete(obj: ObjectInfo) -> None:
        try:
            await client.delete(bucket, obj.name, if_generation_match=obj.generation or None,
                                missing_ok=True)
        except StorageError as exc:
            report.errors.append(str(exc))

    async def abort(upload: MultipartUploadInfo) -> None:
        try:
            await client.abort_multipart(bucket, upload.name, upload.upload_id)
        except NotFound:
            pass
        except StorageError as exc:
            report.errors.append(str(exc))

    await gather_bounded([*(delete(o) for o in composites), *(abort(u) for u in uploads)],
                         _CLEAN_CONCURRENCY)
    return report
