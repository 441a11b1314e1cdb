"""manifest_counts: counting a dataset's shards from its manifest, in us a shard (issue 49).

``python -m perf.manifest_counts [--shards 100000] [--rounds 5] [--store gs|file]``
prints one JSON line of figures, in one process (no server): the shards
are an :class:`~aioflux._core.memory.object_index.ObjectIndex` of listed records, as
``from_prefix`` builds it, and the manifest names every one of them as it
is (no index cache, no sidecar read: the counting a rank does at start-up
when the manifest is right):

- ``parse_us``: the manifest's bytes into its columns (``Table``);
- ``count_us`` / ``count_cpu_us``: ``count_shards`` whole (the manifest's
  one read from a store in memory, its parse, each shard matched), wall
  and CPU time;
- ``held_bytes_a_shard``: the bytes the ``Counts`` hold a shard after it;
- ``peak_bytes_a_shard``: the most it held at once while it ran
  (``tracemalloc``: Python objects and numpy arrays), a shard.

``--store gs`` lists shards as GCS does (a crc32c each, 16-digit
generations); ``file`` as local files (no crc32c: the version is matched).
Each figure is the best of ``--rounds``. Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from typing import Any

from perf.index_speed import best_of

__all__ = ["measure"]


class _ManifestStore:
    """A store of one object, the manifest: all ``count_shards`` reads of it here."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads = 0

    async def read(self, bucket: str, name: str, **_: Any) -> bytes:
        self.reads += 1
        return self.data


def measure(shards: int = 100_000, rounds: int = 5, store: str = "gs") -> dict[str, Any]:
    """Figures of counting ``shards`` shards from their manifest (see the module)."""
    from aioflux._core.memory.object_index import ObjectIndex
    from aioflux._core.records.types import ObjectInfo
    from aioflux._engines.shards import FORMATS
    from aioflux._engines.shards._counts import count_shards
    from aioflux._engines.shards._manifest import (
        MANIFEST_NAME,
        Entry,
        Table,
        encode_manifest,
    )

    folder = "data/train/"
    infos, entries = [], []
    for k in range(shards):
        name, size = f"shard-{k:07d}.tar", 300_000_000 + k * 512
        if store == "gs":
            crc, generation = (k * 2654435761) & 0xFFFFFFFF, 1_700_000_000_000_000 + k
        else:
            crc, generation = None, 1_700_000_000_123_456_789 + k * 1000
        infos.append(ObjectInfo("bucket", folder + name, size, generation, crc, scheme=store))
        entries.append(Entry(name=name, size=size, crc32c=crc, version=generation,
                             format="tar", compression=None, samples=1000 + k % 7,
                             data_size=size))
    listed = ObjectIndex(infos)
    del infos
    data = encode_manifest(entries)
    del entries
    fake = _ManifestStore(data)
    manifests = {folder + MANIFEST_NAME}
    fmt = FORMATS["tar"]
    out: dict[str, Any] = {"shards": shards, "store": store, "rounds": rounds,
                           "manifest_bytes": len(data)}

    def count() -> object:
        found = count_shards(fake, listed, fmt, cache=None, sidecars=True,  # type: ignore[arg-type]
                             manifests=manifests)
        assert not found.missing(), len(found.missing())
        out["held_bytes_a_shard"] = (found.samples.nbytes + found.data.nbytes) / shards
        return found

    parse, _ = best_of(rounds, lambda: Table(data, "m"))
    wall, cpu = best_of(rounds, count)
    # The most memory counting held at once beyond the listing and the
    # manifest's bytes (one more run, traced: slower, so not timed).
    tracemalloc.start()
    count()
    out["peak_bytes_a_shard"] = round(tracemalloc.get_traced_memory()[1] / shards, 1)
    tracemalloc.stop()
    us = 1e6 / shards
    out.update(parse_us=round(parse * us, 3), count_us=round(wall * us, 3),
               count_cpu_us=round(cpu * us, 3), count_s=round(wall, 3))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", choices=("gs", "file"), default="gs")
    args = parser.parse_args()
    print(json.dumps(measure(args.shards, args.rounds, args.store)))


if __name__ == "__main__":
    main()
