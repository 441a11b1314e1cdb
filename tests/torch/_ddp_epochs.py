"""A DDP rank of test_datasets_ddp: EPOCHS epochs of an ObjectIterableDataset
through 2 DataLoader workers, what it got written to ``OUT/<rank>.json``.

Apart from the test module so a rank (started from the tests' forkserver)
and a spawned DataLoader worker (unpickling ``digest``) import torch and
aioflux only, not pytest and the fixtures.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch.distributed as dist
import torch.utils.data

from aioflux import DownloadOptions
from aioflux.torch import DatasetSettings, ObjectIterableDataset, Order

EPOCHS = 2


def digest(data: bytes | bytearray) -> str:
    return hashlib.sha1(data).hexdigest()


def rank_main(rank: int, world: int, init: str, kwargs: dict[str, str], root: str, ctx: str,
              out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        # The rank comes from the process group; workers inherit it with the dataset.
        compose = DownloadOptions(compose_threshold=64 * 1024)
        ds = ObjectIterableDataset.from_prefix(
            f"{root}/d/", order=Order(seed=11), transform=digest, prefetch=16,
            settings=DatasetSettings(**kwargs, download_options=compose))
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                             multiprocessing_context=ctx,
                                             persistent_workers=ctx == "spawn")
        epochs = []
        for epoch in range(EPOCHS):
            ds.set_epoch(epoch)
            epochs.append(list(loader))
        Path(out, f"{rank}.json").write_text(json.dumps(epochs))
        dist.barrier()
    finally:
        dist.destroy_process_group()
