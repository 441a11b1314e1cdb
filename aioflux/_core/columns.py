"""The columns of an :class:`~aioflux._core.index.ObjectIndex`: built a page
at a time, then laid out end to end in one :class:`~.shared_columns.Block`.

A column is built in the smallest form its values so far allow, and
finished in the smallest form all of them allow:

- a value every entry shares (a bucket, a scheme, a crc32c or MD5 a store
  never gives) is kept once: no bytes per entry;
- integers are 32-bit where they all fit (sizes of files under 4 GiB),
  64-bit otherwise, each as its own bytes beyond that (S3's ETag as a
  generation), None being one reserved value;
- strings are UTF-8 end to end in one buffer with an end offset each
  (32-bit while the buffer is under 4 GiB);
- values that repeat (content types, custom metadata) once each, with a
  small id per entry;
- a file's ``updated`` time is its generation (modification time in
  nanoseconds) written out, so it is written out on each read instead of
  kept (27 bytes an object).

What a finished column is, is a small picklable ``spec``: its kind and
where its bytes lie in the block (by the index of a segment).
"""

from __future__ import annotations

import itertools
import operator
import time
from array import array
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, cast

from .shared_columns import Block

__all__ = ["Blobs", "Get", "Ints", "Repeated", "Segments", "Strings", "Updated", "getter",
           "layout_of", "rfc3339"]

_INT64_MIN = -(1 << 63)
# None in an int64 column (a value that is it goes to the big form).
_NONE64 = _INT64_MIN
# None in a 32-bit column (a value that is it goes to 64 bits).
_NONE32 = 0xFFFFFFFF

Spec = tuple[Any, ...]
Get = Callable[[int], Any]


class Segments:
    """The buffers a finished index copies into its block, in order."""

    def __init__(self) -> None:
        self.parts: list[Any] = []

    def add(self, buffer: Any) -> int:
        self.parts.append(buffer)
        return len(self.parts) - 1


def _view(block: Block, place: tuple[int, int], code: str) -> memoryview[int]:
    """A segment of ``block`` as integers of type ``code``."""
    start, size = place
    return cast("memoryview[int]", block.view[start:start + size].cast(code))  # type: ignore[call-overload]


def layout_of(parts: list[Any]) -> list[tuple[int, int]]:
    """(offset, length) of each segment, each 8-byte aligned."""
    placed, offset = [], 0
    for part in parts:
        size = memoryview(part).nbytes
        placed.append((offset, size))
        offset += (size + 7) & ~7
    return placed


