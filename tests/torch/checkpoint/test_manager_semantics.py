"""CheckpointManager semantics a user relies on: an existing step is not
silently replaced, retention is by step (the order ``latest()`` uses), and
the resume pattern works from a fresh manager. On the emulator and the local
filesystem, with the loaded tensors and the stored objects checked."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pickle
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from aioflux import (
    ChecksumMismatch,
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    WriterOptions,
)
from aioflux.local import LocalStore
from aioflux.torch import CheckpointManager
from tests.torch.conftest import Where

PART = 5 * 1024 * 1024


def _state(step: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(20_000, generator=g), "step": step}


def _step_dirs(where: Where, root: str) -> list[str]:
    return sorted({n.split("/")[1] for n in where.names(root) if "/step-" in n})


def test_saving_an_existing_step_is_a_conflict_unless_overwrite(where: Where) -> None:
    with CheckpointManager(where.url("c"), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        first = mgr.save(_state(1), 5)
        with pytest.raises(Conflict, match="step 5 already has a checkpoint"):
            mgr.save(_state(2), 5)
        future = mgr.save_async(_state(2), 5)
        with pytest.raises(Conflict, match="overwrite=True"):
            future.result(timeout=60)
        # The refused saves wrote nothing: the stored state is the first one.
        assert mgr.latest() == first
        assert torch.equal(mgr.load()["w"], _state(1)["w"])  # type: ignore[arg-type]
        replaced = mgr.save(_state(2), 5, overwrite=True)
        assert replaced.step == 5 and mgr.load()["step"] == 2
        assert [r.ok for r in mgr.history()] == [True, False, False, True]


def test_a_second_save_async_of_the_same_step_is_refused_at_once(where: Where) -> None:
    with CheckpointManager(where.url("a"), client=where.client,
                           writer=WriterOptions(part_size=PART),
                           max_pending=2) as mgr:
        first = mgr.save_async(_state(1), 7)
        with pytest.raises(Conflict, match="already being saved"):
            mgr.save_async(_state(2), 7)
        assert first.result(timeout=60).step == 7
    assert torch.equal(mgr.load()["w"], _state(1)["w"])  # type: ignore[arg-type]


def test_retention_is_by_step_not_by_save_order(where: Where) -> None:
    with CheckpointManager(where.url("r"), keep_last=2, client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        for step in (100, 350, 400):
            mgr.save(_state(step), step)
        assert [c.step for c in mgr.list()] == [350, 400]
        with pytest.raises(Conflict, match="step 400 already"):
            mgr.save(_state(1), 400)
        # Step 10 after 400: outside the two highest steps, so retention would
        # delete it at once; refused before anything is written.
        with pytest.raises(InvalidArgument, match=r"step 10 is below .*350, 400"):
            mgr.save(_state(10), 10)
        assert _step_dirs(where, "r") == ["step-000000000350",
                                                        "step-000000000400"]
        mgr.save(_state(375), 375)  # inside the window: kept, and 350 goes
        assert [c.step for c in mgr.list()] == [375, 400]
        assert mgr.latest().step == 400  # type: ignore[union-attr]
    # Without keep_last nothing is deleted, and latest() is still the highest step.
    with CheckpointManager(where.url("r"), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        mgr.save(_state(10), 10)
        assert [c.step for c in mgr.list()] == [10, 375, 400]
        assert mgr.latest().step == 400  # type: ignore[union-attr]


def test_resume_pattern_from_a_fresh_manager(where: Where) -> None:
    root = where.url("resume")
    with CheckpointManager(root, client=where.client, writer=WriterOptions(part_size=PART)) as mgr:
        assert mgr.latest() is None  # a fresh run starts at step 0
        mgr.save_async(_state(30), 30)
        # close() (the with block) waits for the background save.
    restarted = CheckpointManager(root, client=where.client, writer=WriterOptions(part_size=PART))
    latest = restarted.latest()
    assert latest is not None and latest.step == 30
    state = restarted.load()
    assert state["step"] == 30 and torch.equal(state["w"], _state(30)["w"])  # type: ignore[arg-type]
    restarted.close()


def test_a_copied_root_is_checked_against_its_manifests_crc32c(tmp_path: Path) -> None:
    # A root copied by `cp -r` keeps no crc32c of its own (the copy drops the
    # extended attribute, and its new modification time voids it): a rotten
    # byte loaded in silence, tensors and data position wrong.
    root = tmp_path / "run"
    with CheckpointManager(root) as mgr:
        mgr.save(_state(1), 1, data_state={"epoch": 3, "order": list(range(4096))})
    copied = tmp_path / "copy"
    shutil.copytree(root, copied, copy_function=shutil.copyfile)  # no xattrs, new mtimes
    with CheckpointManager(copied) as mgr:
        # A good copy still loads: the manifest's crc32c matches its bytes.
        assert torch.equal(mgr.load()["w"], _state(1)["w"])  # type: ignore[arg-type]
        assert mgr.load_data_state() == {"epoch": 3, "order": list(range(4096))}
        for leaf in ("state.pt", "data_state.pt"):
            path = copied / "step-000000000001" / leaf
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(data)
        assert mgr.latest() is not None  # the size still matches: complete
        with pytest.raises(ChecksumMismatch, match=r"step-000000000001/state\.pt") as error:
            mgr.load()
        assert error.value.name.endswith("step-000000000001/state.pt")
        with pytest.raises(ChecksumMismatch, match=r"step-000000000001/data_state\.pt"):
            mgr.load_data_state()


class _Unpicklable:
    def __reduce__(self) -> str:
        raise RuntimeError("this state cannot be serialized")


def test_a_failed_overwrite_keeps_the_checkpoint_it_would_replace(where: Where) -> None:
    # The step's checkpoint stands until the new one is whole: a failed
    # overwrite loses nothing, and the next save's retention keeps it.
    with CheckpointManager(where.url("o"), keep_last=2, client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        mgr.save(_state(1), 100)
        good = mgr.save(_state(2), 200)
        with pytest.raises(RuntimeError, match="cannot be serialized"):
            mgr.save({"w": torch.zeros(4), "bad": _Unpicklable()}, 200, overwrite=True)
        assert mgr.latest() == good
        assert mgr.load()["step"] == 2
        mgr.save(_state(3), 300)
        assert [c.step for c in mgr.list()] == [200, 300]
        assert mgr.load(200)["step"] == 2
        # An overwrite that completes replaces it, and leaves none of the
        # replaced or failed saves' objects behind.
        replaced = mgr.save(_state(4), 200, overwrite=True, data_state={"at": 4})
        assert mgr.load(200)["step"] == 4 and mgr.load_data_state(200) == {"at": 4}
        leaves = sorted(n.split("/", 2)[2] for n in where.names("o") if "step-000000000200" in n)
        assert leaves == sorted(["manifest.json", *replaced.objects])
        assert len(replaced.objects) == 2 and all(
            name.startswith("replace-") for name in replaced.objects)
        again = mgr.save(_state(5), 200, overwrite=True)
        assert mgr.load(200)["step"] == 5
        assert sorted(n.split("/", 2)[2] for n in where.names("o")
                      if "step-000000000200" in n) == sorted(["manifest.json", *again.objects])


def test_retention_deletes_only_what_a_manager_writes(where: Where) -> None:
    # A DCP checkpoint named as the DCP docs name them (run/step-100), and a
    # file a user put in a step's folder, are not the manager's to delete.
    with CheckpointManager(where.url("m"), keep_last=1, client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        where.put("m/step-100/.metadata", b"dcp")
        where.put("m/step-150/__0_0.distcp", b"dcp data")
        where.put("m/step-000000000100/notes.txt", b"mine")
        where.put("m/step-000000000100/state.pt", b"a killed save's")
        mgr.save(_state(1), 100)
        mgr.save(_state(2), 200)
        assert [c.step for c in mgr.list()] == [200]
    names = where.names("m")
    for kept in ("m/step-100/.metadata", "m/step-150/__0_0.distcp",
                 "m/step-000000000100/notes.txt"):
        assert kept in names
    assert "m/step-000000000100/state.pt" not in names


def test_concurrent_background_saves_keep_the_window_and_every_history_line(
        where: Where) -> None:
    # Saves in flight together finish in any order: once they are done,
    # keep_last holds and each one's history line is there.
    with CheckpointManager(where.url("h"), client=where.client, max_pending=4, keep_last=2,
                           writer=WriterOptions(part_size=PART)) as mgr:
        futures = [mgr.save_async({"w": torch.zeros(100)}, step) for step in range(1, 13)]
        assert [f.result(timeout=60).step for f in futures] == list(range(1, 13))
        mgr.wait()
        assert [c.step for c in mgr.list()] == [11, 12]
        assert sorted(r.step for r in mgr.history()) == list(range(1, 13))


def test_a_save_whose_later_steps_finished_first_is_still_kept_in_history(
        where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    # Saves 1 to 4 in flight together, 3 and 4 published before 2 checks
    # the keep_last window: 2 was inside it when it was asked for, so it
    # completes (and retention drops it), as any finishing order must.
    with CheckpointManager(where.url("race"), client=where.client, max_pending=4,
                           keep_last=2) as mgr:
        go = threading.Event()
        check = mgr._check_target

        def held(step: int, *args: Any) -> Any:
            if step == 2:
                assert go.wait(60)
            return check(step, *args)

        monkeypatch.setattr(mgr, "_check_target", held)
        futures = {step: mgr.save_async(_state(step), step) for step in (1, 2, 3, 4)}
        assert futures[3].result(timeout=60).step == 3
        assert futures[4].result(timeout=60).step == 4
        go.set()
        assert futures[2].result(timeout=60).step == 2
        mgr.wait()
        assert [c.step for c in mgr.list()] == [3, 4]
        assert sorted(r.step for r in mgr.history()) == [1, 2, 3, 4]
        # Asked for now, below the window published before: refused.
        with pytest.raises(InvalidArgument, match="below the 2 highest steps"):
            mgr.save(_state(2), 2)


def test_a_negative_step_is_refused(where: Where) -> None:
    # "-0000000005" is no step folder a listing would find again.
    with CheckpointManager(where.url("n"), client=where.client) as mgr:
        with pytest.raises(InvalidArgument, match="step"):
            mgr.save(_state(1), -5)


def test_a_step_may_be_anything_that_stands_for_an_int(where: Where) -> None:
    # A step often comes out of a tensor or an array (a scheduler's counter,
    # a resumed state dict); what range() takes is taken, as a plain int.
    np = pytest.importorskip("numpy")
    with CheckpointManager(where.url("idx"), client=where.client) as mgr:
        mgr.save(_state(1), np.int64(7))
        mgr.save_async(_state(2), torch.tensor(9)).result(60)
        assert [c.step for c in mgr.list()] == [7, 9]
        assert torch.equal(mgr.load(step=np.int32(7))["w"], _state(1)["w"])
        assert mgr.load_data_state(step=torch.tensor(9)) is None
        for wrong in (7.0, "7", True, torch.tensor(7.0), torch.tensor([7, 8]), np.int64(-1)):
            with pytest.raises(InvalidArgument, match="step"):
                mgr.save(_state(1), wrong)
        assert [c.step for c in mgr.list()] == [7, 9]


def test_a_load_from_an_empty_root_says_there_is_no_checkpoint_under_it(where: Where) -> None:
    # It said "no complete checkpoint for any".
    with CheckpointManager(where.url("empty"), client=where.client) as mgr:
        root = mgr.root
        with pytest.raises(NotFound, match=re.escape(
                f"load {root}: there is no complete checkpoint under this root")) as info:
            mgr.load()
        assert info.value.bucket == where.bucket and info.value.name == mgr.prefix
        with pytest.raises(NotFound, match=re.escape(
                f"load_data_state {root}: there is no complete checkpoint under this root")):
            mgr.load_data_state()
        mgr.save(_state(1), 1)
        with pytest.raises(NotFound, match=re.escape(
                f"load {root}: there is no complete checkpoint of step 2 under this root")):
            mgr.load(2)
        with pytest.raises(NotFound, match=re.escape(
                f"load_data_state {root}: there is no complete checkpoint of step 2")):
            mgr.load_data_state(2)


def _save_in_child(pickled: bytes) -> int:
    mgr = pickle.loads(pickled)
    with mgr:
        mgr.save({"w": torch.full((4,), 7.0)}, 9)
    return 9


def test_a_manager_pickles_by_its_settings(where: Where) -> None:
    # A LightningModule holding one under ddp_spawn, or a spawned worker, is
    # pickled: the lock a manager holds made that fail ("cannot pickle
    # '_thread.lock' object").
    with CheckpointManager(where.url("p"), keep_last=2, client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        mgr.save_async({"w": torch.ones(4)}, 1)
        copy = pickle.loads(pickle.dumps(mgr))
        assert (copy.root, copy.keep_last) == (mgr.root, 2)
        copy.wait()  # the original's save in flight is not the copy's
        mgr.wait()
        copy.save({"w": torch.zeros(4)}, 2)
        assert [c.step for c in mgr.list()] == [1, 2]
        copy.close()
    if where.client is None:  # a store the child builds from the URL (files, s3)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1) as pool:
            assert pool.apply(_save_in_child, (pickle.dumps(mgr),)) == 9
        with CheckpointManager(where.url("p")) as fresh:
            assert [c.step for c in fresh.list()] == [2, 9]  # keep_last=2 went along
            assert torch.equal(fresh.load(9)["w"], torch.full((4,), 7.0))


class _NoDeletesUnder(LocalStore):
    """A store refusing deletes under one folder (a role that may create but
    not delete objects, or a retention lock on the old checkpoints)."""

    refused = ""

    async def delete(self, bucket: str, name: str, **kwargs: Any) -> None:
        if self.refused and f"/{bucket}/{name}".startswith(self.refused):
            raise PermissionDenied(f"delete {name}: refused", operation="delete",
                                   bucket=bucket, name=name)
        await super().delete(bucket, name, **kwargs)


def test_a_retention_failure_does_not_fail_the_save_that_completed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Retention runs after the new manifest is written: a delete it could not
    # make failed the save whose checkpoint was complete (its history line
    # said ok), so save() raised, save_async's future too, and a retry of
    # the step was a Conflict ("already has a checkpoint").
    store = _NoDeletesUnder()
    root = tmp_path / "run"
    with CheckpointManager(root, keep_last=1, client=store) as mgr:
        mgr.save(_state(1), 1)
        store.refused = str(root / "step-000000000001")
        with caplog.at_level("WARNING", logger="aioflux.checkpoint"):
            info = mgr.save(_state(2), 2)
            background = mgr.save_async(_state(3), 3).result(timeout=60)
        assert (info.step, background.step) == (2, 3)
        assert "step-000000000001" in caplog.text and "PermissionDenied" in caplog.text
        assert [c.step for c in mgr.list()] == [1, 3]  # step 2 went, step 1 could not
        store.refused = ""
        mgr.save(_state(4), 4)  # the next pass deletes what the failed one left
        assert [c.step for c in mgr.list()] == [4]
        assert [r.ok for r in mgr.history()] == [True, True, True, True]


class _WaitsWhenSaved:
    """A state value whose pickling (in the save's thread) waits for ``go``;
    copied as itself when the state is snapshotted."""

    def __init__(self, go: threading.Event) -> None:
        self.go = go

    def __deepcopy__(self, memo: dict[int, Any]) -> _WaitsWhenSaved:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        assert self.go.wait(60)
        return (int, (0,))


def test_a_save_still_finishing_is_no_save_in_flight_to_retention(tmp_path: Path) -> None:
    # Step 1 published and ran its pass (keeping itself: step 2 was not
    # published yet), but its future was not done when step 2's pass ran,
    # which spared step 1 as "in flight": keep_last=1 ended with 2 kept.
    first_passed, second_passed = threading.Event(), threading.Event()
    with CheckpointManager(tmp_path.as_uri(), keep_last=1, max_pending=2) as mgr:
        release = mgr._release

        def held(future: Any) -> None:
            step = mgr._pending.get(future, (None, 0))[0]
            if step == 1:
                first_passed.set()
                assert second_passed.wait(60)
                release(future)
            else:
                release(future)
                second_passed.set()

        mgr._release = held  # type: ignore[method-assign]
        first = mgr.save_async({"w": torch.zeros(10)}, 1)
        second = mgr.save_async({"w": torch.ones(10), "late": _WaitsWhenSaved(first_passed)}, 2)
        assert (first.result(timeout=60).step, second.result(timeout=60).step) == (1, 2)
        assert [c.step for c in mgr.list()] == [2]


# CheckpointManager's background saves: a polled future's failure still
# raised, and save_async storing what save() stores for states save() takes.


class _Held:
    """Fails the background save it is in, once ``go`` is set: until then
    the save cannot finish, whatever the machine's speed."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def __deepcopy__(self, memo: object) -> _Held:
        return self  # the snapshot keeps it; torch.save fails on it in the background

    def __reduce__(self) -> str:
        assert self.go.wait(60), "the test never let the save go on"
        raise RuntimeError("cannot pickle the held leaf")


@pytest.mark.parametrize("poll", ["result", "exception"])
def test_a_failure_after_a_poll_that_timed_out_is_still_raised(tmp_path: Path,
                                                               poll: str) -> None:
    # future.result(timeout=0) while the upload ran marked the outcome
    # looked at: the failure that came later was raised by no save, by no
    # close(), and logged by no exit hook.
    with CheckpointManager(tmp_path / "run") as mgr:
        held = _Held()
        future = mgr.save_async({"x": held}, 1)
        with pytest.raises(concurrent.futures.TimeoutError):
            getattr(future, poll)(timeout=0)
        held.go.set()
        concurrent.futures.wait([future])
        with pytest.raises(RuntimeError, match="cannot pickle the held leaf"):
            mgr.save({"w": torch.ones(2)}, 2)
        assert mgr.save({"w": torch.ones(2)}, 2).step == 2  # raised once
        assert future.exception() is not None


def test_tensors_over_one_numpy_array_save_in_the_background(tmp_path: Path) -> None:
    # Two tensors made over one array have storages of their own that start
    # at one address: the snapshot took them for one storage and copied the
    # span of both out of the smaller ("Trying to resize storage that is
    # not resizable"), while save() stored them.
    array = np.arange(100, dtype=np.float32)
    state = {"head": torch.from_numpy(array[:10]), "all": torch.from_numpy(array)}
    with CheckpointManager(tmp_path / "run") as mgr:
        mgr.save_async(state, 1).result()
        loaded = mgr.load(1)
    assert torch.equal(loaded["head"], torch.arange(10, dtype=torch.float32))
    assert torch.equal(loaded["all"], torch.arange(100, dtype=torch.float32))


def test_parameters_stay_parameters_in_the_background(tmp_path: Path) -> None:
    # save() stores a Parameter as one (a state_dict(keep_vars=True)); the
    # snapshot stored a plain tensor without requires_grad.
    layer = torch.nn.Linear(3, 2)
    layer.bias.requires_grad_(False)
    state = dict(layer.state_dict(keep_vars=True))
    state["tied"] = layer.weight  # the same Parameter twice stays one
    with CheckpointManager(tmp_path / "run") as mgr:
        mgr.save_async(state, 1).result()
        mgr.save(state, 2)
        background, foreground = mgr.load(1), mgr.load(2)
    for name in ("weight", "bias"):
        assert type(background[name]) is type(foreground[name]) is torch.nn.Parameter
        assert background[name].requires_grad == foreground[name].requires_grad
        assert torch.equal(background[name], getattr(layer, name))
    assert background["weight"].requires_grad and not background["bias"].requires_grad
    assert background["tied"] is background["weight"]
