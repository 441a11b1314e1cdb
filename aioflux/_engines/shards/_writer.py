"""Packing samples into shards: the bytes a format stores, and the index built from them.

A :class:`ShardPacker` takes one shard's samples in order, hands their
bytes to a sink as they come (nothing of a shard is held but the sample
being written) and records each sample's offset, length and crc32c from
those same bytes, so a writer publishes a shard's index without reading
the shard again. What it records is what the format's ``index`` finds
reading the shard back.

Tar samples are written as webdataset's ``TarWriter`` writes them: a
member ``<key>.<field>`` per field in sorted field order, mode 0o444,
owner ``bigdata``; the modification time is 0 and the ids are 0, so the
same samples make the same bytes (webdataset stamps the time of writing).
The headers are Python's ``tarfile`` headers (POSIX pax, which is plain
USTAR unless a name is too long or not ASCII), and the archive ends as
``tarfile`` ends one (two zero blocks, then zeros to a 10 KiB record), so
a shard is byte for byte what ``tarfile`` writes for these members.
A tar field that is a number or a bool (numpy's and torch's scalars
included) is its text, ``str(x)``, as webdataset writes a ``cls``.
A ``lines`` sample is one line: a dict or list as JSON, a str as UTF-8,
bytes as they are.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import numbers
import operator
import string
import tarfile
import zlib
from collections.abc import Callable, Mapping
from typing import Protocol

from ..._core.errors import InvalidArgument
from ..._core.integrity.crc import crc32c
from ..._core.records.types import ObjectInfo
from ..writer import Bytes, byte_view
from ._index import ShardIndex, new_columns
from ._tar import member_key

__all__ = ["DEFAULT_MAX_COUNT", "DEFAULT_MAX_SIZE", "Encoded", "ShardPacker", "Sink",
           "check_compression", "compressing", "encode_sample", "shard_namer"]

#: webdataset's ShardWriter defaults: a shard's data bytes and samples.
DEFAULT_MAX_SIZE = 3_000_000_000
DEFAULT_MAX_COUNT = 100_000

# webdataset's TarWriter defaults (its mtime is the time of writing; ours
# is fixed so the bytes are a function of the samples).
_MODE = 0o444
_OWNER = "bigdata"
# gzip's own default level; zstd shards take the zstd engine's.
_GZIP_LEVEL = 6
_END_BLOCKS = tarfile.BLOCKSIZE * 2


class Sink(Protocol):
    """Where a shard's stored bytes go: an object writer, or a compressor over one."""

    def write(self, data: Bytes) -> int:
        """Take ``data``."""
        ...

    def close(self) -> None:
        """Publish what was written."""
        ...

    def abort(self) -> None:
        """Publish nothing."""
        ...


@dataclasses.dataclass(frozen=True)
class Encoded:
    """One sample's bytes: ``region`` (what the index records) then ``tail``.

    Attributes:
        key: the tar sample's key (None for a line).
        region: the pieces of the sample's region, in order.
        tail: bytes after the region that belong to no sample (a line's newline).
    """

    key: str | None
    region: list[Bytes]
    tail: bytes = b""

    @property
    def size(self) -> int:
        """Bytes the sample adds to the shard's data."""
        return sum(len(piece) for piece in self.region) + len(self.tail)


def _json(value: object, what: str) -> bytes:
    try:
        return json.dumps(value).encode()
    except (TypeError, ValueError) as exc:  # an object json cannot write, a cycle
        raise InvalidArgument(f"{what}: not JSON: {exc}") from None


def _value_bytes(value: object, what: str) -> Bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return byte_view(what, value)
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(f"{what}: not UTF-8 text: {exc}") from None
    if isinstance(value, (dict, list)):
        return _json(value, what)
    text = _number_text(value)
    if text is not None:
        return text.encode()
    raise InvalidArgument(f"{what}: a value must be bytes, str, a number, a bool, dict or "
                          f"list, got {type(value).__name__}")


def _number_text(value: object) -> str | None:
    """A number or bool as webdataset's ``ShardWriter`` writes it (``str(x)``), else None.

    Labels often come out of numpy (``np.int64``, ``np.bool_``) or torch;
    they are recognised by their protocols, not by importing either.
    """
    if isinstance(value, (bool, numbers.Number)):  # numpy's ints and floats register
        return str(value)
    if getattr(value, "ndim", 0) != 0:
        return None  # a tensor or array with a shape, which a number would lose
    if str(getattr(value, "dtype", "")) in ("torch.bool", "bool"):
        return str(bool(value))  # "True" as Python's, not the "1" its index is
    kind = type(value)
    if hasattr(kind, "__index__"):
        try:
            # A 0-d tensor prints as "tensor(3)": write the integer it stands for.
            return str(operator.index(value))  # type: ignore[arg-type]
        except TypeError:
            pass
    if hasattr(kind, "__float__"):
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):  # an array of more than one value
            return None
        # numpy's bool is neither a Number nor an index; it prints as Python's.
        text = str(value)
        return text if text in ("True", "False") else str(number)
    return None


