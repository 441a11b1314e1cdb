"""``ObjectIndex``: a dataset's objects in columns rather than a list of records.

A list of a million :class:`~aioflux._core.types.ObjectInfo` takes ~350 MB,
and every DataLoader worker forked from it makes most of that its own: the
collector's first full pass writes the header of every record (named
tuples are never untracked), and a read writes the record's reference
count, so the shared pages are copied (PyTorch issue 13246). Measured here
for a million listed objects, per forked worker: 149 MiB made private by
one collection and 61 MiB more by one shuffled pass of reads.

Columns hold no Python object per entry: names and other strings in one
bytes buffer each, numbers in ``array`` s, repeated values (bucket, scheme,
content type, custom metadata) once with an id per entry. The collector
does not visit them and a read writes nothing, so forked workers share the
parent's pages (0.1 MiB private after the same pass), a spawned worker
unpickles a few buffers instead of a million tuples (0.13 s against 2.2 s),
and the index is half the size. A record is rebuilt on each access (about
a microsecond).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from .types import NO_METADATA, ObjectInfo

__all__ = ["ObjectIndex"]

_INT64_MIN = -(1 << 63)
# None in an int64 column (no size, generation, crc32c or metageneration is it).
_NONE = _INT64_MIN


class _Blobs:
    """Byte strings end to end in one buffer; entry ``i`` is
    ``data[ends[i]:ends[i + 1]]``."""

    def __init__(self, items: Sequence[bytes]) -> None:
        self.data = b"".join(items)
        self.ends = array("Q", itertools.accumulate(map(len, items), initial=0))

    def __getitem__(self, i: int) -> bytes:
        return self.data[self.ends[i]:self.ends[i + 1]]

    def nbytes(self) -> int:
        return len(self.data) + len(self.ends) * self.ends.itemsize


def _strings(values: Sequence[str | None], *, optional: bool = True) -> _Blobs:
    """Strings as UTF-8 (surrogatepass: a file name that is not valid UTF-8,
    as os.fsdecode escapes it, comes back exactly). Where None may occur it
    is an empty entry and every string gets a leading byte."""
    if optional:
        return _Blobs([b"" if v is None else b"\x01" + v.encode("utf-8", "surrogatepass")
                       for v in values])
    return _Blobs([v.encode("utf-8", "surrogatepass") for v in values])  # type: ignore[union-attr]


class _BigInts:
    """Integers (or None) beyond 64 bits, such as S3's ETag-as-generation:
    each as its own little-endian bytes."""

    def __init__(self, values: Sequence[int | None]) -> None:
        self._blobs = _Blobs([b"" if v is None else
                              v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
                              for v in values])

    def __getitem__(self, i: int) -> int | None:
        raw = self._blobs[i]
        return int.from_bytes(raw, "little", signed=True) if raw else None

    def nbytes(self) -> int:
        return self._blobs.nbytes()


def _ints(values: Sequence[int | None]) -> array[int] | _BigInts:
    """An int64 array with None as ``_NONE`` (so never holding that value
    itself), or :class:`_BigInts`, which returns None as None."""
    if _NONE not in values:  # else that value would read back as None
        try:
            return array("q", [_NONE if v is None else v for v in values])
        except OverflowError:
            pass  # a value beyond 64 bits (an S3 ETag as a generation)
    return _BigInts(values)


def _repeated(values: Iterable[Hashable]) -> tuple[array[int], list[Any]]:
    """Values that repeat (a bucket, a content type): each kept once, and
    an id per entry; entry ``i`` is ``kept[ids[i]]``."""
    ids: dict[Hashable, int] = {}
    return array("I", [ids.setdefault(v, len(ids)) for v in values]), list(ids)


def _metadata_key(metadata: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    # Hashable and reversible (dict(key)); the common empty case costs nothing.
    return tuple(sorted(metadata.items())) if metadata else ()


def _nbytes(column: array[int] | _Blobs | _BigInts) -> int:
    return len(column) * column.itemsize if isinstance(column, array) else column.nbytes()


class ObjectIndex(Sequence[ObjectInfo]):
    """A dataset's objects, in order, as columns (see the module doc).

    A ``Sequence`` of :class:`~aioflux._core.types.ObjectInfo`: indexing,
    ``len``, iteration and slices (a slice is a list) work as on the list
    it was built from, and every record compares equal to the one given.

    Args:
        objects: the records, in order.
    """

    def __init__(self, objects: Iterable[ObjectInfo]) -> None:
        records = objects if isinstance(objects, list) else list(objects)
        self._len = len(records)
        self._names = _strings([o.name for o in records], optional=False)
        self._sizes = _ints([o.size for o in records])
        self._generations = _ints([o.generation for o in records])
        self._crc32cs = _ints([o.crc32c for o in records])
        self._md5s = _strings([o.md5 for o in records])
        self._metagenerations = _ints([o.metageneration for o in records])
        self._updated = _strings([o.updated for o in records])
        self._buckets = _repeated(o.bucket for o in records)
        self._content_types = _repeated(o.content_type for o in records)
        self._metadata = _repeated(_metadata_key(o.metadata) for o in records)
        self._schemes = _repeated(o.scheme for o in records)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> ObjectInfo: ...

    @overload
    def __getitem__(self, index: slice) -> list[ObjectInfo]: ...

    def __getitem__(self, index: int | slice) -> ObjectInfo | list[ObjectInfo]:
        if isinstance(index, slice):
            return [self._record(i) for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"object index {index} out of range for {self._len} objects")
        return self._record(index)

    def __iter__(self) -> Iterator[ObjectInfo]:
        return map(self._record, range(self._len))

    def __repr__(self) -> str:
        return f"ObjectIndex({self._len} objects)"

    def _record(self, i: int) -> ObjectInfo:
        # Inline column reads: a method call per field would double the cost.
        j = i + 1
        names, md5s, updated = self._names, self._md5s, self._updated
        md5 = md5s.data[md5s.ends[i] + 1:md5s.ends[j]]
        when = updated.data[updated.ends[i] + 1:updated.ends[j]]
        crcs, metagenerations = self._crc32cs, self._metagenerations
        crc, metageneration = crcs[i], metagenerations[i]
        metadata = self._metadata[1][self._metadata[0][i]]
        return tuple.__new__(ObjectInfo, (
            self._buckets[1][self._buckets[0][i]],
            names.data[names.ends[i]:names.ends[j]].decode("utf-8", "surrogatepass"),
            self._sizes[i],
            self._generations[i],
            None if crc == _NONE and isinstance(crcs, array) else crc,
            md5.decode("utf-8", "surrogatepass") if md5s.ends[i] != md5s.ends[j] else None,
            None if metageneration == _NONE and isinstance(metagenerations, array)
            else metageneration,
            self._content_types[1][self._content_types[0][i]],
            when.decode("utf-8", "surrogatepass") if updated.ends[i] != updated.ends[j] else None,
            dict(metadata) if metadata else NO_METADATA,
            self._schemes[1][self._schemes[0][i]]))

    def select(self, positions: Sequence[int]) -> Sequence[ObjectInfo]:
        """The objects at ``positions``, in that order, as a view: records are
        built as they are read, so a worker's shard costs no list of them.

        Args:
            positions: indices into this index.

        Returns:
            A read-only sequence.
        """
        return _Selection(self, positions)

    def size(self, index: int) -> int:
        """The size of object ``index``, without building its record.

        Args:
            index: its position.

        Returns:
            Its size in bytes.
        """
        return self._sizes[index]  # type: ignore[return-value]

    def names(self) -> Iterator[str]:
        """The object names, in order (without building records).

        Returns:
            An iterator of names.
        """
        data, ends = self._names.data, self._names.ends
        return (data[ends[i]:ends[i + 1]].decode("utf-8", "surrogatepass")
                for i in range(self._len))

    def nbytes(self) -> int:
        """Bytes the columns hold (the buffers, not the few objects around them).

        Returns:
            The total.
        """
        columns = (self._names, self._sizes, self._generations, self._crc32cs, self._md5s,
                   self._metagenerations, self._updated, self._buckets[0],
                   self._content_types[0], self._metadata[0], self._schemes[0])
        return sum(_nbytes(c) for c in columns)


class _Selection(Sequence[ObjectInfo]):
    """Some of an index's objects, by position (see :meth:`ObjectIndex.select`)."""

    def __init__(self, index: ObjectIndex, positions: Sequence[int]) -> None:
        self._index = index
        self._positions = positions

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, i: int) -> ObjectInfo: ...

    @overload
    def __getitem__(self, i: slice) -> list[ObjectInfo]: ...

    def __getitem__(self, i: int | slice) -> ObjectInfo | list[ObjectInfo]:
        if isinstance(i, slice):
            return [self._index[p] for p in self._positions[i]]
        return self._index[self._positions[i]]
