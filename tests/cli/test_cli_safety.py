"""The CLI touches only what the user named and stops cleanly on Ctrl-C.

URL rule (as gcloud storage / gsutil): gs://b/a names the object "a" and the
folder "a/", never "a2/..." or "acopy/...". Ctrl-C: `cp` exits 130 (143 on
SIGTERM) within 2 s, aborts its open uploads, removes its partial files and publishes
nothing but whole files (a download's temporary file, where the local store
writes before its rename, is removed). The interrupted copies run in a subprocess against
an emulator slowed to 1 MB/s per connection, so they are still running when
SIGINT arrives.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aioflux import Client, ClientConfig
from aioflux.testing import Emulator, EmulatorProfile, running_emulator
from tests.conftest import FAST_RETRY, unique_bucket

# -- the URL rule -------------------------------------------------------------

_TREE = {"a": b"A", "a/x": b"AX", "a/y/z": b"AYZ", "a2/x": b"A2X", "acopy/x": b"ACOPYX"}


@pytest.fixture
def tree(emulator: Emulator, bucket: str) -> str:
    for name, data in _TREE.items():
        emulator.store.put(bucket, name, data)
    return bucket


def _names(emulator: Emulator, bucket: str) -> list[str]:
    return list(emulator.store.bucket(bucket).names)


def test_rm_r_removes_the_object_and_its_folder_only(run, emulator: Emulator,  # type: ignore[no-untyped-def]
                                                     tree: str) -> None:
    assert run("rm", "-r", f"gs://{tree}/a") == (0, "removed 3 object(s)\n", "")
    assert _names(emulator, tree) == ["a2/x", "acopy/x"]


def test_rm_r_of_a_folder_url_keeps_the_object(run, emulator: Emulator,  # type: ignore[no-untyped-def]
                                               tree: str) -> None:
    assert run("rm", "-r", f"gs://{tree}/a/") == (0, "removed 2 object(s)\n", "")
    assert _names(emulator, tree) == ["a", "a2/x", "acopy/x"]


def test_rm_without_r_removes_only_the_object(run, emulator: Emulator, tree: str) -> None:  # type: ignore[no-untyped-def]
    assert run("rm", f"gs://{tree}/a") == (0, "removed 1 object(s)\n", "")
    assert _names(emulator, tree) == ["a/x", "a/y/z", "a2/x", "acopy/x"]


def test_rm_of_urls_naming_an_object_twice_deletes_it_once(run, emulator: Emulator,  # type: ignore[no-untyped-def]
                                                          tree: str) -> None:
    # The second delete found it gone: everything was removed, then rm exited 1.
    assert run("rm", "-r", f"gs://{tree}/a", f"gs://{tree}/a/y") == \
        (0, "removed 3 object(s)\n", "")
    assert run("rm", f"gs://{tree}/a2/x", f"gs://{tree}/a2/x") == (0, "removed 1 object(s)\n", "")
    assert _names(emulator, tree) == ["acopy/x"]


def test_rm_r_of_a_name_that_is_only_a_prefix_removes_nothing(run, emulator: Emulator,  # type: ignore[no-untyped-def]
                                                              tree: str) -> None:
    code, out, err = run("rm", "-r", f"gs://{tree}/ac")
    assert (code, out) == (1, "")
    assert err == (f"aioflux rm: rm gs://{tree}/ac: nothing matches (no object 'ac' and no "
                   "folder 'ac/')\n")
    assert _names(emulator, tree) == sorted(_TREE)


def test_rm_r_keeps_an_object_rewritten_after_it_was_listed(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import aioflux.cli._objects as objects

    listed = objects.list_named

    async def list_then_rewrite(client, url):  # type: ignore[no-untyped-def]
        async for obj in listed(client, url):
            yield obj
            if obj.name == "a/x":
                # Another writer, between list and delete: rm deletes as it
                # lists, and a delete starts once the listing has moved on.
                emulator.store.put(tree, "a/x", b"NEW")

    monkeypatch.setattr(objects, "list_named", list_then_rewrite)
    code, out, err = run("rm", "-r", f"gs://{tree}/a")
    assert (code, out) == (1, "removed 2 object(s)\n")
    assert err.startswith(f"aioflux rm: delete gs://{tree}/a/x failed: HTTP 412")
    assert len(err.splitlines()) == 1
    assert bytes(emulator.store.get(tree, "a/x").data) == b"NEW"
    assert _names(emulator, tree) == ["a/x", "a2/x", "acopy/x"]  # the rest is gone


# The first object missing or rewritten cancelled the deletes under way and
# never sent the rest: rm -r of 200 objects, one rewritten meanwhile, deleted
# none, and rm of 100 named objects and a missing one some (exit 1 either
# way, naming only the one). Each other object is deleted, as by GNU rm.
def test_rm_deletes_the_rest_when_one_object_is_missing_or_rewritten(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import aioflux.cli._objects as objects

    names = [f"r/{i:03d}" for i in range(200)]
    for name in names:
        emulator.store.put(bucket, name, b"x")
    listed = objects.list_named

    async def list_then_rewrite(client, url):  # type: ignore[no-untyped-def]
        async for obj in listed(client, url):
            yield obj
            if obj.name == "r/000":
                emulator.store.put(bucket, "r/000", b"NEW")

    monkeypatch.setattr(objects, "list_named", list_then_rewrite)
    code, out, err = run("rm", "-r", f"gs://{bucket}/r")
    assert (code, out) == (1, "removed 199 object(s)\n")
    assert err.startswith(f"aioflux rm: delete gs://{bucket}/r/000 failed: HTTP 412")
    assert len(err.splitlines()) == 1
    assert _names(emulator, bucket) == ["r/000"]

    monkeypatch.setattr(objects, "list_named", listed)
    for name in names[1:101]:
        emulator.store.put(bucket, name, b"x")
    code, out, err = run("rm", f"gs://{bucket}/r/missing",
                         *(f"gs://{bucket}/{name}" for name in names[1:101]))
    assert (code, out) == (1, "removed 100 object(s)\n")
    assert err == (f"aioflux rm: delete gs://{bucket}/r/missing failed: HTTP 404 notFound: "
                   f"No such object: {bucket}/r/missing\n")
    assert _names(emulator, bucket) == ["r/000"]


def test_ls_and_du_follow_the_rule(run, tree: str) -> None:  # type: ignore[no-untyped-def]
    b = f"gs://{tree}"
    assert run("ls", f"{b}/a") == (0, f"{b}/a\n{b}/a/x\n{b}/a/y/\n", "")
    assert run("ls", "-r", f"{b}/a") == (0, f"{b}/a\n{b}/a/x\n{b}/a/y/z\n", "")
    assert run("ls", "-r", f"{b}/a/") == (0, f"{b}/a/x\n{b}/a/y/z\n", "")
    # "ac" is only a prefix of "acopy/x": it names nothing, as gcloud storage says.
    assert run("ls", f"{b}/ac") == (1, "", f"aioflux ls: ls {b}/ac: nothing matches (no object "
                                           "'ac' and no folder 'ac/')\n")
    code, out, _ = run("du", "--json", f"{b}/a")
    assert (code, json.loads(out)) == (0, {"url": f"{b}/a", "objects": 3, "bytes": 6})
    code, out, _ = run("du", "--json", b)
    assert json.loads(out)["objects"] == 5


def test_cp_r_follows_the_rule(run, emulator: Emulator, tree: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run("cp", "-r", f"gs://{tree}/a", str(tmp_path / "down"))
    assert (code, out) == (0, "copied 2 file(s), 5 bytes\n")
    assert err == (f"aioflux cp: skipped gs://{tree}/a: an object and a folder share the name; "
                   "copy it without -r\n")
    files = sorted(p.relative_to(tmp_path / "down").as_posix()
                   for p in (tmp_path / "down").rglob("*") if p.is_file())
    assert files == ["x", "y/z"]
    assert (tmp_path / "down" / "y" / "z").read_bytes() == b"AYZ"
    assert run("cp", "-r", f"gs://{tree}/a2", f"gs://{tree}/copy")[:2] == (
        0, "copied 1 file(s), 3 bytes\n")
    # The object alone, when no folder has its name.
    assert run("cp", "-r", f"gs://{tree}/acopy/x", f"gs://{tree}/single")[0] == 0
    assert _names(emulator, tree) == ["a", "a/x", "a/y/z", "a2/x", "acopy/x", "copy/x",
                                      "single"]
    assert bytes(emulator.store.get(tree, "single").data) == b"ACOPYX"


# A copy onto itself is refused before anything is copied, as S3 refuses
# it: GCS rewrote the object as a new generation and printed "copied".
@pytest.mark.parametrize(("argv", "same"), [
    (["a", "a"], "a"),
    (["a/x", "a/"], "a/x"),  # into the folder it is in, under its own name
    (["-r", "a2", "a2"], "a2/x"),  # a folder onto itself
    (["-r", "a2/", "a2/"], "a2/x"),
])
def test_cp_onto_itself_is_refused(run, emulator: Emulator, tree: str,  # type: ignore[no-untyped-def]
                                   argv: list[str], same: str) -> None:
    before = {n: emulator.store.get(tree, n).generation for n in _TREE}
    urls = [f"gs://{tree}/{a}" if a != "-r" else a for a in argv]
    code, out, err = run("cp", *urls)
    assert (code, out) == (1, "")
    assert err == (f"aioflux cp: cp gs://{tree}/{same}: the source and destination are the "
                   "same object; nothing was copied\n")
    assert {n: emulator.store.get(tree, n).generation for n in _TREE} == before


def test_cp_of_a_local_file_onto_itself_is_refused(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "f.bin"
    f.write_bytes(b"F")
    mtime = f.stat().st_mtime_ns
    for dst in (str(f), str(tmp_path), f"file://{f}"):
        code, out, err = run("cp", str(f), dst)
        assert (code, out) == (1, "")
        assert err == (f"aioflux cp: cp file://{f}: the source and destination are the same "
                       "object; nothing was copied\n")
    assert (f.read_bytes(), f.stat().st_mtime_ns) == (b"F", mtime)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]



# cp -r a a/b once a/b/ held objects: a/x was copied onto a/b/x before a/b/x
# was read for a/b/b/x, so a/b/x's bytes were lost (both copies held a/x's)
# and cp exited 0. Refused before any copy, on object stores (server-side
# copies) and files alike.
@pytest.mark.parametrize("jobs", ["1", "8"])
def test_cp_r_of_a_folder_into_itself_overwriting_a_source_is_refused(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, tmp_path: Path, jobs: str) -> None:
    emulator.store.put(bucket, "t/x", b"TX")
    emulator.store.put(bucket, "t/b/x", b"TBX")
    local = tmp_path / "t"
    (local / "b").mkdir(parents=True)
    (local / "x").write_bytes(b"TX")
    (local / "b" / "x").write_bytes(b"TBX")
    for src, dst, url in ((f"gs://{bucket}/t", f"gs://{bucket}/t/b", f"gs://{bucket}/t"),
                          (str(local), str(local / "b"), f"file://{local}")):
        code, out, err = run("cp", "-r", "-j", jobs, src, dst)
        assert (code, out) == (1, "")
        assert err == (f"aioflux cp: cp {url}/x: its destination {url}/b/x is also a source of "
                       "this copy (a folder copied into itself), and could be overwritten "
                       "before it is read; nothing was copied\n")
    assert list(emulator.store.bucket(bucket).names) == ["t/b/x", "t/x"]
    assert bytes(emulator.store.get(bucket, "t/b/x").data) == b"TBX"
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*")) == [
        "b", "b/x", "x"]
    assert (local / "b" / "x").read_bytes() == b"TBX"
    # Into a folder of itself that holds none of its sources: a copy as any other.
    assert run("cp", "-r", f"gs://{bucket}/t", f"gs://{bucket}/t/c")[:2] == (
        0, "copied 2 file(s), 5 bytes\n")
    assert bytes(emulator.store.get(bucket, "t/c/b/x").data) == b"TBX"

# -- symbolic links to directories ---------------------------------------------


@pytest.fixture
def linked_run(tmp_path: Path) -> Path:
    """runs/2024-06-01/{model.pt, sub/opt.pt} and runs/latest -> runs/2024-06-01."""
    target = tmp_path / "runs" / "2024-06-01"
    (target / "sub").mkdir(parents=True)
    (target / "model.pt").write_bytes(b"weights")
    (target / "sub" / "opt.pt").write_bytes(b"optim")
    (tmp_path / "runs" / "latest").symlink_to(target)
    return tmp_path / "runs"


def _run_files(runs: Path) -> dict[str, bytes]:
    return {p.relative_to(runs).as_posix(): p.read_bytes()
            for p in runs.rglob("*") if p.is_file() and not p.is_symlink()}


_RUN_FILES = {"2024-06-01/model.pt": b"weights", "2024-06-01/sub/opt.pt": b"optim"}


@pytest.mark.parametrize("flags", [["-r"], []])
def test_rm_of_a_symlink_to_a_directory_removes_only_the_link(  # type: ignore[no-untyped-def]
        run, linked_run: Path, flags: list[str]) -> None:
    assert run("rm", *flags, str(linked_run / "latest")) == (0, "removed 1 object(s)\n", "")
    assert not (linked_run / "latest").is_symlink()
    assert _run_files(linked_run) == _RUN_FILES


def test_rm_r_of_a_symlink_with_a_trailing_slash_is_a_usage_error(  # type: ignore[no-untyped-def]
        run, linked_run: Path) -> None:
    target = linked_run / "2024-06-01"
    code, out, err = run("rm", "-r", f"{linked_run}/latest/")
    assert (code, out) == (2, "")
    assert err == (f"aioflux rm: error: file://{linked_run}/latest/ names the directory "
                   f"{target} through a symbolic link, which rm does not delete through: "
                   f"drop the trailing '/' to remove the link, or name {target} to delete its "
                   "files (see aioflux rm --help)\n")
    assert (linked_run / "latest").is_symlink()
    assert _run_files(linked_run) == _RUN_FILES


# The commands that only read follow a link they are given (a dataset is
# often one), as GNU ls does; only rm keeps to the link itself.
def test_ls_and_cp_r_follow_a_named_symlink_to_a_directory(  # type: ignore[no-untyped-def]
        run, linked_run: Path) -> None:
    link, out_dir = linked_run / "latest", linked_run.parent / "out"
    code, out, _ = run("ls", "-r", str(link))
    assert code == 0 and "model.pt" in out and "sub/opt.pt" in out
    assert run("cp", "-r", str(link), str(out_dir))[0] == 0
    copied = {p.relative_to(out_dir).as_posix(): p.read_bytes()
              for p in out_dir.rglob("*") if p.is_file()}
    assert sorted(copied.values()) == [b"optim", b"weights"]
    assert _run_files(linked_run) == _RUN_FILES


# "gs:/b/x" (one slash, or none) once meant the relative path ./gs:/b/x:
# `cp f gs:/b/x` printed "copied" and wrote a local file under ./gs:.
@pytest.mark.parametrize(("argv", "fix"), [
    (["cp", "f.txt", "gs:/{b}/f.txt"], "did you mean gs://{b}/f.txt?"),
    (["cp", "f.txt", "s3:/{b}/f.txt"], "did you mean s3://{b}/f.txt?"),
    (["cp", "-r", "gs:{b}/a", "down"], "did you mean gs://{b}/a?"),
    (["cp", "f.txt", "file:/{tmp}/up.txt"], "did you mean file:///{tmp}/up.txt?"),
    (["ls", "gs:/{b}"], "did you mean gs://{b}?"),
    (["ls", "S3:{b}"], "did you mean s3://{b}?"),
    # The colon left out: once the empty local directory ./gs/b/x, exit 0.
    (["ls", "gs//{b}/x"], "did you mean gs://{b}/x?"),
    (["cp", "f.txt", "s3//{b}/f.txt"], "did you mean s3://{b}/f.txt?"),
])
def test_a_scheme_without_slashes_is_a_usage_error_and_writes_nothing(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, tree: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        argv: list[str], fix: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.txt").write_bytes(b"F")
    tmp = str(tmp_path).lstrip("/")
    code, out, err = run(*[a.format(b=tree, tmp=tmp) for a in argv])
    assert (code, out) == (2, "")
    assert err.startswith(f"aioflux {argv[0]}: error: ") and len(err.splitlines()) == 1, err
    missing = "':'" if argv[-1].split("/")[0] in ("gs", "s3") else "'//'"
    assert fix.format(b=tree, tmp=tmp) in err and f"lacks the {missing}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    assert _names(emulator, tree) == sorted(_TREE)


# -- Ctrl-C -------------------------------------------------------------------

# 1 MB/s per connection: a 100 KB file takes ~0.1 s, a 16 MiB part ~17 s.
_SLOW = EmulatorProfile(ttfb=0.02, bandwidth=1e6)
_BIG = 20 * 1024 * 1024  # above cp's 16 MiB streaming threshold


@pytest.fixture(scope="module")
def slow() -> Iterator[Emulator]:
    with running_emulator(profile=_SLOW) as emu:
        yield emu


@pytest.fixture
def slow_bucket(slow: Emulator) -> str:
    return slow.create_bucket(unique_bucket("sigint"))


@pytest.fixture
def slow_client(slow: Emulator) -> Iterator[Client]:
    with Client(ClientConfig(retry=FAST_RETRY), endpoint=slow.endpoint) as client:
        yield client


def _ignore_sigint() -> None:
    # As in a script's background job: Python then installs no SIGINT
    # handler, and neither does asyncio.run.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _default_sigint() -> None:
    # Whatever the test runner inherited (a CI job started in the
    # background ignores SIGINT), cp starts as from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_cp(emulator: Emulator, *argv: str,
              sigint_ignored: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "aioflux", "cp", *argv,
                             "--endpoint", emulator.endpoint],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignore_sigint if sigint_ignored else _default_sigint)


def _wait_until(proc: subprocess.Popen[str], ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"cp ended (exit {proc.returncode}) before {what}: {out!r} {err!r}")
        assert time.monotonic() < deadline, f"cp never got to {what}"
        time.sleep(0.02)


# What cp reports for each signal: SIGTERM (timeout(1), Kubernetes, CI
# cancellation) takes Ctrl-C's path.
_STOPPED = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}


def _interrupt(proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGINT,
               then: Callable[[], None] = lambda: None) -> None:
    """SIGINT (or SIGTERM), then ``then()``, then: exit 130 (143), one line
    on stderr (after the count of files copied before, if any), nothing on
    stdout. Not timed against the clock (a loaded
    machine may take seconds to run the exit): the callers check by counts
    that the work stopped (files left unpublished, a 17 s part never
    finished), and 10 s bounds a hang."""
    code, word = _STOPPED[sig]
    proc.send_signal(sig)
    then()
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"cp still running 10 s after {sig.name}")
    assert proc.returncode == code, err
    *before, last = err.splitlines()
    assert (out, last) == ("", f"aioflux cp: {word}"), err
    assert len(before) <= 1 and all(re.fullmatch(
        r"aioflux cp: copied \d+ file\(s\), \d+ bytes before stopping", line)
        for line in before), err


def _published(emulator: Emulator, bucket: str) -> dict[str, bytes]:
    b = emulator.store.bucket(bucket)
    return {name: bytes(emulator.store.get(bucket, name).data) for name in list(b.names)}


def _settled(emulator: Emulator, bucket: str, writes_before: int,
             drops_before: int) -> dict[str, bytes]:
    """The objects published, once each write the emulator took since the
    counts given has landed or ended with its dropped connection.

    A body cp sent whole just before it stopped may still be read (paced to
    the profile) and stored after cp exited, as a real server would store
    it: counts, not a sleep of a guessed length, say the emulator is done.
    """
    deadline = time.monotonic() + 30
    while True:
        stats = emulator.stats
        published = _published(emulator, bucket)
        taken = stats["writes"] - writes_before
        if len(published) + stats["client_disconnects"] - drops_before >= taken:
            return published
        assert time.monotonic() < deadline, (len(published), dict(stats))
        time.sleep(0.01)


def _no_open_uploads(emulator: Emulator, client: Client, bucket: str) -> None:
    assert client.list_multipart_uploads(bucket) == []
    assert [s for s in list(emulator.store.sessions.values())
            if s.bucket == bucket and s.result is None] == []


def test_sigint_stops_an_upload_of_many_files(slow: Emulator, slow_bucket: str,
                                              slow_client: Client, tmp_path: Path) -> None:
    src = tmp_path / "many"
    src.mkdir()
    files = {f"f{i:03d}": os.urandom(100_000) for i in range(200)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    writes, drops = slow.stats["writes"], slow.stats["client_disconnects"]
    proc = _start_cp(slow, "-r", "-j", "4", str(src), f"gs://{slow_bucket}/up")
    _wait_until(proc, lambda: bool(slow.store.bucket(slow_bucket).names), "a first object")
    _interrupt(proc)
    published = _settled(slow, slow_bucket, writes, drops)
    assert 0 < len(published) < len(files)
    for name, data in published.items():  # whole files only
        assert data == files[name.removeprefix("up/")]
    _no_open_uploads(slow, slow_client, slow_bucket)


@pytest.mark.parametrize(("sig", "sigint_ignored"), [(signal.SIGINT, False),
                                                     (signal.SIGTERM, False),
                                                     (signal.SIGTERM, True)],
                         ids=["SIGINT", "SIGTERM", "SIGTERM-with-SIGINT-ignored"])
def test_a_signal_aborts_the_multipart_upload_of_a_large_file(
        slow: Emulator, slow_bucket: str, slow_client: Client, tmp_path: Path,
        sig: signal.Signals, sigint_ignored: bool) -> None:
    (tmp_path / "big.bin").write_bytes(os.urandom(_BIG))
    proc = _start_cp(slow, str(tmp_path / "big.bin"), f"gs://{slow_bucket}/big.bin",
                     sigint_ignored=sigint_ignored)
    _wait_until(proc, lambda: bool(slow_client.list_multipart_uploads(slow_bucket)),
                "an open multipart upload")
    _interrupt(proc, sig)
    _no_open_uploads(slow, slow_client, slow_bucket)
    # No wait for late arrivals: the upload is aborted (above), so no
    # request still on its way can publish it.
    assert _published(slow, slow_bucket) == {}


def _taken(pid: int, sig: signal.Signals) -> bool:
    """Whether the process has taken ``sig``: its handler ran (Linux's
    /proc lists a signal sent to a process as pending until then)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return not int(line.split()[1], 16) & (1 << (sig - 1))
    raise AssertionError(f"no ShdPnd in /proc/{pid}/status")


