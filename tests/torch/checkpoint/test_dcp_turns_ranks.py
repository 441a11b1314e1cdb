"""One save at a time through a ``DcpWriter``, one load through a
``DcpReader``, on two gloo ranks (``_dcp_turns``).

The writer gave its turn back in ``write_data`` (``finish`` on rank 0),
before DCP's gather of the write results: a second ``dcp.async_save``
waiting on that rank started its own collectives among the first's, both
saves hung until the process group timed out, and neither checkpoint was
written. A reader gave its turn back at the end of ``read_data``, before
``dcp.load``'s last collective, and a second load from another thread
failed both with gloo errors.
"""

from __future__ import annotations

import datetime
import functools
import multiprocessing
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from aioflux.torch.dcp import DcpReader, DcpWriter

pytestmark = [
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built"),
    pytest.mark.timeout(600),
]

WORLD = 2
WAIT_S = 240  # only a hang reaches it (a collective's timeout: half of it)


def _state(rank: int, step: int) -> dict[str, Any]:
    numbers = torch.Generator().manual_seed(100 * rank + step)
    return {f"w{rank}": torch.randn(64, 256, generator=numbers),
            f"b{rank}": torch.randn(7, 3, generator=numbers), "step": step}


def _empty(rank: int) -> dict[str, Any]:
    return {f"w{rank}": torch.zeros(64, 256), f"b{rank}": torch.zeros(7, 3), "step": -1}


def _same(got: dict[str, Any], want: dict[str, Any]) -> bool:
    return got.keys() == want.keys() and all(
        torch.equal(got[k], want[k]) if isinstance(want[k], torch.Tensor) else got[k] == want[k]
        for k in want)


def _rank(work: Callable[[int, Path], None], rank: int, root: str) -> None:
    where = Path(root)
    try:
        dist.init_process_group(
            "gloo", store=dist.FileStore(str(where / "store"), WORLD), rank=rank,
            world_size=WORLD, timeout=datetime.timedelta(seconds=WAIT_S / 2))
        try:
            work(rank, where)
        finally:
            dist.destroy_process_group()
    except BaseException:
        (where / f"failed-{rank}").write_text(traceback.format_exc())
        raise


def _on_ranks(work: Callable[[int, Path], None], root: Path) -> None:
    """Run ``work(rank, root)`` in a process per rank; each must succeed."""
    spawn = multiprocessing.get_context("spawn")
    ranks = [spawn.Process(target=_rank, args=(work, rank, str(root))) for rank in range(WORLD)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(WAIT_S)
    hung = [rank for rank, process in enumerate(ranks) if process.is_alive()]
    for rank in hung:
        ranks[rank].kill()
        ranks[rank].join()
    failed = {rank: (root / f"failed-{rank}").read_text()
              for rank in range(WORLD) if (root / f"failed-{rank}").exists()}
    assert not hung and not failed, (hung, failed)
    assert [process.exitcode for process in ranks] == [0] * WORLD


def _three_async_saves_in_flight(kept: bool, rank: int, root: Path) -> None:
    writer = DcpWriter(root / "unused", cache_staged_state_dict=kept)
    states = [_state(rank, step) for step in range(3)]
    # No future waited for before the next save: the second and third wait
    # for the writer, in the same order on both ranks.
    futures = [dcp.async_save(state, storage_writer=writer, checkpoint_id=root / f"step-{step}")
               for step, state in enumerate(states)]
    for future in futures:
        future.result(WAIT_S)
    dist.barrier()
    for step, state in enumerate(states):
        got = _empty(rank)
        dcp.load(got, storage_reader=DcpReader(root / f"step-{step}"))
        assert _same(got, state), step


@pytest.mark.parametrize("kept", [True, False])
def test_async_saves_in_flight_through_one_writer_on_two_ranks_are_whole(tmp_path: Path,
                                                                         kept: bool) -> None:
    _on_ranks(functools.partial(_three_async_saves_in_flight, kept), tmp_path)
    for step in range(3):
        assert (tmp_path / f"step-{step}" / ".metadata").is_file()


class HeldReader(DcpReader):
    """Holds its first load inside ``read_data`` until released, and tells
    when its second load's ``reset`` is called."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inside, self.release = threading.Event(), threading.Event()
        self.second_reset = threading.Event()
        self.resets = self.reads = 0

    def reset(self, checkpoint_id: Any = None) -> None:
        self.resets += 1
        if self.resets == 2:
            self.second_reset.set()
        super().reset(checkpoint_id)

    def read_data(self, plan: Any, planner: Any) -> Any:
        self.reads += 1
        if self.reads == 1:
            self.inside.set()
            assert self.release.wait(WAIT_S)
        return super().read_data(plan, planner)


def _loads_through_one_reader(rank: int, root: Path) -> None:
    states = [_state(rank, step) for step in range(2)]
    for step, state in enumerate(states):
        dcp.save(state, storage_writer=DcpWriter(root / f"step-{step}"))
    dist.barrier()
    reader = HeldReader(root / "step-0")
    got = [_empty(rank), _empty(rank)]
    failed: list[BaseException] = []

    def load(step: int) -> None:
        try:
            dcp.load(got[step], storage_reader=reader, checkpoint_id=root / f"step-{step}")
        except BaseException as exc:  # reported below
            failed.append(exc)

    # The second load starts while the first reads, on both ranks alike:
    # the order two threads' loads go in is the same on every rank only
    # where the program makes it so.
    first = threading.Thread(target=load, args=(0,))
    first.start()
    assert reader.inside.wait(WAIT_S)
    second = threading.Thread(target=load, args=(1,))
    second.start()
    assert reader.second_reset.wait(WAIT_S)
    reader.release.set()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert failed == [] and not first.is_alive() and not second.is_alive()
    assert _same(got[0], states[0]) and _same(got[1], states[1])
    # And one after the other, in this thread.
    again = [_empty(rank), _empty(rank)]
    for step in (1, 0):
        dcp.load(again[step], storage_reader=reader, checkpoint_id=root / f"step-{step}")
    assert _same(again[0], states[0]) and _same(again[1], states[1])


def test_loads_through_one_reader_on_two_ranks_wait_for_each_other(tmp_path: Path) -> None:
    _on_ranks(_loads_through_one_reader, tmp_path)
