"""The one version of each data file a DCP load reads.

A load reads a data file in many ranged GETs (one per plan item, some
ahead of the item DCP is loading). Unpinned, a file replaced between two
of them handed DCP items of two versions: a checkpoint aioflux wrote is
caught by its items' crc32c, but one torch's writer wrote has none, and a
load of some of its items (the model without the optimizer) never tiles
the file for the whole-file check, so it loaded a mix silently.

So each data file's version is the one its stat found (the stat its reader
took anyway, begun by whichever comes first: DCP opening the file or a read
ahead of it), and every read of the file during the load asks for that
version: a file replaced or deleted since fails the load with a
``PreconditionFailed`` that names it. A load costs the same requests as
before: one stat per data file, one ranged GET per item.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

from ..._core.concurrency.portal import get_portal
from ..._core.errors import NotFound, PreconditionFailed, StorageError
from ..._core.records.types import ObjectInfo
from ..._core.storage.protocol import Fetched, ObjectStore
from ._dcp_crc import check_whole_file

__all__ = ["PinnedFiles", "changed"]


def changed(info: ObjectInfo, exc: StorageError) -> PreconditionFailed:
    """The error of a data file no longer at the version the load reads.

    Args:
        info: the file as the load's stat found it.
        exc: what the read pinned to that version raised (a store answers
            a version gone with NotFound, or, on S3 and Azure, 412); the
            caller chains it.

    Returns:
        A PreconditionFailed naming the file and the version.
    """
    return PreconditionFailed(
        f"dcp.load {info.url} failed: the data file changed during the load (version "
        f"{info.version}, which the load began reading, is gone): its items would be of "
        "two versions; load again", operation="read", bucket=info.bucket, name=info.name,
        status=exc.status)


async def _pinned_fetch(store: ObjectStore, stat: Future[ObjectInfo], start: int,
                        end: int) -> Fetched:
    # Shielded: a cancelled read must not cancel the stat the file's other
    # reads and its open share.
    info = await asyncio.shield(asyncio.wrap_future(stat))
    try:
        return await store.fetch(info.bucket, info.name, start=start, end=end,
                                 generation=info.generation or None, want_crc=True)
    except (NotFound, PreconditionFailed) as exc:
        raise changed(info, exc) from exc


class PinnedFiles:
    """The version of each data file one load reads.

    Used from the thread DCP loads on; the stats and reads run on the portal.
    """

    def __init__(self) -> None:
        # By (scheme, bucket, name): DCP's path and a reader's URL of one
        # file are one key.
        self._stats: dict[tuple[str, str, str], Future[ObjectInfo]] = {}

    def _stat(self, store: ObjectStore, bucket: str, name: str) -> Future[ObjectInfo]:
        key = (store.features.scheme, bucket, name)
        stat = self._stats.get(key)
        if stat is None:
            stat = get_portal().submit(store.stat(bucket, name))
            self._stats[key] = stat
        return stat

    def info(self, store: ObjectStore, bucket: str, name: str) -> ObjectInfo:
        """The file at the version the load reads (stat'ed on first ask).

        Args:
            store: the file's store.
            bucket: its bucket.
            name: its object name.

        Returns:
            Its metadata.

        Raises:
            NotFound: no such file.
            StorageError: the stat failed.
        """
        return self._stat(store, bucket, name).result()

    def fetch(self, store: ObjectStore, bucket: str, name: str, start: int,
              end: int) -> Future[Fetched]:
        """Start a read of ``[start, end)`` of a file, at the load's version.

        Args:
            store: the file's store.
            bucket: its bucket.
            name: its object name.
            start: first byte.
            end: end (exclusive).

        Returns:
            The read's future: the bytes and their crc32c; it raises
            PreconditionFailed if the file changed (or was deleted) since
            the load's version was found, NotFound if it never existed.
        """
        return get_portal().submit(
            _pinned_fetch(store, self._stat(store, bucket, name), start, end))

    def check_whole_file(self, store: ObjectStore, bucket: str, name: str) -> None:
        """Read a data file through at the load's version, its crc32c checked
        (see :func:`~._dcp_crc.check_whole_file`).

        Args:
            store: the file's store.
            bucket: its bucket.
            name: its object name.

        Raises:
            ChecksumMismatch: its bytes are not the ones the store recorded.
            PreconditionFailed: it changed (or was deleted) since the load's
                version was found.
            StorageError: the read failed.
        """
        info = self.info(store, bucket, name)
        try:
            check_whole_file(store, bucket, name, info=info)
        except (NotFound, PreconditionFailed) as exc:
            raise changed(info, exc) from exc

    def clear(self) -> None:
        """Forget the versions (the load is over): stats still running stop."""
        for stat in self._stats.values():
            stat.cancel()
        self._stats.clear()
