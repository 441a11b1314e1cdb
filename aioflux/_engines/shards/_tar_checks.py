"""The checks of plain tar headers, made in numpy a batch at a time.

The indexer's fast path (:mod:`._tar_index`) walks plain members without
reading their headers as tarfile would; these make the checks tarfile
makes of such a header, for all the headers of a buffer at once: every
number field in the form tarfile reads (``plain_member``'s rule), the
checksum the sum of the header's bytes, and a name of the form
``key.field`` that ``member_key`` reads as the fast path does.
"""

from __future__ import annotations

from typing import Any

from ._tar_headers import BLOCK, NUMBER, plain_member

__all__ = ["BATCH", "checked", "first_refused"]

#: Headers checked one at a time (plain_member) below this many in a batch:
#: numpy's fixed cost (~30 calls) is then more than the per-header one.
BATCH = 16

# The number fields (mode, uid, gid, size, mtime, chksum, devmajor,
# devminor) side by side: where each is in a header, and in the row of them.
_FIELDS = ((100, 8), (108, 8), (116, 8), (124, 12), (136, 12), (148, 8), (329, 8), (337, 8))
_COLUMNS = [c for offset, width in _FIELDS for c in range(offset, offset + width)]
_CHKSUM = slice(48, 56)
# Forms of number fields one batch sorts its headers by (a writer uses one
# or two); headers of the forms past these go to the other path.
_FORMS = 4


def checked(buf: bytes, walked: list[int]) -> tuple[int, tuple[Any, Any, Any]]:
    """How many of the headers at ``walked`` (16 or more) the fast path takes
    (up to the first that plain_member refuses or whose name is not
    ``key.field`` as _NAME reads it, an ASCII field), and their names:
    ``(bytes, first "." after the last "/", first NUL)``."""
    import numpy as np

    blocks = _blocks(buf, walked, np)
    refused = _refused(blocks, np)
    # The names, cut after the longest (most are short).
    nul = blocks[:, :100] == 0
    has_nul = nul.any(axis=1)
    nuls = np.where(has_nul, np.argmax(nul, axis=1), 100)
    width = int(nuls.max()) + 1 if len(nuls) else 1
    rows = np.zeros((len(blocks), width + 2), np.uint8)
    rows[:, :min(width, 100)] = blocks[:, :min(width, 100)]
    at = np.arange(width + 2)
    inside = at < nuls[:, None]
    slashes = (rows == 0x2F) & inside
    slash = np.where(slashes.any(axis=1), width + 1 - np.argmax(slashes[:, ::-1], axis=1), -1)
    dots_after = (rows == 0x2E) & inside & (at > slash[:, None])
    dots = np.argmax(dots_after, axis=1)
    line = np.arange(len(blocks))
    good = has_nul & dots_after.any(axis=1) & (dots > slash + 1)
    good &= ~((rows == 0x0A) & inside).any(axis=1)
    good &= ~((rows >= 0x80) & inside & (at > dots[:, None])).any(axis=1)  # fields: ASCII
    good &= ~((rows[:, 0] == 0x5F) & (rows[:, 1] == 0x5F) & (nuls >= 2))  # "__..." names
    good &= ~((rows[line, slash + 1] == 0x5F) & (rows[line, slash + 2] == 0x5F) &
              (slash + 2 < nuls))  # "__..." basenames
    stops = np.flatnonzero(refused | ~good)
    took = int(stops[0]) if len(stops) else len(walked)
    return took, (rows[:took], dots[:took], nuls[:took])


def _blocks(buf: bytes, walked: list[int], np: Any) -> Any:
    """The 512-byte headers at ``walked`` as rows (headers sit at multiples
    of 512 in the tar: at one remainder in ``buf``)."""
    first = walked[0] % BLOCK
    rows = (len(buf) - first) // BLOCK
    return np.frombuffer(buf, np.uint8, rows * BLOCK, first).reshape(rows, BLOCK)[
        (np.array(walked) - first) // BLOCK]


def first_refused(buf: bytes, walked: list[int]) -> int | None:
    """The first of the headers at ``walked`` that ``plain_member`` would
    refuse (a number field not in its form, or a checksum that is not the
    sum of the header's bytes), or None."""
    if len(walked) < BATCH:
        for i, p in enumerate(walked):
            if plain_member(buf[p:p + BLOCK]) is None:
                return i
        return None
    import numpy as np

    found = np.flatnonzero(_refused(_blocks(buf, walked, np), np))
    return int(found[0]) if len(found) else None


def _refused(blocks: Any, np: Any) -> Any:
    """Per header: whether plain_member would refuse it (see first_refused)."""
    numbers = blocks[:, _COLUMNS]
    # A field's form: its bytes with every octal digit as "0". Whether
    # tarfile reads a field, and where its digits are, depends on its form
    # alone: each form is checked once, by plain_member's own rule.
    digit = (numbers - 0x30) < 8  # uint8: below "0" wraps round
    forms = np.where(digit, np.uint8(0x30), numbers)
    refused = np.zeros(len(blocks), bool)
    stated = np.zeros(len(blocks), np.int64)
    left = np.ones(len(blocks), bool)
    for _ in range(_FORMS):
        form = forms[int(np.argmax(left))]
        alike = left & (forms == form).all(axis=1)
        left &= ~alike
        places = _read(form.tobytes())
        if places is None:
            refused |= alike
        else:
            for column, shift in places:
                stated += (numbers[:, column].astype(np.int64) - 0x30) * alike << shift
        if not left.any():
            break
    else:
        refused |= left
    # tarfile's checksum: the header's bytes summed, its own field as spaces.
    summed = blocks.sum(axis=1, dtype=np.int32) - numbers[:, _CHKSUM].sum(axis=1,
                                                                          dtype=np.int32)
    refused |= stated != summed + 256
    return refused


def _read(form: bytes) -> list[tuple[int, int]] | None:
    """The checksum's digits (column, bit shift) in headers of this form of
    their number fields; None if tarfile would not read them all."""
    at = 0
    for _, width in _FIELDS:
        if not NUMBER.fullmatch(form, at, at + width):
            return None
        at += width
    chksum = form[_CHKSUM].split(b"\0", 1)[0]
    digits = [_CHKSUM.start + i for i, c in enumerate(chksum) if c == 0x30]
    return [(column, 3 * (len(digits) - 1 - k)) for k, column in enumerate(digits)]
