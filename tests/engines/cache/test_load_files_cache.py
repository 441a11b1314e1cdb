"""``load_files(..., cache_dir=)``: a URL carries no version, so each one is
``stat``-ed and its entry keyed by the version found; the bytes stored
under that key must be that version's, on files that other programs wrote
(no crc32c for the cache to check them against)."""

from __future__ import annotations

import os
from pathlib import Path

from aioflux import LocalStore
from aioflux._api.iterables import load_files
from aioflux._core.records.types import ObjectInfo


class _ReplacedAfterStat(LocalStore):
    """A store on which another program replaces the file once, between the
    ``stat`` that learns its version and the read of its bytes: same size,
    other bytes, a later modification time."""

    def __init__(self, path: Path, newer: bytes) -> None:
        super().__init__()
        self._path = path
        self._newer: bytes | None = newer
        self.stats_made = 0

    async def stat(self, bucket: str, name: str) -> ObjectInfo:
        info = await super().stat(bucket, name)
        self.stats_made += 1
        if self._newer is not None:
            self._path.write_bytes(self._newer)  # no crc32c recorded, as by any tool
            st = os.stat(self._path)
            os.utime(self._path, ns=(st.st_atime_ns, info.generation + 1_000_000_000))
            self._newer = None
        return info


def test_a_file_replaced_between_stat_and_read_is_not_cached_as_the_stat_version(
        tmp_path: Path) -> None:
    path = tmp_path / "data" / "sample.bin"
    path.parent.mkdir()
    older, newer = b"A" * 4096, b"B" * 4096  # the same size: the cache's length check passes
    path.write_bytes(older)
    first = os.stat(path).st_mtime_ns
    cache = tmp_path / "cache"
    url = f"file://{path}"

    store = _ReplacedAfterStat(path, newer)
    [(_, got)] = load_files([url], client=store, cache_dir=cache)
    assert got == newer  # what is there when it is read
    assert store.stats_made == 1

    # The older bytes come back with their old modification time (rsync -a,
    # tar x, cp -p): the version the first stat saw. The cache must not
    # hand out the newer bytes as that version's.
    path.write_bytes(older)
    os.utime(path, ns=(first, first))
    [(_, again)] = load_files([url], cache_dir=cache)  # the default file store
    assert again == older
