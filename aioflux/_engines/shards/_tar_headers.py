"""The rules of tar headers, shared by the indexer and the sample reader.

A member's key is its name up to the first dot of its basename, and the
rest is the field (``dir/000123.seg.png`` is key ``dir/000123``, field
``seg.png``; fields lowercased, as webdataset's ``group_by_keys`` does).
Skipped, as webdataset skips them: anything but a regular file (directories,
links), names whose basename has no dot or starts with one (``._x.jpg``,
macOS's AppleDouble files), and ``__meta__``-style names. Headers are read
as Python's ``tarfile`` reads them (PAX, local and global, and GNU long
names applied to the member after them).
"""

from __future__ import annotations

import re
import tarfile
import zlib

from ..._core.errors import ShardFormatError

__all__ = ["BLOCK", "MAX_EXTENSION", "NUMBER", "PLAIN_NAME", "Headers", "checked_fields",
           "member_key", "padded", "plain_fields", "plain_member"]

_KEY_FIELD = re.compile(r"^((?:.*/|)[^./][^./]*)[.]([^/]*)$")
_META = re.compile(r"__[^/]*__($|/)")


def member_key(name: str) -> tuple[str, str] | None:
    """``(key, field)`` of a member name, or None for a member no sample holds."""
    base = name.rsplit("/", 1)[-1]
    if _META.match(name) or (base.startswith("__") and base.endswith("__")):
        return None
    found = _KEY_FIELD.match(name)
    if found is None:
        return None
    return found.group(1), found.group(2).lower()


BLOCK = tarfile.BLOCKSIZE
# The most data an extension header (PAX records, a GNU long name) may hold:
# the indexer holds it whole, so one that claims gigabytes is refused before
# it is read into memory. Real ones hold a few hundred
# bytes; libarchive refuses PAX headers past a few MiB too.
MAX_EXTENSION = 16 * 1024 * 1024
_ZERO_BLOCK = bytes(BLOCK)
# Header types whose data follows the header (tarfile's rule: regular files
# and types it does not know); links, folders and devices carry none.
_NO_DATA = frozenset(t for t in tarfile.SUPPORTED_TYPES if t not in tarfile.REGULAR_TYPES)
_PAX_NAME = re.compile(rb"(\d+) ([^=]+)=")
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE)
# A number field as tarfile's nti reads it: octal digits between spaces,
# then a NUL and anything (a field that fails this goes to tarfile).
NUMBER = re.compile(rb" *[0-7]* *(?:\0[0-7 \0]*)?")
# mode, uid, gid, size, mtime, chksum, devmajor, devminor.
NUMBERS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156),
            (329, 337), (337, 345))
# The usual writing of those fields (octal digits, then a NUL, then digits,
# spaces or NULs), all six of 100-156 and both of 329-345 in one match each:
# a field that matches is one NUMBER accepts (digits up to its NUL, or all
# digits when the lookahead's NUL lies past it), so only a header that does
# not pays for the eight fullmatches.
_USUAL = rb"(?=[0-7]*\0)[0-7 \0]"
_USUAL_NUMBERS = re.compile(rb"(?:%s{8}){3}(?:%s{12}){2}%s{8}" % (_USUAL, _USUAL, _USUAL))
_USUAL_DEVICES = re.compile(rb"(?:%s{8}){2}" % _USUAL)
# Both in one match (from byte 100; the 173 bytes between are not numbers).
_USUAL_FIELDS = re.compile(rb"(?:%s{8}){3}(?:%s{12}){2}%s{8}.{173}(?:%s{8}){2}"
                           % (_USUAL, _USUAL, _USUAL, _USUAL), re.DOTALL)
# The fields as tarfile and GNU tar write them (all digits, then a NUL; the
# checksum 6 digits, a NUL and a space; devices all NULs or digits), read
# at fixed places: a third of _USUAL_FIELDS' time, whose lookaheads run at
# every byte. Forms NUMBER takes, so tarfile reads them alike.
_WRITTEN_NUMBERS = re.compile(rb"(?:[0-7]{7}\0){3}(?:[0-7]{11}\0){2}[0-7]{6}\0 ")
_WRITTEN_DEVICES = re.compile(rb"(?:[0-7]{7}\0|\0{8}){2}")
# A name the fast paths take: ``dir/.../key.field`` ending in its field
# (NUL-terminated), no ``\n`` (``member_key``'s ``.`` stops there), neither the
# name nor its basename starting with ``__`` (``__meta__``-style names). It
# is member_key's rule on the raw bytes: every other name goes to member_key.
PLAIN_NAME = re.compile(
    rb"(?!__)((?:[^\0\n/]*/)*(?!__)[^\0\n/.][^\0\n/.]*)\.([^\0\n/]*)\0")