def test_sigterm_while_the_upload_is_being_created_still_aborts_it(
        slow: Emulator, slow_bucket: str, slow_client: Client, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The server has created the upload, but its id has not reached cp yet.
    # Cancelling the request then (SIGTERM once cancelled every task where
    # SIGINT is ignored) lost the id, and the upload stayed open; cp must
    # wait for the answer and abort. The emulator holds its answer until
    # cp has taken the signal.
    created, answer = threading.Event(), threading.Event()
    create = slow.store.create_multipart

    def create_and_hold(*args: Any, **kwargs: Any) -> Any:
        upload = create(*args, **kwargs)
        created.set()
        answer.wait(60)  # blocks the emulator's loop thread: no answer meanwhile
        return upload

    monkeypatch.setattr(slow.store, "create_multipart", create_and_hold)
    (tmp_path / "big.bin").write_bytes(os.urandom(_BIG))
    proc = _start_cp(slow, str(tmp_path / "big.bin"), f"gs://{slow_bucket}/big.bin",
                     sigint_ignored=True)
    try:
        assert created.wait(60), "cp never created its upload"
        assert [u.name for u in list(slow.store.uploads.values())
                if u.bucket == slow_bucket] == ["big.bin"]

        def answer_once_taken() -> None:
            deadline = time.monotonic() + 10
            while not _taken(proc.pid, signal.SIGTERM):
                assert time.monotonic() < deadline, "cp never took SIGTERM"
                time.sleep(0.01)
            answer.set()

        _interrupt(proc, signal.SIGTERM, then=answer_once_taken)
    finally:
        answer.set()
    _no_open_uploads(slow, slow_client, slow_bucket)
    assert _published(slow, slow_bucket) == {}


def test_sigint_stops_a_download_of_many_files(slow: Emulator, slow_bucket: str,
                                               tmp_path: Path) -> None:
    objects = {f"d/f{i:03d}": os.urandom(100_000) for i in range(100)}
    for name, data in objects.items():
        slow.store.put(slow_bucket, name, data)
    dst = tmp_path / "down"
    proc = _start_cp(slow, "-r", "-j", "4", f"gs://{slow_bucket}/d", str(dst))
    _wait_until(proc, lambda: dst.exists() and any(dst.iterdir()), "a first file")
    _interrupt(proc)
    assert list(dst.rglob("*aioflux-tmp*")) == []  # the local store's temporary files
    done = {p.name: p.read_bytes() for p in dst.iterdir()}
    assert len(done) < len(objects)
    for name, data in done.items():
        assert data == objects[f"d/{name}"]


def test_sigint_removes_the_temporary_file_of_a_large_download(slow: Emulator,
                                                               slow_bucket: str,
                                                               tmp_path: Path) -> None:
    # Nine 8 MiB ranges: the first eight arrive together (~8 s at 1 MB/s) and
    # create the temporary file; the ninth is still on its way when SIGINT
    # comes (with fewer, all ranges land at once and the copy ends at once).
    slow.store.put(slow_bucket, "big.bin", os.urandom(9 * 8 * 1024 * 1024))
    target = tmp_path / "big.bin"
    proc = _start_cp(slow, f"gs://{slow_bucket}/big.bin", str(target))
    # The local store writes .big.bin.aioflux-tmp-<id> and renames it when complete.
    _wait_until(proc, lambda: bool(list(tmp_path.glob(".big.bin.aioflux-tmp-*"))),
                "the temporary file")
    _interrupt(proc)
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cmd", ["ls", "rm", "du", "cp", "stat", "cat", "clean"])
def test_help_states_the_url_rule_and_exit_codes(cmd: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from aioflux.cli import main

    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "gs://bucket/a names the object 'a' and the folder 'a/'" in text
    assert "never 'a2' or 'acopy/'" in text
    assert "2 usage error" in text and "130 interrupted" in text


@pytest.fixture
def no_multipart() -> Iterator[Emulator]:
    """The slow emulator without XML multipart uploads (as fake-gcs-server):
    the writer falls back to a resumable session."""
    with running_emulator(profile=_SLOW, xml_multipart=False) as emu:
        yield emu


def test_sigint_cancels_the_resumable_session_of_a_large_upload(
        no_multipart: Emulator, tmp_path: Path) -> None:
    bucket = no_multipart.create_bucket(unique_bucket("sigint"))
    (tmp_path / "big.bin").write_bytes(os.urandom(_BIG))
    proc = _start_cp(no_multipart, str(tmp_path / "big.bin"), f"gs://{bucket}/big.bin")

    def session_open() -> bool:
        return any(s.bucket == bucket for s in list(no_multipart.store.sessions.values()))

    _wait_until(proc, session_open, "an open resumable session")
    _interrupt(proc)
    assert not session_open()
    # No wait for late arrivals: the session is cancelled (above), so no
    # request still on its way can publish it.
    assert _published(no_multipart, bucket) == {}


def test_cancelling_a_large_local_copy_publishes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What Ctrl-C does to ``cp big.bin copy.bin`` on the filesystem: the copy
    streams in ranges (a copy in one thread could not be stopped), so it
    stops between two, and the temporary file goes with it."""
    import argparse
    import asyncio

    import aioflux.cli._copy as copy_mod
    from aioflux.cli._common import Stores
    from aioflux.local import LocalStore

    monkeypatch.setattr(copy_mod, "STREAM_THRESHOLD", 1024)
    monkeypatch.setattr(copy_mod, "_CHUNK", 1024 * 1024)
    (tmp_path / "big.bin").write_bytes(os.urandom(8 * 1024 * 1024))
    ranges_read = 0
    real_fetch = LocalStore.fetch

    async def slow_fetch(self, bucket, name, **kw):  # type: ignore[no-untyped-def]
        nonlocal ranges_read
        if kw.get("start", 0) >= 2 * 1024 * 1024:
            await asyncio.sleep(3600)  # the disk stalls after two ranges
        ranges_read += 1
        return await real_fetch(self, bucket, name, **kw)

    monkeypatch.setattr(LocalStore, "fetch", slow_fetch)
    args = argparse.Namespace(endpoint=None, concurrency=4, progress=False)

    async def copy_then_cancel() -> None:
        async with Stores(args) as stores:
            src = copy_mod.url_arg(str(tmp_path / "big.bin"))
            item = await copy_mod.single(stores(src), src,
                                         copy_mod.url_arg(str(tmp_path / "copy.bin")))
            task = asyncio.ensure_future(copy_mod._copy_one(stores, item, copy_mod.Progress(
                item.src.size, "cp", enabled=False)))
            while not list(tmp_path.glob(".copy.bin.aioflux-tmp-*")):
                assert not task.done()
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(asyncio.wait_for(copy_then_cancel(), 30))
    assert ranges_read == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.bin"]


def test_cp_refuses_a_device_fifo_or_link_as_its_destination(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, tree: str, tmp_path: Path) -> None:
    # Written beside it and renamed over it, /dev/null or /dev/stdout (a
    # link) became a regular file holding the data, and cp exited 0.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target"
    target.write_bytes(b"kept")
    link = tmp_path / "link"
    link.symlink_to(target)
    for dest, says in ((fifo, "not a regular file"), (link, "symbolic link")):
        code, _, err = run("cp", f"gs://{tree}/a", str(dest))
        assert code == 1 and says in err and "nothing was copied" in err, err
    assert fifo.is_fifo() and link.is_symlink() and target.read_bytes() == b"kept"
    # A regular file is still replaced as before.
    assert run("cp", f"gs://{tree}/a", str(target))[0] == 0
    assert target.read_bytes() == b"A"


def test_rm_r_and_cp_r_of_an_empty_bucket_or_directory_match(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, tmp_path: Path) -> None:
    # As cli.md says and ls and du do: they exited 1, "nothing matches".
    empty = unique_bucket("empty")
    emulator.create_bucket(empty)
    (tmp_path / "emptyd").mkdir()
    assert run("rm", "-r", f"gs://{empty}")[:2] == (0, "removed 0 object(s)\n")
    assert run("rm", "-r", str(tmp_path / "emptyd"))[0] == 0
    assert run("cp", "-r", f"gs://{empty}", str(tmp_path / "out"))[0] == 0
    assert run("cp", "-r", str(tmp_path / "emptyd"), f"gs://{empty}/e")[0] == 0
    assert run("rm", "-r", f"gs://{empty}/nothing")[0] == 1  # a name still must match


def test_cp_r_of_a_folder_url_ending_in_a_slash_takes_its_placeholder_for_the_folders(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, tmp_path: Path) -> None:
    # "ef/" (a console's "Create folder") was taken for an object "ef": copied
    # to an empty file, or to an object without its slash.
    for name, data in {"ef/": b"", "pf/": b"", "pf/kid": b"K"}.items():
        emulator.store.put(bucket, name, data)
    code, _, err = run("cp", "-r", f"gs://{bucket}/ef/", str(tmp_path / "EF"))
    assert code == 0 and "placeholder" in err and not (tmp_path / "EF").is_file(), err
    assert run("cp", "-r", f"gs://{bucket}/ef/", f"gs://{bucket}/efdir/")[0] == 0
    code, _, err = run("cp", "-r", f"gs://{bucket}/pf/", f"gs://{bucket}/pfc/")
    assert code == 0 and "share the name" not in err, err
    names = list(emulator.store.bucket(bucket).names)
    assert "efdir/" in names and "efdir" not in names
    assert "pfc/" in names and "pfc/kid" in names


# ``aioflux rm`` refuses '.' and '..' and deletes nothing.


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("operand", ["d/..", "d/../", ".", "./", "d/.", "d/sub/.."])
def test_rm_refuses_dot_and_dot_dot(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                    monkeypatch: pytest.MonkeyPatch, operand: str) -> None:
    # A path is made absolute before it is a URL, so "rm -r d/.." would name
    # the current directory and delete every file in it, "keep" included;
    # POSIX and GNU rm refuse '.' and '..' and delete nothing, as this does.
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("keep", "d/x", "d/sub/y"):
        (tmp_path / name).write_bytes(b"data")
    monkeypatch.chdir(tmp_path)
    code, out, err = run("rm", "-r", operand)
    assert (code, out) == (2, ""), err
    assert "refuses to remove '.' or '..'" in err and len(err.splitlines()) == 1
    assert _files(tmp_path) == ["d/sub/y", "d/x", "keep"]
    # Nothing else was named: the other operands of the command are not deleted either.
    assert run("rm", "-r", "d/x", operand)[0] == 2
    assert (tmp_path / "d" / "x").exists()
    # A name that only starts with dots is a name.
    (tmp_path / "...").write_bytes(b"dots")
    assert run("rm", "...")[:2] == (0, "removed 1 object(s)\n")


@pytest.mark.parametrize("operand", ["d/..", "d/../", "d/.", "d/sub/.."])
def test_rm_refuses_dot_and_dot_dot_in_a_file_url(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  operand: str) -> None:
    # A file:// URL's ".." is resolved as a path's, so
    # "rm -r file:///.../d/.." would name the directory above d.
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("keep", "d/x", "d/sub/y"):
        (tmp_path / name).write_bytes(b"data")
    for url in (f"file://{tmp_path}/{operand}", f"file://localhost{tmp_path}/{operand}"):
        code, out, err = run("rm", "-r", url)
        assert (code, out) == (2, ""), err
        assert "refuses to remove '.' or '..'" in err and len(err.splitlines()) == 1
    assert _files(tmp_path) == ["d/sub/y", "d/x", "keep"]
