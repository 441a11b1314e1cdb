"""CheckpointManager's background saves: a polled future's failure still
raised, and save_async storing what save() stores for states save() takes."""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from aioflux.torch import CheckpointManager


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