def _tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = _MODE
    info.uname = info.gname = _OWNER
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _tar_sample(sample: object, op: str) -> Encoded:
    if not isinstance(sample, Mapping):
        raise InvalidArgument(f"{op}: a tar sample must be a dict, got {type(sample).__name__}")
    key = sample.get("__key__")
    if not isinstance(key, str):
        raise InvalidArgument(f"{op}: a tar sample needs a str '__key__', got {key!r:.60}")
    # A header's name ends at its first NUL: the member would read back
    # under a name cut there (a field renamed, or a sample without one).
    if "\0" in key or any(isinstance(field, str) and "\0" in field for field in sample):
        raise InvalidArgument(f"{op}: the sample {key!r} has a NUL in its key or a field "
                              "name, which a tar header cuts the name at")
    base = key.rsplit("/", 1)[-1]
    if "." in base:
        raise InvalidArgument(f"{op}: the key {key!r} has a '.' in its last part: its "
                              f"members would read back as the key {key[:key.rindex('.')]!r}")
    names = list(sample)
    if not all(isinstance(field, str) for field in names):
        raise InvalidArgument(f"{op}: the sample {key!r} has a field name that is not a str")
    fields = sorted(field for field in names if not field.startswith("__"))
    if not fields:
        raise InvalidArgument(f"{op}: the sample {key!r} has no fields to write "
                              "(names starting with '__' are not written)")
    seen: set[str] = set()
    region: list[Bytes] = []
    for field in fields:
        name = f"{key}.{field}"
        if member_key(name) != (key, field.lower()):
            raise InvalidArgument(f"{op}: the member {name!r} would not read back as key "
                                  f"{key!r}, field {field!r} (webdataset's naming rule)")
        if field.lower() in seen:
            raise InvalidArgument(f"{op}: the sample {key!r} has the field {field!r} twice "
                                  "(fields read back in lower case)")
        seen.add(field.lower())
        data = _value_bytes(sample[field], f"{op}: {key!r} field {field!r}")
        try:
            region.append(_tar_header(name, len(data)))
        except ValueError as exc:  # what tarfile cannot encode
            raise InvalidArgument(f"{op}: no tar header for {name!r}: {exc}") from None
        region.append(data)
        pad = -len(data) % tarfile.BLOCKSIZE
        if pad:
            region.append(bytes(pad))
    return Encoded(key, region)


def _line(sample: object, op: str) -> Encoded:
    if isinstance(sample, (dict, list)):
        line = _json(sample, op)
    elif isinstance(sample, str):
        try:
            line = sample.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(f"{op}: the line is not UTF-8 text: {exc}") from None
    elif isinstance(sample, (bytes, bytearray, memoryview)):
        line = bytes(sample)
    else:
        raise InvalidArgument(f"{op}: a line must be a dict, list, str or bytes, "
                              f"got {type(sample).__name__}")
    # What the lines format would read otherwise: no sample, two, or one short of a \r.
    if not line:
        raise InvalidArgument(f"{op}: an empty line is no sample (readers skip it)")
    if b"\n" in line:
        raise InvalidArgument(f"{op}: a line must not contain a newline")
    if line[-1] == 13:
        raise InvalidArgument(f"{op}: a line must not end with '\\r' (readers drop it "
                              "as part of a \\r\\n)")
    return Encoded(None, [line], b"\n")


_ENCODERS: dict[str, Callable[[object, str], Encoded]] = {"tar": _tar_sample, "lines": _line}


def encode_sample(format: str, sample: object, op: str) -> Encoded:
    """``sample``'s bytes in ``format`` (checked to read back as this sample).

    Args:
        format: ``"tar"`` or ``"lines"``.
        sample: a tar sample (``{"__key__": ..., field: value}``) or a line.
        op: the operation and shard, for messages.

    Returns:
        The sample's bytes.

    Raises:
        InvalidArgument: not a sample of ``format``, or one that would read back otherwise.
    """
    return _ENCODERS[format](sample, op)


