"""zstd (de)compression of checkpoint streams (the ``aioflux-storage[zstd]`` extra).

Compression runs on zstandard's own worker threads (``threads=-1``: one per
core), so it overlaps with serialization and upload; the seed documents
report 22% smaller checkpoints for +9% time with multithreaded zstd.

The default level is 1, not zstandard's 3. On a torch.save of fp32 tensors,
half of them rounded through fp16 (perf ``ckpt_zstd``), level 3 stored
75.6% of the bytes and level 1 78.3%, but level 3 compressed at ~140 MB/s
per core against ~600 MB/s for level 1 (256 MiB, in-process, shared 2-core
machine); level 1's cost on a 1 GiB save is perf's ``ckpt_zstd`` row. A
few points of size are not worth 4x the CPU a checkpoint competes for with
training.

Every frame written carries zstd's content checksum (XXH64 of the
uncompressed bytes), which the decompressor checks: the stored object's
crc32c covers its compressed bytes only where the store recorded one (a
file copied by another tool has none). Decompression also insists that the
stream ends at the end of a frame: libzstd's streaming API returns a
truncated stream's first part as if it were all of it.
"""

from __future__ import annotations

import io
import os
import tempfile
import weakref
from typing import IO, Any, cast

from .._core.errors import ChecksumMismatch, InvalidArgument
from .compression import FRAME_MAGIC, SKIPPABLE_MAGIC, ZSTD_EXTRA
from .writer import PublishOnExit, byte_view

try:
    import zstandard
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(f"zstd compression needs the zstandard package: {ZSTD_EXTRA}") from exc

__all__ = ["DEFAULT_LEVEL", "IN_MEMORY", "ZstdWriter", "compress_writer", "decompress_reader",
           "decompress_seekable"]

DEFAULT_LEVEL = 1
# Compressed bytes asked of the source per read when decompressing a whole
# stream (the object reader's read-ahead is in the same range).
_WHOLE_READ = 8 << 20
#: A whole stream decompressed beyond this many bytes goes to a temporary file.
IN_MEMORY = 64 << 20


class ZstdWriter(PublishOnExit, io.BufferedIOBase):
    """Compressing write-only file object over a raw writer with ``abort()``.

    Args:
        raw: destination with ``write``, ``close`` and ``abort``.
        level: zstd level.
        threads: compression threads (-1: one per core).
    """

    mode = "wb"  # as the plain writer's

    def __init__(self, raw: Any, *, level: int = DEFAULT_LEVEL, threads: int = -1) -> None:
        super().__init__()
        self.raw = raw
        self._url = str(getattr(raw, "url", "zstd stream"))
        # The object's name, as on the plain writer (io.TextIOWrapper reads it).
        self.name = str(getattr(raw, "name", self._url))
        cctx = zstandard.ZstdCompressor(level=level, threads=threads, write_checksum=True)
        self._z: Any = cctx.stream_writer(raw, closefd=False, write_return_read=True)
        self._written = 0
        self._done = False
        self._track()
        _THREADED.add(self)

    def writable(self) -> bool:
        self._check_open()
        return True

    def seekable(self) -> bool:
        self._check_open()
        return False

    def tell(self) -> int:
        self._check_open()
        return self._written

    def _unpublished(self) -> tuple[str, int, str]:
        return self._url, self._written, "byte"

    def _inner(self) -> PublishOnExit | None:
        return self.raw if isinstance(self.raw, PublishOnExit) else None

    def write(self, data: Any) -> int:
        """Compress and forward ``data``.

        Args:
            data: bytes-like.

        Returns:
            Bytes consumed.

        Raises:
            InvalidArgument: closed, or ``data`` is not bytes-like (as the
                plain writer: zstandard's own TypeError names neither).
        """
        if self._done:
            raise InvalidArgument(f"write to closed writer {self._url}")
        n = int(self._z.write(byte_view(self._url, data)))
        self._written += n
        return n

    def flush(self) -> None:
        """No-op: frames are flushed at close.

        Raises:
            InvalidArgument: the writer is closed (a ``ValueError``).
        """
        self._check_open()

    def close(self) -> None:
        """Finish the frame and publish the underlying object."""
        if self._done:
            return
        self._done = True
        try:
            self._z.flush(zstandard.FLUSH_FRAME)
            self._z.close()
            self.raw.close()
        except BaseException:
            self.raw.abort()
            raise
        finally:
            self._z = None  # zstd's worker threads end now, in this process
            super().close()

    def abort(self) -> None:
        """Discard everything; nothing is published."""
        self._done = True
        self._z = None
        self.raw.abort()
        if not self.closed:
            super().close()


