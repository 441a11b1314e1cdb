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

import re
import tarfile
from collections.abc import Iterable
from typing import Any

from ..._core.crc import crc32c, crc32c_combine
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


_BLOCK = tarfile.BLOCKSIZE
# The most data an extension header (PAX records, a GNU long name) may hold:
# the indexer holds it whole, and one that claimed gigabytes was read into
# memory before anything could be said of it. Real ones hold a few hundred
# bytes; libarchive refuses PAX headers past a few MiB too.
MAX_EXTENSION = 16 * 1024 * 1024
_ZERO_BLOCK = bytes(_BLOCK)
# Header types whose data follows the header (tarfile's rule: regular files
# and types it does not know); links, folders and devices carry none.
_NO_DATA = frozenset(t for t in tarfile.SUPPORTED_TYPES if t not in tarfile.REGULAR_TYPES)
_PAX_NAME = re.compile(rb"(\d+) ([^=]+)=")
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE)
# A number field as tarfile's nti reads it: octal digits between spaces,
# then a NUL and anything (a field that fails this goes to tarfile).
_NUMBER = re.compile(rb" *[0-7]* *(?:\0[0-7 \0]*)?")
# mode, uid, gid, size, mtime, chksum, devmajor, devminor.
_NUMBERS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156),
            (329, 337), (337, 345))


def _octal(field: bytes) -> int:
    return int(field.split(b"\0", 1)[0].strip() or b"0", 8)


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _plain_member(block: bytes) -> tarfile.TarInfo | None:
    """A regular member's header in plain ustar form, or None for any other.

    What ``TarInfo.frombuf`` makes of such a header (name with its ustar
    prefix, size, type), in about a fifth of its time: it was half of a
    warm epoch's CPU on 100 KiB samples. Anything else (extensions, links,
    base-256 numbers, a signed checksum, a field tarfile would refuse) is
    None, and goes to tarfile.
    """
    kind = block[156:157]
    if kind not in _REGULAR or not all(_NUMBER.fullmatch(block, a, b) for a, b in _NUMBERS):
        return None
    checksum, size = _octal(block[148:156]), _octal(block[124:136])
    if checksum != 256 + sum(block) - sum(block[148:156]):
        return None
    name = _text(block[0:100])
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        return None  # a V7 folder
    prefix = _text(block[345:500])
    info = tarfile.TarInfo(f"{prefix}/{name}" if prefix else name)
    info.size, info.type = size, kind
    return info


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _pax(data: bytes, where: str, at: int) -> dict[str, str]:
    """The records of a PAX extended header (``"len key=value\n"``), as tarfile reads them."""
    out: dict[str, str] = {}
    pos = 0
    while True:
        found = _PAX_NAME.match(data, pos)
        if found is None:
            return out
        length = int(found.group(1))
        if length < 1 or pos + length > len(data):
            raise ShardFormatError(f"{where}: corrupt PAX header at byte {at}")
        value = data[found.end(2) + 1:pos + length - 1]
        out[found.group(2).decode("utf-8", "surrogateescape")] = \
            value.decode("utf-8", "surrogateescape")
        pos += length


class _Headers:
    """The header rules both passes share: one 512-byte header at a time,
    PAX (local and global) and GNU long names applied to the member after
    them, as ``tarfile`` applies them."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.global_pax: dict[str, str] = {}
        self.local: dict[str, str] = {}

    def parse(self, block: bytes, at: int) -> tarfile.TarInfo | None:
        """The header at byte ``at`` (None for an end-of-archive zero block)."""
        if block == _ZERO_BLOCK:
            return None
        plain = _plain_member(block)
        if plain is not None:
            return plain
        try:
            return tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except tarfile.HeaderError as exc:
            raise ShardFormatError(f"{self.where}: corrupt tar header at byte {at}: "
                                   f"{exc}") from None

    def extension(self, info: tarfile.TarInfo) -> bool:
        """Whether ``info`` is a header for the next member (its data read by :meth:`absorb`)."""
        return info.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME,
                             tarfile.GNUTYPE_LONGLINK, tarfile.SOLARIS_XHDTYPE)

    def absorb(self, info: tarfile.TarInfo, data: bytes, at: int) -> None:
        """Take an extension header's data."""
        if info.type == tarfile.GNUTYPE_LONGNAME:
            self.local["path"] = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        elif info.type == tarfile.XGLTYPE:
            self.global_pax.update(_pax(data, self.where, at))
        elif info.type != tarfile.GNUTYPE_LONGLINK:
            self.local.update(_pax(data, self.where, at))

    def member(self, info: tarfile.TarInfo, at: int) -> tuple[str, bool, int]:
        """``(name, regular, data bytes)`` of a member header, extensions applied."""
        pax = {**self.global_pax, **self.local}
        self.local = {}
        if info.type == tarfile.GNUTYPE_SPARSE or any(k.startswith("GNU.sparse") for k in pax):
            raise ShardFormatError(f"{self.where}: sparse member at byte {at}: not supported "
                                   "in a shard")
        name = pax.get("path", info.name)
        size = info.size
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError:
                raise ShardFormatError(f"{self.where}: corrupt PAX size at byte {at}") from None
        regular = info.type in tarfile.REGULAR_TYPES
        return name, regular, 0 if info.type in _NO_DATA else size