# PLAIN_NAME of a name with no folder, in half its time (its folders' part
# backtracks over every byte of such a name before it matches none).
_PLAIN_BASE = re.compile(rb"(?!__)([^\0\n/.]+)\.([^\0\n/]*)\0")


def _octal(field: bytes) -> int:
    return int(field.split(b"\0", 1)[0].strip() or b"0", 8)


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _byte_sum(block: bytes) -> int:
    """The sum of a 512-byte block's bytes, as ``sum(block)``: adler32's low
    half is 1 + the bytes' sum modulo 65521, exact for 256 bytes (at most
    65,280), in C (``sum`` was a quarter of a header's parse)."""
    view = memoryview(block)
    return (zlib.adler32(view[:256]) & 0xFFFF) + (zlib.adler32(view[256:]) & 0xFFFF) - 2


def plain_member(block: bytes) -> tarfile.TarInfo | None:
    """A regular member's header in plain ustar form, or None for any other.

    What ``TarInfo.frombuf`` makes of such a header (name with its ustar
    prefix, size, type), in about a fifth of its time: it was half of a
    warm epoch's CPU on 100 KiB samples. Anything else (extensions, links,
    base-256 numbers, a signed checksum, a field tarfile would refuse) is
    None, and goes to tarfile.
    """
    kind = block[156:157]
    if kind not in _REGULAR or len(block) != BLOCK:
        return None
    if (_USUAL_NUMBERS.match(block, 100) is None or _USUAL_DEVICES.match(block, 329) is None) \
            and not all(NUMBER.fullmatch(block, a, b) for a, b in NUMBERS):
        return None
    checksum, size = _octal(block[148:156]), _octal(block[124:136])
    if checksum != 256 + _byte_sum(block) - sum(block[148:156]):
        return None
    name = _text(block[0:100])
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        return None  # a V7 folder
    prefix = _text(block[345:500])
    info = tarfile.TarInfo(f"{prefix}/{name}" if prefix else name)
    info.size, info.type = size, kind
    return info


def plain_fields(block: bytes) -> tuple[bytes, bytes, int] | None:
    """``(key, field, size)`` of a regular member's plain ustar header named
    ``key.field`` as :data:`PLAIN_NAME` reads it (raw bytes: the field not yet
    lowercased), or None for any other header (which then goes the way of
    :class:`Headers`).

    It makes plain_member's checks (every number field in the form tarfile
    reads, the checksum the sum of the header's bytes) without a ``TarInfo``
    or a ``str`` name: read with plain_member, TarInfo and member_key, the
    headers were a fifth of a DataLoader worker's CPU on 100 KiB samples.
    """
    if len(block) != BLOCK or block[156] not in b"0\0" or block[345]:
        return None  # not a regular file, or a name with a ustar prefix
    found = PLAIN_NAME.match(block, 0, 100)
    if found is None:
        return None
    chksum = block[148:156]
    if _WRITTEN_NUMBERS.match(block, 100) is not None and \
            _WRITTEN_DEVICES.match(block, 329) is not None:
        stated, size = int(chksum[:6], 8), int(block[124:135], 8)
    elif _USUAL_FIELDS.match(block, 100) is not None \
            or all(NUMBER.fullmatch(block, a, b) for a, b in NUMBERS):
        stated, size = _octal(chksum), _octal(block[124:136])
    else:
        return None
    if stated != 256 + _byte_sum(block) - sum(chksum):
        return None
    key, field = found.group(1, 2)
    return key, field, size


