"""The crc32c of a DCP checkpoint's items: recorded as the writer writes
them, kept beside the metadata, and held against what a load reads.

DCP's metadata names each item's data file, offset and length, not its
checksum, and the items are written without torch's zip CRC32
(``_zip_crc``). So the writer records each item's crc32c as it writes it
(``.metadata.crc32c``, or ``__<rank>.metadata.crc32c`` beside a rank's own
metadata when ranks save without collectives), and a load checks each
item's bytes against it; a load of some items of a file (the model without
the optimizer) is checked too. Where a load's ranges cover a whole data
file, their crc32c combine and must equal the file's (for checkpoints
without the items' crc32c: torch's writer, older aioflux).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.storage import WriteResult

from ..._core.errors import ChecksumMismatch
from ..._core.integrity.crc import crc32c_combine, decode_crc32c, encode_crc32c
from ..._core.records.types import ObjectInfo
from ..._core.storage.protocol import ObjectStore
from ..._engines.reader import ObjectReader
from ..._engines.writer import ObjectWriter

__all__ = ["ITEM_CRCS", "CheckedStorageInfo", "RecordingWriter", "Segments", "check_tiled_files",
           "check_whole_file", "decode_item_crcs", "encode_item_crcs", "item_mismatch",
           "metadata_name", "split_item_crcs", "truncated"]

# Read size when a data file is checked whole after torch failed on it.
_CHECK_CHUNK = 8 * 1024 * 1024
# Beside a checkpoint's metadata (".metadata.crc32c"), written just before
# it: the crc32c of every item's bytes, which DCP's metadata does not hold.
# A load of some items of a file (the model without the optimizer) checks
# them against it; without it only loads that read whole files are checked.
# It names the save it belongs to (the save_id DCP puts in the metadata's
# storage_meta): another writer re-saving into the directory (torch's
# FileSystemWriter(overwrite=True)) replaces the metadata and data files but
# leaves ours, whose crc32c then are of bytes no longer there.
ITEM_CRCS = ".crc32c"
# DCP's name for a checkpoint's metadata (``__<rank>.metadata`` per rank
# when ranks save without collectives).
_METADATA = ".metadata"


def metadata_name(rank: int | None, use_collectives: bool) -> str:
    """The name of the metadata a writer writes, or a reader reads: the
    checkpoint's, or a rank's own when ranks save without collectives
    (where DCP's loader falls back on it, the items' crc32c beside it)."""
    return f"__{rank}{_METADATA}" if not use_collectives and rank is not None else _METADATA


class Segments:
    """The crc32c of a data file's bytes between the positions DCP asked
    for: each item starts and ends at a ``tell()`` (``_write_item``), so an
    item's crc32c combines from these without a second pass over it."""

    def __init__(self) -> None:
        self._marks: dict[int, tuple[int, int]] = {}  # segment end -> (start, crc32c)
        self._start = 0
        self._crc = 0

    def add(self, crc: int, length: int) -> None:
        """The next ``length`` bytes of the file have crc32c ``crc``."""
        self._crc = crc32c_combine(self._crc, crc, length)

    def mark(self, at: int) -> None:
        if at != self._start:
            self._marks[at] = (self._start, self._crc)
            self._start, self._crc = at, 0

    def item_crc32c(self, offset: int, length: int) -> int | None:
        """The crc32c of bytes ``offset`` to ``offset + length``, or None
        when they do not start and end at positions DCP asked for."""
        end, pieces = offset + length, []
        while end > offset:
            segment = self._marks.get(end)
            if segment is None:
                return None
            pieces.append((segment[1], end - segment[0]))
            end = segment[0]
        if end != offset:
            return None
        combined = 0  # the crc32c of no bytes
        for crc, size in reversed(pieces):
            combined = crc32c_combine(combined, crc, size)
        return combined


