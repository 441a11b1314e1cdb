"""Rank body of the Parquet rank-0 listing test: 2 processes, gloo on CPU,
Parquet shards on the fake Hub (``HF_ENDPOINT``; the parent runs it).

``python -m tests.backends.hf._rank_parquet_worker RANK WORLD INIT_FILE ROOT OUT``

Each rank sends its own token (``hf_rank{RANK}``), so the Hub's log says
which rank asked for what. Rank 0 lists the folder and reads the footers;
rank 1 gets the listing and the row counts from it. Each then reads its
share of the epoch and records its rows' ids.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

GUARD = 60.0  # seconds: a hang guard, never reached when the program is right
URL = "hf://datasets/org/pq/data/"


def scenarios(rank: int, root: Path, out: Path) -> dict[str, Callable[[], Any]]:
    def rank0_listing() -> dict[str, Any]:
        from aioflux.torch import Order, ShardDataset, ShardReads

        ds = ShardDataset.from_prefix(
            URL,
            format="parquet",
            reads=ShardReads(listing="rank0", index_dir=root / f"idx-{rank}"),
            order=Order(batch_size=4, seed=5),
        )
        made = {"counts": ds.counts, "names": [s.name for s in ds.shards]}
        return {**made, "ids": [row["id"] for row in ds]}

    return {"rank0_listing": rank0_listing}


def main() -> None:
    from tests.torch._two_ranks import rank_main

    os.environ["HF_TOKEN"] = f"hf_rank{sys.argv[1]}"
    rank_main(sys.argv[1:], GUARD, scenarios)


if __name__ == "__main__":
    main()
