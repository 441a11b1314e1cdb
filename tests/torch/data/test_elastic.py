"""Elastic determinism: an epoch saved by 4 ranks x 2 workers continues on
2 ranks x 3 workers with nothing repeated or skipped, in the same batches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioflux.torch.data._order import RankBatches, epoch_order
from tests.torch._resume_util import expected, objects_of, parts, run, seed_data
from tests.torch.conftest import Where

GLOBAL = 12  # global batch size: fixed across the resume


@pytest.mark.timeout(180)
# 3 workers on this 2-core machine: torch's advice, not a problem here.
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker:UserWarning")
@pytest.mark.parametrize("kind", ["map", "sampler", "iterable"])
def test_resume_on_fewer_ranks_and_more_workers(where: Where, kind: str) -> None:
    data = seed_data(where, 100)  # 9 global batches, the last one short (4 of 12)
    first = parts(where, kind, 4, 2, GLOBAL // 4, 9)
    owner = first[0][0]
    objects = objects_of(owner)
    want = expected(where, data, objects, 9, 0, GLOBAL)
    before, state = run(first, stop=5)
    assert state is not None and state["samples"] == 5 * GLOBAL
    after, _ = run(parts(where, kind, 2, 3, GLOBAL // 2, 9), state=state)
    assert before + after == want
    assert sorted(s for batch in before + after for s in batch) == sorted(data.values())


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_another_global_batch_size_still_yields_each_sample_once(where: Where,
                                                                 kind: str) -> None:
    # The documented rule keeps the global batch size; breaking it costs the
    # identical batches, not correctness: the position is in samples.
    data = seed_data(where, 30)
    first = parts(where, kind, 2, 0, 2, 4)
    owner = first[0][0]
    objects = objects_of(owner)
    before, state = run(first, stop=3)
    after, _ = run(parts(where, kind, 3, 0, 3, 4), state=state)  # global 9 instead of 4
    flat = [s for batch in expected(where, data, objects, 4, 0, 4) for s in batch]
    assert before == expected(where, data, objects, 4, 0, 4)[:3]
    assert after == [flat[k:k + 9] for k in range(12, 30, 9)]


@given(count=st.integers(0, 200), start_frac=st.floats(0, 1), batch=st.integers(1, 9),
       world=st.integers(1, 6), epoch=st.integers(0, 3), drop_last=st.booleans())
@settings(max_examples=300, deadline=None)
def test_shares_of_any_cut_rebuild_the_rest_of_the_order(count: int, start_frac: float,
                                                         batch: int, world: int, epoch: int,
                                                         drop_last: bool) -> None:
    # The invariant elastic resume rests on: whatever the world size, the
    # ranks' shares of each global batch put together are the rest of the
    # one global order, in order, then the padding that evens the ranks out
    # (the order's first samples, wrapping around), or without the short
    # last global batch under drop_last. Any cut: a state saved at another
    # global batch size resumes anywhere.
    order = list(epoch_order(count, 3, epoch, True))
    assert sorted(order) == list(range(count))
    start = int(start_frac * count)
    global_batch = batch * world
    shares = [list(RankBatches(order, start, global_batch, r, world, drop_last))
              for r in range(world)]
    steps = list(zip(*shares, strict=True))  # as many batches on every rank
    rest = order[start:]
    if drop_last:
        want = rest[:len(rest) - len(rest) % global_batch]
    else:
        want = rest + (order * world)[:-len(rest) % world]
    assert [i for step in steps for share in step for i in share] == want
    for step in steps:  # as many samples on every rank, at every step
        assert len({len(share) for share in step}) == 1
    for share in shares:  # every batch but a rank's last is a full DataLoader batch
        assert all(len(b) == batch for b in share[:-1]) and all(share)