class ShardPacker:
    """One shard's data, sample by sample, with its index (see the module).

    Args:
        format: ``"tar"`` or ``"lines"``.
        where: the shard's URL, for messages.
        write: takes the shard's data (its sink's ``write``).
    """

    def __init__(self, format: str, where: str, write: Callable[[Bytes], object]) -> None:
        self.format = format
        self.where = where
        self._write = write
        self.offsets, self.lengths, self.crcs = new_columns()
        self.size = 0  # data bytes written
        self._key: str | None = None

    @property
    def count(self) -> int:
        """Samples added."""
        return len(self.offsets)

    def size_with(self, sample: Encoded) -> int:
        """The data's size were ``sample`` the shard's last."""
        return self._ended(self.size + sample.size)

    def _ended(self, size: int) -> int:
        if self.format != "tar":
            return size
        size += _END_BLOCKS
        return size + -size % tarfile.RECORDSIZE

    def check(self, sample: Encoded) -> None:
        """Refuse a sample that cannot come next in this shard.

        Raises:
            InvalidArgument: it has the key of the sample before (readers would
                merge the two).
        """
        if sample.key is not None and sample.key == self._key:
            raise InvalidArgument(f"write {self.where}: the sample {sample.key!r} follows a "
                                  "sample with the same key (readers would merge them)")

    def add(self, sample: Encoded) -> None:
        """Write ``sample`` (passed by :meth:`check`) and record it.

        Args:
            sample: from :func:`encode_sample` in this packer's format.

        Raises:
            Exception: whatever the sink raises.
        """
        start, crc = self.size, 0
        for piece in sample.region:
            self._write(piece)
            crc = crc32c(piece, crc)
            self.size += len(piece)
        self.offsets.append(start)
        self.lengths.append(self.size - start)
        self.crcs.append(crc)
        if sample.tail:
            self._write(sample.tail)
            self.size += len(sample.tail)
        self._key = sample.key

    def finish(self) -> None:
        """Write the end of the data (a tar's end-of-archive blocks)."""
        end = self._ended(self.size) - self.size
        if end:
            self._write(bytes(end))
            self.size += end

    def index(self, info: ObjectInfo, compression: str | None) -> ShardIndex:
        """The index of the shard published as ``info`` (after :meth:`finish`).

        Args:
            info: the published object.
            compression: its compression.

        Returns:
            The index, as ``stream_index`` would build it from the object.
        """
        return ShardIndex(format=self.format, compression=compression, size=info.size,
                          crc32c=info.crc32c, version=info.generation or None,
                          data_size=self.size, offsets=self.offsets, lengths=self.lengths,
                          crcs=self.crcs)


class _GzipWriter:
    """Gzip over a sink; a member's header records no time or name, as
    ``zlib`` writes it, so the bytes are a function of the data."""

    def __init__(self, raw: Sink) -> None:
        self.raw = raw
        self._z = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)

    def write(self, data: Bytes) -> int:
        out = self._z.compress(data)
        if out:
            self.raw.write(out)
        return len(data)

    def close(self) -> None:
        try:
            self.raw.write(self._z.flush())
        except BaseException:
            self.raw.abort()
            raise
        self.raw.close()

    def abort(self) -> None:
        self.raw.abort()


def check_compression(op: str, compression: str | None) -> None:
    """Check that ``compression`` can be written here.

    Raises:
        InvalidArgument: zstd without the zstandard package.
    """
    if compression == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError:
            raise InvalidArgument(f"{op}: zstd shards need the zstandard package: "
                                  "pip install 'aioflux-storage[zstd]'") from None


def compressing(raw: Sink, compression: str | None) -> Sink:
    """A sink compressing into ``raw`` (``raw`` itself for None).

    Args:
        raw: the object writer.
        compression: ``None``, ``"gzip"`` or ``"zstd"`` (see :func:`check_compression`).

    Returns:
        The sink; its ``close`` publishes ``raw``, its ``abort`` aborts it.
    """
    if compression is None:
        return raw
    if compression == "gzip":
        return _GzipWriter(raw)
    from ..zstd import compress_writer

    writer: Sink = compress_writer(raw)
    return writer


def _format_field(pattern: str, field: str, n: int) -> str:
    return pattern.format(**{field: n})


def _numbers_differ(namer: Callable[[int], str]) -> bool:
    """Whether ``namer`` names shard 0 and shard 1 apart (not failing)."""
    try:
        return namer(0) != namer(1)
    except (TypeError, ValueError, KeyError, IndexError):
        return False


def shard_namer(op: str, pattern: str) -> Callable[[int], str]:
    """The shard names of a pattern with one integer field.

    Args:
        op: the operation, for messages.
        pattern: ``%``-style (``train-%06d.tar``, as webdataset) or a
            ``str.format`` field (``train-{:06d}.tar``, ``train-{shard:06d}.tar``).

    Returns:
        The shard number's name.

    Raises:
        InvalidArgument: not such a pattern.
    """
    namer: Callable[[int], str] | None = None
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(pattern) if f is not None]
    except ValueError:  # unbalanced braces
        fields = []
    # A "%" is a field only where it formats a number: a folder named
    # "top-5%" is no field of a {}-pattern under it.
    percent = _numbers_differ(pattern.__mod__)
    if percent and fields:
        raise InvalidArgument(f"{op}: url_pattern holds both a %-field and a {{}}-field, "
                              f"which of them numbers the shards is not clear: {pattern!r}")
    if percent:
        namer = pattern.__mod__
    elif len(fields) == 1 and fields[0] in ("", "0"):
        namer = pattern.format
    elif len(fields) == 1 and fields[0].isidentifier():
        namer = functools.partial(_format_field, pattern, fields[0])
    if namer is not None and _numbers_differ(namer):
        return namer
    raise InvalidArgument(f"{op}: url_pattern must hold one integer field (train-%06d.tar "
                          f"or train-{{:06d}}.tar), got {pattern!r}")
