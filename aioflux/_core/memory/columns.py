"""The columns of an :class:`~aioflux._core.memory.object_index.ObjectIndex`: built a page
at a time, then laid out end to end in one :class:`~.shared_columns.Block`.

A column is built in the smallest form its values so far allow, and
finished in the smallest form all of them allow:

- a value every entry shares (a bucket, a scheme, a crc32c or MD5 a store
  never gives) is kept once: no bytes per entry;
- integers are 32-bit where they all fit (sizes of files under 4 GiB),
  64-bit otherwise, each as its own bytes beyond that (S3's ETag as a
  generation), None being one reserved value;
- strings are UTF-8 end to end in one buffer with an end offset each
  (32-bit while the buffer is under 4 GiB); names without the folder they
  all share, kept once (:class:`Names`);
- while they are built, the buffers grow in mappings of their own
  (:mod:`.growing`), not through ``realloc``;
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
from bisect import bisect_left
from collections.abc import AsyncGenerator, Callable, Hashable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

from .growing import Grown
from .shared_columns import Block

__all__ = ["Blobs", "Get", "Ints", "ListedColumns", "ListsColumns", "Names", "Repeated",
           "Segments", "Strings", "Updated", "getter", "layout_of", "rfc3339"]

_INT64_MIN = -(1 << 63)
# None in an int64 column (a value that is it goes to the big form).
_NONE64 = _INT64_MIN
# None in a 32-bit column (a value that is it goes to 64 bits).
_NONE32 = 0xFFFFFFFF

Spec = tuple[Any, ...]
Get = Callable[[int], Any]


class ListedColumns(NamedTuple):
    """One page of a listing as columns, not a record an object: what a
    store that lists files hands an index (:class:`ListsColumns`). Every
    other field of its objects' records is None, no custom metadata.

    Attributes:
        bucket: the bucket of every object.
        scheme: the store's URL scheme.
        names: the names, in order.
        sizes: their sizes.
        generations: their generations.
        crc32cs: their crc32cs (None: none known).
        updated: their ``updated`` times, or None where each is its
            generation written out by :func:`rfc3339` (no text made).
    """

    bucket: str
    scheme: str
    names: list[str]
    sizes: list[int]
    generations: list[int]
    crc32cs: list[int | None]
    updated: list[str | None] | None

    def without(self, prefix: str) -> ListedColumns:
        """The page without the names starting with ``prefix``.

        Args:
            prefix: the names to leave out (``""``: none).

        Returns:
            This page, or a copy without them.
        """
        names = self.names
        if not prefix or not names:
            return self
        pick: Callable[[list[Any]], list[Any]]
        if all(map(str.__lt__, names, names[1:])):
            # Sorted: the names under a prefix are one run, found by halving.
            low = high = bisect_left(names, prefix)
            while high < len(names) and names[high].startswith(prefix):
                high += 1
            if low == high:
                return self

            def pick(column: list[Any]) -> list[Any]:
                return column[:low] + column[high:]
        else:
            kept = [i for i, name in enumerate(names) if not name.startswith(prefix)]
            if len(kept) == len(names):
                return self

            def pick(column: list[Any]) -> list[Any]:
                return [column[i] for i in kept]
        return ListedColumns(self.bucket, self.scheme, pick(names), pick(self.sizes),
                             pick(self.generations), pick(self.crc32cs),
                             None if self.updated is None else pick(self.updated))


@runtime_checkable
class ListsColumns(Protocol):
    """A store that lists as :class:`ListedColumns` (the local files): an
    index is built from its pages without a record an object."""

    def list_columns(self, bucket: str, prefix: str
                     ) -> AsyncGenerator[ListedColumns, None]:
        """The objects under ``prefix``, in name order, a page at a time.

        Args:
            bucket: the bucket.
            prefix: only names starting with this.

        Returns:
            The pages.
        """
        ...


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
    """Byte strings end to end, with the end of each so far (32-bit ends
    while the bytes are under 4 GiB), each in a :class:`~.growing.Grown`."""

    def __init__(self) -> None:
        self.data = Grown("B")
        self.ends = Grown("I")
        self.ends.extend(array("I", [0]))

    def __len__(self) -> int:
        return len(self.ends) - 1

    def add(self, items: Sequence[bytes]) -> None:
        joined = b"".join(items)
        if self.data.nbytes + len(joined) >= _NONE32 and self.ends.code == "I":
            wide = Grown("Q")
            for chunk in self.ends.chunks():
                wide.extend(array("Q", chunk))
            self.ends = wide
        ends = itertools.accumulate(map(len, items), initial=self.data.nbytes)
        next(ends)
        self.ends.extend(array(self.ends.code, ends))
        self.data.extend(joined)

    def item(self, i: int) -> bytes:
        """Entry ``i``'s bytes."""
        bounds = self.ends.chunk(i, i + 2)
        return self.data.bytes_at(bounds[0], bounds[1])

    def finish(self, out: Segments) -> Spec:
        data, ends = self.data, self.ends
        self.__init__()  # type: ignore[misc]
        return ("blobs", out.add(data.view()), out.add(ends.view()), ends.code)


