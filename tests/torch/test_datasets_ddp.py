"""Exactly once per epoch across 2 DDP ranks (gloo) x 2 DataLoader workers, on gs and file."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.utils.data

from aioflux.torch import IterableDataset
from tests.torch.conftest import Where

EPOCHS = 2


def digest(data: bytes | bytearray) -> str:
    return hashlib.sha1(data).hexdigest()


def _rank_main(rank: int, world: int, init: str, kwargs: dict[str, str], root: str, ctx: str,
               out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        # The rank comes from the process group; workers inherit it with the dataset.
        ds = IterableDataset.from_prefix(f"{root}/d/", **kwargs, seed=11,
                                         transform=digest, prefetch=16,
                                         compose_threshold=64 * 1024)
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


@pytest.mark.timeout(180)
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_every_object_once_per_epoch_across_ranks_and_workers(
        where: Where, tmp_path: Path, ctx: str) -> None:
    expected = []
    for i in range(96):
        body = os.urandom(100 + i * 37)
        where.put(f"d/{i:03d}", body)
        expected.append(digest(body))
    mp.start_processes(_rank_main, args=(2, str(tmp_path / "init"), where.kwargs, where.root,
                                         ctx, str(tmp_path)),
                       nprocs=2, join=True, start_method="spawn")
    ranks = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(2)]
    for epoch in range(EPOCHS):
        got = ranks[0][epoch] + ranks[1][epoch]
        assert sorted(got) == sorted(expected)  # each object once, byte-identical
        assert abs(len(ranks[0][epoch]) - len(ranks[1][epoch])) <= 1
    assert ranks[0][0] != ranks[0][1]  # reshuffled per epoch
    assert where.names() == [f"d/{i:03d}" for i in range(96)]
    if where.emulator is not None:  # no composite left at the bucket root either
        assert where.emulator.store.bucket(where.bucket).names == [
            f"{where.base}d/{i:03d}" for i in range(96)]
