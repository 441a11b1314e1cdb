"""Rank body of the shared-indexing test: 2 processes, gloo on CPU, file:// shards.

``python -m tests.torch._index_share_worker RANK WORLD INIT_FILE ROOT OUT``

Each rank makes a ShardDataset over ROOT (lines shards without sidecars)
with ``listing="rank0", publish_indexes=True`` and its own index cache (as
on another machine), and records which shards it streamed to index them,
the counts it holds, and what it then read of its share. A second
dataset over the same folder is made and read the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from aioflux._engines.shards import _build
from aioflux.torch import ShardDataset, ShardReads
from tests.torch._two_ranks import rank_main

STREAMED: list[str] = []
GUARD = 60.0  # seconds: a hang guard for the collectives


def _instrument() -> None:
    real = _build.stream_index

    def counting(store: Any, info: Any, *args: Any) -> Any:
        STREAMED.append(info.name.rsplit("/", 1)[-1])
        return real(store, info, *args)

    _build.stream_index = counting  # type: ignore[assignment]


def _make(rank: int, root: Path, out: Path, name: str) -> dict[str, Any]:
    STREAMED.clear()
    ds = ShardDataset.from_prefix(f"file://{root}", format="lines", decode="json",
                                  reads=ShardReads(listing="rank0", publish_indexes=True,
                                                   index_dir=out / f"idx-{name}-{rank}"))
    made = list(STREAMED)
    STREAMED.clear()
    read = [row["i"] for row in ds]
    return {"streamed": made, "counts": ds.counts, "read": read,
            "streamed_reading": list(STREAMED)}


def scenarios(rank: int, root: Path, out: Path) -> dict[str, Any]:
    return {"first": lambda: _make(rank, root, out, "first"),
            "again": lambda: _make(rank, root, out, "again")}


def main() -> None:
    _instrument()
    rank_main(sys.argv[1:], GUARD, scenarios)


if __name__ == "__main__":
    main()
