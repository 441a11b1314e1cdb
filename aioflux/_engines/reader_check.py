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

from .._core.errors import ChecksumMismatch
from .._core.integrity.crc import crc32c_combine, encode_crc32c
from .._core.records.types import ObjectInfo

__all__ = ["FrontToBackCheck"]


class FrontToBackCheck:
    """The crc32c (or MD5) of one object version's blocks consumed in order,
    checked at the end.

    Args:
        url: the object's URL, for the error.
        bucket: bucket name.
        name: object name.
        block_size: bytes a block (every block but the last).

    Attributes:
        want_crc: a GET works out its bytes' crc32c (read by the block fetches).
        next: the next block to account.
        corrupt: the mismatch found, raised by every later read.
    """

    __slots__ = ("_crc", "_md5", "_verify", "block_size", "bucket", "corrupt", "info", "name",
                 "next", "url", "want_crc")

    info: ObjectInfo  # the version checked (set by :meth:`start`, before any block)

    def __init__(self, url: str, bucket: str, name: str, block_size: int) -> None:
        self.url, self.bucket, self.name, self.block_size = url, bucket, name, block_size
        self.corrupt: ChecksumMismatch | None = None
        self._verify = False
        self._md5: hashlib._Hash | None = None
        self.want_crc = False
        self.next = 0
        self._crc = 0

    def start(self, info: ObjectInfo, checking: bool, stat_pending: bool) -> None:
        """Check the version ``info`` names from its first byte on (at open,
        or when another version is adopted before any byte went out)."""
        self.info = info
        # An object with no crc32c but an MD5 (a plain S3 ETag) is hashed as
        # it is consumed, on the reader's thread, not the event loop.
        self._verify = info.crc32c is not None and checking
        self._md5 = hashlib.md5(usedforsecurity=False) \
            if checking and not self._verify and info.md5 is not None else None
        # Before a stat beside says, every block's crc32c is worked out as
        # it arrives: the stat may yet give the object's.
        self.want_crc = self._verify or (checking and stat_pending)
        self.next = 0
        self._crc = 0

    @property
    def active(self) -> bool:
        """Whether there is anything to check against."""
        return self._verify or self._md5 is not None

    def account(self, index: int, data: bytearray | memoryview, crc: int | None) -> None:
        """Block ``index``, held whole and consumed: counted if it is the
        next in order (a block read again, or out of order, is not)."""
        if index != self.next:
            return
        if self._verify and crc is not None:
            self._crc = crc32c_combine(self._crc, crc, len(data))
        elif self._md5 is not None:
            self._md5.update(data)
        else:
            return
        self.next += 1
        if self.next * self.block_size >= self.info.size:
            self.check_whole()

    def check_whole(self) -> None:
        """The bytes accounted are the whole object's: hold them to its
        crc32c (or MD5)."""
        info = self.info
        if self._md5 is not None:
            digest = base64.b64encode(self._md5.digest()).decode()
            if digest != info.md5:
                self.corrupt = ChecksumMismatch(
                    f"read {self.url} failed: MD5 {digest} of the bytes read != "
                    f"{info.md5}", operation="read", bucket=self.bucket, name=self.name)
        elif self._verify and self._crc != info.crc32c:
            self.corrupt = ChecksumMismatch(
                f"read {self.url} failed: crc32c "
                f"{encode_crc32c(self._crc)} of the bytes read != "
                f"{encode_crc32c(info.crc32c or 0)}", operation="read",
                bucket=self.bucket, name=self.name)
        if self.corrupt is not None:
            raise self.corrupt