class RecordingWriter(ObjectWriter):
    """An ObjectWriter that keeps :class:`Segments` of what DCP writes,
    from the checksums the writer computes of its part buffers anyway
    (each byte is checksummed once, in place: see ``_checksum_filled``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.segments = Segments()

    def _checksummed(self, crc: int, length: int) -> None:
        self.segments.add(crc, length)

    def tell(self) -> int:
        with self._lock:
            self._checksum_filled()  # the bytes up to here end a segment
            at = super().tell()
            self.segments.mark(at)
            return at

    def _close(self) -> None:
        if not self._done:
            self.tell()  # the last segment
        super()._close()


@dataclass
class CheckedStorageInfo(_StorageInfo):
    """DCP's per-item storage info, with the item's crc32c: what a rank's
    write results carry to the coordinator, whose ``finish`` moves the
    crc32c into the ``.crc32c`` file and writes plain ``_StorageInfo`` into
    ``.metadata`` (which torch's own reader then still loads)."""

    crc32c: int | None = None


def split_item_crcs(results: list[list[WriteResult]]
                    ) -> tuple[dict[str, dict[str, str]], list[list[WriteResult]]]:
    """The items' crc32c out of every rank's write results.

    Returns:
        The crc32c by data file and ``"offset:length"``, and the results
        with plain storage infos (for ``.metadata``).
    """
    crcs: dict[str, dict[str, str]] = {}
    plain: list[list[WriteResult]] = []
    for rank_results in results:
        plain.append([])
        for result in rank_results:
            info = result.storage_data
            if isinstance(info, CheckedStorageInfo):
                if info.crc32c is not None:
                    crcs.setdefault(info.relative_path, {})[
                        f"{info.offset}:{info.length}"] = encode_crc32c(info.crc32c)
                info = _StorageInfo(info.relative_path, info.offset, info.length,
                                    info.transform_descriptors)
            plain[-1].append(WriteResult(result.index, result.size_in_bytes, info))
    return crcs, plain


def encode_item_crcs(save_id: str | None, crcs: dict[str, dict[str, str]]) -> bytes:
    """The ``.crc32c`` file of a save (``save_id``) and its items' crc32c."""
    return json.dumps({"format": 2, "save_id": save_id, "items": crcs}).encode()


def decode_item_crcs(raw: bytes, *, url: str, bucket: str, name: str, save_id: str | None,
                     saved: set[tuple[str, int, int]]) -> dict[tuple[str, int, int], int]:
    """The items' crc32c a ``.crc32c`` file records, if they are of the
    save being loaded.

    Args:
        raw: the file's bytes.
        url: the file's URL (for messages).
        bucket: its bucket.
        name: its object name.
        save_id: the save the metadata being loaded is of.
        saved: ``(relative path, offset, length)`` of each item that
            metadata lists.

    Returns:
        ``(relative path, offset, length) -> crc32c``; empty for another
        save's file.

    Raises:
        ChecksumMismatch: the file is not one a ``DcpWriter`` writes.
    """
    try:
        doc = json.loads(raw)
        items = doc["items"]
        crcs = {(path, int(offset), int(length)): decode_crc32c(crc)
                for path, ranges in items.items()
                for key, crc in ranges.items()
                for offset, length in [key.split(":")]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ChecksumMismatch(f"dcp.load {url} failed: not the items' crc32c a "
                               f"DcpWriter writes ({type(exc).__name__})",
                               operation="read", bucket=bucket, name=name) from exc
    if doc.get("save_id") is not None:
        # Another save's (see ITEM_CRCS): its crc32c are of bytes a
        # later writer replaced, and would fail a valid checkpoint.
        return crcs if doc["save_id"] == save_id else {}
    # Written before the tie (format 1, older aioflux): it cannot say
    # which save it is of. Used only if every item it lists is one of
    # the metadata's (offset and length alike), as a stale one of
    # another layout is not; one of the same layout is used as before
    # (the price of still checking every checkpoint older aioflux
    # wrote, and the only case a later writer's save can trip over).
    return crcs if crcs.keys() <= saved else {}


def item_mismatch(info: ObjectInfo, offset: int, length: int, got: int,
                  expected: int) -> ChecksumMismatch:
    """The error of an item whose bytes have another crc32c than the one saved."""
    return ChecksumMismatch(
        f"dcp.load {info.url} failed: bytes {offset}-{offset + length} have crc32c "
        f"{encode_crc32c(got)}, the item was saved with {encode_crc32c(expected)}",
        operation="read", bucket=info.bucket, name=info.name)


def truncated(info: ObjectInfo, needed: int, have: int) -> ChecksumMismatch:
    """The error of a data file that ends before an item the metadata lists."""
    return ChecksumMismatch(
        f"dcp.load {info.url} failed: the "
        f"checkpoint's metadata needs its bytes up to {needed}, it ends at {have} "
        "(truncated)", operation="read", bucket=info.bucket, name=info.name)


def check_whole_file(store: ObjectStore, bucket: str, name: str, *,
                     info: ObjectInfo | None = None) -> None:
    """Read a data file through, its crc32c checked.

    Args:
        store: the file's store.
        bucket: its bucket.
        name: its object name.
        info: the version to read (a load's: the one its items were read
            at); None: the current one.

    Raises:
        ChecksumMismatch: its bytes are not the ones the store recorded.
        NotFound: the file (or ``info``'s version of it) is gone.
        StorageError: the read failed.
    """
    with ObjectReader(store, bucket, name, info=info) as reader:  # bounded read-ahead
        while reader.read(_CHECK_CHUNK):
            pass  # its last read raises ChecksumMismatch if the crc32c differs


def check_tiled_files(ranges: dict[str, tuple[ObjectInfo, dict[tuple[int, int], int]]]) -> None:
    """The crc32c of each data file whose ranges this load read tile it
    whole, against the file's: ranged reads carry no checksum of their
    own, while the store states each object's (``ChecksumMismatch`` if
    the bytes DCP loaded differ; a file replaced between ranges fails
    their reads, pinned to one version: ``_dcp_pins``).

    Args:
        ranges: by data file URL, its metadata and the crc32c of each
            ``(offset, length)`` read.
    """
    for url, (info, read) in ranges.items():
        if info.crc32c is None:
            continue  # nothing to check against
        at, combined = 0, 0
        for (offset, length), crc in sorted(read.items()):
            if offset != at:
                break  # a partial load (resharding): its ranges leave gaps
            combined = crc32c_combine(combined, crc, length) if at else crc
            at += length
        else:
            if at == info.size and combined != info.crc32c:
                raise ChecksumMismatch(
                    f"dcp.load {url} failed: the {len(read)} ranges read have crc32c "
                    f"{encode_crc32c(combined)}, the file's is "
                    f"{encode_crc32c(info.crc32c)}", operation="read",
                    bucket=info.bucket, name=info.name)
