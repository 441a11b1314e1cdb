"""Indexing a tar shard in one streamed pass (the rules: :mod:`._tar_headers`).

Two paths share the pass. The common member, a plain ustar header of a
regular file named ``key.field`` with no extension header before it, is
walked with a few byte operations (its type, its size); then, for all the
members walked in a buffer at once, numpy makes the checks tarfile makes of
their headers (every number field's form, the checksum: :mod:`._tar_checks`),
reads their names as ``member_key`` does, groups them by key and refuses a
field twice in a sample. The first header those checks refuse, and every
other header (extensions, folders, links, long names), goes through
:class:`~._tar_headers.Headers`, one at a time, as ``tarfile`` reads it. A
walk of a few members is checked and grouped member by member (numpy's
fixed cost would be more). Header by header costs 8 regular expressions
and 3 crc32c calls a member, about 9 times this way's CPU a sample of
100-byte jpg + cls members (``python -m perf.index_speed`` runs both).

A sample's region is contiguous (its first member's first header to its
last member's padded data, skipped members between included), so its
crc32c is one call over those bytes once its end is known; only where a
buffer is let go of before the sample ends is the crc32c carried, and the
bytes after its last member so far held apart (they are the sample's only
if a member of the same key follows).
"""

from __future__ import annotations

import itertools
import tarfile
from collections.abc import Iterable
from typing import Any

import google_crc32c

from ..._core.errors import ShardFormatError
from ..._core.integrity.crc import crc32c, crc32c_combine
from ._index import new_columns
from ._tar_checks import BATCH, checked, first_refused
from ._tar_headers import BLOCK, MAX_EXTENSION, PLAIN_NAME, Headers, member_key, padded

__all__ = ["index_tar"]

# A name the fast path takes (member_key's rule on the raw bytes).
_NAME = PLAIN_NAME
# Below this a region's crc32c is taken of a bytes slice (one copy, one C
# call); from it of a view (the crc module reads it in place).
_IN_PLACE = 64 * 1024
_LOWERED = 1024  # distinct raw fields whose lowercased form is remembered
# A sample's members in one batch above which the batch is routed member by
# member (a set of fields), not pairwise in numpy (quadratic in them).
_MOST_FIELDS = 32


def index_tar(chunks: Iterable[bytes | memoryview], where: str) -> tuple[Any, Any, Any, int]:
    """``(offsets, lengths, crcs, data_size)`` of the samples of a tar's data.

    Raises:
        ShardFormatError: not a tar, a member past the end, a field twice
            in a sample (naming the byte).
    """
    return _Indexer(where).run(chunks)


def _size(field: bytes) -> int:
    """A size field as tarfile reads it (the text before a NUL, as octal
    with spaces around), or -1: the other path reads it."""
    digits = field.split(b"\0", 1)[0]
    try:
        return int(digits, 8) if digits.strip(b" ") else 0
    except ValueError:
        return -1


def _lowered(known: dict[bytes, str], raw: bytes) -> str:
    """A field name as member_key gives it (lowercased), remembered."""
    if len(known) >= _LOWERED:
        known.clear()
    known[raw] = raw.decode("utf-8", "surrogateescape").lower()
    return known[raw]


def _extend(buf: bytes, a: int, b: int, crc: int) -> int:
    """crc32c of ``buf[a:b]`` continuing from ``crc``."""
    if b - a < _IN_PLACE:
        return crc32c(buf[a:b], crc)
    with memoryview(buf) as view:
        return crc32c(view[a:b], crc)