def checked_fields(block: bytes | memoryview, pos: int = 0) -> tuple[bytes, bytes, int] | None:
    """:func:`plain_fields` of the header at ``pos`` of ``block`` (a header,
    or a region of bytes or a byte view holding it), already checked: one of
    a region whose bytes are those its index's builder read, and checked as
    :func:`plain_fields` and :class:`Headers` check them
    (``ShardIndex.checked``). The same choice of path (None: a header the
    other way reads, a base-256 size among them), without the checks of
    the number fields and the checksum, a third of a sample's decoding.
    The key and field are of ``block``'s type (a view's are views)."""
    if len(block) < pos + BLOCK or block[pos + 156] not in b"0\0" or block[pos + 345] \
            or block[pos + 124] & 0x80:
        return None
    found = _PLAIN_BASE.match(block, pos, pos + 100) or PLAIN_NAME.match(block, pos, pos + 100)
    if found is None:
        return None
    key, field = found.group(1, 2)
    size = bytes(block[pos + 124:pos + 136])
    if size[11] in b"\0 ":
        # As tarfile and GNU tar write it (digits, then a NUL or a space): int
        # reads the digits as they are (a third of _octal's time). The
        # indexer took only forms NUMBER matches, so no sign or underscore.
        try:
            return key, field, int(size[:11], 8)
        except ValueError:
            pass  # a NUL among them: _octal's
    return key, field, _octal(size)


def padded(size: int) -> int:
    """``size`` rounded up to whole blocks (a member's data as the tar holds it)."""
    return -(-size // BLOCK) * BLOCK


def _pax(data: bytes, where: str, at: int) -> dict[str, str]:
    """The records of a PAX extended header (``"len key=value\n"``), as tarfile reads them."""
    out: dict[str, str] = {}
    pos = 0
    while True:
        found = _PAX_NAME.match(data, pos)
        if found is None:
            return out
        length = int(found.group(1))
        if length < 1 or pos + length > len(data):
            raise ShardFormatError(f"{where}: corrupt PAX header at byte {at}")
        value = data[found.end(2) + 1:pos + length - 1]
        out[found.group(2).decode("utf-8", "surrogateescape")] = \
            value.decode("utf-8", "surrogateescape")
        pos += length


def _check_size(size: int, where: str, at: int) -> None:
    # tarfile reads a minus sign (in an octal field, in a PAX size) and a
    # negative base-256 number; a member's data cannot end before it starts
    # (walked, the next header was behind this one).
    if size < 0:
        raise ShardFormatError(f"{where}: corrupt tar header at byte {at} (a size of {size})")


class Headers:
    """The header rules both passes share: one 512-byte header at a time,
    PAX (local and global) and GNU long names applied to the member after
    them, as ``tarfile`` applies them."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.global_pax: dict[str, str] = {}
        self.local: dict[str, str] = {}

    def parse(self, block: bytes, at: int) -> tarfile.TarInfo | None:
        """The header at byte ``at`` (None for an end-of-archive zero block)."""
        if block == _ZERO_BLOCK:
            return None
        plain = plain_member(block)
        if plain is not None:
            return plain
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except tarfile.HeaderError as exc:
            raise ShardFormatError(f"{self.where}: corrupt tar header at byte {at}: "
                                   f"{exc}") from None
        _check_size(info.size, self.where, at)
        return info

    def extension(self, info: tarfile.TarInfo) -> bool:
        """Whether ``info`` is a header for the next member (its data read by :meth:`absorb`)."""
        return info.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME,
                             tarfile.GNUTYPE_LONGLINK, tarfile.SOLARIS_XHDTYPE)

    def absorb(self, info: tarfile.TarInfo, data: bytes, at: int) -> None:
        """Take an extension header's data."""
        if info.type == tarfile.GNUTYPE_LONGNAME:
            self.local["path"] = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        elif info.type == tarfile.XGLTYPE:
            self.global_pax.update(_pax(data, self.where, at))
        elif info.type != tarfile.GNUTYPE_LONGLINK:
            self.local.update(_pax(data, self.where, at))

    def idle(self) -> bool:
        """Whether no extension header waits to apply to the next member."""
        return not self.local and not self.global_pax

    def member(self, info: tarfile.TarInfo, at: int) -> tuple[str, bool, int]:
        """``(name, regular, data bytes)`` of a member header, extensions applied."""
        pax = {**self.global_pax, **self.local}
        self.local = {}
        if info.type == tarfile.GNUTYPE_SPARSE or any(k.startswith("GNU.sparse") for k in pax):
            raise ShardFormatError(f"{self.where}: sparse member at byte {at}: not supported "
                                   "in a shard")
        name = pax.get("path", info.name)
        size = info.size
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError:
                raise ShardFormatError(f"{self.where}: corrupt PAX size at byte {at}") from None
        _check_size(size, self.where, at)
        regular = info.type in tarfile.REGULAR_TYPES
        return name, regular, 0 if info.type in _NO_DATA else size
