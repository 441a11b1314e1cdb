"""zstd-compressed objects: every frame carries its content checksum, and a
stream that is corrupt, truncated, empty or not zstd at all is a typed
error naming the object, never fewer or other bytes than were written.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import aioflux
from aioflux import ChecksumMismatch

zstandard = pytest.importorskip("zstandard")
from aioflux._engines import zstd as zstd_engine  # noqa: E402
from aioflux._engines.zstd import decompress_reader, decompress_seekable  # noqa: E402

KiB = 1024
MiB = 1024 * KiB


def _write(path: Path, payload: bytes) -> bytes:
    """Write ``payload`` compressed through aioflux; return the stored bytes."""
    with aioflux.open(path, "wb", compression="zstd") as f:
        f.write(payload)
    return path.read_bytes()


def _foreign_copy(path: Path, stored: bytes) -> None:
    """The stored bytes, as a copy by another tool leaves them: no crc32c."""
    path.write_bytes(stored)


def _payload() -> bytes:
    return os.urandom(256 * KiB) + b"\0" * MiB + os.urandom(100 * KiB)


def test_frames_written_carry_a_content_checksum(tmp_path: Path) -> None:
    stored = _write(tmp_path / "a.zst", b"abc" * 1000)
    assert zstandard.get_frame_parameters(stored).has_checksum


def test_a_truncated_object_is_an_error_naming_it(tmp_path: Path) -> None:
    payload = _payload()
    stored = _write(tmp_path / "full.zst", payload)
    cut = tmp_path / "cut.zst"
    _foreign_copy(cut, stored[:len(stored) - 1000])  # cp on a disk that filled up
    with aioflux.open(cut, compression="zstd") as f, \
            pytest.raises(ChecksumMismatch, match="ends inside a frame") as info:
        f.read()
    assert (info.value.operation, info.value.name) == ("read", str(cut).lstrip("/")
                                                       .partition("/")[2])
    assert f"file://{cut}" in str(info.value)
    with aioflux.open(tmp_path / "full.zst", compression="zstd") as f:
        assert f.read() == payload


def test_every_truncation_of_a_stream_is_refused() -> None:
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
    for data in (b"", b"abc", os.urandom(3000), b"z" * 5000):
        one = compressor.compress(data)
        blob = one + one
        for cut in range(len(blob)):
            if cut == len(one):
                continue  # a whole frame: a shorter stream, not a torn one
            with pytest.raises(ChecksumMismatch):
                decompress_seekable(io.BytesIO(blob[:cut]))


def test_a_flipped_byte_is_an_error_where_the_store_has_no_crc(tmp_path: Path) -> None:
    stored = bytearray(_write(tmp_path / "a.zst", _payload()))
    stored[len(stored) // 3] ^= 0x10
    _foreign_copy(tmp_path / "b.zst", bytes(stored))
    with aioflux.open(tmp_path / "b.zst", compression="zstd") as f, \
            pytest.raises(ChecksumMismatch, match="zstd"):
        f.read()


@pytest.mark.parametrize("stored", [b"", b"plain text, not compressed", b"\x28\xb5\x2f"],
                         ids=["empty", "not-zstd", "cut-magic"])
def test_what_is_no_zstd_stream_is_refused(stored: bytes) -> None:
    with pytest.raises(ChecksumMismatch, match="not a valid zstd stream"):
        decompress_seekable(io.BytesIO(stored))
    with pytest.raises(ChecksumMismatch, match="not a valid zstd stream"):
        decompress_reader(io.BytesIO(stored)).read()


def test_concatenated_and_skippable_frames_are_read_whole() -> None:
    compressor = zstandard.ZstdCompressor(level=1, write_checksum=True, write_content_size=True)
    parts = [b"", b"a" * 300_000, os.urandom(70_000)]
    skippable = (0x184D2A57).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"xyz"
    blob = b"".join(skippable + compressor.compress(p) for p in parts)
    with decompress_seekable(io.BytesIO(blob)) as whole:
        assert whole.read() == b"".join(parts)
    reader = decompress_reader(io.BytesIO(blob))
    pieces = []
    while piece := reader.read(4096):  # bounded reads, whatever the ratio
        assert len(piece) <= 4096
        pieces.append(piece)
    assert b"".join(pieces) == b"".join(parts)
    assert reader.tell() == sum(map(len, parts))


def test_an_empty_compressed_object_round_trips(tmp_path: Path) -> None:
    assert _write(tmp_path / "e.zst", b"")  # a frame even for no bytes
    with aioflux.open(tmp_path / "e.zst", compression="zstd") as f:
        assert f.read() == b""


def test_a_large_stream_is_decompressed_to_a_temporary_file_not_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.load seeks, so a compressed checkpoint is decompressed first:
    # beyond IN_MEMORY bytes into a file, or it would be held in memory
    # twice (the bytes, then the tensors loaded from them).
    monkeypatch.setattr(zstd_engine, "IN_MEMORY", 1 << 20)
    plain = os.urandom(1 << 20) * 3
    packed = zstandard.ZstdCompressor(write_checksum=True).compress(plain)
    with decompress_seekable(io.BytesIO(packed)) as out:
        assert out._rolled  # type: ignore[attr-defined]  # SpooledTemporaryFile's
        assert out.read() == plain
        out.seek(len(plain) - 5)
        assert out.read() == plain[-5:]
    tiny = zstandard.ZstdCompressor().compress(b"tiny")
    with decompress_seekable(io.BytesIO(tiny)) as small:
        assert not small._rolled  # type: ignore[attr-defined]
        assert small.read() == b"tiny"


def test_a_write_after_close_names_the_object(tmp_path: Path) -> None:
    f = aioflux.open(tmp_path / "a.zst", "wb", compression="zstd")
    f.write(b"abc")
    f.close()
    with pytest.raises(aioflux.InvalidArgument, match=f"write to closed writer file://{tmp_path}"):
        f.write(b"more")


def test_lines_of_a_compressed_object_are_read_a_buffer_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The binary file had no buffer of its own: readline and iteration took
    # one byte per decompressor call (2 MB/s; a 100 MiB JSON line, minutes).
    lines = [b"%d,%s\n" % (i, b"x" * (i % 300)) for i in range(20_000)]
    payload = b"".join(lines) + b"last, no newline"
    _write(tmp_path / "l.zst", payload)
    calls = []
    inner = zstd_engine._Decompressed.readinto

    def counted(self: object, buffer: memoryview) -> int:
        calls.append(len(buffer))
        return inner(self, buffer)  # type: ignore[arg-type]

    monkeypatch.setattr(zstd_engine._Decompressed, "readinto", counted)
    with aioflux.open(tmp_path / "l.zst", "rb", compression="zstd") as f:
        assert f.readline() == lines[0]
        assert f.tell() == len(lines[0])
        assert f.readline(3) == lines[1][:3]
        rest = list(f)
    assert rest == [lines[1][3:], *lines[2:], b"last, no newline"]
    # A call per 8 KiB of the 3 MiB, not one per byte.
    assert len(calls) < len(payload) // 4096
