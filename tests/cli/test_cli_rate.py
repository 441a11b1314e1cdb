"""``aioflux rate show|reset``: the request-rate state a machine's processes
share, made by a real throttle of the emulator's token bucket, listed, and
reset so that the next client is not paced.

Bounded by counts and events: the throttles are the emulator's count of
its 429s (its bucket holds a second of its rate: ``cp -j OBJECTS`` against
a cap of CAP/s is refused at once, however fast the machine is), and a
client is paced or not by what its stats say it waited for.

The tests that throttle use this user's table (the one every client uses),
each on a key of its own emulator's endpoint: other test processes of the
machine use it at the same time, so nothing here resets every key of it;
that is tested on a table of the test's own.
"""

from __future__ import annotations

import fcntl as real
import json
import threading
import time
from pathlib import Path

import pytest

from aioflux import Client, ClientConfig, load_files
from aioflux._core.rate import shared_table as rate_shared
from aioflux._core.rate.controller import pace_at
from aioflux._core.rate.shared_table import SharedRate, Table, shared_rate
from aioflux.testing import Emulator, EmulatorProfile
from tests.cli.calls import call
from tests.cli.conftest import OBJECTS

CAP = 20



def _keys(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    code, out, err = call(capsys, "rate", "show", "--json", *argv)
    assert code in (0, 1), err
    keys: list[dict[str, object]] = json.loads(out)["keys"]
    return keys


def _read_all(emu: Emulator, bucket: str, config: ClientConfig | None = None) -> Client:
    """A fresh client that reads every object at once (and is closed)."""
    with Client(endpoint=emu.endpoint, config=config) as client:
        got = dict(load_files([f"gs://{bucket}/d/o{i}" for i in range(OBJECTS)], client=client))
        assert [got[f"gs://{bucket}/d/o{i}"] for i in range(OBJECTS)] == \
            [f"object {i}".encode() for i in range(OBJECTS)]
    return client


def test_show_lists_a_throttled_key_and_reset_frees_the_next_client(
        dataset: tuple[Emulator, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    emu, bucket = dataset
    mine = ("--endpoint", emu.endpoint)
    emu.profile = EmulatorProfile(qps_limit=CAP)
    code, _, err = call(capsys, "cp", "-r", "-j", str(OBJECTS), f"gs://{bucket}/d",
                        str(tmp_path / "out"), *mine)
    assert code == 0, err
    assert emu.stats["throttled"] > 0

    (key,) = _keys(capsys, f"gs://{bucket}", *mine)
    assert (key["endpoint"], key["bucket"], key["kind"]) == (emu.endpoint, bucket, "read")
    assert key["paced"] is True and key["times_paced"] == 1
    assert isinstance(key["rate"], float) and 0 < key["rate"] < OBJECTS
    assert key["throttled_seconds_ago"] is not None
    code, out, _ = call(capsys, "rate", "show", f"gs://{bucket}/d/", *mine)
    header, row = out.splitlines()
    assert header.split()[:5] == ["ENDPOINT", "BUCKET", "KIND", "PACED", "RATE"]
    assert code == 0 and row.split()[:4] == [emu.endpoint, bucket, "read", "yes"], out

    emu.profile = EmulatorProfile()  # the cap lifted
    code, out, err = call(capsys, "rate", "reset", f"gs://{bucket}", *mine)
    assert code == 0, err
    assert out.splitlines() == [
        f"reset {emu.endpoint} {bucket} read (was paced at {key_rate(out)}/s)",
        f"reset 1 key(s) in {rate_shared.state_dir()}"]
    (key,) = _keys(capsys, f"gs://{bucket}", *mine)
    assert key["paced"] is False and key["rate"] is None and key["owed"] == 0.0

    # The next client is not paced: no request waited for a budget.
    throttled = emu.stats["throttled"]
    freed = _read_all(emu, bucket)
    assert (freed.stats.rates, freed.stats.budget_wait, freed.stats.throttled) == ({}, 0.0, 0)
    assert emu.stats["throttled"] == throttled


def key_rate(out: str) -> str:
    """The rate a reset line says the key was paced at."""
    return out.split("paced at ", 1)[1].split("/s", 1)[0]


def test_a_url_or_endpoint_that_matches_nothing_fails(
        dataset: tuple[Emulator, str], capsys: pytest.CaptureFixture[str]) -> None:
    emu, bucket = dataset
    _read_all(emu, bucket)  # a key of this emulator's, not paced
    mine = ("--endpoint", emu.endpoint)
    (key,) = _keys(capsys, bucket, *mine)  # a bare bucket name
    assert (key["bucket"], key["paced"]) == (bucket, False)
    nothing: list[tuple[str, ...]] = [
        ("show", f"gs://{bucket}-typo", *mine), ("reset", f"s3://{bucket}-typo"),
        ("reset", f"gs://{bucket}", "--endpoint", "127.0.0.1:1")]
    for argv in nothing:
        code, out, err = call(capsys, "rate", *argv)
        assert (code, out) == (1, ""), argv
        assert err == f"aioflux rate: no request-rate state matches in " \
                      f"{rate_shared.state_dir()}\n"
    assert _keys(capsys, bucket, *mine)[0]["used_seconds_ago"] is not None
    usage: list[tuple[str, ...]] = [("show", "file:///tmp/x"), ("reset", "ftp://x/y"), ("forget",)]
    for argv in usage:
        code, _, err = call(capsys, "rate", *argv)
        assert code == 2, (argv, err)


@pytest.fixture
def own_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Table:
    """This process's clients and the command on a table of the test's own."""
    table = Table(str(tmp_path / "rates"))
    monkeypatch.setattr(rate_shared, "_TABLE", table)
    monkeypatch.setattr(rate_shared, "_OPEN", {})
    return table


def test_reset_without_a_url_resets_every_key(own_table: Table,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    now = time.monotonic()
    for key in ("http://h:1|a|read", "http://h:1|b|write"):
        with shared_rate(key).locked() as state:
            pace_at(state, now, 5.0)
    # A key whose name no process recorded (an older aioflux's), paced; and
    # one not paced.
    old, idle = (SharedRate(f"http://h:1|{b}|read", own_table) for b in ("old", "idle"))
    with old.locked() as state:
        pace_at(state, now, 7.0)
    code, out, _ = call(capsys, "rate", "show")
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and rows[0][:3] == ["ENDPOINT", "BUCKET", "KIND"]
    assert [row[:7] for row in rows[1:3]] == [
        ["http://h:1", "a", "read", "yes", "5.0/s", "-", "1"],
        ["http://h:1", "b", "write", "yes", "5.0/s", "-", "1"]]
    assert rows[3][:9] == ["(not", "recorded:", "slot", f"{_slot(old)})", "-", "-", "yes",
                           "7.0/s", "-"]
    assert out.splitlines()[4:] == ["1 more key(s) not recorded by name, not paced"]

    code, out, _ = call(capsys, "rate", "reset")
    lines = out.splitlines()
    assert code == 0 and lines[:2] == ["reset http://h:1 a read (was paced at 5.0/s)",
                                       "reset http://h:1 b write (was paced at 5.0/s)"]
    assert sorted(lines[2:4], key=lambda line: "not paced" in line) == [
        f"reset slot {_slot(old)} (key not recorded) (was paced at 7.0/s)",
        f"reset slot {_slot(idle)} (key not recorded) (was not paced)"]
    assert lines[4] == f"reset 4 key(s) in {rate_shared.state_dir()}"
    keys = _keys(capsys)
    assert sorted((k["paced"], k["times_paced"]) for k in keys) == [(False, 0)] + [(False, 1)] * 3
    assert not any(shared_rate(key).paced for key in ("http://h:1|a|read", "http://h:1|b|write"))


def test_reset_waits_for_the_table_lock(own_table: Table, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Another process holds the table: a description of the file of its own
    # (flock excludes descriptions, in one process as in two).
    with shared_rate("http://h:1|a|read").locked() as state:
        pace_at(state, time.monotonic(), 5.0)
    assert own_table.path is not None
    other = Table(str(Path(own_table.path).parent))
    asking, done = threading.Event(), threading.Event()
    outcome: list[tuple[int, str, str]] = []

    class Flock:
        LOCK_EX, LOCK_UN = real.LOCK_EX, real.LOCK_UN

        @staticmethod
        def flock(fd: int, operation: int) -> None:
            if threading.current_thread() is thread and operation == real.LOCK_EX:
                asking.set()
            real.flock(fd, operation)

    monkeypatch.setattr(rate_shared, "fcntl", Flock)

    def reset() -> None:
        outcome.append(call(capsys, "rate", "reset", "a"))
        done.set()

    thread = threading.Thread(target=reset)
    with other.locked():
        thread.start()
        assert asking.wait(60)
        # Asked for the lock, which this hold keeps: nothing read or reset yet.
        assert not done.is_set()
        assert other.read(_slot(shared_rate("http://h:1|a|read")), time.monotonic())[0].throttled
    thread.join(timeout=60)
    assert done.is_set() and outcome[0][0] == 0
    assert outcome[0][1].splitlines()[0] == "reset http://h:1 a read (was paced at 5.0/s)"
    assert not shared_rate("http://h:1|a|read").paced


def _slot(shared: SharedRate) -> int:
    return shared.at // rate_shared.SLOT
