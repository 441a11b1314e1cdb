"""Shard formats and whole-shard compression.

A format turns a shard's data into samples in two steps: ``index`` walks
the data once as it streams by and returns each sample's offset, length
and crc32c; ``sample`` decodes one sample's region, which a reader fetched
alone. Parquet row groups, say, would be a third format with the same two
methods.

Compression (``.gz``, ``.zst``) covers a whole shard, so offsets are in the
decompressed data and a compressed shard is read front to back.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from ..._core.errors import InvalidArgument, ShardFormatError
from ._lines import LinesFormat
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

    def sample(self, region: bytes | memoryview, url: str, offset: int) -> Any:
        """The sample whose region (checked against the index) is ``region``."""
        ...


FORMATS: dict[str, ShardFormat] = {"tar": TarFormat(), "lines": LinesFormat()}

_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}


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
    """``"gzip"``, ``"zstd"`` or None, from an object name's suffix."""
    dot = name.rfind(".")
    return _SUFFIXES.get(name[dot:].lower()) if dot >= 0 else None


class Decompressor(Protocol):
    """Incremental decompression of one shard."""

    def feed(self, data: bytes | memoryview) -> bytes:
        """The data decompressed from ``data``."""
        ...

    def end(self) -> None:
        """Check the stream ended whole."""
        ...


class _Frames:
    """Concatenated frames (gzip members, zstd frames) read as one stream, as
    ``gzip`` and ``zstd`` read them; a stream cut inside a frame is an error."""

    kind = ""

    def __init__(self, where: str) -> None:
        self.where = where
        self._d = self._new()
        self._open = False  # inside a frame: bytes fed, its end not seen

    def _new(self) -> Any:
        raise NotImplementedError

    def _errors(self) -> tuple[type[Exception], ...]:
        raise NotImplementedError

    def feed(self, data: bytes | memoryview) -> bytes:
        out = []
        data = bytes(data)
        try:
            while data:
                self._open = True
                out.append(self._d.decompress(data))
                if not self._d.eof:
                    break
                self._open = False
                data = self._d.unused_data
                self._d = self._new()
        except self._errors() as exc:
            raise ShardFormatError(f"read {self.where}: corrupt {self.kind} data: "
                                   f"{exc}") from None
        return b"".join(out)

    def end(self) -> None:
        if self._open:
            raise ShardFormatError(f"read {self.where}: the {self.kind} stream is truncated")


class _Gzip(_Frames):
    kind = "gzip"

    def _new(self) -> Any:
        return zlib.decompressobj(wbits=31)

    def _errors(self) -> tuple[type[Exception], ...]:
        return (zlib.error,)


class _Zstd(_Frames):
    kind = "zstd"

    def __init__(self, where: str) -> None:
        try:
            import zstandard
        except ImportError:
            raise InvalidArgument(f"read {where}: zstd shards need the zstandard package: "
                                  "pip install 'aioflux-storage[zstd]'") from None
        self._zstd = zstandard
        super().__init__(where)

    def _new(self) -> Any:
        return self._zstd.ZstdDecompressor().decompressobj()

    def _errors(self) -> tuple[type[Exception], ...]:
        return (self._zstd.ZstdError,)


def new_decompressor(compression: str, where: str) -> Decompressor:
    """A decompressor of ``compression`` for the shard at ``where``."""
    return _Gzip(where) if compression == "gzip" else _Zstd(where)


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
        out = d.feed(chunk)
        if out:
            yield out
    d.end()
