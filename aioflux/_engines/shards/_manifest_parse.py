"""A manifest's text parsed: line by line, or a column at a time.

:func:`parse_rows` reads each line with ``json.loads`` and checks its
fields (:func:`decode_manifest <._manifest.decode_manifest>` and the
writers' read-merge-write use it). :func:`parse_columns` gives the same
entries as columns for counting, without a Python object per line: a
``json.loads`` a line costs several microseconds an entry, a tenth of a
second or more for 100,000 entries in every rank.

aioflux writes an entry as one compact object with its keys in order
(:func:`encode_manifest <._manifest.encode_manifest>`)::

    {"compression":null,"crc32c":1,"data_size":2,"format":"tar","name":"a.tar","samples":3,"size":2,"version":4}

Such lines are read all at once here with numpy: the quotes are found (no
line read so has a backslash, so each quote is a string's edge), every
byte between the values is compared with what the form says, each number
is read eight digits to a word and held to JSON's grammar (digits, no
leading zero, at most 19, an int64) or ``null`` where the field may be
null, and each string is cut out of the text. Any other line (another
tool's order or spaces, an escape, a number past an int64, a mistake) is
read by ``json.loads`` as :func:`parse_rows` reads it, so it is taken, or
refused with the same message, as before. A text broken into lines by
anything but ``\\n`` (``str.splitlines`` breaks at ``\\r``, ``\\x1c``,
``\\u2028``...) or holding another control character is read line by line
whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._core.errors import ShardFormatError

__all__ = ["KIND", "VERSION", "Columns", "Row", "parse_columns", "parse_rows"]

KIND = "aioflux-shard-manifest"
VERSION = 1

#: An entry: name, size, crc32c, version, format, compression, samples, data bytes.
Row = tuple[str, int, int | None, int | None, str, str | None, int, int]

_INT64_MAX = (1 << 63) - 1
_ZEROS = np.uint64(0x3030303030303030)  # "00000000"
_HIGH = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIX = np.uint64(0x0606060606060606)
# The low p bytes of a word, p = 0..8.
_LOW = np.array([(1 << 8 * p) - 1 for p in range(9)], dtype=np.uint64)
_NULL = int.from_bytes(b"null", "little")
# Digits to numbers in a word: each pair, then each four, then all eight
# (times the first's place, plus the next shifted down, the rest masked off).
_SWAR = tuple((np.uint64(factor), np.uint64(shift), np.uint64(mask)) for factor, shift, mask in
              ((10, 8, 0x00FF00FF00FF00FF), (100, 16, 0x0000FFFF0000FFFF),
               (10000, 32, 0xFFFFFFFF)))
_E8 = np.uint64(100_000_000)
# Lines read at once (~1 MiB of text: the reads of it stay in a core's cache).
_LINES_AT_ONCE = 8192
# Bytes compared at once where the text is searched for a byte.
_BYTES_AT_ONCE = 1 << 20
# The quotes _read reads of a line, as numbered in the null-compression form.
_AT = np.array([3, 4, 5, 6, 8, 9, 12, 13, 15, 16, 17, 18, 19])[:, None]


def _head(line: str | None, where: str) -> None:
    try:
        head = json.loads(line) if line is not None else None
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("kind") != KIND:
        raise ShardFormatError(f"read manifest {where}: not an aioflux shard manifest")
    if head.get("version") != VERSION:
        raise ShardFormatError(f"read manifest {where}: version {head.get('version')!r}; "
                               f"this aioflux reads version {VERSION}")


def _int(row: Mapping[str, Any], key: str, *, optional: bool = False) -> int | None:
    value = row.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key!r} must be a count, got {value!r:.40}")
    return value


def _fast(row: dict[str, Any]) -> Row:
    """An entry that is right, checked in one expression (else an error, and
    :func:`_checked` says what is wrong)."""
    name, size, crc, version = row["name"], row["size"], row.get("crc32c"), row.get("version")
    fmt, compression, samples = row["format"], row.get("compression"), row["samples"]
    data_size = row.get("data_size")
    if type(name) is not str or type(fmt) is not str or type(size) is not int or size < 0 \
            or type(samples) is not int or samples < 0 \
            or not (crc is None or (type(crc) is int and crc >= 0)) \
            or not (version is None or (type(version) is int and version >= 0)) \
            or not (data_size is None or (type(data_size) is int and data_size >= 0)) \
            or not (compression is None or type(compression) is str):
        raise ValueError
    return name, size, crc, version, fmt, compression, samples, \
        size if data_size is None else data_size


def _checked(row: Any) -> Row:
    """An entry, checked field by field.

    Raises:
        ValueError: naming what is wrong.
    """
    if not isinstance(row, dict) or not isinstance(row.get("name"), str) \
            or not isinstance(row.get("format"), str):
        raise ValueError("an entry needs a str 'name' and 'format'")
    compression = row.get("compression")
    if compression is not None and not isinstance(compression, str):
        raise ValueError(f"'compression' must be a str or null, got {compression!r:.40}")
    size = _int(row, "size")
    assert size is not None
    samples = _int(row, "samples")
    assert samples is not None
    data_size = _int(row, "data_size", optional=True)
    return (row["name"], size, _int(row, "crc32c", optional=True),
            _int(row, "version", optional=True), row["format"], compression, samples,
            size if data_size is None else data_size)


def _row(line: str, number: int, where: str) -> Row | None:
    """Line ``number``'s entry (None: a blank line).

    Raises:
        ShardFormatError: it is not one.
    """
    if not line.strip():
        return None
    try:
        row = json.loads(line)
        try:
            return _fast(row)
        except (ValueError, TypeError, KeyError):
            return _checked(row)  # what is wrong, named (or taken)
    except ValueError as exc:
        raise ShardFormatError(f"read manifest {where}: line {number}: {exc}") from None


def parse_rows(data: bytes, where: str) -> list[Row]:
    """The manifest's entries, line by line, checked.

    Raises:
        ShardFormatError: not a manifest, of a later version, or damaged.
    """
    lines = data.decode("utf-8", "surrogatepass").splitlines()
    _head(lines[0] if lines else None, where)
    return [row for number, line in enumerate(lines[1:], start=2)
            if (row := _row(line, number, where)) is not None]


class Columns:
    """A manifest's entries in line order as columns (blank lines left out).

    ``formats`` are the formats named, sorted, and ``format`` each entry's
    (an index into them). ``crc32c`` and ``version`` hold -1 for null, and
    are Python ints (dtype object) where one does not fit an int64 (an S3
    ETag as a number). ``spans``, where every line was read as columns:
    the text and where each name lies in it (``names`` are cut out of it
    when first asked for: counting compares the bytes when it can).
    """

    def __init__(self, names: list[str] | Callable[[], list[str]], formats: tuple[str, ...],
                 format: npt.NDArray[np.int16], size: npt.NDArray[np.int64],
                 crc32c: npt.NDArray[Any], version: npt.NDArray[Any],
                 samples: npt.NDArray[np.int64], data_size: npt.NDArray[np.int64], *,
                 spans: tuple[bytes, npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None,
                 ) -> None:
        self._names = names
        self.formats, self.format, self.size = formats, format, size
        self.crc32c, self.version, self.samples, self.data_size = crc32c, version, samples, \
            data_size
        self.spans = spans

    def __len__(self) -> int:
        return len(self.size)

    @property
    def names(self) -> list[str]:
        """Each entry's name."""
        if callable(self._names):
            self._names = self._names()
        return self._names


