"""The emulator's Rope: content served from its pieces without joining them."""

from __future__ import annotations

import ctypes.util
import hashlib
import platform
import subprocess
import sys

import google_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from aioflux.testing._rope import Rope

pieces_strategy = st.lists(st.binary(max_size=40), max_size=8)


@settings(max_examples=200, deadline=None)
@given(pieces=pieces_strategy, a=st.integers(0, 400), b=st.integers(0, 400))
def test_slice_is_the_joined_bytes_slice(pieces: list[bytes], a: int, b: int) -> None:
    rope = Rope(pieces)
    joined = b"".join(pieces)
    start, end = min(a, b), max(a, b)
    part = rope.slice(start, end)
    assert bytes(part) == joined[start:end]
    assert part.size == len(bytes(part))
    assert all(len(p) for p in part.pieces)  # never an empty piece


@settings(max_examples=200, deadline=None)
@given(pieces=pieces_strategy, size=st.integers(1, 50), split=st.integers(0, 400))
def test_chunks_cover_the_content_and_stop_at_the_split(
        pieces: list[bytes], size: int, split: int) -> None:
    rope = Rope(pieces)
    chunks = list(rope.chunks(size, split_at=split))
    assert b"".join(bytes(c) for c in chunks) == b"".join(pieces)
    assert all(0 < len(c) <= size for c in chunks)
    if 0 < split < rope.size:
        ends = set()
        offset = 0
        for c in chunks:
            offset += len(c)
            ends.add(offset)
        assert split in ends  # a fault can cut the body exactly there


@given(pieces=pieces_strategy)
def test_hashes_and_equality_match_the_joined_bytes(pieces: list[bytes]) -> None:
    rope = Rope(pieces)
    joined = b"".join(pieces)
    assert rope.crc32c() == google_crc32c.value(joined)
    assert rope.md5() == hashlib.md5(joined).digest()
    assert rope == joined
    assert rope == Rope([joined])
    assert Rope([rope, b"x"]) == joined + b"x"  # ropes nest flat


def test_a_single_bytes_piece_is_served_without_a_copy() -> None:
    data = b"abc" * 1000
    assert bytes(Rope([data])) is data
    assert Rope([data]).slice(0, len(data)).pieces[0] is data


def test_the_emulator_process_keeps_freed_memory_for_reuse() -> None:
    # In a child: the setting changes the allocator of the process it runs in.
    out = subprocess.run(
        [sys.executable, "-c",
         "from aioflux.testing._serve import keep_freed_memory; print(keep_freed_memory())"],
        capture_output=True, text=True, check=True).stdout.strip()
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert out == ("True" if glibc and ctypes.util.find_library("c") else "False")


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(pieces_strategy, max_size=5), hashed=st.lists(st.booleans(), max_size=5))
def test_a_rope_of_ropes_combines_the_checksums_its_parts_know(
        parts: list[list[bytes]], hashed: list[bool]) -> None:
    ropes = [Rope(p) for p in parts]
    for rope, known in zip(ropes, hashed, strict=False):
        if known:
            rope.crc32c()  # as an upload's part is hashed when it arrives
    whole = Rope(ropes)
    joined = b"".join(b"".join(p) for p in parts)
    assert whole.crc32c() == google_crc32c.value(joined)
    assert Rope([whole, b"tail"]).crc32c() == google_crc32c.value(joined + b"tail")


def test_completing_does_not_hash_parts_whose_checksum_is_known() -> None:
    parts = [Rope([bytes([n]) * 1000]) for n in range(3)]
    for part in parts:
        part.crc32c()
        part.pieces = ()  # a read of the bytes would now see nothing
    assert Rope(parts).crc32c() == google_crc32c.value(
        b"".join(bytes([n]) * 1000 for n in range(3)))
