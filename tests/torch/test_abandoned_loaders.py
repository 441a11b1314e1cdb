"""The suite's own guard: a DataLoader iterator a test abandons is shut down
when the test ends, its workers told to stop (not left to the collector,
which makes torch wait 5 s a worker; tests/_abandoned_loaders.py)."""

from __future__ import annotations

from collections.abc import Iterator

import torch.utils.data

from tests import _abandoned_loaders


class _Refuses(torch.utils.data.IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        yield 1
        raise ValueError("refused")


def test_an_iterator_abandoned_after_a_worker_error_is_shut_down() -> None:
    loader = torch.utils.data.DataLoader(_Refuses(), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork")
    iterator = iter(loader)
    try:
        list(iterator)
    except ValueError as error:
        cycle = error  # the frames and the iterator, held as a failed test holds them
    workers = list(iterator._workers)
    assert all(w.is_alive() for w in workers)
    _abandoned_loaders.shut_down_the_abandoned()
    assert iterator._shutdown
    # Told to stop, each worker left by itself: the join did not time out
    # into a terminate (a terminated worker's exit code is -SIGTERM).
    assert [w.exitcode for w in workers] == [0, 0]
    del cycle
