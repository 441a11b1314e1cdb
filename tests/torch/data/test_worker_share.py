"""A worker's share of a pass, computed a block at a time, is what the rank's
batches give made whole (RankBatches.flat), and holds no memory a sample."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from aioflux.torch.data._order import epoch_order
from aioflux.torch.data._rank_batches import RankBatches
from aioflux.torch.data._worker_share import SPAN, WorkerShare


@pytest.mark.parametrize("seed", range(12))
def test_the_share_is_the_worker_s_batches_one_after_the_other(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([1, 7, 100, 3 * SPAN + 5])
    world = rng.randint(1, 4)
    global_batch = world * rng.randint(1, 9)
    start = rng.randint(0, count)
    drop_last = rng.random() < 0.3
    order = epoch_order(count, seed, rng.randint(0, 5), shuffle=rng.random() < 0.8)
    batches = RankBatches(order, start, global_batch, rng.randrange(world), world, drop_last)
    workers = rng.randint(1, 3)
    for worker in range(workers):
        mine = batches.of_worker(worker, workers, rng.randint(0, 2))
        share = WorkerShare(batches, mine)
        made = batches.flat(mine)
        assert len(share) == len(made)
        assert list(share) == made
        assert share[:] == made and share[5:SPAN + 9] == made[5:SPAN + 9]
        picks = [rng.randrange(len(made)) for _ in range(20)] if made else []
        assert [share[p] for p in picks] == [made[p] for p in picks]
        # Where each batch ends, and the global batch after it.
        ends, total = [], 0
        for j in mine:
            total += batches.share(j)
            ends.append((total, j + 1))
        assert [share.batch_end(k) for k in range(share.batches())] == ends


def test_a_share_holds_a_few_blocks_whatever_its_samples() -> None:
    # 1e9 samples, one worker of 8 ranks' 4: 31 million positions. Made
    # whole, they took 8 bytes each (250 MB), and 16 more a batch.
    order = epoch_order(10**9, 1, 0, shuffle=True)
    batches = RankBatches(order, 0, 8 * 32, 3, 8)
    tracemalloc.start()
    try:
        share = WorkerShare(batches, batches.of_worker(1, 4))
        for at in range(0, 40 * SPAN, 997):  # reads moving forward
            share[at]
        share[len(share) - 1]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(share) == len(batches.of_worker(1, 4)) * 32  # 31 million
    # The blocks kept (128 KiB each) and the permutation's temporaries of
    # one block: about 2 MiB, whatever the share.
    assert peak < 4 << 20, peak
