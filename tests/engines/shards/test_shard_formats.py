"""The tar indexer walks headers itself and checksums each sample's bytes in
one pass: it must find what Python's tarfile finds, on whatever tarfile and
GNU tar write (PAX and GNU long names, global PAX headers, folders, links,
junk members, empty members, members of one key split by a skipped one)."""

from __future__ import annotations

import io
import random
import tarfile

import google_crc32c
import pytest

from aioflux import ShardFormatError
from aioflux._engines.shards import _tar, _tar_headers
from aioflux._engines.shards._lines import LinesFormat
from aioflux._engines.shards._tar import TarFormat, member_key
from tests.engines.shards._tar_reference import damaged_number_fields, random_tar


def reference(data: bytes) -> list[tuple[int, int, int, str]]:
    """(offset, length, crc32c, key) per sample, from tarfile's own reading."""
    out: list[list[int | str]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            found = member_key(member.name) if member.isreg() else None
            if found is None:
                continue
            end = member.offset_data + -(-member.size // 512) * 512
            if out and out[-1][3] == found[0]:
                out[-1][1] = end
            else:
                out.append([member.offset, end, 0, found[0]])
    return [(int(a), int(b) - int(a), int(google_crc32c.value(data[int(a):int(b)])), str(k))
            for a, b, _, k in out]


@pytest.mark.parametrize("seed", range(40))
def test_the_indexer_finds_what_tarfile_finds(seed: int) -> None:
    rng = random.Random(seed)
    data = random_tar(rng)
    chunk = rng.choice([1, 7, 512, 1000, 65536])
    offsets, lengths, crcs, size = TarFormat().index(
        (data[i:i + chunk] for i in range(0, len(data), chunk)), "mem")
    want = reference(data)
    assert list(zip(offsets, lengths, crcs, strict=True)) == [w[:3] for w in want]
    assert size == len(data)
    for (offset, length, _, key), sample_key in zip(
            want, [TarFormat().sample(data[o:o + n], "u", o)["__key__"]
                   for o, n in zip(offsets, lengths, strict=True)], strict=True):
        assert sample_key == key, (offset, length)


def test_samples_hold_the_member_bytes_by_field() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for field, data in (("jpg", b"\xff\xd8" * 700), ("CLS", b"3"), ("seg.png", b"")):
            member = tarfile.TarInfo(f"a/b.c/000001.{field}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    data = out.getvalue()
    offsets, lengths, _, _ = TarFormat().index([data], "mem")
    sample = TarFormat().sample(data[offsets[0]:offsets[0] + lengths[0]], "u", 0)
    assert sample == {"__url__": "u", "__key__": "a/b.c/000001", "jpg": b"\xff\xd8" * 700,
                      "cls": b"3", "seg.png": b""}


def test_a_field_twice_in_a_sample_is_refused() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for _ in range(2):
            member = tarfile.TarInfo("k.jpg")
            member.size = 1
            tar.addfile(member, io.BytesIO(b"x"))
    with pytest.raises(ShardFormatError, match="the sample 'k' has the field 'jpg' twice"):
        TarFormat().index([out.getvalue()], "mem")


def _headers_of(archive: bytes) -> list[bytes]:
    """Every 512-byte block of an archive that tarfile reads as a header."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            # The first extension header (if any) and the member's own.
            for at in {member.offset, member.offset_data - tarfile.BLOCKSIZE}:
                out.append(archive[at:at + tarfile.BLOCKSIZE])
    return out


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_plain_headers_read_as_tarfile_reads_them_and_corrupt_ones_go_to_tarfile(
        fmt: int) -> None:
    # The fast header path must agree with TarInfo.frombuf on every header it
    # takes, and leave every other (and every corrupted one) to tarfile.
    rng = random.Random(fmt)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        names = ["a.jpg", "dir/", "x" * 99 + ".c", "p/" * 60 + "long.txt", "ünï.cls",
                 "k.seg.png", "n" * 120 + "/y.z"]
        for i, name in enumerate(names * 3):
            info = tarfile.TarInfo(name.rstrip("/") if name.endswith("/") else name)
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
            data = rng.randbytes(rng.choice([0, 1, 511, 512, 3000]))
            info.size, info.mtime, info.mode = len(data), rng.randrange(2**32), 0o644 + i
            try:
                tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
            except ValueError:  # too long a name for ustar: nothing written
                assert fmt == tarfile.USTAR_FORMAT
    took = 0
    for block in _headers_of(buf.getvalue()):
        for trial in range(40):
            damaged = bytearray(block)
            if trial:
                for _ in range(rng.choice([1, 2])):
                    damaged[rng.randrange(512)] = rng.randrange(256)
            plain = _tar_headers.plain_member(bytes(damaged))
            if not trial and block[156:157] == tarfile.REGTYPE:
                assert plain is not None  # the plain path is the common one
            if plain is None:
                continue
            took += 1
            want = tarfile.TarInfo.frombuf(damaged, "utf-8", "surrogateescape")
            assert (plain.name, plain.size, plain.type) == (want.name, want.size, want.type)
    assert took


def test_a_v7_folder_and_a_base256_size_go_to_tarfile() -> None:
    info = tarfile.TarInfo("old/")
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    block[156:157] = tarfile.AREGTYPE
    block[148:156] = b"%06o\0 " % (256 + sum(block) - sum(block[148:156]))
    assert _tar_headers.plain_member(bytes(block)) is None
    big = tarfile.TarInfo("big.bin")
    big.size = 8**11 + 1
    header = big.tobuf(tarfile.GNU_FORMAT)[:512]
    assert _tar_headers.plain_member(header) is None
    assert tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape").size == 8**11 + 1


def _lines_the_plain_way(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of every non-empty line, a ``\\r`` before its ``\\n`` dropped."""
    out, pos = [], 0
    for piece in data.split(b"\n"):
        length = len(piece) - (piece.endswith(b"\r") and pos + len(piece) < len(data))
        if length > 0:
            out.append((pos, length))
        pos += len(piece) + 1
    return out


@pytest.mark.parametrize("seed", range(6))
def test_lines_are_indexed_whatever_the_chunks(seed: int) -> None:
    rng = random.Random(seed)
    data = b"".join(rng.choice([b"", b"a", b"\r", b"xyz" * rng.randrange(400)])
                    + rng.choice([b"\n", b"\r\n", b"\n\n"]) for _ in range(300))
    data += rng.choice([b"", b"tail", b"tail\r"])
    cuts = sorted(rng.sample(range(1, len(data)), 25))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    offsets, lengths, crcs, size = LinesFormat().index(chunks, "gs://b/x.jsonl")
    want = _lines_the_plain_way(data)
    assert list(zip(offsets, lengths, strict=True)) == want
    assert list(crcs) == [google_crc32c.value(data[o:o + n]) for o, n in want]
    assert size == len(data)


def _with_comment(size: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("k.txt")
        info.size = 3
        info.pax_headers = {"comment": "c" * size}
        tar.addfile(info, io.BytesIO(b"abc"))
    return out.getvalue()


def test_an_extension_header_past_the_cap_is_refused_before_it_is_held() -> None:
    fine = _with_comment(1 << 20)
    offsets, lengths, crcs, size = TarFormat().index([fine], "gs://b/s.tar")
    assert list(zip(offsets, lengths, crcs, strict=True)) == [w[:3] for w in reference(fine)]
    assert size == len(fine)
    huge = _with_comment(_tar.MAX_EXTENSION)  # its records are a little more
    # Only the header is given: the size it claims is refused as it is read.
    with pytest.raises(ShardFormatError, match=r"corrupt tar header at byte 0 .*extension header"):
        TarFormat().index([huge[:512]], "gs://b/s.tar")


@pytest.mark.parametrize("chunk", [1, 100, 512, 1 << 20])
def test_a_truncated_tar_names_the_member_it_ends_in(chunk: int) -> None:
    # The message said "inside the member at byte None" once the member's
    # header had been read.
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i, (name, size) in enumerate([("a.jpg", 1500), ("d/" * 60 + "b.jpg", 700),
                                          ("c.cls", 0), ("c.txt", 3000)]):
            member = tarfile.TarInfo(name)
            member.size = size
            if i == 3:
                member.pax_headers = {"comment": "x" * 600}
            tar.addfile(member, io.BytesIO(bytes(size)))
    data = out.getvalue()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        spans = [(m.offset, m.offset_data + -(-m.size // 512) * 512) for m in tar.getmembers()]
    cuts = 0
    for start, end in spans:
        for cut in range(start + 1, end, 97):
            whole = data[:cut]
            with pytest.raises(ShardFormatError) as caught:
                TarFormat().index((whole[i:i + chunk] for i in range(0, cut, chunk)),
                                  "gs://b/s.tar")
            assert str(caught.value) == (f"index gs://b/s.tar: truncated: the tar ends at byte "
                                         f"{cut}, inside the member at byte {start}"), cut
            cuts += 1
    assert cuts > 50


def _old_plain_member_accepts(block: bytes) -> bool:
    """The plain path's rule before its fast checks: all eight number fields
    fullmatched one by one, the checksum by ``sum``."""
    if block[156:157] not in (tarfile.REGTYPE, tarfile.AREGTYPE) or not all(
            _tar_headers.NUMBER.fullmatch(block, a, b) for a, b in _tar_headers.NUMBERS):
        return False
    checksum = int(block[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
    return checksum == 256 + sum(block) - sum(block[148:156])


def test_number_fields_the_fast_checks_take_are_the_ones_the_fullmatches_take() -> None:
    # Fields of every shape around the usual one (digits, NUL, padding; spaces,
    # NULs first, no NUL, a digit 8, a letter), the checksum then made right
    # for the damaged header: the fast checks must take exactly what the eight
    # fullmatches took, and read it as tarfile does.
    took = refused = 0
    for damaged in damaged_number_fields(4000, written=0.2):
        old = _old_plain_member_accepts(damaged)
        plain = _tar_headers.plain_member(damaged)
        assert (plain is not None) == old, damaged[100:156]
        if plain is not None:
            took += 1
            want = tarfile.TarInfo.frombuf(damaged, "utf-8", "surrogateescape")
            assert (plain.name, plain.size, plain.type) == (want.name, want.size, want.type)
        else:
            refused += 1
    assert took and refused
