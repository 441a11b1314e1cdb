"""One save at a time through a ``DcpWriter``, one load through a
``DcpReader`` (``_dcp_turns``).

A second ``dcp.async_save`` through a writer whose first save was still
writing moved the first save's metadata into the second's checkpoint and
overwrote the staged copy the first had not written yet: both futures
succeeded and the first checkpoint did not exist. A second ``dcp.load``
through a reader whose first load was reading loaded the second
checkpoint into both states, and both loads succeeded.
"""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner

from aioflux.torch.checkpoint._dcp_turns import LOADER, SAVER, Turns, inside
from aioflux.torch.dcp import DcpReader, DcpWriter

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

WAIT_S = 60  # only a hang reaches it


class Held:
    """Holds its first save (load) inside ``write_data`` (``read_data``),
    before any byte is read, until released, and tells when its second
    save's (load's) ``reset`` is called."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inside, self.release = threading.Event(), threading.Event()
        self.second_reset = threading.Event()
        self.resets = self.passes = 0

    def reset(self, checkpoint_id: Any = None) -> None:
        self.resets += 1
        if self.resets == 2:
            self.second_reset.set()
        super().reset(checkpoint_id)  # type: ignore[misc]  # the writer's (reader's)

    def _hold_the_first(self) -> None:
        self.passes += 1
        if self.passes == 1:
            self.inside.set()
            assert self.release.wait(WAIT_S)


class HeldWriter(Held, DcpWriter):
    def write_data(self, plan: Any, planner: Any) -> Any:
        self._hold_the_first()
        return super().write_data(plan, planner)


class HeldReader(Held, DcpReader):
    def read_data(self, plan: Any, planner: Any) -> Any:
        self._hold_the_first()
        return super().read_data(plan, planner)


def _state(value: float, step: int) -> dict[str, Any]:
    return {"w": torch.full((4096,), value), "b": torch.full((7, 3), -value), "step": step}


def _loaded(where: Path) -> dict[str, Any]:
    target = {"w": torch.zeros(4096), "b": torch.zeros(7, 3), "step": 0}
    dcp.load(target, storage_reader=DcpReader(where))
    return target


def _same(got: dict[str, Any], want: dict[str, Any]) -> bool:
    return got["step"] == want["step"] and all(torch.equal(got[k], want[k]) for k in ("w", "b"))


@pytest.mark.parametrize("kept", [True, False])
def test_a_second_async_save_through_a_busy_writer_waits_for_the_first(tmp_path: Path,
                                                                     kept: bool) -> None:
    writer = HeldWriter(tmp_path / "one", cache_staged_state_dict=kept)
    one, two = _state(1.0, 1), _state(2.0, 2)
    first = dcp.async_save(one, storage_writer=writer, checkpoint_id=tmp_path / "one")
    assert writer.inside.wait(WAIT_S)  # the first save is writing, nothing read yet
    second = dcp.async_save(two, storage_writer=writer, checkpoint_id=tmp_path / "two")
    # The second save's first step has been called while the first still writes.
    assert writer.second_reset.wait(WAIT_S)
    writer.release.set()
    first.result(WAIT_S)
    second.result(WAIT_S)
    assert _same(_loaded(tmp_path / "one"), one)
    assert _same(_loaded(tmp_path / "two"), two)


def test_the_kept_copy_is_lent_to_one_save_and_reused_once_it_has_been_read(
        tmp_path: Path) -> None:
    writer = HeldWriter(tmp_path / "one", cache_staged_state_dict=True)
    one, two, three = _state(1.0, 1), _state(2.0, 2), _state(3.0, 3)
    first = dcp.async_save(one, storage_writer=writer, checkpoint_id=tmp_path / "one")
    assert writer.inside.wait(WAIT_S)
    kept = writer.state_dict_cache
    assert kept is not None
    pointer = kept["w"].data_ptr()
    second = dcp.async_save(two, storage_writer=writer, checkpoint_id=tmp_path / "two")
    # Staged apart: the kept copy still holds the first save's bytes.
    assert torch.equal(kept["w"], one["w"])
    writer.release.set()
    first.result(WAIT_S)
    second.result(WAIT_S)
    dcp.async_save(three, storage_writer=writer, checkpoint_id=tmp_path / "three").result(WAIT_S)
    assert writer.state_dict_cache is kept and kept["w"].data_ptr() == pointer
    assert torch.equal(kept["w"], three["w"])  # the third save staged into it again
    for name, state in (("one", one), ("two", two), ("three", three)):
        assert _same(_loaded(tmp_path / name), state)


class FailingPlanner(DefaultSavePlanner):
    """Fails between the writer's steps, where the writer does not see it."""

    def create_local_plan(self) -> Any:
        raise RuntimeError("planner failed")


