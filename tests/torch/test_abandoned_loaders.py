"""The suite's own guard: a DataLoader iterator a test abandons is shut down
when the test ends, its workers told to stop (not left to the collector,
which makes torch wait 5 s a worker; tests/_abandoned_loaders.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch.utils.data

from tests import _abandoned_loaders


class _Refuses(torch.utils.data.IterableDataset[int]):
    """Worker 0 raises after one sample; worker 1 never runs out.

    Worker 0 may be told to stop before the test looks (the loader asks it
    for more, and a worker whose iterator ended says so and is let go), so
    only worker 1 is sure to be running when the error reaches the test.
    """

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        if info.id == 0:
            yield 1
            raise ValueError("refused")
        yield from itertools.count()


def test_an_iterator_abandoned_after_a_worker_error_is_shut_down() -> None:
    loader = torch.utils.data.DataLoader(_Refuses(), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork")
    iterator = iter(loader)
    try:
        list(iterator)
    except ValueError as error:
        cycle = error  # the frames and the iterator, held as a failed test holds them
    workers = list(iterator._workers)
    assert not iterator._shutdown
    assert workers[1].is_alive()
    _abandoned_loaders.shut_down_the_abandoned()
    assert iterator._shutdown
    # Told to stop, each worker left by itself: the join did not time out
    # into a terminate (a terminated worker's exit code is -SIGTERM).
    assert [w.exitcode for w in workers] == [0, 0]
    del cycle