class TarFormat:
    """Samples of WebDataset tar shards (see the module)."""

    name = "tar"

    def index(self, chunks: Iterable[bytes | memoryview], where: str
              ) -> tuple[Any, Any, Any, int]:
        """Index a shard's data as it streams by: headers parsed, data only checksummed.

        Args:
            chunks: the shard's data, in order.
            where: the shard's URL, for messages.

        Returns:
            ``(offsets, lengths, crcs, data_size)``.

        Raises:
            ShardFormatError: not a tar, a member past the end, or a field twice in a sample.
        """
        return _Indexer(f"index {where}").run(chunks)

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
        data = memoryview(region).cast("B")  # each field copied once, from here
        headers = _Headers(f"read {url}")
        sample: dict[str, Any] = {"__url__": url}
        pos = 0
        while pos + _BLOCK <= len(data):
            info = headers.parse(bytes(data[pos:pos + _BLOCK]), offset + pos)
            if info is None:
                break
            size = _padded(info.size)
            if headers.extension(info):
                headers.absorb(info, bytes(data[pos + _BLOCK:pos + _BLOCK + info.size]),
                               offset + pos)
                pos += _BLOCK + size
                continue
            name, regular, length = headers.member(info, offset + pos)
            start = pos + _BLOCK
            if start + length > len(data):
                raise ShardFormatError(f"read {url}: the member at byte {offset + pos} runs "
                                       "past its sample")
            found = member_key(name) if regular else None
            if found is not None:
                if sample.setdefault("__key__", found[0]) != found[0]:
                    raise ShardFormatError(f"read {url}: the sample at byte {offset} holds "
                                           f"two keys ({sample['__key__']!r}, {found[0]!r})")
                sample[found[1]] = bytes(data[start:start + length])
            pos = start + _padded(length)
        if "__key__" not in sample:
            raise ShardFormatError(f"read {url}: no sample at byte {offset}")
        return sample


