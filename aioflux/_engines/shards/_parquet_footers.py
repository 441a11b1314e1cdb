"""Every Parquet file's footer beside the manifest, in one object.

``_aioflux_parquet_footers.bin`` sits beside a folder's manifest: with it a
job learns every file's row groups and column chunk ranges from one GET,
instead of a ranged GET of each file's end. Its form: a magic line, then
per file a JSON line (its name relative to the folder, size, crc32c,
version and footer length) followed by the footer's bytes as the file ends
(metadata, length, ``PAR1``), and the crc32c of everything before it.

A footer is taken only for the file it was read from: the same size, and
the same crc32c where the entry and the store both know one, else the same
version (as a manifest's entry of a tar shard is matched): a footer names
byte ranges, and another file's would cut this one's bytes wrong.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence

from ..._core.errors import NotFound, PreconditionFailed, ShardFormatError
from ..._core.integrity.crc import crc32c
from ..._core.records.types import ObjectInfo
from ..._core.storage.protocol import ObjectStore
from ._parquet import MAX_FOOTER

__all__ = ["FOOTERS_NAME", "FooterEntry", "decode_footers", "encode_footers",
           "read_footers", "update_footers"]

FOOTERS_NAME = "_aioflux_parquet_footers.bin"
_MAGIC = b"AIOFLUX-PARQUET-FOOTERS 1\n"
# Writers racing on the object each retry their read-merge-write this often.
_ATTEMPTS = 8


@dataclasses.dataclass(frozen=True)
class FooterEntry:
    """One file's footer.

    Attributes:
        name: the file's name relative to the folder.
        size: its size.
        crc32c: its crc32c (None: unknown).
        version: the store's version token of it (None: unknown).
        footer: its footer's bytes as the file ends.
    """

    name: str
    size: int
    crc32c: int | None
    version: int | None
    footer: bytes

    def matches(self, info: ObjectInfo) -> bool:
        """Whether this footer is of ``info`` as it is now (see the module)."""
        if self.size != info.size:
            return False
        if self.crc32c is not None and info.crc32c is not None:
            return self.crc32c == info.crc32c
        return self.version is not None and self.version == (info.generation or None)


def encode_footers(entries: Iterable[FooterEntry]) -> bytes:
    """The object's bytes, its entries by name."""
    parts = [_MAGIC]
    for e in sorted(entries, key=lambda e: e.name):
        head = {"name": e.name, "size": e.size, "crc32c": e.crc32c, "version": e.version,
                "length": len(e.footer)}
        parts += [json.dumps(head, sort_keys=True).encode("utf-8", "surrogatepass"), b"\n",
                  e.footer]
    body = b"".join(parts)
    return body + crc32c(body).to_bytes(4, "little")


def decode_footers(data: bytes, where: str) -> dict[str, FooterEntry]:
    """Parse what :func:`encode_footers` wrote.

    Raises:
        ShardFormatError: not such an object, or damaged.
    """
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4:
        raise ShardFormatError(f"read {where}: not an aioflux Parquet footers object")
    body = memoryview(data)[:-4]
    if crc32c(body).to_bytes(4, "little") != data[-4:]:
        raise ShardFormatError(f"read {where}: damaged (its crc32c does not match)")
    out: dict[str, FooterEntry] = {}
    at = len(_MAGIC)
    while at < len(body):
        end = data.find(b"\n", at, len(body))
        try:
            if end < 0:
                raise ValueError("no entry line")
            head = json.loads(data[at:end])
            length = int(head["length"])
            if not 0 < length <= MAX_FOOTER or end + 1 + length > len(body):
                raise ValueError(f"a footer of {length} bytes")
            crc, version = head.get("crc32c"), head.get("version")
            entry = FooterEntry(str(head["name"]), int(head["size"]),
                                crc if isinstance(crc, int) else None,
                                version if isinstance(version, int) else None,
                                bytes(data[end + 1:end + 1 + length]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ShardFormatError(f"read {where}: damaged at byte {at} ({exc})") from None
        out[entry.name] = entry
        at = end + 1 + length
    return out


async def read_footers(store: ObjectStore, bucket: str, folder: str,
                       url: str) -> dict[str, FooterEntry] | None:
    """The footers object in ``folder`` (one GET), or None where there is none.

    Raises:
        ShardFormatError: it is damaged.
        StorageError: the read failed.
    """
    try:
        data = await store.read(bucket, folder + FOOTERS_NAME)
    except NotFound:
        return None
    return decode_footers(bytes(data), url)


async def update_footers(store: ObjectStore, bucket: str, folder: str, url: str,
                         entries: Sequence[FooterEntry]) -> None:
    """Add ``entries`` to the footers object in ``folder`` (made if there is
    none); writers racing on it each write over the version they read.

    Raises:
        ShardFormatError: the object there is damaged.
        StorageError: the write failed, or lost the race every time.
    """
    name = folder + FOOTERS_NAME
    for attempt in range(_ATTEMPTS):
        try:
            info = await store.stat(bucket, name)
            data = await store.read(bucket, name, generation=info.generation or None)
            merged, generation = decode_footers(bytes(data), url), info.generation
        except NotFound:
            merged, generation = {}, 0  # 0: the write's precondition is "must not exist"
        merged.update((e.name, e) for e in entries)
        try:
            await store.write(bucket, name, encode_footers(merged.values()),
                              if_generation_match=generation)
            return
        except PreconditionFailed:
            if attempt == _ATTEMPTS - 1:
                raise
