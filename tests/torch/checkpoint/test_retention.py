"""Retention planning: which step directories a pass may delete."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aioflux.torch.checkpoint._retention import steps_to_delete


def test_keeps_last_complete_and_busy_and_newer() -> None:
    steps = [1, 2, 3, 4, 5, 6]
    complete = [1, 3, 5]
    # 2: a killed save's leftover; 4: still saving; 6: above the step just saved.
    assert steps_to_delete(steps, complete, keep_last=1, busy={4}, newest=5) == [1, 2, 3]
    assert steps_to_delete(steps, complete, keep_last=None, busy=(), newest=5) == [2, 4]


@given(
    steps=st.sets(st.integers(0, 50), max_size=20),
    data=st.data(),
    keep_last=st.one_of(st.none(), st.integers(1, 5)),
)
def test_never_deletes_what_must_survive(steps: set[int], data: st.DataObject,
                                         keep_last: int | None) -> None:
    complete = sorted(data.draw(st.sets(st.sampled_from(sorted(steps))) if steps
                                else st.just(set[int]())))
    busy = data.draw(st.sets(st.integers(0, 50), max_size=5))
    newest = data.draw(st.integers(0, 50))
    doomed = steps_to_delete(steps, complete, keep_last, busy, newest)
    kept = complete if keep_last is None else complete[-keep_last:]
    assert set(doomed) <= steps
    assert not set(doomed) & (set(kept) | busy)
    assert all(s < newest for s in doomed)
    assert doomed == sorted(doomed)
