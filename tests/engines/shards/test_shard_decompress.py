"""Compressed shards come out a bounded piece at a time, and long lines are
indexed in the memory of a chunk.

A shard of repeated lines packs hundreds to one under gzip and more under zstd:
one 4 MiB block of it decompressed at once was gigabytes held at once.
Memory is measured with tracemalloc (numpy's buffers and zlib's and
zstd's outputs are traced), bounded by multiples of a piece, never by time.
"""

from __future__ import annotations

import asyncio
import bz2
import gzip
import lzma
import struct
import tracemalloc
from collections.abc import Callable, Iterator

import google_crc32c
import pytest

from aioflux import ShardFormatError
from aioflux._engines.shards._compressed import _CURSOR_BLOCK, Cursor
from aioflux._engines.shards._formats import PIECE, decompressed, new_decompressor
from aioflux._engines.shards._lines import LinesFormat

zstd = pytest.importorskip("backports.zstd", reason="the zstd extra is not installed")

LINE = b"x" * 1023 + b"\n"
LINES = 64 * 1024  # 64 MiB of data, a few dozen KiB compressed


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def _zstd(data: bytes) -> bytes:
    return bytes(zstd.compress(data, options={zstd.CompressionParameter.checksum_flag: 1}))


# bzip2 and xz are read too (webdataset's tarfile opens .tar.bz2 and .tar.xz).
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {"gzip": _gzip, "zstd": _zstd,
                                                    "bzip2": bz2.compress, "xz": lzma.compress}