def _columns_of(rows: list[Row], where: str) -> Columns:
    n = len(rows)
    names, formats = [""] * n, [""] * n
    numbers = [np.full(n, -1, dtype=np.int64) for _ in range(5)]
    for k, row in enumerate(rows):
        _put(names, formats, numbers, k, row)
    return _columns(names, formats, numbers, where)


def _put(names: list[str], formats: list[str], numbers: list[npt.NDArray[Any]], k: int,
         row: Row) -> None:
    """Entry ``k`` set to ``row`` (numbers: size, crc32c, version, samples, data bytes)."""
    names[k], formats[k] = row[0], row[4]
    for field, value in enumerate((row[1], row[2], row[3], row[6], row[7])):
        try:
            numbers[field][k] = -1 if value is None else value
        except OverflowError:  # past an int64: Python ints (see _columns)
            numbers[field] = numbers[field].astype(object)
            numbers[field][k] = value


def _coded(formats: list[str]) -> tuple[tuple[str, ...], npt.NDArray[np.int16]]:
    distinct = tuple(sorted(set(formats)))
    code = {name: k for k, name in enumerate(distinct)}
    return distinct, np.fromiter(map(code.__getitem__, formats), dtype=np.int16,
                                 count=len(formats))


def _columns(names: list[str], formats: list[str], numbers: list[npt.NDArray[Any]],
             where: str) -> Columns:
    """The columns, a size or count past an int64 refused (checked once every
    line is read, so a line that is no entry at all is named first, as line
    by line)."""
    size, crc32c, version, samples, data_size = numbers
    for field, column in (("size", size), ("samples", samples), ("data_size", data_size)):
        if column.dtype == object:
            k = int(np.argmax(column > _INT64_MAX))
            raise ShardFormatError(f"read manifest {where}: {field!r} of {names[k]!r} "
                                   f"is past an int64 ({column[k]})")
    return Columns(names, *_coded(formats), size, crc32c, version, samples, data_size)


