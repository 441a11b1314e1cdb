"""The tar indexer as it was before its fast path: one header at a time,
every byte checksummed as it streamed by. The reference the fast indexer
is compared with (same samples, same crc32c, same first error)."""

from __future__ import annotations

import io
import random
import tarfile
from collections.abc import Iterable
from typing import Any

from aioflux._core.errors import ShardFormatError
from aioflux._core.integrity.crc import crc32c, crc32c_combine
from aioflux._engines.shards._index import new_columns
from aioflux._engines.shards._tar_headers import (
    BLOCK,
    MAX_EXTENSION,
    NUMBERS,
    Headers,
    member_key,
    padded,
)

__all__ = ["OldIndexer", "old_index", "random_tar"]


def random_tar(rng: random.Random) -> bytes:
    """A small tar of every kind of member tarfile writes, in one of its formats."""
    fmt = rng.choice([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
    out = io.BytesIO()
    pax = {"comment": "global"} if fmt == tarfile.PAX_FORMAT and rng.random() < 0.5 else {}
    with tarfile.open(fileobj=out, mode="w", format=fmt, pax_headers=pax) as tar:
        # (tarfile cannot read back a global header with no member after it)
        for i in range(rng.randint(1 if pax else 0, 12)):
            deep = "d/" * rng.choice([0, 1, 60]) if fmt != tarfile.USTAR_FORMAT else "d/"
            key = f"{deep}k{i:03d}"
            fields = rng.sample(["jpg", "cls", "seg.png", "json", "txt"], rng.randint(1, 3))
            for n, field in enumerate(fields):
                if n and rng.random() < 0.3:  # a skipped member inside the sample
                    folder = tarfile.TarInfo(f"{deep}folder{i}")
                    folder.type = tarfile.DIRTYPE
                    tar.addfile(folder)
                data = rng.randbytes(rng.choice([0, 1, 511, 512, 513, 3000]))
                member = tarfile.TarInfo(f"{key}.{field}")
                member.size = len(data)
                if fmt == tarfile.PAX_FORMAT and rng.random() < 0.2:
                    member.pax_headers = {"comment": "x" * rng.randint(1, 900)}
                tar.addfile(member, io.BytesIO(data))
            if rng.random() < 0.3:
                link = tarfile.TarInfo(f"._k{i:03d}.jpg")
                link.size = 4
                tar.addfile(link, io.BytesIO(b"junk"))
            if rng.random() < 0.2:
                sym = tarfile.TarInfo(f"link{i}.jpg")
                sym.type = tarfile.SYMTYPE
                sym.linkname = "x" * (rng.choice([5, 200]) if fmt != tarfile.USTAR_FORMAT else 5)
                tar.addfile(sym)
    return out.getvalue()


def old_index(chunks: Iterable[bytes | memoryview], where: str) -> tuple[Any, Any, Any, int]:
    """``(offsets, lengths, crcs, data_size)`` as the old indexer found them."""
    return OldIndexer(where).run(chunks)


class OldIndexer:
    """One streamed pass over a tar: every header parsed, every byte checksummed once.

    A member's bytes (its extension headers, header and data) are known to
    be a sample's, or not, once its header is parsed, before its data
    streams by: a sample's go straight into its running crc32c; a skipped
    member's into a pending one, folded in only if the same key follows
    (rare: a folder or ``._`` file between two members of one sample).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.headers = Headers(where)
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
        want = BLOCK  # bytes to hold before the next step
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
                    ext, want = None, BLOCK
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
                        ext, want = info, padded(info.size)
                    else:
                        self.headers.absorb(info, b"", held_at)
                    continue
                name, regular, length = self.headers.member(info, held_at)
                found = member_key(name) if regular else None
                into_sample = self._route(found, held_at if member_at is None else member_at)
                member_at = None
                self._checksum(block, into_sample)
                data_left = padded(length)
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


def damaged_number_fields(count: int, *, written: float, zeroed: float = 0.0,
                          checksums: tuple[bytes, ...] = (b"%06o\0 ",)) -> Iterable[bytes]:
    """``count`` ustar headers of ``000123.jpg`` (102,400 bytes) with one to
    three number fields damaged, each header's checksum then made right (in
    a form picked from ``checksums``). A damaged field holds random bytes
    of the shapes around the usual one (digits, NUL, padding, spaces, a
    digit 8, a letter), or with chance ``written`` the form tarfile writes,
    or with chance ``zeroed`` all NULs; the same seed each call."""
    rng = random.Random(51)
    base = tarfile.TarInfo("000123.jpg")
    base.size, base.mtime = 102400, 1_700_000_000
    block = base.tobuf(tarfile.USTAR_FORMAT)[:512]
    alphabet = b"0000017 \0\0x8"
    for _ in range(count):
        damaged = bytearray(block)
        for a, b in rng.sample(NUMBERS, rng.choice([1, 2, 3])):
            if (a, b) == (148, 156):
                continue  # the checksum is written below
            roll = rng.random()
            damaged[a:b] = (b"%0*o\0" % (b - a - 1, rng.randrange(8 ** (b - a - 1)))
                            if roll < written else bytes(b - a) if roll < written + zeroed
                            else bytes(rng.choice(alphabet) for _ in range(b - a)))
        damaged[148:156] = b" " * 8
        damaged[148:156] = rng.choice(checksums) % sum(damaged)
        yield bytes(damaged)
