"""Which compression an object holds, told by its first bytes, and the check
that the zstd extra is installed, without importing zstandard.

A zstd stream is recognisable: every frame starts with a magic number (RFC
8878, section 3.1.1), and no ``torch.save`` output starts with one (a zip
archive starts ``PK``, the legacy format with pickle's ``0x80``). So a load
needs no flag to find a compressed checkpoint; where it was missing,
``torch.load`` failed on the compressed bytes with an unpickling error that
named no compression. A plain object is loaded without zstandard installed;
a compressed one, or a zstd stream asked for, without it is a typed error
that names the extra.
"""

from __future__ import annotations

from typing import Protocol

from .._core.errors import InvalidArgument

__all__ = ["FRAME_MAGIC", "SKIPPABLE_MAGIC", "ZSTD_EXTRA", "Rewindable", "require_zstd",
           "starts_zstd"]

#: The first 4 bytes of a zstd frame, little-endian (28 B5 2F FD).
FRAME_MAGIC = 0xFD2FB528
#: A skippable frame's magic number, whose low 4 bits are free (pzstd's
#: streams start with one).
SKIPPABLE_MAGIC = 0x184D2A50
#: How to install what zstd (de)compression needs.
ZSTD_EXTRA = "pip install 'aioflux-storage[zstd]'"


class Rewindable(Protocol):
    """What :func:`starts_zstd` needs of a file."""

    def read(self, size: int, /) -> bytes: ...

    def seek(self, offset: int, /) -> int: ...


def starts_zstd(file: Rewindable) -> bool:
    """Whether a seekable file at its start holds a zstd stream.

    Args:
        file: a readable, seekable file at position 0 (an ObjectReader: the
            bytes read are those of its first block, which a load reads next).

    Returns:
        True if its first bytes are a zstd (or skippable) frame's magic
        number; the file is back at position 0.
    """
    head = file.read(4)
    file.seek(0)
    if len(head) < 4:
        return False
    magic = int.from_bytes(head, "little")
    return magic == FRAME_MAGIC or magic & ~0xF == SKIPPABLE_MAGIC


def require_zstd(op: str) -> None:
    """Fail unless zstd (de)compression can run.

    Args:
        op: what needs it, for the message (``"load gs://b/ckpt.pt (zstd-compressed)"``).

    Raises:
        InvalidArgument: the zstandard package is not installed; the message
            names the extra that brings it.
    """
    try:
        import zstandard  # noqa: F401
    except ImportError as exc:
        raise InvalidArgument(f"{op}: zstd needs the zstandard package: {ZSTD_EXTRA}") from exc
