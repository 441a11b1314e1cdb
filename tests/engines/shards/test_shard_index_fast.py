"""The fast indexing paths against simple references.

The tar indexer walks plain members without tarfile and checks their
headers in numpy a buffer at a time: it must find what the header-by-header
indexer it replaced finds (tests/engines/shards/_tar_reference.py: same samples, same
crc32c, the same first error on a damaged tar), however the data is cut
into chunks. The lines indexer computes short lines' crc32c in numpy: it
must agree with one crc32c call a line.
"""

from __future__ import annotations

import io
import random
import tarfile
from collections.abc import Callable, Iterable
from typing import Any

import google_crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioflux import ShardFormatError
from aioflux._engines.shards._lines import SHORT, LinesFormat, line_crcs
from aioflux._engines.shards._tar_index import index_tar
from tests.engines.shards._tar_reference import old_index, random_tar

Index = Callable[[Iterable[bytes | memoryview], str], tuple[Any, Any, Any, int]]


def outcome(index: Index, chunks: list[bytes]) -> object:
    """What an indexer makes of ``chunks``: its columns and size, or its error."""
    try:
        offsets, lengths, crcs, size = index(chunks, "mem")
    except ShardFormatError as exc:
        return str(exc)
    return list(zip(offsets, lengths, crcs, strict=True)), size


