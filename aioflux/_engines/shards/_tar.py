"""WebDataset tar shards: members grouped into samples by key.

Consecutive regular members with one key are one sample (the key and
field rules, and the members skipped: :mod:`._tar_headers`). Headers are
read as Python's ``tarfile`` reads them, so PAX and GNU long names are
read as ``tarfile`` reads them; a sample's region starts at its first
member's first header (the long-name header where there is one), so a
region parses on its own. Indexing: :mod:`._tar_index`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..._core.errors import ShardFormatError
from ._tar_headers import BLOCK, MAX_EXTENSION, Headers, member_key, padded
from ._tar_index import index_tar

__all__ = ["MAX_EXTENSION", "TarFormat", "member_key"]


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

    def sample(self, region: bytes | memoryview, url: str, offset: int) -> dict[str, Any]:
        """Decode one sample's region into ``{"__key__", "__url__", field: bytes...}``.

        Args:
            region: the sample's bytes (checked against the index).
            url: the shard's URL.
            offset: the region's offset in the shard, for messages.

        Returns:
            The sample.

        Raises:
            ShardFormatError: the region does not parse as one sample.
        """
        data = memoryview(region).cast("B")  # each field copied once, from here
        headers = Headers(f"read {url}")
        sample: dict[str, Any] = {"__url__": url}
        pos = 0
        while pos + BLOCK <= len(data):
            info = headers.parse(bytes(data[pos:pos + BLOCK]), offset + pos)
            if info is None:
                break
            size = padded(info.size)
            if headers.extension(info):
                headers.absorb(info, bytes(data[pos + BLOCK:pos + BLOCK + info.size]),
                               offset + pos)
                pos += BLOCK + size
                continue
            name, regular, length = headers.member(info, offset + pos)
            start = pos + BLOCK
            if start + length > len(data):
                raise ShardFormatError(f"read {url}: the member at byte {offset + pos} runs "
                                       "past its sample")
            found = member_key(name) if regular else None
            if found is not None:
                if sample.setdefault("__key__", found[0]) != found[0]:
                    raise ShardFormatError(f"read {url}: the sample at byte {offset} holds "
                                           f"two keys ({sample['__key__']!r}, {found[0]!r})")
                sample[found[1]] = bytes(data[start:start + length])
            pos = start + padded(length)
        if "__key__" not in sample:
            raise ShardFormatError(f"read {url}: no sample at byte {offset}")
        return sample