class Names(Blobs):
    """Names: :class:`Blobs` with the folder every name so far starts in
    (up to its last ``/``) kept once, not in each.

    A listing's names share their folder (``train/images/``, or a local
    folder's whole path: 40 bytes of 58 in a measured listing). It is found
    from the names themselves (the first and last of each page in byte
    order bound the rest); when a page falls outside it, it shrinks to the
    folder both share and the names kept so far are written again with the
    part dropped (at most once per ``/`` of the first name).
    """

    def __init__(self) -> None:
        super().__init__()
        self.prefix: bytes | None = None

    def add(self, items: Sequence[bytes]) -> None:
        if not items:
            return
        low, high = min(items), max(items)
        prefix = self.prefix
        if prefix is None:
            self.prefix = _folder(low, high)
        elif not (low.startswith(prefix) and high.startswith(prefix)):
            self._shrink(_folder(min(prefix, low), max(prefix, high)))
        cut = len(self.prefix or b"")
        super().add([name[cut:] for name in items] if cut else items)

    def _shrink(self, prefix: bytes) -> None:
        assert self.prefix is not None
        extra = self.prefix[len(prefix):]
        old = Blobs.__new__(Blobs)
        old.data, old.ends = self.data, self.ends
        Blobs.__init__(self)
        self.prefix = prefix
        for start in range(0, len(old), 65536):
            stop = min(len(old), start + 65536)
            bounds = old.ends.chunk(start, stop + 1)
            raw = old.data.bytes_at(bounds[0], bounds[-1])
            base = bounds[0]
            Blobs.add(self, [extra + raw[a - base:b - base]
                             for a, b in itertools.pairwise(bounds)])

    def finish(self, out: Segments) -> Spec:
        prefix = self.prefix or b""
        self.prefix = None
        return (*super().finish(out), prefix)