class Blobs:
    """Byte strings end to end, with the end of each so far."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.ends = array("Q", [0])

    def add(self, items: Sequence[bytes]) -> None:
        self.data += b"".join(items)
        ends = itertools.accumulate(map(len, items), initial=self.ends[-1])
        next(ends)
        self.ends.extend(ends)

    def finish(self, out: Segments) -> Spec:
        data, ends = self.data, self.ends
        self.data, self.ends = bytearray(), array("Q", [0])
        if len(data) < _NONE32:
            ends = array("I", ends)
        return ("blobs", out.add(data), out.add(ends), ends.typecode)


def _blob_reader(spec: Spec, block: Block, places: list[tuple[int, int]]) -> Get:
    _, data_at, ends_at, code = spec
    base = places[data_at][0]
    ends = _view(block, places[ends_at], code)
    data = block.data

    def get(i: int) -> bytes | bytearray:
        return data[base + ends[i]:base + ends[i + 1]]
    return get


def _to_bytes(value: int | None) -> bytes:
    if value is None:
        return b""
    return value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)


class Ints:
    """Integers or None: one shared value, then int64s, then each as its bytes."""

    def __init__(self) -> None:
        self.count = 0
        self.value: int | None = None  # while every entry is this one
        self.ints: array[int] | None = None
        self.big: Blobs | None = None

    def add(self, values: Sequence[int | None]) -> None:
        if not values:
            return
        if self.ints is None and self.big is None:
            first = values[0] if self.count == 0 else self.value
            if values.count(first) == len(values):
                self.value = first
                self.count += len(values)
                return
            self._spread()
        if self.ints is not None:
            try:
                if _NONE64 in values:
                    raise OverflowError  # would read back as None
                self.ints.extend(array("q", [_NONE64 if v is None else v for v in values]))
                self.count += len(values)
                return
            except OverflowError:
                self._widen()
        assert self.big is not None
        self.big.add([_to_bytes(v) for v in values])
        self.count += len(values)

    def _spread(self) -> None:
        try:
            if self.value == _NONE64:
                raise OverflowError
            self.ints = array("q", [_NONE64 if self.value is None else self.value]) * self.count
        except OverflowError:
            self.big = Blobs()
            self.big.add([_to_bytes(self.value)] * self.count)

    def _widen(self) -> None:
        assert self.ints is not None
        self.big = Blobs()
        for start in range(0, len(self.ints), 65536):
            self.big.add([_to_bytes(None if v == _NONE64 else v)
                          for v in self.ints[start:start + 65536]])
        self.ints = None

    def values(self) -> Iterator[int | None]:
        """Every value so far, in order."""
        if self.ints is not None:
            return (None if v == _NONE64 else v for v in self.ints)
        if self.big is not None:
            big = self.big
            return (int.from_bytes(big.data[big.ends[i]:big.ends[i + 1]], "little", signed=True)
                    if big.ends[i] != big.ends[i + 1] else None for i in range(self.count))
        return itertools.repeat(self.value, self.count)

    def finish(self, out: Segments) -> Spec:
        ints, big = self.ints, self.big
        self.ints = self.big = None
        if big is not None:
            return ("big", big.finish(out))
        if ints is None:
            return ("const", self.value)
        nones = _NONE64 in ints
        lowest = min((v for v in ints if v != _NONE64), default=0) if nones else min(ints)
        highest = max(ints)  # the marker is the least int64
        if lowest >= 0 and highest < _NONE32:
            # 32 bits when every value fits below the None marker (sizes
            # under 4 GiB; a crc32c of 0xFFFFFFFF keeps 64).
            narrow = array("I", [_NONE32 if v == _NONE64 else v for v in ints]) if nones \
                else array("I", ints)
            return ("ints", out.add(narrow), "I", nones)
        return ("ints", out.add(ints), "q", nones)


def _ints_reader(spec: Spec, block: Block, places: list[tuple[int, int]]) -> Get:
    kind = spec[0]
    if kind == "const":
        value = spec[1]
        return lambda i: value
    if kind == "big":
        blob = _blob_reader(spec[1], block, places)

        def big(i: int) -> int | None:
            raw = blob(i)
            return int.from_bytes(raw, "little", signed=True) if raw else None
        return big
    _, at, code, nones = spec
    view = _view(block, places[at], code)
    if not nones:
        return view.__getitem__
    marker = _NONE64 if code == "q" else _NONE32

    def get(i: int) -> int | None:
        v = view[i]
        return None if v == marker else v
    return get


def _encoded(value: str | None) -> bytes:
    # A leading byte tells "" from None. surrogatepass: a file name that is
    # not UTF-8, as os.fsdecode escapes it, comes back exactly.
    return b"" if value is None else b"\x01" + value.encode("utf-8", "surrogatepass")


class Strings:
    """Strings or None: one shared value, else each in a :class:`Blobs`."""

    def __init__(self) -> None:
        self.count = 0
        self.value: str | None = None
        self.blobs: Blobs | None = None

    def add(self, values: Sequence[str | None]) -> None:
        if not values:
            return
        if self.blobs is None:
            first = values[0] if self.count == 0 else self.value
            if values.count(first) == len(values):
                self.value = first
                self.count += len(values)
                return
            self.blobs = Blobs()
            self.blobs.add([_encoded(self.value)] * self.count)
        self.blobs.add([_encoded(v) for v in values])
        self.count += len(values)

    def finish(self, out: Segments) -> Spec:
        blobs, self.blobs = self.blobs, None
        return ("const", self.value) if blobs is None else ("strings", blobs.finish(out))


def _strings_reader(spec: Spec, block: Block, places: list[tuple[int, int]]) -> Get:
    if spec[0] == "const":
        value = spec[1]
        return lambda i: value
    blob = _blob_reader(spec[1], block, places)

    def get(i: int) -> str | None:
        raw = blob(i)
        return raw[1:].decode("utf-8", "surrogatepass") if raw else None
    return get


# The (second, its text) last written out: objects listed together mostly
# share their second. One tuple, replaced whole: threads may share it.
_last_second: tuple[int, str] = (-1, "")


def rfc3339(ns: int | None) -> str | None:
    """A time in nanoseconds since the epoch as the JSON API writes
    ``updated`` (UTC, microseconds), as the local store lists a file's
    modification time; None for none (or past the years a date holds).

    Args:
        ns: the time.

    Returns:
        Its text.
    """
    global _last_second
    if ns is None:
        return None
    second, nanos = divmod(ns, 1_000_000_000)
    last = _last_second
    if last[0] != second:
        try:
            last = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        except (OverflowError, ValueError, OSError):
            return None  # past the years a struct_time holds
        _last_second = last
    return f"{last[1]}.{nanos // 1000:06d}Z"


class Updated:
    """``updated`` times: none kept while each is its generation written
    out (:func:`rfc3339`, a file's), else :class:`Strings`."""

    def __init__(self, generations: Ints) -> None:
        self.generations = generations  # given each page after this column
        self.strings: Strings | None = None

    def add(self, values: Sequence[str | None], generations: Sequence[int | None]) -> None:
        if self.strings is None:
            if all(map(operator.eq, values, map(rfc3339, generations))):
                return
            self.strings = Strings()
            batch: list[str | None] = []
            for generation in self.generations.values():
                batch.append(rfc3339(generation))
                if len(batch) == 65536:
                    self.strings.add(batch)
                    batch = []
            self.strings.add(batch)
        self.strings.add(values)

    def finish(self, out: Segments) -> Spec:
        strings, self.strings = self.strings, None
        return ("derived",) if strings is None else strings.finish(out)


class Repeated:
    """Values that repeat (a bucket, a content type): one shared value, else
    each distinct value once and an id per entry."""

    def __init__(self) -> None:
        self.count = 0
        self.value: Hashable = None
        self.ids: array[int] | None = None
        self.kept: dict[Hashable, int] = {}

    def add(self, values: Sequence[Hashable]) -> None:
        if not values:
            return
        if self.ids is None:
            first = values[0] if self.count == 0 else self.value
            if values.count(first) == len(values):
                self.value = first
                self.count += len(values)
                return
            self.kept = {self.value: 0} if self.count else {}
            self.ids = array("I", [0]) * self.count
        kept = self.kept
        self.ids.extend(array("I", [kept.setdefault(v, len(kept)) for v in values]))
        self.count += len(values)

    def finish(self, out: Segments) -> Spec:
        ids, self.ids = self.ids, None
        if ids is None:
            return ("const", self.value)
        code = "B" if len(self.kept) <= 1 << 8 else "H" if len(self.kept) <= 1 << 16 else "I"
        return ("ids", out.add(array(code, ids)), code, list(self.kept))


def _repeated_reader(spec: Spec, block: Block, places: list[tuple[int, int]]) -> Get:
    if spec[0] == "const":
        value = spec[1]
        return lambda i: value
    _, at, code, kept = spec
    ids = _view(block, places[at], code)
    return lambda i: kept[ids[i]]


def getter(kind: str, spec: Spec, block: Block, places: list[tuple[int, int]]) -> Get:
    """How entry ``i`` of a finished column is read.

    Args:
        kind: ``"ints"``, ``"strings"``, ``"repeated"`` or ``"names"``.
        spec: what its ``finish`` returned.
        block: the index's bytes.
        places: (offset, length) of each segment in it.

    Returns:
        ``i -> value``.
    """
    if kind == "ints":
        return _ints_reader(spec, block, places)
    if kind == "strings":
        return _strings_reader(spec, block, places)
    if kind == "repeated":
        return _repeated_reader(spec, block, places)
    _, data_at, ends_at, code = spec
    base = places[data_at][0]
    ends = _view(block, places[ends_at], code)
    data = block.data
    if base:
        return lambda i: data[base + ends[i]:base + ends[i + 1]].decode("utf-8", "surrogatepass")
    # The names are the block's first bytes: no offset to add.
    return lambda i: data[ends[i]:ends[i + 1]].decode("utf-8", "surrogatepass")
