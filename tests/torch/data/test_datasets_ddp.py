"""Exactly once per epoch across 2 DDP ranks (gloo) x 2 DataLoader workers, on gs and file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from tests.torch._ddp_epochs import EPOCHS, digest, rank_main
from tests.torch._forkserver import forkserver
from tests.torch.conftest import Where


@pytest.mark.timeout(180)
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_every_object_once_per_epoch_across_ranks_and_workers(
        where: Where, tmp_path: Path, ctx: str) -> None:
    expected = []
    for i in range(96):
        body = os.urandom(100 + i * 37)
        where.put(f"d/{i:03d}", body)
        expected.append(digest(body))
    # The ranks start from the tests' forkserver (torch imported once, not
    # once a rank); ctx is how each rank starts its DataLoader workers.
    forkserver()
    mp.start_processes(rank_main, args=(2, str(tmp_path / "init"), where.kwargs, where.root,
                                        ctx, str(tmp_path)),
                       nprocs=2, join=True, start_method="forkserver")
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
