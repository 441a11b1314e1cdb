"""A DataLoader worker reading Parquet leaves the objects it inherited out of
its garbage collections (``gc.freeze``): a full collection would write to
every one, copying each page of the parent's heap the fork shared. And it
allocates pyarrow's buffers from jemalloc (where pyarrow has it), not from
the mimalloc heaps the fork inherited; the process that made the dataset
keeps its own pool."""

from __future__ import annotations

import gc
import multiprocessing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch.utils.data

from aioflux.torch import ShardDataset, ShardReads


def _with_frozen(row: dict[str, Any]) -> tuple[int, int, str]:
    return row["id"], gc.get_freeze_count(), pa.default_memory_pool().backend_name


def test_a_forked_worker_freezes_what_it_inherited_and_allocates_from_jemalloc(
        tmp_path: Path) -> None:
    path = tmp_path / "part-0.parquet"
    pq.write_table(
        pa.table({"id": pa.array(range(64), pa.int64())}),
        path,
        row_group_size=16,
        write_page_checksum=True,
    )
    ds = ShardDataset(
        path.as_uri(), format="parquet",
        reads=ShardReads(index_dir=tmp_path / "idx"), transform=_with_frozen
    )
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=4,
        num_workers=2,
        collate_fn=list,
        multiprocessing_context=multiprocessing.get_context("fork"),
    )
    # What the workers inherit frozen (the test session freezes what its
    # collection made): a worker that froze nothing holds at most these.
    inherited = gc.get_freeze_count()
    mine = pa.default_memory_pool().backend_name
    rows = [row for batch in loader for row in batch]
    assert sorted(i for i, _, _ in rows) == list(range(64))
    # Every row, the first too, was made after the worker froze its objects
    # and took jemalloc's pool.
    assert all(frozen > inherited for _, frozen, _ in rows)
    wanted = "jemalloc" if "jemalloc" in pa.supported_memory_backends() else mine
    assert {pool for _, _, pool in rows} == {wanted}
    assert pa.default_memory_pool().backend_name == mine