@pytest.mark.parametrize("how", ["async", "sync"])
def test_a_save_that_failed_where_the_writer_cannot_see_leaves_it_free(tmp_path: Path,
                                                                       how: str) -> None:
    writer = DcpWriter(tmp_path / "bad", cache_staged_state_dict=True)
    bad = tmp_path / "bad"
    with pytest.raises(CheckpointException, match="planner failed"):
        if how == "async":
            dcp.async_save(_state(1.0, 1), storage_writer=writer, checkpoint_id=bad,
                           planner=FailingPlanner()).result(WAIT_S)
        else:
            dcp.save(_state(1.0, 1), storage_writer=writer, checkpoint_id=bad,
                     planner=FailingPlanner())
    # The failed save's turn: its thread ended (async), or this thread's own.
    good = _state(2.0, 2)
    dcp.async_save(good, storage_writer=writer, checkpoint_id=tmp_path / "good").result(WAIT_S)
    dcp.save(good, storage_writer=writer, checkpoint_id=tmp_path / "again")
    assert _same(_loaded(tmp_path / "good"), good)
    assert _same(_loaded(tmp_path / "again"), good)


def test_a_failed_write_gives_the_writer_and_its_kept_copy_back(tmp_path: Path) -> None:
    (tmp_path / "taken").write_bytes(b"a file where the checkpoint's folder would be")
    writer = DcpWriter(tmp_path / "taken", cache_staged_state_dict=True)
    with pytest.raises(CheckpointException, match="Not a directory"):
        dcp.async_save(_state(1.0, 1), storage_writer=writer,
                       checkpoint_id=tmp_path / "taken").result(WAIT_S)
    assert writer._lent is None
    kept = writer.state_dict_cache
    good = _state(2.0, 2)
    dcp.async_save(good, storage_writer=writer, checkpoint_id=tmp_path / "good").result(WAIT_S)
    assert writer.state_dict_cache is kept
    assert _same(_loaded(tmp_path / "good"), good)


def test_a_pickled_writer_saves_on_its_own_turns(tmp_path: Path) -> None:
    writer = DcpWriter(tmp_path / "a", cache_staged_state_dict=True)
    writer._turns.take()  # held here: a copy in another process does not share it
    copy = pickle.loads(pickle.dumps(writer))
    state = _state(5.0, 5)
    dcp.save(state, storage_writer=copy, checkpoint_id=tmp_path / "a")
    assert _same(_loaded(tmp_path / "a"), state)
    writer._turns.give_back()


def test_a_turn_held_outside_dcp_s_save_is_taken_over_not_waited_for() -> None:
    # Waiting for a turn held inside a save: the async tests above.
    turns = Turns(SAVER)
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:  # the writer's steps called by hand, not by a save
        turns.take()
        holding.set()
        assert done.wait(WAIT_S)

    alive = threading.Thread(target=hold)
    alive.start()
    assert holding.wait(WAIT_S)
    assert not inside(alive, SAVER)
    turns.take()
    done.set()
    alive.join(WAIT_S)
    # A holder whose thread ended without giving the turn back.
    ended = threading.Thread(target=turns.take)
    ended.start()
    ended.join(WAIT_S)
    assert not inside(ended, SAVER)
    turns.take()
    turns.give_back()


def test_a_thread_inside_dcp_s_save_is_seen_there(tmp_path: Path) -> None:
    writer = HeldWriter(tmp_path / "one")
    save = dcp.async_save(_state(1.0, 1), storage_writer=writer, checkpoint_id=tmp_path / "one")
    assert writer.inside.wait(WAIT_S)
    savers = [t for t in threading.enumerate() if inside(t, SAVER)]
    assert len(savers) == 1 and savers[0] is not threading.current_thread()
    writer.release.set()
    save.result(WAIT_S)


def _empty() -> dict[str, Any]:
    return {"w": torch.zeros(4096), "b": torch.zeros(7, 3), "step": 0}


