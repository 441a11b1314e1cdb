"""WebDataset tar shards: members grouped into samples by key.

A member's key is its name up to the first dot of its basename, and the
rest is the field (``dir/000123.seg.png`` is key ``dir/000123``, field
``seg.png``; fields lowercased, as webdataset's ``group_by_keys`` does).
Consecutive regular members with one key are one sample. Skipped, as
webdataset skips them: anything but a regular file (directories, links),
names whose basename has no dot or starts with one (``._x.jpg``, macOS's
AppleDouble files), and ``__meta__``-style names. Python's ``tarfile``
parses the headers, so PAX and GNU long names are read as ``tarfile`` reads
them; a sample's region starts at its first member's first header (the
long-name header where there is one), so a region parses on its own.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterable, Iterator
from typing import Any

from ..._core.crc import crc32c
from ..._core.errors import ShardFormatError
from ._index import new_columns

__all__ = ["TarFormat", "member_key"]

_KEY_FIELD = re.compile(r"^((?:.*/|)[^./][^./]*)[.]([^/]*)$")
_META = re.compile(r"__[^/]*__($|/)")


def member_key(name: str) -> tuple[str, str] | None:
    """``(key, field)`` of a member name, or None for a member no sample holds."""
    base = name.rsplit("/", 1)[-1]
    if _META.match(name) or (base.startswith("__") and base.endswith("__")):
        return None
    found = _KEY_FIELD.match(name)
    if found is None:
        return None
    return found.group(1), found.group(2).lower()


class _Tap(io.RawIOBase):
    """A forward-only file over chunks that keeps the bytes from ``keep`` on,
    so a sample's region can be checksummed once its end is known."""

    def __init__(self, chunks: Iterable[bytes | memoryview]) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")
        self.pos = 0  # bytes handed to tarfile
        self.kept = bytearray()
        self.keep = 0  # absolute offset of kept[0]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk).cast("B")
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self.kept += self._pending[:n]
        self._pending = self._pending[n:]
        self.pos += n
        return n

    def region(self, start: int, end: int) -> memoryview:
        return memoryview(self.kept)[start - self.keep:end - self.keep]

    def drop_before(self, offset: int) -> None:
        if offset > self.keep:
            del self.kept[:offset - self.keep]
            self.keep = offset

    def zeros_from(self, offset: int) -> int | None:
        """Read to the end; the first byte from ``offset`` on that is not zero, if any."""
        chunk = bytearray(1 << 16)
        while True:
            tail = bytes(self.region(max(offset, self.keep), self.pos))
            stray = len(tail) - len(tail.lstrip(b"\0"))
            if stray < len(tail):
                return max(offset, self.keep) + stray
            self.drop_before(self.pos)
            if not self.readinto(chunk):
                return None


def _padded(member: tarfile.TarInfo) -> int:
    return member.offset_data + -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def _members(stream: tarfile.TarFile, where: str, tap: _Tap) -> Iterator[tarfile.TarInfo]:
    while True:
        try:
            member = stream.next()
        except tarfile.TarError as exc:
            raise ShardFormatError(f"index {where}: corrupt tar at byte {tap.pos}: {exc}") \
                from None
        if member is None:
            return
        yield member


class TarFormat:
    """Samples of WebDataset tar shards (see the module)."""

    name = "tar"

    def index(self, chunks: Iterable[bytes | memoryview], where: str
              ) -> tuple[Any, Any, Any, int]:
        """Index a shard's data as it streams by.

        Args:
            chunks: the shard's data, in order.
            where: the shard's URL, for messages.

        Returns:
            ``(offsets, lengths, crcs, data_size)``.

        Raises:
            ShardFormatError: not a tar, a member past the end, or a field twice in a sample.
        """
        offsets, lengths, crcs = new_columns()
        tap = _Tap(chunks)
        key: str | None = None
        fields: set[str] = set()
        start = end = 0

        def close_sample() -> None:
            if key is not None:
                offsets.append(start)
                lengths.append(end - start)
                crcs.append(crc32c(tap.region(start, end)))

        try:
            stream = tarfile.open(fileobj=tap, mode="r|",  # type: ignore[call-overload]
                                  encoding="utf-8", errors="surrogateescape")
        except tarfile.TarError as exc:
            if tap.pos == 0:
                return offsets, lengths, crcs, 0  # an empty object: no samples
            raise ShardFormatError(f"index {where}: not a tar archive: {exc}") from None
        for member in _members(stream, where, tap):
            found = member_key(member.name) if member.isreg() else None
            if found is None:
                continue
            if found[0] != key:
                close_sample()
                tap.drop_before(member.offset)
                key, fields, start = found[0], set(), member.offset
            elif found[1] in fields:
                raise ShardFormatError(f"index {where}: the sample {key!r} has the field "
                                       f"{found[1]!r} twice (member at byte {member.offset})")
            fields.add(found[1])
            end = _padded(member)
        if key is not None and end > tap.pos:
            raise ShardFormatError(f"index {where}: truncated: a member of {key!r} runs to "
                                   f"byte {end}, past the end at {tap.pos}")
        close_sample()
        # tarfile ends an archive quietly at a damaged header past the first:
        # only zeros (the end-of-archive blocks) may follow the last member.
        stray = tap.zeros_from(stream.offset)
        if stray is not None:
            raise ShardFormatError(f"index {where}: corrupt tar header at byte {stream.offset} "
                                   f"(data after the end of the archive at byte {stray})")
        return offsets, lengths, crcs, tap.pos

    def sample(self, region: bytes | memoryview, url: str, offset: int) -> dict[str, Any]:
        """Decode one sample's region into ``{"__key__", "__url__", field: bytes...}``.

        Args:
            region: the sample's bytes (checked against the index).
            url: the shard's URL.
            offset: the region's offset in the shard, for messages.

        Returns:
            The sample.

        Raises:
            ShardFormatError: the region does not parse as one sample.
        """
        sample: dict[str, Any] = {"__url__": url}
        view = memoryview(region)
        try:
            with tarfile.open(fileobj=io.BytesIO(view), mode="r:",  # type: ignore[call-overload]
                              encoding="utf-8", errors="surrogateescape") as stream:
                for member in stream:
                    found = member_key(member.name) if member.isreg() else None
                    if found is None:
                        continue
                    if sample.setdefault("__key__", found[0]) != found[0]:
                        raise ShardFormatError(f"read {url}: the sample at byte {offset} holds "
                                               f"two keys ({sample['__key__']!r}, {found[0]!r})")
                    data_at = member.offset_data
                    sample[found[1]] = bytes(view[data_at:data_at + member.size])
        except tarfile.TarError as exc:
            raise ShardFormatError(f"read {url}: corrupt tar in the sample at byte {offset}: "
                                   f"{exc}") from None
        if "__key__" not in sample:
            raise ShardFormatError(f"read {url}: no sample at byte {offset}")
        return sample
