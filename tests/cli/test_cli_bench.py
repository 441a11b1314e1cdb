"""``aioflux bench`` when it does not run to its end: a failure, Ctrl-C, a
clean-up that fails too, a bundled emulator that does not start or stop.
What it measures and prints is in test_cli.py and test_hedged_reads.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aioflux import AsyncClient, Client, PermissionDenied, TransportError
from aioflux.cli import _bench, main
from aioflux.testing import Emulator, _subprocess

# The bench with its measurements replaced by a wait that only an interrupt
# ends, once it said it got there: what a Ctrl-C midway meets, at a moment
# the test knows (the line), not one a machine's speed picks.
STUCK_BENCH = """
import asyncio, sys
from aioflux.cli import _bench, main

async def measuring(*args, **kwargs):
    print("measuring", flush=True)
    await asyncio.Event().wait()

_bench._write_read_list = measuring
sys.exit(main(sys.argv[1:]))
"""
# Bounds a hang only: every wait below ends on an event well before it.
HANG = 60.0


def _default_sigint() -> None:
    # A CI job started in the background ignores SIGINT, and a child
    # inherits that: the bench then never saw the Ctrl-C and the test
    # waited for its exit forever (why it was taken out). As from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # gone meanwhile
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry))
    return found


def _readable(fd: int, what: str) -> None:
    ready, _, _ = select.select([fd], [], [], HANG)
    assert ready, f"{what} within {HANG:g} s"


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfd_open is Linux's")
@pytest.mark.timeout(2 * HANG + 30)
def test_ctrl_c_on_the_bundled_emulator_exits_130() -> None:
    bench = subprocess.Popen([sys.executable, "-c", STUCK_BENCH, "bench", "--objects", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=_default_sigint)
    try:
        assert bench.stdout is not None
        _readable(bench.stdout.fileno(), "the bench started measuring")
        assert bench.stdout.readline() == "measuring\n"
        (emulator,) = _children(bench.pid)
        # A terminal's Ctrl-C reaches the whole process group: the emulator
        # stops too, here first (pidfd: readable once it exited), so the
        # bench meets the interrupt with its emulator gone.
        exited = os.pidfd_open(emulator)
        try:
            os.kill(emulator, signal.SIGINT)
            _readable(exited, "the emulator exited on SIGINT")
        finally:
            os.close(exited)
        bench.send_signal(signal.SIGINT)
        out, err = bench.communicate(timeout=HANG)
    finally:
        # Whatever failed above, nothing of the bench's group outlives the
        # test (its session: the bench and its emulator).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bench.pid, signal.SIGKILL)
        bench.communicate()
    # Not exit 1 with a connection error: no clean-up asks the gone emulator
    # (whose objects went with it) to list and delete, retrying in vain.
    assert (bench.returncode, err) == (130, "aioflux bench: interrupted\n"), err
    assert out == ""


def test_a_failed_write_stops_the_others_before_the_clean_up(
        run: Any, sync_client: Client, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = AsyncClient.write
    waiting: list[asyncio.Event] = []
    loops: list[asyncio.AbstractEventLoop] = []
    in_flight = 0

    async def write(self: AsyncClient, bucket: str, name: str, data: Any,
                    **kwargs: Any) -> Any:
        nonlocal in_flight
        if name.endswith("obj-0000000"):
            raise PermissionDenied(f"write gs://{bucket}/{name} failed: injected refusal",
                                   operation="write", bucket=bucket, name=name, status=403)
        in_flight += 1
        try:
            if not waiting:
                waiting.append(asyncio.Event())
                loops.append(asyncio.get_running_loop())
            await waiting[0].wait()  # until the clean-up listed (unless cancelled)
            return await real_write(self, bucket, name, data, **kwargs)
        finally:
            in_flight -= 1

    real_cleanup = _bench._cleanup
    in_flight_at_cleanup: list[int] = []

    def cleanup(client: Client, bucket: str, prefix: str) -> None:
        in_flight_at_cleanup.append(in_flight)
        try:
            real_cleanup(client, bucket, prefix)
        finally:
            if waiting:
                loops[0].call_soon_threadsafe(waiting[0].set)

    monkeypatch.setattr(AsyncClient, "write", write)
    monkeypatch.setattr(_bench, "_cleanup", cleanup)
    code, out, err = run("bench", f"gs://{bucket}/area", "--objects", "8", "--size", "10",
                         "--ops", "write")
    assert (code, out) == (1, "") and "injected refusal" in err, err
    # The other 7 writes were stopped before the clean-up listed what to
    # delete: none publishes behind its back.
    assert in_flight_at_cleanup == [0]
    assert list(sync_client.list_objects(bucket)) == []


def test_a_failing_clean_up_leaves_ctrl_c_the_outcome(
        run: Any, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    def unreachable(self: Client, bucket: str, prefix: str = "", **kwargs: Any) -> Any:
        raise TransportError(f"list gs://{bucket}/{prefix} failed: connection refused",
                             operation="list", bucket=bucket, name=prefix)

    monkeypatch.setattr(_bench, "_write_read_list", interrupted)
    monkeypatch.setattr(Client, "list_objects", unreachable)
    code, out, err = run("bench", f"gs://{bucket}/area", "--objects", "3")
    lines = err.splitlines()
    assert (code, out) == (130, ""), err
    assert lines[-1] == "aioflux bench: interrupted"
    # The clean-up's failure is said, with the prefix to clean by hand.
    assert len(lines) == 2 and lines[0].startswith(
        f"aioflux bench: what it wrote under gs://{bucket}/area/aioflux-bench/"), err
    assert lines[0].endswith("connection refused"), err


def test_a_bundled_emulator_that_does_not_start_is_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")  # exits 1 at once, says nothing
    assert main(["bench", "--objects", "1"]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", "aioflux bench: the aioflux emulator did not start (exit "
                              "status 1)\n")


def test_an_emulator_that_ignores_sigterm_is_killed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "python"
    # Ignores SIGTERM (kept across exec), and says its pid where the endpoint goes.
    fake.write_text("#!/bin/sh\ntrap '' TERM\necho \"aioflux emulator listening on $$\"\n"
                    "exec sleep 100000\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    monkeypatch.setattr(_subprocess, "STOP_WAIT", 0.0)
    pid = 0
    try:
        with _subprocess.emulator_process() as said:
            pid = int(said)
        assert not Path(f"/proc/{pid}").exists()  # killed and reaped
    finally:
        if pid and Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


def test_the_bench_deletes_what_it_wrote(run: Any, sync_client: Client, bucket: str,
                                         emulator: Emulator) -> None:
    before = emulator.stats["delete"]
    code, _, err = run("bench", f"gs://{bucket}/area", "--objects", "5", "--size", "10",
                       "--ops", "write,read,save", "--checkpoint-mb", "1")
    assert (code, err) == (0, "")
    assert list(sync_client.list_objects(bucket)) == []
    assert emulator.stats["delete"] - before == 6  # 5 objects and the checkpoint