@pytest.mark.parametrize("writer", ["aioflux", "torch"])
def test_a_second_load_through_a_busy_reader_waits_for_the_first(tmp_path: Path,
                                                                 writer: str) -> None:
    # Both states held the second checkpoint's tensors, and neither load
    # failed: the items' crc32c (aioflux's writer) were the second's too.
    states = {"one": _state(1.0, 1), "two": _state(2.0, 2)}
    for name, state in states.items():
        storage = DcpWriter(tmp_path / name) if writer == "aioflux" else \
            dcp.FileSystemWriter(tmp_path / name)
        dcp.save(state, storage_writer=storage, checkpoint_id=tmp_path / name)
    reader = HeldReader(tmp_path / "one")
    got = {name: _empty() for name in states}
    failed: list[BaseException] = []

    def load(name: str) -> None:
        try:
            dcp.load(got[name], storage_reader=reader, checkpoint_id=tmp_path / name)
        except BaseException as exc:  # reported below
            failed.append(exc)

    first = threading.Thread(target=load, args=("one",))
    first.start()
    assert reader.inside.wait(WAIT_S)  # the first load is reading, nothing read yet
    second = threading.Thread(target=load, args=("two",))
    second.start()
    assert reader.second_reset.wait(WAIT_S)  # the second load's first step
    reader.release.set()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert failed == []
    assert _same(got["one"], states["one"]) and _same(got["two"], states["two"])


class FailingLoadPlanner(DefaultLoadPlanner):
    """Fails between the reader's steps, where the reader does not see it."""

    def create_local_plan(self) -> Any:
        raise RuntimeError("planner failed")


def test_a_load_that_failed_where_the_reader_cannot_see_leaves_it_free(tmp_path: Path) -> None:
    state = _state(3.0, 3)
    dcp.save(state, storage_writer=DcpWriter(tmp_path / "a"), checkpoint_id=tmp_path / "a")
    reader = DcpReader(tmp_path / "a")
    with pytest.raises(CheckpointException, match="planner failed"):
        dcp.load(_empty(), storage_reader=reader, checkpoint_id=tmp_path / "a",
                 planner=FailingLoadPlanner())
    # This thread holds the turn outside any load: another thread takes it over.
    got = _empty()
    other = threading.Thread(target=lambda: dcp.load(got, storage_reader=reader,
                                                     checkpoint_id=tmp_path / "a"))
    other.start()
    other.join(WAIT_S)
    assert not other.is_alive() and _same(got, state)
    assert reader._turns._holder is None  # the load that read gave it back
    clone = pickle.loads(pickle.dumps(reader))  # a copy loads on its own turns
    again = _empty()
    dcp.load(again, storage_reader=clone, checkpoint_id=tmp_path / "a")
    assert _same(again, state)


def test_a_thread_inside_dcp_s_load_is_seen_there(tmp_path: Path) -> None:
    dcp.save(_state(1.0, 1), storage_writer=DcpWriter(tmp_path / "one"),
             checkpoint_id=tmp_path / "one")
    reader = HeldReader(tmp_path / "one")
    load = threading.Thread(target=lambda: dcp.load(_empty(), storage_reader=reader,
                                                    checkpoint_id=tmp_path / "one"))
    load.start()
    assert reader.inside.wait(WAIT_S)
    loaders = [t for t in threading.enumerate() if inside(t, LOADER)]
    assert loaders == [load] and not inside(load, SAVER)
    reader.release.set()
    load.join(WAIT_S)
    assert not inside(load, LOADER)


def test_a_save_refused_before_its_write_gives_the_kept_copy_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A save into an existing checkpoint without overwrite fails in
    # prepare_local_plan, before write_data: the kept copy stayed lent to it
    # for good, and every later save staged a fresh copy beside it.
    import aioflux.torch.dcp as dcp_module

    fresh: list[int] = []
    made = dcp_module.fresh_copy
    monkeypatch.setattr(dcp_module, "fresh_copy", lambda sd: fresh.append(1) or made(sd))
    writer = DcpWriter(tmp_path / "c", cache_staged_state_dict=True, overwrite=False)
    state = _state(1.0, 1)
    dcp.async_save(state, storage_writer=writer, checkpoint_id=tmp_path / "one").result(WAIT_S)
    kept = writer.state_dict_cache
    failed = dcp.async_save(state, storage_writer=writer, checkpoint_id=tmp_path / "one")
    with pytest.raises(CheckpointException):
        failed.result(WAIT_S)
    assert writer._lent is None
    for n in (2, 3):
        good = _state(float(n), n)
        dcp.async_save(good, storage_writer=writer, checkpoint_id=tmp_path / f"s{n}").result(WAIT_S)
        assert _same(_loaded(tmp_path / f"s{n}"), good)
    assert fresh == [] and writer.state_dict_cache is kept