# A compressor with worker threads must never be freed in a forked child:
# freeing it joins threads that did not survive the fork, which corrupts the
# C library's thread bookkeeping there; the child's next threads then crash
# or hang (a DataLoader worker that collects a writer its parent dropped).
# A child keeps every
# writer still open at the fork for its whole life.
_THREADED: weakref.WeakSet[ZstdWriter] = weakref.WeakSet()
_KEPT_AFTER_FORK: list[ZstdWriter] = []


def _keep_in_child() -> None:
    _KEPT_AFTER_FORK.extend(_THREADED)


os.register_at_fork(after_in_child=_keep_in_child)


def compress_writer(raw: Any, *, level: int = DEFAULT_LEVEL, threads: int = -1) -> ZstdWriter:
    """Wrap a raw writer so bytes written are zstd-compressed.

    Args:
        raw: destination with ``write``, ``close`` and ``abort``.
        level: zstd level.
        threads: compression threads (-1: one per core).

    Returns:
        The compressing writer.
    """
    return ZstdWriter(raw, level=level, threads=threads)


def decompress_reader(raw: Any) -> Any:
    """Wrap a readable so reads return decompressed bytes (forward only).

    Args:
        raw: compressed source (its ``bucket``, ``name`` and ``url``, when
            it has them, name the object in errors).

    Returns:
        A readable, not seekable, buffered file object (``readline``,
        ``peek``, ``read1``). Its reads raise ``ChecksumMismatch`` on a
        corrupt frame, a content checksum that does not match, or a stream
        that ends inside a frame (or holds none).
    """
    # Buffered: io's readline and iteration over an unbuffered file ask it
    # for one byte at a time, here a call into the decompressor per byte.
    return io.BufferedReader(_Decompressed(raw))


def decompress_seekable(raw: Any) -> IO[bytes]:
    """Decompress a whole stream into a seekable file (``torch.load`` seeks):
    in memory up to :data:`IN_MEMORY` bytes, in a temporary file beyond,
    so a compressed checkpoint is not held in memory a second time beside
    the tensors loaded from it.

    Args:
        raw: compressed source.

    Returns:
        A file at position 0; close it (a temporary file is then removed).

    Raises:
        ChecksumMismatch: the stream is corrupt or truncated (see
            :func:`decompress_reader`).
        OSError: the temporary file could not be written (a full disk).
    """
    out = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY, prefix="aioflux-zstd-")
    try:
        with _Decompressed(raw, read_size=_WHOLE_READ) as reader:
            while chunk := reader.read(_WHOLE_READ):
                out.write(chunk)
        out.seek(0)
    except BaseException:
        out.close()
        raise
    return cast(IO[bytes], out)


class _Decompressed(io.RawIOBase):
    """zstandard's stream reader, with its errors typed and a stream that
    stops short of a frame's end refused."""

    mode = "rb"  # as the plain reader's

    def __init__(self, raw: Any, read_size: int = zstandard.DECOMPRESSION_RECOMMENDED_INPUT_SIZE
                 ) -> None:
        super().__init__()
        # The object's name, as on the plain reader (io.TextIOWrapper reads it).
        self.name = str(getattr(raw, "name", getattr(raw, "url", "zstd stream")))
        self._frames = _FrameWalker(raw)
        self._z = zstandard.ZstdDecompressor().stream_reader(
            cast(IO[bytes], self._frames), read_size=read_size, closefd=True,
            read_across_frames=True)
        self._position = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        try:
            count = int(self._z.readinto(buffer))
        except zstandard.ZstdError as exc:
            raise self._frames.corrupt(str(exc)) from exc
        if count == 0 and len(memoryview(buffer)):
            self._frames.check_complete()
        self._position += count
        return count

    def close(self) -> None:
        if not self.closed:
            try:
                self._z.close()  # type: ignore[no-untyped-call]
            finally:
                super().close()


