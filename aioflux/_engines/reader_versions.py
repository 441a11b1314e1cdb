"""Which version the reader reads: the one its info names, until a read
shows that info was stale (``recent``) or a stat begun beside the first
GETs names another (``stat_beside``).

Both happen before any byte is handed out, so switching to the store's
current version loses nothing: what was fetched of the old one is dropped
and the front-to-back check starts over on the new one.
"""

from __future__ import annotations

import concurrent.futures
import io
from typing import TYPE_CHECKING

from .._core.errors import (
    ChecksumMismatch,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    ProtocolError,
)
from .._core.types import ObjectInfo
from .reader_blocks import BlockWindow
from .reader_check import FrontToBackCheck

if TYPE_CHECKING:
    from .._core.store import ObjectStore

__all__ = ["VersionedReads"]


class VersionedReads(io.RawIOBase):
    """Blocks of the version being read, and the switch to another.

    The reader's base: the attributes below are set by ``ObjectReader``.
    """

    _client: ObjectStore
    bucket: str
    name: str
    url: str
    block_size: int
    read_ahead: int
    # The version read (:meth:`_adopt`).
    info: ObjectInfo
    size: int
    # The parts: the blocks held and fetched, and the front-to-back check.
    _window: BlockWindow
    _check: FrontToBackCheck
    # The stat whose checksums the bytes read so far await (stat_beside).
    _stat: concurrent.futures.Future[ObjectInfo] | None
    # The position, and where the last read ended (a read starting
    # elsewhere follows a seek).
    _pos: int
    _last_end: int

    # ``info`` came from a cache and no read has confirmed it yet.
    _recent: bool
    # The caller was told ``size`` (a seek from the end) while it was unconfirmed.
    _size_told: bool = False

    def _adopt(self, info: ObjectInfo) -> None:
        """Read the version ``info`` names (at open, or after a stale one)."""
        self.info = info
        self.size = info.size
        self._window.adopt(info)
        self._check.start(info, self._client.config.verify_crc32c, self._stat is not None)

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"read from closed reader {self.url}")

    def _after_fork(self) -> None:
        """A forked child's copy: the parent's stat never completes here."""
        if self._stat is not None:
            self._stat = self._window.portal.submit(self._client.stat(self.bucket, self.name))

    def _block(self, index: int) -> tuple[bytearray, int | None]:
        """Block ``index`` (waited for), with read-ahead scheduled past it.

        After a stale recent info, the current version may end before the
        block: then it is empty and the position is past the (new) size.
        """
        self._window.schedule(index)
        outcome = self._window.fetch(index).result()
        if isinstance(outcome, Exception):
            # The read-ahead is dropped (blocks ahead may fail alike, or be
            # failing now), so that reading again once the store is back
            # fetches anew instead of raising this error forever.
            self._window.drop()
            if not self._recover(outcome):
                raise outcome
        elif self._settle():
            self._recent = False
            return outcome
        # The version fetched is gone, or a stat beside found another: the
        # current one, from this block on.
        if self._pos >= self.size:
            return bytearray(), None
        return self._block(index)

    def _confirm_end(self, count: int) -> None:
        """Nothing read yet, and at or past the end a cache named: the store
        says where the end is now (no block fetch would find out). An empty
        object (no block to account) is held to its checksum here: a size
        of 0 beside the crc32c of other bytes is not an empty object."""
        if count == 0:
            return
        if self._recent and self._pos >= self.size:
            self._restat()
        if self.size == 0:
            self._settle()  # the checksums a stat beside gives, or its other version
            if self.size == 0:
                self._check.check_whole()

    def _recover(self, exc: Exception) -> bool:
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
        if not self._recent:
            return False
        if isinstance(exc, NotFound | PreconditionFailed):
            self._window.drop()
            self._restat()
            return True
        if not isinstance(exc, ProtocolError | ChecksumMismatch):
            return False
        self._window.drop()
        self._recent = False  # asked once: a second error is the read's own
        current = self._window.portal.call(self._client.stat(self.bucket, self.name))
        if current.generation == self.info.generation and current.size == self.size:
            return False
        self._restat(current)
        return True

    def _restat(self, current: ObjectInfo | None = None) -> None:
        """Read the version the store has now (a recent info was stale): the
        one ``current`` names, else the one a stat finds.

        Raises:
            PreconditionFailed: the caller was told the stale size (a seek
                from the end) and the current version's is another: offsets
                placed by it would read other bytes than the caller meant.
        """
        self._recent = False
        if self._stat is not None:
            self._stat.cancel()  # asked before the version changed, perhaps
            self._stat = None
        told = self.size if self._size_told else None
        self._adopt(current or self._window.portal.call(self._client.stat(self.bucket, self.name)))
        if told is not None and told != self.size:
            self._size_told = False  # reads go on at the current version, once said
            raise PreconditionFailed(
                f"read {self.url} failed: the object changed since it was opened (a recent "
                f"listing or stat said {told} bytes, handed out as its size or used by a "
                f"seek from its end; it now has {self.size}): open it again",
                operation="read", bucket=self.bucket, name=self.name, status=412,
                reason="conditionNotMet")

    def _settle(self) -> bool:
        """The stat begun beside the first GETs (``stat_beside``) adopted,
        before any byte is handed out. False: it found another version than
        the one the GETs were pinned to (a listing gone stale): what they
        fetched is dropped, and the caller reads again at the stat's."""
        pending = self._stat
        if pending is None:
            return True
        try:
            current = pending.result()
        except Exception:
            # Asked again by the next read: no byte goes out unchecked.
            self._stat = self._window.portal.submit(self._client.stat(self.bucket, self.name))
            self._window.drop()
            raise
        self._stat = None
        if current.generation == self.info.generation and current.size == self.size:
            # Nothing was handed out, so nothing accounted: adopting starts
            # the front-to-back check on the bytes already fetched (their
            # crc32c worked out, see FrontToBackCheck.want_crc).
            self._adopt(current)
            return True
        self._window.drop()
        self._restat(current)
        return False