def cut(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` in chunks of ``sizes`` (cycled)."""
    out, pos, k = [], 0, 0
    while pos < len(data):
        out.append(data[pos:pos + sizes[k % len(sizes)]])
        pos += sizes[k % len(sizes)]
        k += 1
    return out


def many_members(rng: random.Random) -> bytes:
    """A tar of many plain members (a batch of headers checked at once), a
    skipped or extended one now and then."""
    fmt = rng.choice([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for i in range(rng.randint(16, 70)):
            for field in rng.sample(["jpg", "cls", "TXT", "seg.png"], rng.randint(1, 3)):
                if rng.random() < 0.15:  # skipped, inside a sample or between two
                    folder = tarfile.TarInfo(f"d{i}")
                    folder.type = tarfile.DIRTYPE
                    tar.addfile(folder)
                if rng.random() < 0.05:
                    junk = tarfile.TarInfo(f"._k{i:04d}.jpg")
                    junk.size = 4
                    tar.addfile(junk, io.BytesIO(b"junk"))
                data = rng.randbytes(rng.choice([0, 1, 3, 100, 511, 512, 513, 1500]))
                member = tarfile.TarInfo(f"{rng.choice(['', 'a/', 'a/b.c/'])}k{i:04d}.{field}")
                member.size, member.mtime = len(data), rng.randrange(2**33)
                member.uid = rng.choice([0, 1000, 2**21 - 1])
                if fmt == tarfile.PAX_FORMAT and rng.random() < 0.05:
                    member.pax_headers = {"comment": "c" * rng.randint(1, 700)}
                tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def header_offsets(data: bytes) -> list[int]:
    """Where tarfile finds headers (each member's first and its own)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return sorted({at for m in tar.getmembers()
                       for at in (m.offset, m.offset_data - tarfile.BLOCKSIZE)})


# Bytes a damaged number field may hold: digits, its separators, a sign,
# what int() reads and tarfile does not, base-256 markers.
_NUMBER_BYTES = st.sampled_from(b"0178 \0-+_\t\x80\xff.")


_SIZES = st.lists(st.one_of(st.integers(1, 1100), st.just(1 << 20)), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), big=st.booleans(), sizes=_SIZES)
def test_the_fast_tar_indexer_finds_what_the_reference_finds_in_whole_tars(
        seed: int, big: bool, sizes: list[int]) -> None:
    rng = random.Random(seed)
    data = many_members(rng) if big else random_tar(rng)
    chunks = cut(data, sizes)
    found = outcome(index_tar, chunks)
    assert found == outcome(old_index, chunks)
    assert isinstance(found, tuple)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), big=st.booleans(),
       damage=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 511),
                                 st.one_of(_NUMBER_BYTES, st.integers(0, 255))), max_size=3),
       end=st.one_of(st.none(), st.integers(0, 10**7)),
       tail=st.sampled_from([b"", bytes(1024), b"\0" * 700 + b"x"]), sizes=_SIZES)
def test_the_fast_tar_indexer_finds_what_the_reference_finds_in_damaged_tars(
        seed: int, big: bool, damage: list[tuple[int, int, int]], end: int | None,
        tail: bytes, sizes: list[int]) -> None:
    rng = random.Random(seed)
    data = bytearray(many_members(rng) if big else random_tar(rng))
    headers = header_offsets(bytes(data))
    for which, offset, value in damage:  # in headers: damaged data only changes crc32c
        if headers:
            data[headers[which % len(headers)] + offset] = value
    if end is not None:
        del data[end % (len(data) + 1):]
    data += tail
    chunks = cut(bytes(data), sizes)
    assert outcome(index_tar, chunks) == outcome(old_index, chunks)


_KEYS = ["k1", "k2", "a/k1", "a.b/k1", "/k3", "__x", "a/__b", "._k", "x\ny", ".k", "__m__",
         "\xe9t\xe9", "_k", "k_", "a//b", "n" * 97]
_FIELDS = ["jpg", "JPG", "Jpg", "cls", "seg.png", "SEG.png", "\xe9", "", "a\nb", "x.y.z", "__"]


@settings(max_examples=150, deadline=None)
@given(members=st.lists(st.tuples(st.sampled_from(_KEYS), st.sampled_from(_FIELDS),
                                  st.integers(0, 3)), min_size=16, max_size=60),
       fmt=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]), sizes=_SIZES)
def test_member_names_are_grouped_as_the_reference_groups_them(
        members: list[tuple[str, str, int]], fmt: int, sizes: list[int]) -> None:
    # Names the fast path takes, and names it leaves to member_key (meta
    # names, dot files, newlines, non-ASCII fields, 100 bytes with no NUL),
    # keys repeated (a field twice, in any case) or not, in batches.
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for key, field, repeat in members:
            for _ in range(1 + (repeat == 3)):
                member = tarfile.TarInfo(f"{key}.{field}")
                member.size = repeat
                tar.addfile(member, io.BytesIO(bytes(repeat)))
    data = out.getvalue()
    chunks = cut(data, sizes)
    assert outcome(index_tar, chunks) == outcome(old_index, chunks)


@pytest.mark.parametrize("second", ["cls", "JPG"])
@pytest.mark.parametrize("chunk", [1024, 1 << 20])
def test_a_sample_split_by_a_skipped_member_goes_on_in_the_next_batch(
        second: str, chunk: int) -> None:
    # k.jpg, a folder, k.<second>, then a batch of plain members: the batch
    # starts inside the open sample (one field twice there is refused too).
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        names = [f"a{i:03d}.jpg" for i in range(20)] + ["k.jpg", "dir/", f"k.{second}"] + \
            [f"z{i:03d}.{field}" for i in range(20) for field in ("jpg", "cls")]
        for name in names:
            member = tarfile.TarInfo(name.rstrip("/"))
            member.type = tarfile.DIRTYPE if name.endswith("/") else tarfile.REGTYPE
            member.size = 0 if name.endswith("/") else 10
            tar.addfile(member, io.BytesIO(bytes(member.size)))
    data = out.getvalue()
    found = outcome(index_tar, cut(data, [chunk]))
    assert found == outcome(old_index, cut(data, [chunk]))
    if second == "cls":
        assert isinstance(found, tuple) and len(found[0]) == 41
    else:
        assert found == "mem: the sample 'k' has the field 'jpg' twice (member at byte 22016)"


@pytest.mark.parametrize("twice", [False, True])
def test_a_sample_of_many_fields_is_grouped_as_the_reference_groups_it(twice: bool) -> None:
    # Past 32 members of one key in a batch, fields go in a set one by one.
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        fields = [f"f{i}" for i in range(100)] + (["F7"] if twice else [])
        for name in [f"a{i}.jpg" for i in range(20)] + [f"k.{f}" for f in fields] + ["z.jpg"]:
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    data = out.getvalue()
    found = outcome(index_tar, [data])
    assert found == outcome(old_index, [data])
    assert (found == f"mem: the sample 'k' has the field 'f7' twice (member at byte "
                     f"{120 * 512})") if twice else len(found[0]) == 22


def _plain_tar(count: int, size: int = 100) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(count):
            for field in ("jpg", "cls"):
                member = tarfile.TarInfo(f"{i:06d}.{field}")
                member.size = size if field == "jpg" else 3
                tar.addfile(member, io.BytesIO(bytes(member.size)))
    return out.getvalue()


def _reheader(data: bytearray, at: int, change: Callable[[bytearray], None],
              signed: bool = False) -> None:
    """Change the header at ``at`` and set its checksum (signed: as tarfile's
    signed sum, which tarfile takes and the fast path's check does not)."""
    block = data[at:at + 512]
    change(block)
    block[148:156] = b" " * 8
    total = 256 + sum(b - 256 if signed and b > 127 else b for b in block) - 256
    block[148:156] = b"%06o\0 " % total
    data[at:at + 512] = block


def _uid_base256(block: bytearray) -> None:
    block[108:116] = b"\x80" + (2**40).to_bytes(7, "big")


def _junk_after_nul(block: bytearray) -> None:
    block[100:108] = b"0644\0\x01\x02\x03"  # tarfile reads "0644"; the fast form refuses it


def _high_byte_in_uname(block: bytearray) -> None:
    block[265:270] = b"\xe9\xe9\xe9\xe9\0"


@pytest.mark.parametrize("change,signed", [(_uid_base256, False), (_junk_after_nul, False),
                                           (_high_byte_in_uname, True)])
@pytest.mark.parametrize("chunk", [512, 1000, 1 << 20])
def test_a_header_the_batch_check_refuses_is_read_as_tarfile_reads_it(
        change: Callable[[bytearray], None], signed: bool, chunk: int) -> None:
    # One header in the middle of a batch of plain ones: a base-256 number,
    # a field with bytes after its NUL, a checksum only as signed bytes.
    data = bytearray(_plain_tar(40))
    at = header_offsets(bytes(data))[31]
    _reheader(data, at, change, signed)
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        assert len(tar.getmembers()) == 80  # tarfile reads it
    chunks = cut(bytes(data), [chunk])
    found = outcome(index_tar, chunks)
    assert found == outcome(old_index, chunks)
    assert isinstance(found, tuple) and len(found[0]) == 40


@pytest.mark.parametrize("chunk", [512, 1000, 1 << 20])
def test_a_bad_checksum_in_a_batch_is_refused_at_its_byte(chunk: int) -> None:
    data = bytearray(_plain_tar(40))
    at = header_offsets(bytes(data))[31]
    data[at + 40] ^= 1  # in the name's NULs: the name still reads the same
    found = outcome(index_tar, cut(bytes(data), [chunk]))
    assert found == f"mem: corrupt tar header at byte {at}: bad checksum"


def test_number_fields_of_many_forms_in_one_batch_are_read_as_tarfile_reads_them() -> None:
    # A batch sorts its headers by the form of their number fields and
    # checks each form once; forms past the first few go to tarfile's path.
    forms = [b"0000644\0", b" 000644\0", b"  00644\0", b"000644 \0", b"0644\0\0\0\0",
             b"   644  ", b"0000644 ", b"644\0 0 \0"]
    data = bytearray(_plain_tar(40))
    for i, at in enumerate(header_offsets(bytes(data))):
        def mode(block: bytearray, form: bytes = forms[i % len(forms)]) -> None:
            block[100:108] = form

        _reheader(data, at, mode)
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        assert {m.mode for m in tar.getmembers()} == {0o644}
    for chunk in (1000, 1 << 20):
        found = outcome(index_tar, cut(bytes(data), [chunk]))
        assert found == outcome(old_index, cut(bytes(data), [chunk]))
        assert isinstance(found, tuple) and len(found[0]) == 40


def test_a_size_tarfile_does_not_read_is_refused_at_its_header() -> None:
    data = bytearray(_plain_tar(40))
    at = header_offsets(bytes(data))[33]
    _reheader(data, at, lambda block: block.__setitem__(slice(124, 136), b"0000 000144\0"))
    found = outcome(index_tar, [bytes(data)])
    assert found == outcome(old_index, [bytes(data)])
    assert found == f"mem: corrupt tar header at byte {at}: invalid header"


def test_a_field_twice_after_an_extension_header_is_refused() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i, name in enumerate(["k.jpg", "k.cls", "k.JPG"]):
            member = tarfile.TarInfo(name)
            member.size = 1
            if i == 2:
                member.pax_headers = {"comment": "c"}
            tar.addfile(member, io.BytesIO(b"x"))
    data = out.getvalue()
    found = outcome(index_tar, [data])
    assert found == outcome(old_index, [data])
    assert found == "mem: the sample 'k' has the field 'jpg' twice (member at byte 2048)"


def test_more_distinct_fields_than_the_fast_path_remembers() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(1100):
            for field in (f"F{i}", "jpg", f"f{i}.x"):
                member = tarfile.TarInfo(f"k{i}.{field}")
                tar.addfile(member, io.BytesIO(b""))
    data = out.getvalue()
    found = outcome(index_tar, [data])
    assert found == outcome(old_index, [data])
    assert isinstance(found, tuple) and len(found[0]) == 1100


@pytest.mark.parametrize("chunk", [100_000, 1 << 20, 8 << 20])
def test_large_samples_are_checksummed_in_place(chunk: int) -> None:
    # From 64 KiB a sample's crc32c is taken of a view of the chunk, not a copy.
    data = _plain_tar(24, size=150_000)
    found = outcome(index_tar, cut(data, [chunk]))
    assert found == outcome(old_index, cut(data, [chunk]))
    assert isinstance(found, tuple) and len(found[0]) == 24


def test_a_header_split_anywhere_between_two_chunks_is_read_whole() -> None:
    data = _plain_tar(20)
    want = outcome(old_index, [data])
    assert isinstance(want, tuple) and len(want[0]) == 20
    for split in range(1, 4 * 512 + 1):  # every byte of the first two headers and more
        assert outcome(index_tar, [data[:split], data[split:]]) == want, split
    for split in range(512, len(data), 509):
        assert outcome(index_tar, [data[:split], data[split:split + 300],
                                   data[split + 300:]]) == want, split


@pytest.mark.parametrize("pax", [True, False])
def test_a_negative_size_is_refused(pax: bool) -> None:
    # tarfile reads "-600" (a PAX size, a minus sign in the octal field);
    # the walk went backwards from there and made an index of other bytes.
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, size in (("a.jpg", 100), ("b.jpg", 1000), ("c.jpg", 10)):
            member = tarfile.TarInfo(name)
            member.size = size
            if name == "b.jpg" and pax:
                member.pax_headers = {"size": "-600"}
            tar.addfile(member, io.BytesIO(bytes(size)))
    data = bytearray(out.getvalue())
    at = 2048 if pax else 1024  # b.jpg's header: after a.jpg's 2 blocks (and its PAX header's)
    if not pax:
        _reheader(data, at, lambda block: block.__setitem__(slice(124, 136), b"-0000001130\0"))
    with pytest.raises(ShardFormatError, match=rf"header at byte {at} \(a size of -600\)"):
        index_tar([bytes(data)], "mem")


def test_extension_headers_with_no_member_after_them_end_the_tar_as_tarfile_reads_it() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        member = tarfile.TarInfo("k.txt")
        member.size = 3
        tar.addfile(member, io.BytesIO(b"abc"))
        member = tarfile.TarInfo("l.txt")
        member.pax_headers = {"comment": "c" * 600}
        tar.addfile(member, io.BytesIO(b""))
    data = out.getvalue()
    orphan = data[:header_offsets(data)[-1]]  # the PAX header of l.txt, not l.txt
    for chunk in (100, 512, 1 << 20):
        found = outcome(index_tar, cut(orphan, [chunk]))
        assert found == outcome(old_index, cut(orphan, [chunk]))
        assert isinstance(found, tuple) and len(found[0]) == 1


# -- lines --------------------------------------------------------------------------


def _lines_the_plain_way(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, length, crc32c) of every non-empty line, a ``\\r`` before its ``\\n`` dropped."""
    out, pos = [], 0
    for piece in data.split(b"\n"):
        length = len(piece) - (piece.endswith(b"\r") and pos + len(piece) < len(data))
        if length > 0:
            out.append((pos, length, google_crc32c.value(data[pos:pos + length])))
        pos += len(piece) + 1
    return out


_LINE = st.one_of(st.binary(max_size=3 * SHORT), st.sampled_from([b"", b"\r", b"\r\r", b"a\r"]),
                  st.integers(1, 2 * SHORT).map(lambda n: b"x" * n))


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINE, max_size=60),
       ends=st.lists(st.sampled_from([b"\n", b"\r\n", b"\n\n"]), min_size=1, max_size=5),
       last=st.sampled_from([b"", b"tail", b"tail\r", b"\r", b"\n"]),
       sizes=st.lists(st.integers(1, 300), min_size=1, max_size=6))
def test_lines_are_indexed_as_the_plain_way_finds_them(
        lines: list[bytes], ends: list[bytes], last: bytes, sizes: list[int]) -> None:
    # Chunk ends fall inside lines, between a \r and its \n, on newlines.
    data = b"".join(line.replace(b"\n", b"") + ends[i % len(ends)]
                    for i, line in enumerate(lines)) + last
    offsets, lengths, crcs, size = LinesFormat().index(cut(data, sizes), "mem")
    assert list(zip(offsets, lengths, crcs, strict=True)) == _lines_the_plain_way(data)
    assert size == len(data)


def test_line_crcs_agree_with_a_call_a_line_at_every_length() -> None:
    rng = random.Random(7)
    data = rng.randbytes(20_000)
    lengths = [n for n in range(1, 3 * SHORT) for _ in range(3)]
    rng.shuffle(lengths)
    starts = [rng.randrange(len(data) - n) for n in lengths]
    got = line_crcs(data, np.array(starts), np.array(starts) + np.array(lengths))
    assert got.dtype == np.uint32
    assert got.tolist() == [google_crc32c.value(data[a:a + n])
                            for a, n in zip(starts, lengths, strict=True)]
    # All one length (the common case: no sort), and the shortest.
    for n in (1, 9, SHORT):
        starts = list(range(0, 5000, n + 1))
        got = line_crcs(data, np.array(starts), np.array(starts) + n)
        assert got.tolist() == [google_crc32c.value(data[a:a + n]) for a in starts]