class _Indexer:
    """One pass over a tar's chunks (see the module).

    Stream offsets throughout; ``buf[0]`` is at ``base``. The open sample is
    ``key`` (the raw bytes), its fields, ``start`` and ``end`` (its last
    member's padded end so far); its crc32c covers ``[start, min(f, end))``
    and ``pcrc``/``plen`` the bytes ``[end, f)`` when ``f`` is past ``end``.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.headers = Headers(where)
        self.columns = new_columns()
        self.key: bytes | None = None
        self.fields: set[str] = set()
        self.start = self.end = self.f = 0
        self.crc = self.pcrc = self.plen = 0
        self.next = 0  # the next header
        self.walked_to = 0  # where the last walk stopped (before going back to ``member_at``)
        self.need = 0  # the stream offset to hold before walking on, when carrying
        self.member_at: int | None = None  # the first extension header of the member to come
        self.under_way = 0  # the first header of the last member walked
        self.ended_at: int | None = None  # the end-of-archive block
        self.lowered: dict[bytes, str] = {}

    def run(self, chunks: Iterable[bytes | memoryview]) -> tuple[Any, Any, Any, int]:
        pos = 0
        parts: list[bytes] = []  # from self.next on, until ``need`` is held
        for chunk in chunks:
            data = chunk if type(chunk) is bytes else bytes(chunk)
            if not data:
                continue
            at, pos = pos, pos + len(data)
            if self.ended_at is not None:
                self._trailing(data, 0, at)
                continue
            if parts:
                parts.append(data)
                if pos < self.need:
                    continue
                buf, base = b"".join(parts), self.next
                parts = []
            elif pos <= self.next:  # all inside one member's data
                self._advance(data, at, pos)
                continue
            else:
                buf, base = data, at
            self._walk(buf, base)
            end = base + len(buf)
            if self.ended_at is None:
                if self.next < end:
                    parts = [buf[self.next - base:]]
                self._advance(buf, base, min(self.next, end))
        # Inside a header, an extension's data or a member's data. Extension
        # headers with no member after them are ignored, as tarfile does.
        if self.ended_at is None and self.next != pos and self.walked_to != pos:
            at = self.next if self.next < pos else self.under_way
            raise ShardFormatError(f"{self.where}: truncated: the tar ends at byte {pos}, "
                                   f"inside the member at byte {at}")
        if self.key is not None:
            self._close(b"", 0)  # its bytes all taken (f == the data's end)
        return (*self.columns, pos)

    # -- the walk over one buffer ------------------------------------------------

    def _walk(self, buf: bytes, base: int) -> None:
        n = len(buf)
        p = self.next - base
        while True:
            if self.member_at is None and not self.headers.global_pax:
                p = self._fast(buf, base, p)
            if p + BLOCK > n:
                need = base + p + BLOCK
                break
            q = self._slow(buf, base, p)
            if self.ended_at is not None:
                return
            if q < 0:  # an extension's data runs past the buffer
                need = -q
                break
            p = q
        self.walked_to = base + p
        if self.member_at is not None:
            # Walked again from the member's first header once the rest is
            # here (its extensions, taken again, set what they set).
            p, self.member_at, self.headers.local = self.member_at - base, None, {}
        self.next, self.need = base + p, need

    def _slow(self, buf: bytes, base: int, p: int) -> int:
        """Take the header at ``p`` as tarfile would; where the walk goes on
        (minus the offset to hold first, for an extension's data)."""
        at = base + p
        info = self.headers.parse(buf[p:p + BLOCK], at)
        if info is None:
            self.ended_at = at
            if self.key is not None:
                self._close(buf, base)
            self._trailing(buf, p, base)
            return len(buf)
        if self.member_at is None and info.type != tarfile.XGLTYPE:
            self.member_at = at
        if self.headers.extension(info):
            if info.size > MAX_EXTENSION:
                raise ShardFormatError(
                    f"{self.where}: corrupt tar header at byte {at} (an extension header of "
                    f"{info.size} bytes, over the {MAX_EXTENSION} an indexer holds)")
            q = p + BLOCK + padded(info.size)
            if q > len(buf):
                return -(base + q)
            self.headers.absorb(info, buf[p + BLOCK:p + BLOCK + info.size], at)
            return q
        name, regular, length = self.headers.member(info, at)
        first, self.member_at = at if self.member_at is None else self.member_at, None
        self.under_way = first
        end = at + BLOCK + padded(length)
        found = member_key(name) if regular else None
        if found is not None:
            key = found[0].encode("utf-8", "surrogateescape")
            if key != self.key:
                if self.key is not None:
                    self._close(buf, base)
                self._open(key, found[1], first)
            else:
                self._add(found[1], first)
            self.end = end
        return p + BLOCK + padded(length)

    def _fast(self, buf: bytes, base: int, p: int) -> int:
        """Walk the plain members from ``p``; where the walk stopped (the
        first header the fast path does not take, or the buffer's end)."""
        walked: list[int] = []
        end = _walk_plain(buf, p, walked)
        if len(walked) >= BATCH:
            # Checked, then routed, all at once: nothing to take back.
            took, names = checked(buf, walked)
            stop = walked[took] if took < len(walked) else end
            if took and not self._route_all(buf, base, walked[:took], stop, names):
                return self._fast_each(buf, base, p)
            return stop
        return self._fast_each(buf, base, p)

    def _fast_each(self, buf: bytes, base: int, p: int) -> int:
        """:meth:`_fast` member by member (a few members: numpy's fixed
        cost would be more), routed as walked, checked after."""
        snapshot = (self.key, set(self.fields), self.start, self.end, self.f, self.crc,
                    self.pcrc, self.plen, self.under_way, len(self.columns[0]))
        walked: list[int] = []
        try:
            stop = self._plain_run(buf, base, p, walked, -1)
        except ShardFormatError:
            bad = first_refused(buf, walked)
            if bad is None:
                raise
        else:
            bad = first_refused(buf, walked)
            if bad is None:
                return stop
        # Put back what the walk did, and walk only the headers the checks took.
        (self.key, self.fields, self.start, self.end, self.f, self.crc, self.pcrc, self.plen,
         self.under_way, count) = snapshot
        for column in self.columns:
            del column[count:]
        self._plain_run(buf, base, p, [], walked[bad])
        return walked[bad]

    def _plain_run(self, buf: bytes, base: int, p: int, walked: list[int], stop: int) -> int:
        """The fast path's loop, up to the header at ``stop`` (-1: no stop).

        Members walked are contiguous, so a sample ends where the next key
        starts: a new key is one position in ``starts``, and the samples
        between them are put in the columns after the loop, their crc32c
        taken without a Python frame between.
        """
        last = len(buf) - BLOCK if stop < 0 else stop - 1  # the last header it may take
        match, lowered = _NAME.match, self.lowered
        key, fields, crc, pcrc, plen = self.key, self.fields, self.crc, self.pcrc, self.plen
        starts: list[int] = []  # in buf: the first member of each new key
        first = p
        try:
            while p <= last:
                # A regular file (type "0" or NUL) with no ustar prefix.
                if buf[p + 156] not in b"0\0" or buf[p + 345]:
                    break
                found = match(buf, p, p + 100)
                if found is None:
                    break
                try:  # the common form: 11 digits, then a NUL or a space
                    size = int(buf[p + 124:p + 135], 8) if buf[p + 135] in b"\0 " else -1
                except ValueError:
                    size = -1
                if size < 0:
                    size = _size(buf[p + 124:p + 136])
                    if size < 0:
                        break
                walked.append(p)
                raw_key, raw_field = found.group(1, 2)
                field = lowered.get(raw_field) or _lowered(lowered, raw_field)
                if raw_key != key:
                    # (crc32c and pending of the sample it closes kept for _samples)
                    key, fields, plen = raw_key, {field}, 0
                    starts.append(p)
                else:
                    if field in fields:
                        raise self._twice(raw_key, field, base + p)
                    fields.add(field)
                    if plen:  # skipped members before this run, inside the sample
                        crc, pcrc, plen = crc32c_combine(crc, pcrc, plen), 0, 0
                p += 512 + ((size + 511) & -512)
        finally:
            self.crc, self.pcrc, self.plen = crc, pcrc, plen
        if p != first:
            self._samples(buf, base, starts, first)
            self.key, self.fields, self.end = key, fields, base + p
            self.under_way = base + walked[-1]
        return p

    def _route_all(self, buf: bytes, base: int, walked: list[int], end: int,
                   names: tuple[Any, Any, Any]) -> bool:
        """Route the plain members at ``walked`` (checked; the last ends at
        ``end``): samples by key, each field once in a sample. False, with
        nothing done, for a sample of more than :data:`_MOST_FIELDS` of them
        (its fields are compared pairwise here)."""
        import numpy as np

        rows, dots, nuls = names  # name bytes, each name's first "." after its dir, its NUL
        count = len(walked)
        at = np.arange(rows.shape[1])
        keys = np.where(at < dots[:, None], rows, 0)
        same = np.empty(count, bool)  # the key of the member before
        same[1:] = (dots[1:] == dots[:-1]) & (keys[1:] == keys[:-1]).all(axis=1)
        key0 = rows[0, :dots[0]].tobytes()
        same[0] = key0 == self.key
        # Fields lowercased (ASCII only here); one key's fields start at one column.
        upper = (rows >= 0x41) & (rows <= 0x5A)
        fields = np.where((at > dots[:, None]) & (at < nuls[:, None]),
                      rows | (upper.astype(np.uint8) << 5), 0)
        group = np.cumsum(~same)
        largest = int(np.bincount(group).max())
        if largest > _MOST_FIELDS:
            return False
        twice = np.zeros(count, bool)
        for back in range(1, largest):
            twice[back:] |= (group[back:] == group[:-back]) & (nuls[back:] == nuls[:-back]) & \
                (fields[back:] == fields[:-back]).all(axis=1)

        def field(i: int) -> str:
            return fields[i, dots[i] + 1:nuls[i]].tobytes().decode("ascii")

        first_twice = int(np.argmax(twice)) if twice.any() else count
        if same[0]:  # the members before the first new key are the open sample's
            opened = int(np.argmin(same)) if not same.all() else count
            for i in range(min(opened, first_twice)):
                if field(i) in self.fields:
                    first_twice = i
                    break
                self.fields.add(field(i))
            if self.plen:  # skipped members before these, inside the sample
                self.crc = crc32c_combine(self.crc, self.pcrc, self.plen)
                self.pcrc = self.plen = 0
        if first_twice < count:
            key = rows[first_twice, :dots[first_twice]].tobytes()
            raise self._twice(key, field(first_twice), base + walked[first_twice])
        news = np.flatnonzero(~same)
        self._samples(buf, base, np.array(walked)[news].tolist(), walked[0])
        if len(news):
            last = int(news[-1])
            self.key = rows[last, :dots[last]].tobytes()
            self.fields = {field(i) for i in range(last, count)}
        self.end, self.under_way = base + end, base + walked[-1]
        return True

    def _samples(self, buf: bytes, base: int, starts: list[int], first: int) -> None:
        """Close the samples a run of members from ``first`` ended: the one
        open before it, each next one at the next start; the last stays open."""
        if not starts:
            return
        if self.key is not None:
            if starts[0] != first:  # the run's first members were the open sample's
                self.end = base + starts[0]
            self._close(buf, base)
        import numpy as np

        bounds = np.array(starts, np.int64)
        offsets, lengths, crcs = self.columns
        offsets.frombytes((bounds[:-1] + base).astype(np.uint64).tobytes())
        sizes = np.diff(bounds)
        lengths.frombytes(sizes.astype(np.uint64).tobytes())
        if len(sizes) and int(sizes.max()) >= _IN_PLACE:
            crcs.extend(_extend(buf, a, b, 0) for a, b in itertools.pairwise(starts))
        else:  # one C call a sample, no Python frame between
            crcs.extend(map(google_crc32c.value, map(buf.__getitem__, map(
                slice, starts, starts[1:]))))
        self.start = self.f = base + starts[-1]
        self.crc = self.pcrc = self.plen = 0

    # -- the open sample ----------------------------------------------------------

    def _open(self, key: bytes, field: str, at: int) -> None:
        self.key, self.fields, self.start, self.f = key, {field}, at, at
        self.crc = self.pcrc = self.plen = 0

    def _add(self, field: str, at: int) -> None:
        """A member of the open sample at ``at`` (its first header)."""
        assert self.key is not None
        if field in self.fields:
            raise self._twice(self.key, field, at)
        self.fields.add(field)
        if self.plen:  # skipped members inside the sample: its bytes after all
            self.crc = crc32c_combine(self.crc, self.pcrc, self.plen)
            self.pcrc = self.plen = 0

    def _close(self, buf: bytes, base: int) -> None:
        if self.f < self.end:
            self.crc = _extend(buf, self.f - base, self.end - base, self.crc)
        offsets, lengths, crcs = self.columns
        offsets.append(self.start)
        lengths.append(self.end - self.start)
        crcs.append(self.crc)
        self.key = None

    def _advance(self, buf: bytes, base: int, to: int) -> None:
        """Checksum the bytes up to ``to`` that ``buf`` holds: let go of next."""
        if self.key is None or self.f >= to:
            return
        f, end = self.f, self.end
        if f < min(to, end):
            self.crc = _extend(buf, f - base, min(to, end) - base, self.crc)
        if max(f, end) < to:
            self.pcrc = _extend(buf, max(f, end) - base, to - base, self.pcrc)
            self.plen += to - max(f, end)
        self.f = to

    def _twice(self, key: bytes, field: str, at: int) -> ShardFormatError:
        name = key.decode("utf-8", "surrogateescape")
        return ShardFormatError(f"{self.where}: the sample {name!r} has the field {field!r} "
                                f"twice (member at byte {at})")

    def _trailing(self, buf: bytes, p: int, base: int) -> None:
        """After the end-of-archive block: zeros only."""
        rest = buf[p:] if p else buf
        left = rest.lstrip(b"\0")
        if left:
            stray = base + p + len(rest) - len(left)
            raise ShardFormatError(f"{self.where}: corrupt tar header at byte {self.ended_at} "
                                   f"(data after the end of the archive at byte {stray})")


def _walk_plain(buf: bytes, p: int, walked: list[int]) -> int:
    """The headers from ``p`` that may be plain members (a regular file, no
    ustar prefix, a size read as tarfile reads it), each after the last
    one's data, into ``walked``; where the walk stopped."""
    last = len(buf) - BLOCK
    while p <= last:
        if buf[p + 156] not in b"0\0" or buf[p + 345]:
            break
        try:  # the common form: 11 digits, then a NUL or a space
            size = int(buf[p + 124:p + 135], 8) if buf[p + 135] in b"\0 " else -1
        except ValueError:
            size = -1
        if size < 0:
            size = _size(buf[p + 124:p + 136])
            if size < 0:
                break
        walked.append(p)
        p += 512 + ((size + 511) & -512)
    return p