# Frame layout (RFC 8878, section 3.1): a 4-byte magic number, a header
# whose length its first byte gives, blocks each with a 3-byte header (last
# flag, type, size), then the 4-byte checksum if the header announced one;
# or a skippable frame (magic, 4-byte length, contents).
_DICT_ID_BYTES = (0, 1, 2, 4)
_CONTENT_SIZE_BYTES = (0, 2, 4, 8)  # flag 0 with a single segment: 1
_RLE_BLOCK, _RESERVED_BLOCK = 1, 3


class _FrameWalker:
    """The compressed source, its frame boundaries followed as the
    decompressor reads it, so that its end can be checked to fall between
    frames. The walk costs a few steps per block (up to 128 KiB each)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        bucket, name = getattr(raw, "bucket", ""), getattr(raw, "name", "")
        self._bucket = bucket if isinstance(bucket, str) else ""
        self._name = name if isinstance(name, str) else ""
        self._url = str(getattr(raw, "url", "zstd stream"))
        self._state = "magic"
        self._want = 4  # header bytes the state needs
        self._head = bytearray()
        self._skip = 0  # bytes to pass over (block contents, the rest of a header)
        self._checksum = False  # the current frame ends with a checksum
        self._frames = 0
        self._ended = False

    def read(self, size: int = -1) -> bytes:
        data = bytes(self._raw.read(size))
        if data:
            self._walk(memoryview(data))
        else:
            self._ended = True
        return data

    def close(self) -> None:
        self._raw.close()

    def corrupt(self, detail: str) -> ChecksumMismatch:
        return ChecksumMismatch(f"read {self._url} failed: not a valid zstd stream: {detail}",
                                operation="read", bucket=self._bucket, name=self._name)

    def check_complete(self) -> None:
        """Raise unless the source ended between frames, after at least one."""
        if not self._ended:
            return
        if self._frames == 0:
            raise self.corrupt("no frame in it")
        if self._state != "magic" or self._head or self._skip:
            raise self.corrupt("it ends inside a frame (truncated)")

    def _walk(self, data: memoryview) -> None:
        at = 0
        while at < len(data):
            if self._skip:
                step = min(self._skip, len(data) - at)
                self._skip -= step
                at += step
                continue
            take = min(self._want - len(self._head), len(data) - at)
            self._head += data[at:at + take]
            at += take
            if len(self._head) == self._want:
                self._advance(int.from_bytes(self._head, "little"))
                self._head.clear()

    def _advance(self, value: int) -> None:
        """Take the header just read (``value``, little-endian) and say what comes next."""
        if self._state == "magic":
            if value == FRAME_MAGIC:
                self._frames += 1
                self._state, self._want = "descriptor", 1
            elif value & ~0xF == SKIPPABLE_MAGIC:
                self._state, self._want = "skippable", 4
            else:
                raise self.corrupt(f"bad magic number {value:#010x}")
        elif self._state == "skippable":
            self._skip = value
            self._state, self._want = "magic", 4
        elif self._state == "descriptor":
            single_segment = bool(value & 0x20)
            content_size = _CONTENT_SIZE_BYTES[value >> 6] or int(single_segment)
            self._skip = (0 if single_segment else 1) + _DICT_ID_BYTES[value & 3] + content_size
            self._checksum = bool(value & 0x04)
            self._state, self._want = "block", 3
        else:  # a block header
            last, kind, size = value & 1, (value >> 1) & 3, value >> 3
            if kind == _RESERVED_BLOCK:
                raise self.corrupt("reserved block type")
            self._skip = 1 if kind == _RLE_BLOCK else size
            if last:
                self._skip += 4 if self._checksum else 0
                self._state, self._want = "magic", 4
