"""Shard formats and whole-shard compression.

A format turns a shard's data into samples in two steps: ``index`` walks
the data once as it streams by and returns each sample's offset, length
and crc32c; ``sample`` decodes one sample's region, which a reader fetched
alone. Parquet row groups, say, would be a third format with the same two
methods.

Compression (``.gz``, ``.zst``; ``.bz2`` and ``.xz`` read, as webdataset's
tarfile reads them, never written) covers a whole shard, so offsets are in
the decompressed data and a compressed shard is read front to back.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from ..._core.errors import InvalidArgument, ShardFormatError
from ._lines import LinesFormat
from ._parquet import ParquetFormat
from ._tar import TarFormat

__all__ = ["FORMATS", "ShardFormat", "compression_of", "decompressed", "format_of",
           "Decompressor", "new_decompressor"]


class ShardFormat(Protocol):
    """How a shard's data holds samples."""

    name: str

    def index(self, chunks: Iterable[bytes | memoryview], where: str
              ) -> tuple[Any, Any, Any, int]:
        """``(offsets, lengths, crcs, data_size)`` of the samples in ``chunks``."""
        ...

    def sample(self, region: bytes | memoryview, url: str, offset: int, *,
               checked: bool = False) -> Any:
        """The sample whose region (checked against the index) is ``region``;
        ``checked``: the index's (``ShardIndex.checked``), whose checks of
        these bytes the format need not make again."""
        ...


FORMATS: dict[str, ShardFormat] = {"tar": TarFormat(), "lines": LinesFormat(),
                                   "parquet": ParquetFormat()}

# .tgz: a gzip tar, as webdataset and tar read it. bzip2 and xz are read
# (webdataset's tarfile opens .tar.bz2 and .tar.xz): read as not compressed,
# such a shard would be a "corrupt tar header at byte 0", or its compressed
# bytes lines.
_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".tgz": "gzip", ".zst": "zstd", ".zstd": "zstd",
             ".bz2": "bzip2", ".tbz": "bzip2", ".tbz2": "bzip2", ".xz": "xz", ".txz": "xz"}


def format_of(op: str, name: str) -> ShardFormat:
    """The format called ``name``.

    Raises:
        InvalidArgument: no such format.
    """
    found = FORMATS.get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidArgument(f"{op}: format must be one of {', '.join(sorted(FORMATS))}, "
                              f"got {name!r}")
    return found


def compression_of(name: str) -> str | None:
    """``"gzip"``, ``"zstd"``, ``"bzip2"``, ``"xz"`` or None, from an object name's suffix."""
    dot = name.rfind(".")
    return _SUFFIXES.get(name[dot:].lower()) if dot >= 0 else None


# The most bytes one step of decompression hands over. Without a bound, one
# 4 MiB block of a shard of repeated lines (gzip packs those ~1,000:1, zstd
# more) came out as 4 GiB at once, held while the cursor looked for its run.
PIECE = 4 * 1024 * 1024


class Decompressor(Protocol):
    """Incremental decompression of one shard."""

    def feed(self, data: bytes | memoryview) -> Iterator[bytes]:
        """The data decompressed from ``data``, in pieces of at most :data:`PIECE`
        bytes, made as they are taken (a suspended feed holds what it has not
        decompressed yet, not its output)."""
        ...

    def end(self) -> None:
        """Check the stream ended whole."""
        ...


