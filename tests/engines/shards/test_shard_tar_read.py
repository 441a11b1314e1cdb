"""Reading a tar sample's region: plain members go by ``plain_fields`` (no
``TarInfo``, no ``Headers``), every other header by ``Headers`` as tarfile
reads it; both make the header checks (checksum, number fields), so a
damaged header is refused whichever way it would have gone."""

from __future__ import annotations

import io
import random
import tarfile

import pytest

from aioflux import ShardFormatError
from aioflux._engines.shards import _tar, _tar_headers
from aioflux._engines.shards._tar import TarFormat, member_key
from tests.engines.shards._tar_reference import damaged_number_fields, random_tar


def _tar_of(members: list[tuple[str, bytes]], fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _regions(data: bytes) -> list[tuple[int, bytes]]:
    offsets, lengths, _, _ = TarFormat().index([data], "mem")
    return [(o, data[o:o + n]) for o, n in zip(offsets, lengths, strict=True)]


def _tarfile_samples(data: bytes) -> list[dict[str, object]]:
    """Each sample as tarfile reads the archive: key and field bytes."""
    out: list[dict[str, object]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            found = member_key(member.name) if member.isreg() else None
            if found is None:
                continue
            if not out or out[-1]["__key__"] != found[0]:
                out.append({"__url__": "u", "__key__": found[0]})
            extracted = tar.extractfile(member)
            assert extracted is not None
            out[-1][found[1]] = extracted.read()
    return out


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_samples_read_as_tarfile_reads_them(seed: int, checked: bool) -> None:
    # PAX, GNU long names, global headers, skipped members: plain members
    # and the others mixed in one region; read checked again (a sidecar's
    # index) or not (one built here: checked_fields).
    data = random_tar(random.Random(seed))
    got = [TarFormat().sample(region, "u", at, checked=checked) for at, region in _regions(data)]
    assert got == _tarfile_samples(data)


def test_a_checked_region_read_in_place_is_the_sample_read_the_general_way() -> None:
    # A checked region whose members are all plain is read in place (no
    # header copied, one key decoded), bytes or a view of them; any other
    # is left to the general reading. Both give the same sample, keys in
    # the same order.
    took = left = 0
    for seed in range(30):
        data = random_tar(random.Random(seed))
        for at, region in _regions(data):
            general = TarFormat().sample(region, "u", at)
            for given in (region, memoryview(b"\0" * 7 + region)[7:]):
                fast = _tar._checked_sample(given, "u")
                if fast is None:
                    left += 1
                    continue
                took += 1
                assert fast == general
                assert list(fast) == list(general)
                assert all(type(v) is bytes for k, v in fast.items() if not k.startswith("__"))
    assert took > 100 and left > 100


def test_field_names_are_decoded_once_a_process_and_kept_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tar, "_FIELDS", {})
    ((_, region),) = _regions(_tar_of([("k.JPG", b"a"), ("k.cls", b"b")]))
    for _ in range(2):  # decoded, then taken from the names kept
        assert _tar._checked_sample(region, "u") == \
            {"__url__": "u", "__key__": "k", "jpg": b"a", "cls": b"b"}
    assert _tar._FIELDS == {b"JPG": "jpg", b"cls": "cls"}
    # Names are data: a shard of many fields keeps no more than the bound.
    ((_, region),) = _regions(_tar_of([(f"k.F{i}", b"x") for i in range(400)]))
    sample = _tar._checked_sample(region, "u")
    assert sample is not None and sorted(sample)[-1] == "f99" and len(sample) == 402
    assert len(_tar._FIELDS) == _tar._MOST_FIELDS


def test_checked_fields_reads_what_plain_fields_takes_and_leaves_the_rest() -> None:
    # Every header the indexer took (plain_member's), in every number form:
    # the same key, field and size, or the same None (to Headers); a
    # base-256 size (GNU's for 8 GiB and more) goes to Headers too.
    took = 0
    for damaged in damaged_number_fields(3000, written=0.28, zeroed=0.12, checksums=(
            b"%06o\0 ", b"%07o\0", b"%06o  ")):
        if _tar_headers.plain_member(damaged) is None:
            continue  # refused when indexed: no checked region holds it
        assert _tar_headers.checked_fields(damaged) == _tar_headers.plain_fields(damaged)
        took += 1
    assert took > 500
    big = bytearray(_tar_of([("000001.jpg", b"x")])[:512])
    big[124:136] = b"\x80" + (8 << 30).to_bytes(11, "big")
    big[148:156] = b" " * 8
    big[148:156] = b"%06o\0 " % sum(big)
    assert tarfile.TarInfo.frombuf(bytes(big), "utf-8", "surrogateescape").size == 8 << 30
    assert _tar_headers.checked_fields(bytes(big)) is None


def test_a_plain_sample_is_read_without_tarinfo_or_headers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its headers were read as TarInfo through Headers (and again by
    # member_key): a fifth of a DataLoader worker's CPU on 100 KiB samples.
    data = _tar_of([("d/000001.jpg", b"\xff" * 3000), ("d/000001.CLS", b"7")])
    (at, region), = _regions(data)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a plain member went the slow way")

    monkeypatch.setattr(_tar, "Headers", refuse)
    monkeypatch.setattr(_tar, "member_key", refuse)
    monkeypatch.setattr(tarfile.TarInfo, "__init__", refuse)
    sample = TarFormat().sample(memoryview(region), "u", at)
    assert sample == {"__url__": "u", "__key__": "d/000001", "jpg": b"\xff" * 3000,
                      "cls": b"7"}


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_a_flipped_bit_in_a_header_is_refused(fmt: int) -> None:
    # Outside the checksum field every flip changes the bytes' sum: refused,
    # by plain_fields' checks or, where it gives up, by tarfile's.
    data = _tar_of([("000001.jpg", b"x" * 700), ("000001.cls", b"1")], fmt)
    (at, region), = _regions(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        headers = [m.offset for m in tar.getmembers()]
    assert len(headers) == 2
    for header in headers:
        for pos in range(512):
            if 148 <= pos < 156:
                continue
            for bit in (0x01, 0x40):
                damaged = bytearray(region)
                damaged[header - at + pos] ^= bit
                with pytest.raises(ShardFormatError, match=r"read u: "):
                    TarFormat().sample(bytes(damaged), "u", at)


def test_plain_fields_takes_what_plain_member_and_member_key_take() -> None:
    rng = random.Random(7)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in ["a.jpg", "x" * 95 + ".c", "ünï.CLS", "k.seg.png", "__meta__.x", "._a.jpg",
                     "dir/__k.jpg", "noext", "d.x/k", "p/" * 60 + "long.txt", "a\nb.c"]:
            info = tarfile.TarInfo(name)
            info.size = rng.choice([0, 1, 600])
            tar.addfile(info, io.BytesIO(bytes(info.size)))
    archive = buf.getvalue()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        blocks = [archive[m.offset_data - 512:m.offset_data] for m in tar.getmembers()]
    took = 0
    for block in blocks:
        for trial in range(60):
            damaged = bytearray(block)
            if trial:
                damaged[rng.randrange(512)] = rng.randrange(256)
            if trial % 2:  # the checksum made right for the damage: the other checks' turn
                damaged[148:156] = b" " * 8
                damaged[148:156] = b"%06o\0 " % sum(damaged)
            fields = _tar_headers.plain_fields(bytes(damaged))
            plain = _tar_headers.plain_member(bytes(damaged))
            if fields is None:
                # Refused only where plain_member refuses it or its name is not key.field.
                assert plain is None or _tar_headers.PLAIN_NAME.match(plain.name.encode(
                    "utf-8", "surrogateescape") + b"\0") is None or damaged[345]
                continue
            took += 1
            assert plain is not None
            key, field, size = fields
            assert member_key(plain.name) == (key.decode("utf-8", "surrogateescape"),
                                              field.decode("utf-8", "surrogateescape").lower())
            assert size == plain.size
    assert took > 60


def test_plain_fields_reads_every_number_form_as_plain_member_does() -> None:
    # The written forms are read at fixed places, the others by the usual
    # rule: together they take what plain_member takes, with its size.
    took = refused = 0
    for damaged in damaged_number_fields(4000, written=0.28, zeroed=0.12, checksums=(
            b"%06o\0 ", b"%07o\0", b"%06o  ")):
        fields = _tar_headers.plain_fields(damaged)
        plain = _tar_headers.plain_member(damaged)
        assert (fields is None) == (plain is None), damaged[100:156]
        if plain is not None and fields is not None:
            assert fields == (b"000123", b"jpg", plain.size)
            took += 1
        else:
            refused += 1
    assert took > 500 and refused > 500