def _folder(low: bytes, high: bytes) -> bytes:
    """The folder (up to a ``/``, a UTF-8 character of its own) that ``low``,
    ``high`` and every name between them in byte order start in."""
    shared = 0
    for a, b in zip(low, high, strict=False):
        if a != b:
            break
        shared += 1
    return low[:low.rfind(b"/", 0, shared) + 1]


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
    """Integers or None: one shared value, then 32-bit unsigned numbers
    while every value fits, then int64s, then each as its bytes."""

    def __init__(self) -> None:
        self.count = 0
        self.value: int | None = None  # while every entry is this one
        self.ints: Grown | None = None  # "I" (None the marker _NONE32), then "q"
        self.nones = False  # a None among the ints
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
        if self.ints is not None and self._extend(values):
            self.nones = self.nones or None in values
            self.count += len(values)
            return
        assert self.big is not None
        self.big.add([_to_bytes(v) for v in values])
        self.count += len(values)

    def _extend(self, values: Sequence[int | None]) -> bool:
        """Append ``values`` to the ints, widened as they need (False: they
        need the big form, which the ints became)."""
        assert self.ints is not None
        if self.ints.code == "I":
            try:
                if _NONE32 in values:
                    raise OverflowError  # would read back as None
                self.ints.extend(array("I", [_NONE32 if v is None else v for v in values]))
                return True
            except OverflowError:
                wide = Grown("q")
                for chunk in self.ints.chunks():
                    wide.extend(array("q", [_NONE64 if v == _NONE32 else v for v in chunk])
                                if self.nones else array("q", chunk))
                self.ints = wide
        try:
            if _NONE64 in values:
                raise OverflowError  # would read back as None
            self.ints.extend(array("q", [_NONE64 if v is None else v for v in values]))
            return True
        except OverflowError:
            self._widen()
            return False

    def _spread(self) -> None:
        value, count = self.value, self.count
        self.ints = Grown("I")
        self.nones = value is None and count > 0
        for start in range(0, count, 65536):
            if not self._extend([value] * min(65536, count - start)):
                assert self.big is not None
                self.big.add([_to_bytes(value)] * (count - start))  # these were not added
                return

    def _widen(self) -> None:
        assert self.ints is not None
        marker = _NONE32 if self.ints.code == "I" else _NONE64
        self.big = Blobs()
        for chunk in self.ints.chunks():
            self.big.add([_to_bytes(None if v == marker else v) for v in chunk])
        self.ints = None

    def values(self) -> Iterator[int | None]:
        """Every value so far, in order."""
        if self.ints is not None:
            marker = _NONE32 if self.ints.code == "I" else _NONE64
            return (None if v == marker else v for chunk in self.ints.chunks() for v in chunk)
        if self.big is not None:
            big = self.big
            return (int.from_bytes(raw, "little", signed=True) if raw else None
                    for raw in map(big.item, range(self.count)))
        return itertools.repeat(self.value, self.count)

    def finish(self, out: Segments) -> Spec:
        ints, big = self.ints, self.big
        self.ints = self.big = None
        if big is not None:
            return ("big", big.finish(out))
        if ints is None:
            return ("const", self.value)
        # 32 bits when every value fits below the None marker (sizes under
        # 4 GiB; a crc32c of 0xFFFFFFFF takes 64).
        return ("ints", out.add(ints.view()), ints.code, self.nones)


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

    def add_derived(self, generations: Sequence[int | None]) -> None:
        """Add times that are each generation written out (no text made
        while every time so far is)."""
        if self.strings is not None:
            self.strings.add(list(map(rfc3339, generations)))

    def finish(self, out: Segments) -> Spec:
        strings, self.strings = self.strings, None
        return ("derived",) if strings is None else strings.finish(out)


class Repeated:
    """Values that repeat (a bucket, a content type): one shared value, else
    each distinct value once and an id per entry."""

    def __init__(self) -> None:
        self.count = 0
        self.value: Hashable = None
        self.ids: Grown | None = None
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
            self.ids = Grown("I")
            for start in range(0, self.count, 65536):
                self.ids.extend(array("I", [0]) * min(65536, self.count - start))
        kept = self.kept
        self.ids.extend(array("I", [kept.setdefault(v, len(kept)) for v in values]))
        self.count += len(values)

    def finish(self, out: Segments) -> Spec:
        ids, self.ids = self.ids, None
        if ids is None:
            return ("const", self.value)
        code = "B" if len(self.kept) <= 1 << 8 else "H" if len(self.kept) <= 1 << 16 else "I"
        narrow = Grown(code)
        for chunk in ids.chunks():
            narrow.extend(array(code, chunk))
        return ("ids", out.add(narrow.view()), code, list(self.kept))


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
    # A Names spec ends with the folder the names share (an older one has none).
    _, data_at, ends_at, code, *shared = spec
    folder = shared[0].decode("utf-8", "surrogatepass") if shared else ""
    base = places[data_at][0]
    ends = _view(block, places[ends_at], code)
    data = block.data
    if folder:
        return lambda i: folder + data[base + ends[i]:base + ends[i + 1]].decode(
            "utf-8", "surrogatepass")
    if base:
        return lambda i: data[base + ends[i]:base + ends[i + 1]].decode("utf-8", "surrogatepass")
    # The names are the block's first bytes: no offset to add.
    return lambda i: data[ends[i]:ends[i + 1]].decode("utf-8", "surrogatepass")
