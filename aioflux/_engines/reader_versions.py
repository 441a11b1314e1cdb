"""Which version the reader reads: the one its info names, until a read
shows that info was stale (``recent``) or a stat begun beside the first
GETs names another (``stat``).

Both happen before any byte is handed out, so switching to the store's
current version loses nothing: what was fetched of the old one is dropped
and the front-to-back check starts over on the new one.
"""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING

from .._core.errors import ChecksumMismatch, NotFound, PreconditionFailed, ProtocolError
from .._core.records.types import ObjectInfo
from .reader_blocks import BlockWindow
from .reader_check import FrontToBackCheck

if TYPE_CHECKING:
    from .._core.storage.protocol import ObjectStore

__all__ = ["PinnedVersion"]


class PinnedVersion:
    """The version a reader reads, its blocks waited for, and the switch to
    another before any byte of it went out.

    A part of the reader (``ObjectReader._version``), over its two others:
    a version adopted is the one the window fetches and the check holds
    the bytes to.

    Args:
        client: the store.
        window: the reader's blocks.
        check: the reader's front-to-back check.

    Attributes:
        info: the version read (set by :meth:`open`, then by each adoption).
        size: its size.
        recent: ``info`` came from a cache and no read has confirmed it yet.
        size_told: the caller was told ``size`` (a seek from the end) while
            it was unconfirmed.
        stat: the stat whose checksums the bytes read so far await (a stat
            beside the first GETs).
    """

    info: ObjectInfo
    size: int
    # Class defaults: a reader whose open() failed (NotFound) is still closed.
    recent = False
    size_told = False
    stat: concurrent.futures.Future[ObjectInfo] | None = None

    def __init__(self, client: ObjectStore, window: BlockWindow,
                 check: FrontToBackCheck) -> None:
        self._client, self._window, self._check = client, window, check

    def open(self, info: ObjectInfo | None, *, recent: bool, stat_beside: bool) -> None:
        """Read the version ``info`` names, else the one a stat finds (see
        ``ObjectReader``'s ``recent`` and ``stat_beside``)."""
        self.recent = recent and info is not None
        if stat_beside and info is not None:
            self.stat = self._stat_soon()
        self.adopt(info or self._stat_now())

    def _stat_soon(self) -> concurrent.futures.Future[ObjectInfo]:
        return self._window.portal.submit(self._client.stat(self._window.bucket, self._window.name))

    def _stat_now(self) -> ObjectInfo:
        return self._window.portal.call(self._client.stat(self._window.bucket, self._window.name))

    def adopt(self, info: ObjectInfo) -> None:
        """Read the version ``info`` names (at open, or after a stale one)."""
        self.info = info
        self.size = info.size
        self._window.adopt(info)
        self._check.start(info, self._client.config.verify_crc32c, self.stat is not None)

    def after_fork(self) -> None:
        """A forked child's copy: the parent's stat never completes here."""
        if self.stat is not None:
            self.stat = self._stat_soon()

    def close(self) -> None:
        if self.stat is not None:
            self.stat.cancel()

    def block(self, index: int, pos: int) -> tuple[bytearray, int | None]:
        """Block ``index`` (waited for), with read-ahead scheduled past it.

        After a stale recent info, the current version may end before the
        block: then it is empty and ``pos`` is past the (new) size.
        """
        self._window.schedule(index)
        outcome = self._window.fetch(index).result()
        if isinstance(outcome, Exception):
            # The read-ahead is dropped (blocks ahead may fail alike, or be
            # failing now), so that reading again once the store is back
            # fetches anew instead of raising this error forever.
            self._window.drop()
            if not self.recover(outcome):
                raise outcome
        elif self.settle():
            return outcome
        # The version fetched is gone, or a stat beside found another: the
        # current one, from this block on.
        if pos >= self.size:
            return bytearray(), None
        return self.block(index, pos)

    def confirm_end(self, count: int, pos: int) -> None:
        """Nothing read yet, and at or past the end a cache named: the store
        says where the end is now (no block fetch would find out). An empty
        object (no block to account) is held to its checksum here: a size
        of 0 beside the crc32c of other bytes is not an empty object."""
        if count == 0:
            return
        if self.recent and pos >= self.size:
            self.restat()
        if self.size == 0:
            self.settle()  # the checksums a stat beside gives, or its other version
            if self.size == 0:
                self._check.check_whole()

    def recover(self, exc: Exception) -> bool:
        """Whether ``exc``, the first read's, says the version a recent info
        named is no longer the object (nothing was handed out yet); then the
        object was stat'ed again (a deleted one raises NotFound) and reads
        go on at its current version.

        A read pinned to that version finds it gone (NotFound, or S3's and
        Azure's 412). One that cannot tell versions apart finds another
        size instead: a 416 below the size the cache named, another length
        stated (ProtocolError), a store comparing sizes itself
        (ChecksumMismatch). That happens when the info carries no version
        (generation 0: an S3-compatible listing without ETags) or the
        change kept it (a file rewritten keeping its modification time:
        ``cp -p``, ``rsync -t``, two writes within one timestamp tick). Then
        the stat decides: another version or size, and the cache was
        stale; the same, and the error is the read's own, raised.
        """
        if not self.recent:
            return False
        if isinstance(exc, NotFound | PreconditionFailed):
            self._window.drop()
            self.restat()
            return True
        if not isinstance(exc, ProtocolError | ChecksumMismatch):
            return False
        self._window.drop()
        self.recent = False  # asked once: a second error is the read's own
        current = self._stat_now()
        if current.generation == self.info.generation and current.size == self.size:
            return False
        self.restat(current)
        return True

    def restat(self, current: ObjectInfo | None = None) -> None:
        """Read the version the store has now (a recent info was stale): the
        one ``current`` names, else the one a stat finds.

        Raises:
            PreconditionFailed: the caller was told the stale size (a seek
                from the end) and the current version's is another: offsets
                placed by it would read other bytes than the caller meant.
        """
        self.recent = False
        if self.stat is not None:
            self.stat.cancel()  # asked before the version changed, perhaps
            self.stat = None
        told = self.size if self.size_told else None
        self.adopt(current or self._stat_now())
        if told is not None and told != self.size:
            self.size_told = False  # reads go on at the current version, once said
            window = self._window
            raise PreconditionFailed(
                f"read {window.url} failed: the object changed since it was opened (a recent "
                f"listing or stat said {told} bytes, handed out as its size or used by a "
                f"seek from its end; it now has {self.size}): open it again",
                operation="read", bucket=window.bucket, name=window.name, status=412,
                reason="conditionNotMet")

    def settle(self) -> bool:
        """The version confirmed before any byte is handed out: the stat
        begun beside the first GETs adopted, and a recent info no longer
        in doubt. False: the stat found another version than the one the
        GETs were pinned to (a listing gone stale): what they fetched is
        dropped, and the caller reads again at the stat's."""
        pending = self.stat
        if pending is None:
            self.recent = False
            return True
        try:
            current = pending.result()
        except Exception:
            # Asked again by the next read: no byte goes out unchecked.
            self.stat = self._stat_soon()
            self._window.drop()
            raise
        self.stat = None
        if current.generation == self.info.generation and current.size == self.size:
            # Nothing was handed out, so nothing accounted: adopting starts
            # the front-to-back check on the bytes already fetched (their
            # crc32c worked out, see FrontToBackCheck.want_crc).
            self.adopt(current)
            self.recent = False
            return True
        self._window.drop()
        self.restat(current)
        return False