class _Indexer:
    """One streamed pass over a tar: every header parsed, every byte checksummed once.

    A member's bytes (its extension headers, header and data) are known to
    be a sample's, or not, once its header is parsed, before its data
    streams by: a sample's go straight into its running crc32c; a skipped
    member's into a pending one, folded in only if the same key follows
    (rare: a folder or ``._`` file between two members of one sample).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.headers = _Headers(where)
        self.columns = new_columns()
        self.key: str | None = None
        self.fields: set[str] = set()
        self.start = self.end = 0
        self.crc = 0
        self.pending: tuple[int, int] | None = None  # crc and length of skipped members
        self.prefix = bytearray()  # extension headers of the member to come

    def run(self, chunks: Iterable[bytes | memoryview]) -> tuple[Any, Any, Any, int]:
        pos = 0  # bytes consumed
        held = bytearray()  # a header being gathered, or an extension's data
        held_at = 0  # offset of held[0]
        member_at: int | None = None  # the current member's first (extension) header
        under_way = 0  # the first header of the member whose data streams (member_at clears)
        want = _BLOCK  # bytes to hold before the next step
        data_left = 0  # data bytes of a member still streaming
        into_sample = False
        ext: tarfile.TarInfo | None = None
        ended_at: int | None = None  # where the end-of-archive block was
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            while view:
                if ended_at is not None:
                    rest = bytes(view)
                    if rest.strip(b"\0"):
                        stray = pos + len(rest) - len(rest.lstrip(b"\0"))
                        raise ShardFormatError(f"{self.where}: corrupt tar header at byte "
                                               f"{ended_at} (data after the end of the "
                                               f"archive at byte {stray})")
                    pos += len(rest)
                    break
                if data_left:
                    take = min(len(view), data_left)
                    self._checksum(view[:take], into_sample)
                    view, pos, data_left = view[take:], pos + take, data_left - take
                    if not data_left and into_sample:
                        self.end = pos
                    continue
                if not held:
                    held_at = pos
                take = min(len(view), want - len(held))
                held += view[:take]
                view, pos = view[take:], pos + take
                if len(held) < want:
                    continue
                block = bytes(held)
                held.clear()
                if ext is not None:  # an extension header's data, complete
                    self.headers.absorb(ext, block[:ext.size], held_at)
                    self._extension_bytes(block, ext)
                    ext, want = None, _BLOCK
                    continue
                info = self.headers.parse(block, held_at)
                if info is None:
                    ended_at = held_at
                    continue
                if member_at is None and info.type != tarfile.XGLTYPE:
                    member_at = held_at
                under_way = held_at if member_at is None else member_at
                if self.headers.extension(info):
                    self._extension_bytes(block, info)
                    if info.size > MAX_EXTENSION:
                        raise ShardFormatError(
                            f"{self.where}: corrupt tar header at byte {held_at} (an "
                            f"extension header of {info.size} bytes, over the "
                            f"{MAX_EXTENSION} an indexer holds)")
                    if info.size:
                        ext, want = info, _padded(info.size)
                    else:
                        self.headers.absorb(info, b"", held_at)
                    continue
                name, regular, length = self.headers.member(info, held_at)
                found = member_key(name) if regular else None
                into_sample = self._route(found, held_at if member_at is None else member_at)
                member_at = None
                self._checksum(block, into_sample)
                data_left = _padded(length)
                if not data_left and into_sample:
                    self.end = pos
        if held or data_left or ext is not None:
            # Inside a member's (or an extension's) data, or a header being gathered.
            at = under_way if data_left or ext is not None else \
                held_at if member_at is None else member_at
            raise ShardFormatError(f"{self.where}: truncated: the tar ends at byte {pos}, "
                                   f"inside the member at byte {at}")
        if self.key is not None:
            self._close_sample()
        return (*self.columns, pos)

    def _extension_bytes(self, block: bytes, info: tarfile.TarInfo) -> None:
        # A member's own extensions start its region (tarfile's offset); a
        # global header belongs to no member, like a skipped one.
        if info.type == tarfile.XGLTYPE:
            self._checksum(block, False)
        else:
            self.prefix += block

    def _checksum(self, data: bytes | memoryview, into_sample: bool) -> None:
        if into_sample:
            self.crc = crc32c(data, self.crc)
        else:
            crc, length = self.pending or (0, 0)
            self.pending = (crc32c(data, crc), length + len(data))

    def _route(self, found: tuple[str, str] | None, member_at: int) -> bool:
        """Start a member whose header was just parsed; whether it is a sample's."""
        prefix = bytes(self.prefix)
        self.prefix.clear()
        if found is None:
            if prefix:
                self._checksum(prefix, False)
            return False
        key, field = found
        if key != self.key:
            if self.key is not None:
                self._close_sample()
            self.key, self.fields, self.start, self.crc = key, set(), member_at, 0
        else:
            if field in self.fields:
                raise ShardFormatError(f"{self.where}: the sample {key!r} has the field "
                                       f"{field!r} twice (member at byte {member_at})")
            if self.pending is not None:  # skipped members inside the sample
                self.crc = crc32c_combine(self.crc, *self.pending)
        self.pending = None
        self.fields.add(field)
        self.crc = crc32c(prefix, self.crc)
        return True

    def _close_sample(self) -> None:
        offsets, lengths, crcs = self.columns
        offsets.append(self.start)
        lengths.append(self.end - self.start)
        crcs.append(self.crc)
