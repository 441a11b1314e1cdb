"""An ObjectIterableDataset worker's memory does not grow with its share: it reads
the positions of the epoch order a block at a time (issue 49)."""

from __future__ import annotations

import gc
import os
import tracemalloc
from pathlib import Path

from aioflux._core.memory.object_index import ObjectIndex
from aioflux.torch import ObjectIterableDataset, ObjectMapDataset, Order


def test_a_worker_s_first_sample_costs_no_memory_a_sample_of_its_share(tmp_path: Path) -> None:
    # 64 files on disk, then 200,000 records past them that are never read
    # (one sample is taken, with 4 in flight): the share is 200,064 samples
    # of batch 1. Made whole, the share took 8 bytes a sample and 16 a batch:
    # 4.8 MB here, 24 GB for a worker's 1e9.
    for i in range(64):
        (tmp_path / f"a{i:02d}").write_bytes(b"x" * 10)
    real = list(ObjectMapDataset.from_prefix(f"file://{tmp_path}").objects)
    template = real[-1]
    fake = (template.replace(name=template.name[:-3] + f"b{i:07d}") for i in range(200_000))
    index = ObjectIndex([*real, *fake])
    ds: ObjectIterableDataset[bytes] = ObjectIterableDataset(index,
                                                             order=Order(batch_size=1,
                                                                         shuffle=False), prefetch=4)
    assert len(ds) == 200_064
    gc.collect()
    tracemalloc.start()
    try:
        it = iter(ds)
        first = next(it)
        peak = tracemalloc.get_traced_memory()[1]
        it.close()
    finally:
        tracemalloc.stop()
    assert first == b"x" * 10
    # The blocks of positions (128 KiB each, a few), the permutation's
    # temporaries and the downloader's chunk of records: about 2.3 MB (7.3
    # MB when the share was made whole).
    assert peak < 3 << 20, peak
    assert os.path.exists(tmp_path / "a00")
