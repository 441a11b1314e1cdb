"""WebDataset tar shards: members grouped into samples by key.

Consecutive regular members with one key are one sample (the key and
field rules, and the members skipped: :mod:`._tar_headers`). Headers are
read as Python's ``tarfile`` reads them, so PAX and GNU long names are
read as ``tarfile`` reads them; a sample's region starts at its first
member's first header (the long-name header where there is one), so a
region parses on its own. A plain member (a ustar header of a regular
file named ``key.field``, no extension before it) is read by
``plain_fields``, the others by :class:`~._tar_headers.Headers`; both check
the header's checksum and fields. Indexing: :mod:`._tar_index`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..._core.errors import ShardFormatError
from ._tar_headers import (
    BLOCK,
    MAX_EXTENSION,
    Headers,
    checked_fields,
    member_key,
    padded,
    plain_fields,
)
from ._tar_index import index_tar

__all__ = ["MAX_EXTENSION", "TarFormat", "member_key"]

# A shard's few field names ("jpg", "cls"...), decoded once a process: a
# str made and lowercased is ~0.2 us a member. Bounded: names are data.
_FIELDS: dict[bytes, str] = {}
_MOST_FIELDS = 256


class TarFormat:
    """Samples of WebDataset tar shards (see the module)."""

    name = "tar"

    def index(self, chunks: Iterable[bytes | memoryview], where: str
              ) -> tuple[Any, Any, Any, int]:
        """Index a shard's data as it streams by: headers parsed, data only checksummed.

        Args:
            chunks: the shard's data, in order.
            where: the shard's URL, for messages.

        Returns:
            ``(offsets, lengths, crcs, data_size)``.

        Raises:
            ShardFormatError: not a tar, a member past the end, or a field twice in a sample.
        """
        return index_tar(chunks, f"index {where}")

    def sample(self, region: bytes | memoryview, url: str, offset: int, *,
               checked: bool = False) -> dict[str, Any]:
        """Decode one sample's region into ``{"__key__", "__url__", field: bytes...}``.

        Args:
            region: the sample's bytes (checked against the index).
            url: the shard's URL.
            offset: the region's offset in the shard, for messages.
            checked: its headers were checked when the index was built here
                (``ShardIndex.checked``): plain ones are read, not checked again.

        Returns:
            The sample.

        Raises:
            ShardFormatError: the region does not parse as one sample.
        """
        data = region if type(region) is bytes else memoryview(region).cast("B")
        if checked:
            fast = _checked_sample(data, url)
            if fast is not None:
                return fast
        data = memoryview(data)  # each field copied once, from here
        # Made at the first header the plain path does not take (an extension,
        # a link, a long or odd name): most samples never need it.
        headers: Headers | None = None
        sample: dict[str, Any] = {"__url__": url}
        fields = checked_fields if checked else plain_fields
        pos = 0
        while pos + BLOCK <= len(data):
            block = bytes(data[pos:pos + BLOCK])
            plain = fields(block) if headers is None or headers.idle() else None
            if plain is not None:
                raw_key, raw_field, length = plain
                found: tuple[str, str] | None = (
                    raw_key.decode("utf-8", "surrogateescape"),
                    raw_field.decode("utf-8", "surrogateescape").lower())
                regular = True
            else:
                if headers is None:
                    headers = Headers(f"read {url}")
                info = headers.parse(block, offset + pos)
                if info is None:
                    break
                if headers.extension(info):
                    headers.absorb(info, bytes(data[pos + BLOCK:pos + BLOCK + info.size]),
                                   offset + pos)
                    pos += BLOCK + padded(info.size)
                    continue
                name, regular, length = headers.member(info, offset + pos)
                found = member_key(name) if regular else None
            start = pos + BLOCK
            if start + length > len(data):
                raise ShardFormatError(f"read {url}: the member at byte {offset + pos} runs "
                                       "past its sample")
            if found is not None:
                if sample.setdefault("__key__", found[0]) != found[0]:
                    raise ShardFormatError(f"read {url}: the sample at byte {offset} holds "
                                           f"two keys ({sample['__key__']!r}, {found[0]!r})")
                sample[found[1]] = bytes(data[start:start + length])
            pos = start + padded(length)
        if "__key__" not in sample:
            raise ShardFormatError(f"read {url}: no sample at byte {offset}")
        return sample


def _checked_sample(data: bytes | memoryview, url: str) -> dict[str, Any] | None:
    """The sample of a checked region (``ShardIndex.checked``) whose members
    are all plain (see :func:`checked_fields`), read in place: no header
    copied, one key decoded. None for any other region (an extension, a
    link, two keys, a member past the end), which the general reading
    then reads, or refuses with its error."""
    sample: dict[str, Any] = {"__url__": url}
    end = len(data)
    key: bytes | None = None
    pos = 0
    while pos + BLOCK <= end:
        plain = checked_fields(data, pos)
        if plain is None:
            return None
        raw_key, raw_field, length = plain
        start = pos + BLOCK
        if start + length > end:
            return None
        if raw_key != key:
            if key is not None:
                return None
            key = raw_key
            sample["__key__"] = str(raw_key, "utf-8", "surrogateescape")
        field = _FIELDS.get(raw_field) if type(raw_field) is bytes else None
        if field is None:
            field = _field(raw_field)
        sample[field] = bytes(data[start:start + length])
        pos = start + padded(length)
    return None if key is None else sample


def _field(raw: bytes | memoryview) -> str:
    """A member's field (its name's extension) as a sample's key, lowercased."""
    field = str(raw, "utf-8", "surrogateescape").lower()
    if type(raw) is bytes and len(_FIELDS) < _MOST_FIELDS:
        _FIELDS[raw] = field
    return field