def _peak(run: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


# What a decoder holds besides the pieces: xz's dictionary (8 MiB at its
# default preset), bounded by the stream, not by the data.
STATE = {"xz": 8 * 1024 * 1024}


@pytest.fixture(scope="module")
def packed() -> dict[str, bytes]:
    data = LINE * LINES
    return {kind: pack(data) for kind, pack in COMPRESSORS.items()}


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_a_block_that_packs_hundreds_to_one_comes_out_in_pieces(
        kind: str, packed: dict[str, bytes]) -> None:
    raw = packed[kind]
    # One cursor block, 64 MiB of data: one feed's worth, all at once before.
    assert len(raw) < _CURSOR_BLOCK and len(raw) * 400 < len(LINE) * LINES

    def drain() -> None:
        d = new_decompressor(kind, "gs://b/s.jsonl")
        total = 0
        for piece in d.feed(raw):
            assert 0 < len(piece) <= PIECE
            total += len(piece)
        d.end()
        assert total == len(LINE) * LINES

    assert _peak(drain) < 5 * PIECE + STATE.get(kind, 0)


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_the_cursor_holds_a_run_and_a_piece(kind: str, packed: dict[str, bytes]) -> None:
    raw = packed[kind]

    async def read(start: int, end: int) -> bytes:
        return raw[start:end]

    async def walk() -> None:
        cursor = Cursor(read, len(raw), kind, "gs://b/s.jsonl")
        # A run of 8 lines from every 256th: most of the data is passed over.
        for first in range(0, LINES, 256):
            got = await cursor.take(first * len(LINE), (first + 8) * len(LINE))
            assert got == LINE * 8
        with pytest.raises(ShardFormatError, match="before the indexed sample"):
            await cursor.take(LINES * len(LINE), LINES * len(LINE) + 1)

    assert _peak(lambda: asyncio.run(walk())) < 5 * PIECE + STATE.get(kind, 0)


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_frames_are_read_as_one_stream_and_a_cut_one_is_an_error(kind: str) -> None:
    pack = COMPRESSORS[kind]
    parts = [b"one\n" * 1000, b"", b"two\n" * 3, LINE * 5000]
    stream = b"".join(pack(p) for p in parts)
    if kind == "zstd":  # a skippable frame between two data frames
        stream = stream + struct.pack("<II", 0x184D2A50, 5) + b"skip!" + pack(b"end\n")
        parts.append(b"end\n")
    for size in (1, 7, 4096, len(stream)):
        chunks = [stream[i:i + size] for i in range(0, len(stream), size)]
        assert b"".join(decompressed(chunks, kind, "gs://b/s")) == b"".join(parts)
    with pytest.raises(ShardFormatError, match="truncated"):
        b"".join(decompressed([stream[:-3]], kind, "gs://b/s"))
    corrupt = bytearray(pack(b"payload " * 100))
    corrupt[len(corrupt) // 2] ^= 0xFF
    with pytest.raises(ShardFormatError, match=f"corrupt {kind} data"):
        b"".join(decompressed([bytes(corrupt)], kind, "gs://b/s"))


def test_zeros_after_the_last_gzip_member_end_the_stream() -> None:
    # Padding to a block (tapes, block devices): gzip -dc and Python's gzip
    # read it as the end; it was "corrupt gzip data: incorrect header check".
    data = LINE * 5000
    stream = _gzip(data[:4096]) + _gzip(data[4096:])
    padded = stream + b"\0" * 1000
    assert gzip.decompress(padded) == data
    for size in (1, 7, 4096, len(stream), len(padded)):
        chunks = [padded[i:i + size] for i in range(0, len(padded), size)]
        assert b"".join(decompressed(chunks, "gzip", "gs://b/s")) == data, size
    # The zeros alone in their own feeds, after a member ended with its feed.
    assert b"".join(decompressed([stream, b"\0" * 3, b"", b"\0"], "gzip", "gs://b/s")) == data
    # A member after the zeros: gzip -dc drops it, Python's gzip reads it.
    for chunks in ([padded + _gzip(b"more\n")], [stream, b"\0\0", b"\0\x1f"]):
        with pytest.raises(ShardFormatError, match="after the zero padding"):
            b"".join(decompressed(chunks, "gzip", "gs://b/s"))
    # Zeros after a cut member are read as its trailer, which they are not;
    # zstd has no such padding.
    with pytest.raises(ShardFormatError, match="corrupt gzip data"):
        b"".join(decompressed([stream[:-3], b"\0" * 8], "gzip", "gs://b/s"))
    with pytest.raises(ShardFormatError, match="corrupt zstd data"):
        b"".join(decompressed([_zstd(data) + b"\0" * 16], "zstd", "gs://b/s"))


def _long_line_chunks(chunk: bytes, count: int) -> Iterator[bytes]:
    yield b"first\r\n"
    for _ in range(count):
        yield chunk  # the same object each time: the test holds one chunk
    yield b"\r"
    yield b"\nlast"


def test_a_line_of_many_chunks_is_indexed_in_the_memory_of_a_chunk() -> None:
    chunk, count = b"y" * (1 << 20), 48  # a 48 MiB line in 1 MiB chunks
    found: list[tuple[list[int], list[int], list[int], int]] = []

    def index() -> None:
        offsets, lengths, crcs, size = LinesFormat().index(
            _long_line_chunks(chunk, count), "gs://b/s.jsonl")
        found.append((list(offsets), list(lengths), list(crcs), size))

    assert _peak(index) < 8 * len(chunk)
    long_crc = 0
    for _ in range(count):
        long_crc = google_crc32c.extend(long_crc, chunk)
    assert found == [([0, 7, 7 + count * len(chunk) + 2],
                      [5, count * len(chunk), 4],
                      [google_crc32c.value(b"first"), long_crc, google_crc32c.value(b"last")],
                      7 + count * len(chunk) + 2 + 4)]


def test_lines_are_indexed_a_byte_at_a_time() -> None:
    data = b"a\r\n\r\nbb\r\r\n\rc\n\n\r\rd\r"
    offsets, lengths, crcs, size = LinesFormat().index([data[i:i + 1] for i in range(len(data))],
                                                      "gs://b/s.jsonl")
    whole = LinesFormat().index([data], "gs://b/s.jsonl")
    assert (list(offsets), list(lengths), list(crcs), size) == \
        (list(whole[0]), list(whole[1]), list(whole[2]), whole[3])
    assert [data[o:o + n] for o, n in zip(offsets, lengths, strict=True)] == \
        [b"a", b"bb\r", b"\rc", b"\r\rd\r"]


def test_an_xz_stream_asking_for_more_memory_than_the_cap_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux._engines.shards import _formats

    # The default preset's stream wants 8 MiB of dictionary: over a 1 MiB cap.
    monkeypatch.setattr(_formats, "_XZ_MEMORY", 1 << 20)
    with pytest.raises(ShardFormatError, match="corrupt xz data"):
        b"".join(decompressed([lzma.compress(b"x" * 1000)], "xz", "gs://b/s"))
