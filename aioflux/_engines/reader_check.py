"""The reader's front-to-back check: the bytes of a whole object read held
to its crc32c (or, where a store keeps none, the MD5 a plain S3 ETag is).

A ranged GET cannot be checked against the object's crc32c on its own, but
the blocks' crc32c, combined in order, are the object's: so every block
held whole and consumed, in index order, is accounted, and the last one
decides. Blocks read out of order (a seek ahead, a zip's directory read
first) are not accounted until the reads come back to them, or until
``ObjectReader.verify`` reads what was skipped.
"""

from __future__ import annotations

import base64
import hashlib

from .._core.crc import crc32c_combine, encode_crc32c
from .._core.errors import ChecksumMismatch
from .._core.types import ObjectInfo

__all__ = ["FrontToBackCheck"]


class FrontToBackCheck:
    """The crc32c (or MD5) of the blocks consumed in order, checked at the end.

    A mixin of the reader: it owns the attributes below and reads the
    object's names, size, block size and info, which the reader sets.
    """

    # Set by the reader.
    url: str
    bucket: str
    name: str
    size: int
    block_size: int
    info: ObjectInfo
    # Owned here: whether blocks carry their crc32c into the combination
    # (``_verify``), or are hashed as they are consumed (``_md5``); whether
    # a GET works its bytes' crc32c out (``_want_crc``, read by the block
    # fetches); the next block to account and the crc32c so far; the
    # mismatch found, raised by every later read.
    _verify: bool
    _md5: hashlib._Hash | None
    _want_crc: bool
    _crc_next: int
    _crc: int
    _corrupt: ChecksumMismatch | None

    def _start_check(self, info: ObjectInfo, checking: bool, stat_pending: bool) -> None:
        """Check the version ``info`` names from its first byte on (at open,
        or when another version is adopted before any byte went out)."""
        # An object with no crc32c but an MD5 (a plain S3 ETag) is hashed as
        # it is consumed, on the reader's thread, not the event loop.
        self._verify = info.crc32c is not None and checking
        self._md5 = hashlib.md5(usedforsecurity=False) \
            if checking and not self._verify and info.md5 is not None else None
        # Before a stat beside says, every block's crc32c is worked out as
        # it arrives: the stat may yet give the object's.
        self._want_crc = self._verify or (checking and stat_pending)
        self._crc_next = 0
        self._crc = 0

    def _account(self, index: int, data: bytearray | memoryview, crc: int | None) -> None:
        """Block ``index``, held whole and consumed: counted if it is the
        next in order (a block read again, or out of order, is not)."""
        if index != self._crc_next:
            return
        if self._verify and crc is not None:
            self._crc = crc32c_combine(self._crc, crc, len(data))
        elif self._md5 is not None:
            self._md5.update(data)
        else:
            return
        self._crc_next += 1
        if self._crc_next * self.block_size >= self.size:
            self._check_whole()

    def _check_whole(self) -> None:
        """The bytes accounted are the whole object's: hold them to its
        crc32c (or MD5)."""
        if self._md5 is not None:
            digest = base64.b64encode(self._md5.digest()).decode()
            if digest != self.info.md5:
                self._corrupt = ChecksumMismatch(
                    f"read {self.url} failed: MD5 {digest} of the bytes read != "
                    f"{self.info.md5}", operation="read", bucket=self.bucket, name=self.name)
        elif self._verify and self._crc != self.info.crc32c:
            self._corrupt = ChecksumMismatch(
                f"read {self.url} failed: crc32c "
                f"{encode_crc32c(self._crc)} of the bytes read != "
                f"{encode_crc32c(self.info.crc32c or 0)}", operation="read",
                bucket=self.bucket, name=self.name)
        if self._corrupt is not None:
            raise self._corrupt
