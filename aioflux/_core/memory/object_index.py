"""``ObjectIndex``: a dataset's objects in columns rather than a list of records.

A list of a million :class:`~aioflux._core.records.types.ObjectInfo` takes ~350 MB,
and every DataLoader worker forked from it makes most of that its own: the
collector's first full pass writes the header of every record (named
tuples are never untracked), and a read writes the record's reference
count, so the shared pages are copied (PyTorch issue 13246). Measured here
for a million listed objects, per forked worker: 149 MiB made private by
one collection and 61 MiB more by one shuffled pass of reads.

Columns hold no Python object per entry (:mod:`.columns`): names end to end
in one buffer with an end offset each, numbers in arrays, a value all
entries share kept once. They are built a page at a time
(:class:`IndexBuilder`; a listing never becomes a list of records), then
laid out in one block of bytes (:mod:`.shared_columns`): from 1 MiB on, an
anonymous memory file that forked workers inherit and spawned ones map by
descriptor, so a node holds the index once and a pickled dataset sent to a
spawned worker does not grow with its objects. A record is rebuilt on each
access (about a microsecond).

Per object, a listing of files holds its name's UTF-8 bytes past the
folder every name shares (kept once) plus 16 bytes (a 32-bit name end, a
32-bit size under 4 GiB, a 64-bit generation; a size every file shares is
kept once), 4 more with recorded crc32cs. While it is listed the columns
grow in mappings of their own (:mod:`.growing`: no copy as they grow, every
page given back when they are freed), then are copied into the block one
after the other, each unmapped once copied; besides them a listing holds a
few pages of records (of columns, from a store that lists as columns:
:class:`~.columns.ListsColumns`, :meth:`IndexBuilder.add_columns`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from ..records.types import NO_METADATA, ObjectInfo
from .columns import (
    _NONE32,
    _NONE64,
    Get,
    Ints,
    ListedColumns,
    Names,
    Repeated,
    Segments,
    Strings,
    Updated,
    _view,
    getter,
    layout_of,
    rfc3339,
)
from .shared_columns import Block, new_block

__all__ = ["IndexBuilder", "ObjectIndex"]

# Records an ObjectIndex(...) of an iterable takes at a time.
_CHUNK = 4096
# Names names() decodes at once (a list of them is held while they are read).
_NAMES_AT_ONCE = 8192


def _metadata_key(metadata: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    # Hashable and reversible (dict(key)); the common empty case costs nothing.
    return tuple(sorted(metadata.items())) if metadata else ()


class IndexBuilder:
    """An :class:`ObjectIndex` made a page of records at a time.

    ``add`` each page in order, then ``finish``; the builder holds columns,
    never the records.
    """

    def __init__(self) -> None:
        self.count = 0
        self.ordered = True  # every name so far above the one before
        self._last: str | None = None
        self._names = Names()
        self._sizes = Ints()
        self._generations = Ints()
        self._crc32cs = Ints()
        self._md5s = Strings()
        self._metagenerations = Ints()
        self._updated = Updated(self._generations)
        self._buckets = Repeated()
        self._content_types = Repeated()
        self._metadata = Repeated()
        self._schemes = Repeated()

    def add(self, objects: Sequence[ObjectInfo]) -> None:
        """Append records.

        Args:
            objects: the next records, in order.
        """
        if not objects:
            return
        (buckets, names, sizes, generations, crc32cs, md5s, metagenerations, content_types,
         updated, metadata, schemes) = zip(*objects, strict=True)
        if self.ordered:
            self.ordered = ((self._last is None or self._last < names[0])
                            and all(map(str.__lt__, names, names[1:])))
        self._last = names[-1]
        self._names.add([n.encode("utf-8", "surrogatepass") for n in names])
        self._sizes.add(sizes)
        self._updated.add(updated, generations)  # before the generations (see Updated)
        self._generations.add(generations)
        self._crc32cs.add(crc32cs)
        self._md5s.add(md5s)
        self._metagenerations.add(metagenerations)
        self._buckets.add(buckets)
        self._content_types.add(content_types)
        # Most listings carry no custom metadata: one C-level test a page,
        # not a key made per object.
        self._metadata.add([_metadata_key(m) for m in metadata] if any(metadata)
                           else [()] * len(metadata))
        self._schemes.add(schemes)
        self.count += len(objects)

    def add_columns(self, page: ListedColumns) -> None:
        """Append a listing page given as columns: the records ``add`` takes,
        without one made an object (nor, for a file, its time written out).

        Args:
            page: the next objects, in order.
        """
        names = page.names
        n = len(names)
        if not n:
            return
        if self.ordered:
            self.ordered = ((self._last is None or self._last < names[0])
                            and all(map(str.__lt__, names, names[1:])))
        self._last = names[-1]
        self._names.add([name.encode("utf-8", "surrogatepass") for name in names])
        self._sizes.add(page.sizes)
        # Before the generations (see Updated).
        if page.updated is None:
            self._updated.add_derived(page.generations)
        else:
            self._updated.add(page.updated, page.generations)
        self._generations.add(page.generations)
        self._crc32cs.add(page.crc32cs)
        nones = [None] * n
        for column in (self._md5s, self._metagenerations, self._content_types):
            column.add(nones)
        self._buckets.add([page.bucket] * n)
        self._metadata.add([()] * n)
        self._schemes.add([page.scheme] * n)
        self.count += n

    def finish(self) -> ObjectIndex:
        """The index of every record added (the builder is left empty).

        Returns:
            The index.
        """
        out = Segments()
        # The names first: the largest buffer is copied, and freed, first.
        specs = {"name": ("names", self._names.finish(out))}
        for field, kind in _FIELDS:
            if field != "name":
                specs[field] = (kind, getattr(self, _COLUMN[field]).finish(out))
        places = layout_of(out.parts)
        block = new_block(places[-1][0] + places[-1][1] if places else 0)
        parts, out.parts = out.parts, []
        for k, (offset, size) in enumerate(places):
            block.view[offset:offset + size] = memoryview(parts[k]).cast("B")
            parts[k] = None  # freed as it is copied
        index = ObjectIndex.__new__(ObjectIndex)
        index._load(self.count, specs, places, block)
        self.__init__()  # type: ignore[misc]
        return index


# ObjectInfo's fields in order, the kind of column each is.
_FIELDS = (("bucket", "repeated"), ("name", "names"), ("size", "ints"), ("generation", "ints"),
           ("crc32c", "ints"), ("md5", "strings"), ("metageneration", "ints"),
           ("content_type", "repeated"), ("updated", "strings"), ("metadata", "repeated"),
           ("scheme", "repeated"))
_COLUMN = {"bucket": "_buckets", "name": "_names", "size": "_sizes",
           "generation": "_generations", "crc32c": "_crc32cs", "md5": "_md5s",
           "metageneration": "_metagenerations", "content_type": "_content_types",
           "updated": "_updated", "metadata": "_metadata", "scheme": "_schemes"}

Specs = dict[str, tuple[str, Any]]


def _rebuild(count: int, specs: Specs, places: list[tuple[int, int]], block: Block) -> ObjectIndex:
    index = ObjectIndex.__new__(ObjectIndex)
    index._load(count, specs, places, block)
    return index


class ObjectIndex(Sequence[ObjectInfo]):
    """A dataset's objects, in order, as columns (see the module doc).

    A ``Sequence`` of :class:`~aioflux._core.records.types.ObjectInfo`: indexing,
    ``len``, iteration and slices (a slice is a list) work as on the list
    it was built from, and every record compares equal to the one given.

    Args:
        objects: the records, in order (an iterable is taken a chunk at a time).
    """

    def __init__(self, objects: Iterable[ObjectInfo]) -> None:
        builder = IndexBuilder()
        if isinstance(objects, Sequence):
            for start in range(0, len(objects), _CHUNK):
                builder.add(objects[start:start + _CHUNK])
        else:
            it = iter(objects)
            while chunk := list(itertools.islice(it, _CHUNK)):
                builder.add(chunk)
        built = builder.finish()
        self._load(built._len, built._specs, built._places, built._block)

    def _load(self, count: int, specs: Specs, places: list[tuple[int, int]],
              block: Block) -> None:
        self._len = count
        self._specs, self._places, self._block = specs, places, block
        get = {field: getter(kind, spec, block, places) for field, (kind, spec) in specs.items()
               if kind != "strings" or spec[0] != "derived"}
        if "updated" not in get:
            generation = get["generation"]
            get["updated"] = lambda i: rfc3339(generation(i))
        metadata = get["metadata"]
        get["metadata"] = lambda i: dict(key) if (key := metadata(i)) else NO_METADATA
        # A record starts as the values every entry shares; only the others
        # are read (a file listing's: name, size, generation, updated).
        template: list[Any] = []
        varying: list[tuple[int, Get]] = []
        for position, (field, _) in enumerate(_FIELDS):
            spec = specs[field][1]
            if spec[0] == "const" and (field != "metadata" or not spec[1]):
                template.append(NO_METADATA if field == "metadata" else spec[1])
            else:
                template.append(None)
                varying.append((position, get[field]))
        self._template, self._varying = template, tuple(varying)
        self._size, self._bucket, self._name = get["size"], get["bucket"], get["name"]
        self._generation, self._crc32c = get["generation"], get["crc32c"]

    def __reduce__(self) -> tuple[Any, ...]:
        # The block pickles as its bytes, or to a process of this node
        # (multiprocessing's pickler) as its descriptor: see shared_columns.
        return _rebuild, (self._len, self._specs, self._places, self._block)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> ObjectInfo: ...

    @overload
    def __getitem__(self, index: slice) -> list[ObjectInfo]: ...

    def __getitem__(self, index: int | slice) -> ObjectInfo | list[ObjectInfo]:
        if isinstance(index, slice):
            return [self._record(i) for i in range(*index.indices(self._len))]
        return self._record(self._at(index))

    def __iter__(self) -> Iterator[ObjectInfo]:
        return map(self._record, range(self._len))

    def __repr__(self) -> str:
        return f"ObjectIndex({self._len} objects)"

    def _record(self, i: int) -> ObjectInfo:
        values = self._template.copy()
        for position, get in self._varying:
            values[position] = get(i)
        return tuple.__new__(ObjectInfo, values)

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
        return self._size(self._at(index))  # type: ignore[no-any-return]

    def version(self, index: int) -> tuple[int, int | None, int | None]:
        """The size, generation and crc32c of object ``index``, without
        building its record: what a read checks the object against.

        Args:
            index: its position.

        Returns:
            ``(size, generation, crc32c)``.
        """
        index = self._at(index)
        return self._size(index), self._generation(index), self._crc32c(index)

    def place(self, index: int) -> tuple[str, str]:
        """The bucket and name of object ``index``, without building its record
        (a record is a microsecond and a half: a local read's tenth).

        Args:
            index: its position.

        Returns:
            ``(bucket, name)``.
        """
        index = self._at(index)
        return self._bucket(index), self._name(index)

    def _at(self, index: int) -> int:
        """``index`` as a position (a negative one counts from the end)."""
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"object index {index} out of range for {self._len} objects")
        return index

    def names(self) -> Iterator[str]:
        """The object names, in order (without building records).

        Returns:
            An iterator of names.
        """
        folder, names = self.folder_names()
        return map(folder.__add__, names) if folder else names

    def folder_names(self) -> tuple[str, Iterator[str]]:
        """A folder every name is in (``""`` or ending in ``/``: not always the
        deepest) and each name past it, in order (without building records).

        Returns:
            The folder and an iterator of the rest of the names.
        """
        spec = self._specs["name"][1]
        folder = spec[4].decode("utf-8", "surrogatepass") if len(spec) > 4 else ""
        return folder, itertools.chain.from_iterable(
            map(self._names_from, range(0, self._len, _NAMES_AT_ONCE)))

    def name_bytes(self) -> tuple[str, memoryview, memoryview]:
        """A folder every name is in (as :meth:`folder_names`) and the rest of
        the names as bytes (UTF-8, surrogates passed), without a str a name.

        Returns:
            The folder, the names' bytes end to end, and where each ends in
            them (``len(self) + 1`` offsets from 0).
        """
        spec = self._specs["name"][1]
        folder = spec[4].decode("utf-8", "surrogatepass") if len(spec) > 4 else ""
        _, data_at, ends_at, code, *_ = spec
        ends = _view(self._block, self._places[ends_at], code)
        base = self._places[data_at][0]
        return folder, self._block.view[base:base + ends[-1]], ends

    def _names_from(self, start: int) -> Iterable[str]:
        """Names ``start`` on past their shared folder, up to :data:`_NAMES_AT_ONCE`:
        their bytes decoded at once where all are ASCII (a byte a character),
        each name a slice of one str, not a decode of its own."""
        stop = min(self._len, start + _NAMES_AT_ONCE)
        _, data_at, ends_at, code, *_ = self._specs["name"][1]
        base = self._places[data_at][0]
        ends = _view(self._block, self._places[ends_at], code)[start:stop + 1].tolist()
        raw = self._block.data[base + ends[0]:base + ends[-1]]
        ends = list(map(ends[0].__rsub__, ends))  # from the chunk's first byte
        if not raw.isascii():
            return [raw[a:b].decode("utf-8", "surrogatepass") for a, b in itertools.pairwise(ends)]
        text = str(raw, "ascii")
        return [text[a:b] for a, b in itertools.pairwise(ends)]

    def integers(self, field: str) -> Any:
        """A column of integers as one array, without building records.

        Args:
            field: ``"size"``, ``"generation"``, ``"crc32c"`` or ``"metageneration"``.

        Returns:
            A numpy array: int64 with -1 for None, or Python ints (dtype
            object, -1 for None) where one does not fit an int64 (an S3 ETag
            as a generation). A value of -1 (a file's generation a
            nanosecond before 1970) reads as None too: for comparing with
            sizes, crc32cs and versions, which are never negative.

        Raises:
            ValueError: ``field`` is not a column of integers.
        """
        import numpy as np  # a dependency already; imported only here

        kind, spec = self._specs[field]
        if kind != "ints":
            raise ValueError(f"{field!r} is not a column of integers")
        n = self._len
        if spec[0] == "const":
            value = -1 if spec[1] is None else spec[1]
            return np.full(n, value, dtype=np.int64 if -(1 << 63) <= value < 1 << 63
                           else object)
        if spec[0] == "big":
            get = getter(kind, spec, self._block, self._places)
            return np.fromiter(map(lambda v: -1 if v is None else v, map(get, range(n))),
                               dtype=object, count=n)
        _, at, code, nones = spec
        raw = np.frombuffer(self._block.view, dtype=np.uint32 if code == "I" else np.int64,
                            count=n, offset=self._places[at][0])
        out = raw.astype(np.int64)
        if nones:
            out[raw == (_NONE32 if code == "I" else _NONE64)] = -1
        return out

    def buckets(self) -> list[str]:
        """The buckets the objects are in, each once (without building records).

        Returns:
            Their names.
        """
        spec = self._specs["bucket"][1]
        if spec[0] == "const":
            return [spec[1]] if self._len else []
        return list(spec[3])

    def schemes(self) -> list[str]:
        """The stores the objects are on, each once (without building records).

        Returns:
            Their URL schemes.
        """
        spec = self._specs["scheme"][1]
        if spec[0] == "const":
            return [spec[1]] if self._len else []
        return list(spec[3])

    @property
    def shared(self) -> bool:
        """Whether the columns are in memory this node's processes share
        (see :mod:`aioflux._core.memory.shared_columns`), not this process's own."""
        return self._block.shared

    def nbytes(self) -> int:
        """Bytes the columns hold (their block, not the few objects around it).

        Returns:
            The total.
        """
        return len(self._block)


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