def _format_codes(keys: npt.NDArray[np.uint64], spans: Callable[[], list[str]],
                  ) -> tuple[tuple[str, ...], npt.NDArray[np.int16]]:
    """The formats coded as :class:`Columns` holds them, from each line's
    format as a word (its bytes, the first lowest: a format of up to 8 bytes;
    0 for a longer one, whose line's are then cut out by ``spans``)."""
    if len(keys) == 0 or not keys.all():
        return _coded(spans())
    inverse: npt.NDArray[Any]
    if (keys == keys[0]).all():  # one format (the usual): no sort
        keys, inverse = keys[:1], np.zeros(len(keys), dtype=np.int16)
    else:
        keys, inverse = np.unique(keys, return_inverse=True)
    # No NUL is in the text (a control character): a format's word is its string.
    found = [int(key).to_bytes(8, "little").rstrip(b"\0").decode("utf-8", "surrogatepass")
             for key in keys]
    order = sorted(range(len(found)), key=found.__getitem__)
    rank = np.empty(len(found), dtype=np.int16)
    rank[order] = np.arange(len(found), dtype=np.int16)
    return tuple(found[k] for k in order), rank[inverse]


def _pieces(*literals: bytes) -> tuple[npt.NDArray[Any], ...]:
    """Each literal cut in words: each word's literal, offset, bytes and mask."""
    cut = [(k, i, literal[i:i + 8]) for k, literal in enumerate(literals)
           for i in range(0, len(literal), 8)]
    return (np.array([k for k, _, _ in cut]), np.array([i for _, i, _ in cut])[:, None],
            np.array([int.from_bytes(p, "little") for _, _, p in cut], dtype=np.uint64)[:, None],
            np.array([(1 << 8 * len(p)) - 1 for _, _, p in cut], dtype=np.uint64)[:, None])


# What lies between the values of a line aioflux writes, each checked at
# the position _read finds for it: the second literal where compression is
# null, else the third and fourth.
_LITERALS = _pieces(b'{"compression":', b'":null,"crc32c":', b'":"', b'","crc32c":',
                    b',"data_size":', b',"format":"', b'","name":"', b'","samples":',
                    b',"size":', b',"version":')
_IF_NULL = _LITERALS[0] == 1
_IF_NAMED = (_LITERALS[0] == 2) | (_LITERALS[0] == 3)