class _Frames:
    """Concatenated frames (gzip members, zstd frames) read as one stream, as
    ``gzip`` and ``zstd`` read them; a stream cut inside a frame is an error.

    Both decompressors take ``max_length`` and stop there, the rest of their
    input kept (zlib's ``unconsumed_tail``; zstd's internal, given back by a
    call with no new input).
    """

    kind = ""
    # Whether zero bytes after a frame end the stream (gzip's padding).
    padded = False

    def __init__(self, where: str) -> None:
        self.where = where
        self._d = self._new()
        self._open = False  # inside a frame: bytes fed, its end not seen
        self._between = False  # a frame ended with its input: the next not begun
        self._padding = False  # zeros after the last frame seen

    def _new(self) -> Any:
        raise NotImplementedError

    def _errors(self) -> tuple[type[Exception], ...]:
        raise NotImplementedError

    def _rest(self) -> bytes:
        """What the last call kept of its input (to give to the next)."""
        raise NotImplementedError

    def feed(self, chunk: bytes | memoryview) -> Iterator[bytes]:
        data = bytes(chunk)
        if not data:
            return
        if self._padding or (self._between and self._pads(data)):
            self._pad(data)
            return
        self._between = False
        self._open = True
        while True:
            try:
                piece = self._d.decompress(data, PIECE)
            except self._errors() as exc:
                raise ShardFormatError(f"read {self.where}: corrupt {self.kind} data: "
                                       f"{exc}") from None
            if piece:
                yield piece
            if self._d.eof:  # a frame ended: what follows starts the next
                self._open = False
                data = self._d.unused_data
                self._d = self._new()
                if not data:
                    self._between = True  # the next feed may start a frame, or pad
                    return
                if self._pads(data):
                    self._pad(data)
                    return
                self._open = True
                continue
            data = self._rest()
            if not data and len(piece) < PIECE:
                return  # all of ``data`` taken, nothing held back: the next block

    def _pads(self, data: bytes) -> bool:
        return self.padded and data[0] == 0

    def _pad(self, data: bytes) -> None:
        """Take ``data`` as padding after the last frame (it may come over
        several feeds): zeros only. A frame after the zeros is refused, not
        guessed at: ``gzip -dc`` ignores it, Python's gzip reads it."""
        self._padding = True
        if data.count(0) != len(data):
            raise ShardFormatError(f"read {self.where}: data after the zero padding that "
                                   f"ends the {self.kind} stream")

    def end(self) -> None:
        if self._open:
            raise ShardFormatError(f"read {self.where}: the {self.kind} stream is truncated")


class _Gzip(_Frames):
    kind = "gzip"
    # Zeros after the last member (a tape's or a block device's padding):
    # gzip -dc and Python's gzip both read the stream as ended there.
    padded = True

    def _new(self) -> Any:
        return zlib.decompressobj(wbits=31)

    def _errors(self) -> tuple[type[Exception], ...]:
        return (zlib.error,)

    def _rest(self) -> bytes:
        return self._d.unconsumed_tail  # type: ignore[no-any-return]


class _Zstd(_Frames):
    kind = "zstd"

    def __init__(self, where: str) -> None:
        self._zstd = zstd_module(f"read {where}")
        super().__init__(where)

    def _new(self) -> Any:
        return self._zstd.ZstdDecompressor()

    def _errors(self) -> tuple[type[Exception], ...]:
        return (self._zstd.ZstdError,)

    def _rest(self) -> bytes:
        return b""  # zstd keeps what it did not take: asked again with none


class _Bzip2(_Frames):
    kind = "bzip2"

    def _new(self) -> Any:
        return bz2.BZ2Decompressor()

    def _errors(self) -> tuple[type[Exception], ...]:
        return (OSError, ValueError)  # what bz2 raises on data that is not bzip2

    def _rest(self) -> bytes:
        return b""  # like zstd's, kept inside


# The most memory an xz decoder may take (xz -9e's streams need 65 MiB).
_XZ_MEMORY = 256 * 1024 * 1024


class _Xz(_Frames):
    kind = "xz"
    # The xz format allows zero "stream padding" after a stream.
    padded = True

    def _new(self) -> Any:
        # The decoder holds the dictionary the stream's header asks for: 8 MiB
        # at xz's default preset, 64 MiB at -9; a header may ask for 1.5 GiB.
        return lzma.LZMADecompressor(memlimit=_XZ_MEMORY)

    def _errors(self) -> tuple[type[Exception], ...]:
        return (lzma.LZMAError,)

    def _rest(self) -> bytes:
        return b""


def zstd_module(op: str) -> Any:
    """The standard library's ``compression.zstd`` (Python 3.14), else its
    backport (``backports.zstd``, the zstd extra): zstandard's decompressor
    cannot stop at a length.

    Raises:
        InvalidArgument: neither is installed.
    """
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        try:
            from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            raise InvalidArgument(f"{op}: zstd shards need the backports.zstd package: "
                                  "pip install 'aioflux-storage[zstd]'") from None
    return zstd


def new_decompressor(compression: str, where: str) -> Decompressor:
    """A decompressor of ``compression`` for the shard at ``where``."""
    kinds: dict[str, type[_Frames]] = {"gzip": _Gzip, "zstd": _Zstd, "bzip2": _Bzip2,
                                       "xz": _Xz}
    return kinds[compression](where)


def decompressed(chunks: Iterable[bytes | memoryview], compression: str | None,
                 where: str) -> Iterator[bytes | memoryview]:
    """``chunks`` decompressed (as they are when ``compression`` is None).

    Raises:
        ShardFormatError: corrupt or truncated compressed data.
    """
    if compression is None:
        yield from chunks
        return
    d = new_decompressor(compression, where)
    for chunk in chunks:
        yield from d.feed(chunk)
    d.end()
