"""Save/load cycles under the emulator's 503/429/reset knobs."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from aioflux import BridgeError, Client, InvalidArgument, WriterOptions
from aioflux.testing import Emulator, Faults
from aioflux.torch import CheckpointManager
from aioflux.torch.checkpoint._checkpoint import save_into
from tests.servers.forking import in_fork
from tests.torch.conftest import HeldBack, Where, a_fork_worker_ends

PART = 5 * 1024 * 1024


@pytest.mark.timeout(120)
def test_ten_cycles_round_trip_under_faults(faults: Emulator, bucket: str,
                                            sync_client: Client) -> None:
    mgr = CheckpointManager(f"gs://{bucket}/faulty", keep_last=2, client=sync_client,
                            writer=WriterOptions(part_size=PART, max_in_flight=3))
    faults.faults = Faults(p_429=0.05, p_503=0.05, p_reset=0.05, seed=11)
    retries_before = sync_client.aio.transport.stats.retries
    for step in range(10):
        g = torch.Generator().manual_seed(step)
        state = {"w": torch.randn(1_600_000, generator=g), "step": step}  # ~6.1 MiB, 2 parts
        if step % 2:
            mgr.save_async(state, step).result(timeout=60)
        else:
            mgr.save(state, step)
        loaded = mgr.load()
        assert loaded["step"] == step
        # byte-identical: same dtype, shape and every bit
        assert loaded["w"].numpy().tobytes() == state["w"].numpy().tobytes()
    faults.faults = Faults()
    assert sync_client.aio.transport.stats.retries > retries_before  # faults really fired
    assert [c.step for c in mgr.list()] == [8, 9]
    assert sync_client.list_multipart_uploads(bucket) == []
    mgr.close()


class _FailingFile(io.RawIOBase):
    """A file whose third write raises ``error``, as an aioflux writer does
    when a Ctrl-C lands while it waits for an upload slot."""

    def __init__(self, error: BaseException) -> None:
        self.writes = 0
        self.error = error

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        self.writes += 1
        if self.writes == 3:
            raise self.error
        return len(data)  # type: ignore[arg-type]


@pytest.mark.parametrize("error", [KeyboardInterrupt(), InvalidArgument("part limit")])
def test_a_save_raises_the_writers_own_error_not_torchs(error: BaseException) -> None:
    # torch's zip writer finishes the archive on its way out and fails
    # ("unexpected pos"): that must not replace an interrupt, which the
    # user's and Lightning's handlers wait for, or the writer's typed error.
    with pytest.raises(type(error)) as raised:
        save_into({"w": torch.zeros(100_000), "v": torch.ones(1000)}, _FailingFile(error))
    assert raised.value is error


_EXITS_WITHOUT_CLOSE = textwrap.dedent("""
    import sys, torch
    from aioflux.torch import CheckpointManager

    manager = CheckpointManager(sys.argv[1])
    # The snapshot copies a function as it is; torch.save cannot pickle it.
    manager.save_async({"w": torch.zeros(4), "bad": lambda: 0}, 1)
    # No close(): the script just ends.
""")


def test_a_failed_background_save_is_reported_when_the_process_exits_without_close(
        tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _EXITS_WITHOUT_CLOSE, str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert "a background save failed and close() was never called" in done.stderr
    assert "PicklingError" in done.stderr


_SAVES_THEN_EXITS = textwrap.dedent("""
    import sys, torch
    from aioflux.torch import CheckpointManager

    manager = CheckpointManager(sys.argv[1], keep_last=1)
    for step in (1, 2):
        manager.save_async({"w": torch.full((2_000_000,), float(step))}, step)
    # No close(): the script just ends with its saves in flight.
""")


def test_saves_in_flight_complete_when_the_process_exits_without_close(
        tmp_path: Path) -> None:
    # At exit thread pools refuse new work; the saves must finish before.
    root = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", _SAVES_THEN_EXITS, str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "failed" not in done.stderr, done.stderr
    with CheckpointManager(str(root)) as manager:
        assert [c.step for c in manager.list()] == [2]
        assert torch.equal(manager.load()["w"], torch.full((2_000_000,), 2.0))


@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_a_fork_worker_ends_at_once_while_the_parent_saves(where: Where) -> None:
    # A DataLoader worker forked while a save is in flight runs the parent's
    # exit hooks as it ends: they waited for saves that never end in its copy.
    manager = CheckpointManager(where.url("run"), client=where.client)
    HeldBack.release.clear()
    try:
        future = manager.save_async({"w": torch.ones(4), "held": HeldBack()}, 1)
        a_fork_worker_ends()
    finally:
        HeldBack.release.set()
    assert future.result(timeout=60).step == 1
    manager.close()
    with CheckpointManager(where.url("run"), client=where.client) as again:
        assert again.load()["held"] == {"held": 7}


@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_a_managers_copy_in_a_forked_child_leaves_the_saves_to_the_parent(where: Where) -> None:
    # Its saver threads are the parent's: a save handed to the copied pool
    # never started, and its future never resolved.
    with CheckpointManager(where.url("run"), client=where.client) as manager:
        manager.save_async({"w": torch.ones(4)}, 1).result(timeout=60)

        HeldBack.release.clear()
        try:
            manager.save_async({"w": torch.ones(4), "held": HeldBack()}, 2)

            def child() -> None:
                with pytest.raises(BridgeError, match="forked child"):
                    manager.save_async({"w": torch.ones(4)}, 3)
                manager.close()  # the parent's save in flight is not waited for here

            in_fork(child)
        finally:
            HeldBack.release.set()
        assert manager.save_async({"w": torch.ones(4)}, 3).result(timeout=60).step == 3