def _are(words: npt.NDArray[np.uint64], at: npt.NDArray[np.int64],
         named: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Whether each line holds :data:`_LITERALS` where ``at`` says (a word
    read past the text's last is not), in one read of them all."""
    row, offset, value, mask = _LITERALS
    last = len(words) - 1
    where = at[row] + offset
    good = where <= last
    np.minimum(where, last, out=where)
    good &= (words[where] & mask) == value
    good[_IF_NULL] |= named  # the form a line is not in is not asked of it
    good[_IF_NAMED] |= ~named
    return good.all(axis=0)  # type: ignore[no-any-return]


def _numbers(codes: npt.NDArray[np.uint8], words: npt.NDArray[np.uint64],
             start: npt.NDArray[np.int64], end: npt.NDArray[np.int64],
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The JSON counts in ``[start, end)`` (-1 for ``null``), whether each is
    one (digits, no leading zero, an int64) and whether each is ``null``.

    Every ``end`` is at least 24 bytes into the text (past the first line)
    and at most its length: the words read end where the number ends.
    """
    length = end - start
    null = (length == 4) & ((words[end - 8] >> 32) == _NULL)
    ok = (length >= 1) & (length <= 19)
    ok &= (codes[np.minimum(start, len(codes) - 1)] != 0x30) | (length == 1)
    widest = int(length[ok].max()) if ok.any() else 1
    spans = -(-widest // 8)  # words a number takes, the first padded with "0"s
    value = np.zeros(len(start), dtype=np.uint64)
    for w in range(spans):
        before = 8 * (spans - w)
        word = words[end - before]
        low = _LOW[np.clip(before - length, 0, 8)]  # bytes before the number
        word &= ~low
        word |= _ZEROS & low
        ok &= ((word & _HIGH) == _ZEROS) & (((word + _SIX) & _HIGH) == _ZEROS)
        # Eight digits, the first in the lowest byte, to their number
        # (wrapping only where they were not digits).
        word -= _ZEROS
        for factor, shift, mask in _SWAR:
            word = (word * factor + (word >> shift)) & mask
        value *= _E8
        value += word
    ok &= value <= _INT64_MAX
    out = np.where(ok, value, 0).astype(np.int64)
    out[null] = -1
    return out, ok, null


def _read(codes: npt.NDArray[np.uint8], words: npt.NDArray[np.uint64],
          quotes: npt.NDArray[np.int64], start: npt.NDArray[np.int64],
          end: npt.NDArray[np.int64], first: npt.NDArray[np.int64],
          named: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[Any], ...]:
    """Lines of 20 quotes (compression null) or 22 (``named``) read as aioflux
    writes them (see the module): whether each is; its size, crc32c, version,
    samples and data bytes; where its name and its format lie."""
    # Quote j (j >= 2) of the fields after compression: its quote j, or j + 2.
    q = quotes[(first + np.where(named, 2, 0)) + _AT]
    at = dict(zip(_AT[:, 0].tolist(), q, strict=True))
    ok = _are(words, np.stack([start, quotes[first + 1], quotes[first + 1],
                               quotes[first + 3], at[4] - 1, at[6] - 1, at[9], at[13],
                               at[16] - 1, at[18] - 1]), named)
    ok &= codes[end - 1] == 0x7D  # "}"
    numbers, digits, null = _numbers(
        codes, words, np.stack([at[3], at[5], at[15], at[17], at[19]]).ravel() + 2,
        np.stack([at[4], at[6], at[16], at[18], end]).ravel() - 1)
    n = len(start)
    crc, data_size, samples, size, version = numbers.reshape(5, n)
    digits, null = digits.reshape(5, n), null.reshape(5, n)
    ok &= (digits | null)[[0, 1, 4]].all(axis=0) & digits[2] & digits[3]
    data_size = np.where(null[1], size, data_size)  # no data_size: the size
    return (ok, size, crc, version, samples, data_size, np.stack([at[12] + 1, at[13]]),
            np.stack([at[8] + 1, at[9]]))


def _find(codes: npt.NDArray[np.uint8], byte: int, start: int = 0,
          stop: int | None = None) -> npt.NDArray[np.int64]:
    """Where ``byte`` is in ``codes[start:stop]``, found a slice at a time (no
    mask of the whole text: 160 MB at a million shards)."""
    stop = len(codes) if stop is None else stop
    found = [np.flatnonzero(codes[at:min(at + _BYTES_AT_ONCE, stop)] == byte) + at
             for at in range(start, stop, _BYTES_AT_ONCE)]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _simple(data: bytes, codes: npt.NDArray[np.uint8], breaks: int) -> bool:
    """Whether ``\\n`` alone breaks the text into lines and no other control
    character is in it (every line is then read as str.splitlines cuts it)."""
    controls = sum(int(np.count_nonzero(codes[at:at + _BYTES_AT_ONCE] < 0x20))
                   for at in range(0, len(codes), _BYTES_AT_ONCE))
    if controls != breaks:
        return False
    return data.isascii() or not any(c.encode() in data for c in "\x85\u2028\u2029")


def parse_columns(data: bytes, where: str) -> Columns:
    """The manifest's entries as columns (see the module).

    Raises:
        ShardFormatError: not a manifest, of a later version, or damaged
            (the first line that is not an entry named, as :func:`parse_rows` does).
    """
    ascii = data.isascii()
    if not ascii:
        data.decode("utf-8", "surrogatepass")  # not UTF-8: refused as before
    codes = np.frombuffer(data, dtype=np.uint8)
    breaks = _find(codes, 0x0A)
    if not _simple(data, codes, len(breaks)):
        return _columns_of(parse_rows(data, where), where)
    ends = breaks if data.endswith(b"\n") or not data else np.append(breaks, len(data))
    _head(data[:ends[0]].decode("utf-8", "surrogatepass") if len(ends) else None, where)
    start, end = ends[:-1] + 1, ends[1:]  # the entry lines (a line's end: its "\n")
    n = len(start)
    escapes = data.find(b"\\", ends[0]) >= 0
    # Each 8 bytes of the text from each byte on, as a number (the first byte lowest).
    words = np.ndarray((max(len(data) - 7, 0),), dtype="<u8", buffer=data, strides=(1,))
    text: list[str] = []

    def cut(start: list[int], end: list[int]) -> list[str]:
        """The strings at ``[start, end)``: by position in the text where every
        byte is a character, else decoded each."""
        if ascii:
            if not text:
                text.append(data.decode("ascii"))
            return [text[0][a:b] for a, b in zip(start, end, strict=True)]
        return [data[a:b].decode("utf-8", "surrogatepass")
                for a, b in zip(start, end, strict=True)]

    parts: list[list[npt.NDArray[Any]]] = []
    # A block of lines at a time: the ~25 reads of each line's bytes hit the
    # cache, not memory (all lines at once take twice as long).
    for block in range(0, n, _LINES_AT_ONCE):
        starts, stops = start[block:block + _LINES_AT_ONCE], end[block:block + _LINES_AT_ONCE]
        low, high = int(starts[0]), int(stops[-1])
        quotes = _find(codes, 0x22, low, high)
        # Each line's first quote, and the next line's (a "\n" is no quote).
        first = np.searchsorted(quotes, np.append(starts, high + 1))
        count = np.diff(first)
        plain = (count == 20) | (count == 22)  # compression null, or a string
        if escapes:  # a line with an escape is json.loads's
            plain[np.searchsorted(stops, _find(codes, 0x5C, low, high))] = False
        lines = np.flatnonzero(plain)
        ok, *numbers, name, fmt = _read(codes, words, quotes, starts[lines], stops[lines],
                                        first[lines], count[lines] == 22)
        parts.append([lines[ok] + block, *(column[ok] for column in numbers), *name[:, ok],
                      *fmt[:, ok]])
    took, size, crc, version, samples, data_size, name_start, name_end, fmt_start, fmt_end = (
        [np.concatenate(column) for column in zip(*parts, strict=True)] if parts
        else [np.zeros(0, dtype=np.int64)] * 10)
    length = fmt_end - fmt_start
    keys = words[fmt_start] & _LOW[np.minimum(length, 8)]  # a read line's: in the text
    keys[length > 8] = 0
    formats, format_code = _format_codes(keys, lambda: cut(fmt_start.tolist(), fmt_end.tolist()))
    numbers = [size, crc, version, samples, data_size]
    if len(took) == n:  # every line aioflux's form: no merge
        return Columns(lambda: cut(name_start.tolist(), name_end.tolist()), formats, format_code,
                       *numbers, spans=(data, name_start, name_end))
    names = cut(name_start.tolist(), name_end.tolist())
    # Some lines are json.loads's: each entry put in its line's place.
    all_names, all_formats = [""] * n, [""] * n
    for k, known, code in zip(took.tolist(), names, format_code.tolist(), strict=True):
        all_names[k], all_formats[k] = known, formats[code]
    merged = [np.full(n, -1, dtype=np.int64) for _ in range(5)]
    for column, values in zip(merged, numbers, strict=True):
        column[took] = values
    keep = np.ones(n, dtype=np.bool_)
    rest = np.ones(n, dtype=np.bool_)
    rest[took] = False
    for k in np.flatnonzero(rest).tolist():
        row = _row(cut([int(start[k])], [int(end[k])])[0], k + 2, where)
        if row is None:
            keep[k] = False  # a blank line
        else:
            _put(all_names, all_formats, merged, k, row)
    if not keep.all():
        kept = np.flatnonzero(keep)
        all_names = [all_names[k] for k in kept.tolist()]
        all_formats = [all_formats[k] for k in kept.tolist()]
        merged = [column[kept] for column in merged]
    return _columns(all_names, all_formats, merged, where)
