"""The Command line page (docs/guides/cli.md) runs as written.

Every command of its Synopsis runs against the bundled emulator with real
objects: ``CLI_CALLS`` turns each synopsis into concrete calls, and a
synopsis without calls, or a documented flag no call uses, fails. The
page's exit codes are the command's own (its ``--help``), and the failures
a user meets first exit as the table says (the signals' and a closed
pipe's codes are tested in tests/cli/test_cli*.py).

The lines run in this interpreter through the console script's own entry
point (``aioflux.cli.main``, :func:`run_in_process`): a process per line
paid Python's and aioflux's start-up for each, most of a minute in all. A
few stay processes where the process is what is checked: ``cat``'s bytes
down a pipe, the exit statuses a shell sees, the emulator serving until
SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import urllib.request
import warnings
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aioflux import AsyncClient, Client, load_files
from aioflux._core.concurrency import portal
from aioflux.cli import main
from aioflux.testing import Emulator, running_emulator

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "guides" / "cli.md").read_text()


def cli_synopses(text: str) -> list[str]:
    """Each ``aioflux ...`` synopsis in the Synopsis section's code block.

    A line may hold two synopses side by side, or a synopsis and a
    parenthesized note, separated by runs of spaces."""
    section = text.split("\n## Synopsis", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    found = []
    for line in block.splitlines():
        for part in re.split(r"\s{2,}", line.strip()):
            if part.startswith("aioflux"):
                found.append(part)
    return found


SYNOPSES = cli_synopses(GUIDE)

B = "cli-guide"  # the bucket every call below works in
T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One concrete command line; ``{b}``, ``{tmp}`` and ``{endpoint}`` are filled in."""

    argv: str
    stdout: str = ""  # a regex stdout must match


# Each synopsis of the page -> calls that use every flag it shows.
CLI_CALLS: dict[str, list[Call]] = {
    "aioflux ls [-l] [-r] [--json] URL": [
        Call("ls gs://{b}", r"(?m)^gs://{b}/data/$"),
        Call("ls gs://{b}/data/", r"gs://{b}/data/a\.txt"),
        Call("ls -l -r gs://{b}/data/", r"12\s.*gs://{b}/data/sub/c\.txt"),
        Call("ls --json gs://{b}/data/", r'"url": "gs://{b}/data/a\.txt"'),
        Call("ls {tmp}/tree", r"(?m)^file:///.*/tree/x/\nfile:///.*/tree/z\.txt$"),
    ],
    "aioflux stat URL": [
        Call("stat gs://{b}/data/a.txt", r'"size": 12'),
        Call("stat {tmp}/local.txt", r'"size": 11'),
    ],
    "aioflux cat URL": [
        Call("cat gs://{b}/data/a.txt", r"^hello, a.txt$"),
        Call("cat file://{tmp}/tree/z.txt", r"^top$"),
    ],
    "aioflux cp [-r] [-j N] [--progress] SRC DST": [
        Call("cp --progress {tmp}/local.txt gs://{b}/up/local.txt", r"copied 1 file"),
        Call("cp gs://{b}/up/local.txt {tmp}/back.txt", r"copied 1 file"),
        Call("cp gs://{b}/up/local.txt gs://{b}/up/copy.txt", r"copied 1 file"),
        Call("cp -r -j 4 {tmp}/tree gs://{b}/tree", r"copied 2 file"),
        Call("cat gs://{b}/tree/x/y.txt", r"^deep$"),
        Call("cp -r {tmp}/tree file://{tmp}/tree-copy", r"copied 2 file"),
        Call("cat {tmp}/tree-copy/x/y.txt", r"^deep$"),
    ],
    "aioflux rm [-r] URL ...": [
        Call("rm gs://{b}/up/copy.txt gs://{b}/up/local.txt", r"removed 2 object"),
        Call("rm -r gs://{b}/tree/", r"removed 2 object"),
        Call("rm -r {tmp}/tree-copy", r"removed 2 object"),
    ],
    "aioflux du [--json] URL": [
        Call("du gs://{b}/data/", r"36.*3 objects"),
        Call("du --json gs://{b}/data/", r'"objects": 3'),
        Call("du {tmp}/tree", r"^9\t.*2 objects"),
    ],
    "aioflux clean [--dry-run] [--older-than 24h] URL": [
        # The upload was just opened: the 24 h default leaves it alone.
        Call("clean --dry-run gs://{b}", r"skipped .*younger than --older-than"),
        Call("clean --older-than 24h gs://{b}/data", r"0 multipart uploads"),
        Call("clean --older-than 0 gs://{b}/data", r"aborted upload .*gs://{b}/data/abandoned\.bin"),
        Call("clean {tmp}/tree", r"0 composed objects, 0 multipart uploads"),
    ],
    "aioflux bench [gs://bucket/prefix] [--json] [--plot out.png]": [
        Call("bench gs://{b}/bench --objects 20 --size 1024 --checkpoint-mb 1 --json "
             "--plot {tmp}/out.png", r'"op": "read"'),
    ],
    "aioflux ckpt list|history ROOT": [
        Call("ckpt list gs://{b}/run", r"gs://{b}/run/step-0+3/"),
        Call("ckpt history gs://{b}/run", r"(?m)^ +3 +ok "),
    ],
    "aioflux cache info|clear DIR": [
        Call("cache info {tmp}/cache", r"(?m)^entries +3$"),
        Call("cache clear {tmp}/cache", r"removed 3 entries"),
        Call("cache info {tmp}/cache", r"(?m)^entries +0$"),
    ],
    "aioflux rate show [--json] [URL]": [
        # The keys the world's client made on the emulator, not paced.
        Call("rate show gs://{b}", r"(?m)^http://127\.0\.0\.1:\d+ +{b} +read +no "),
        Call("rate show --json gs://{b}", r'"bucket": "{b}", "endpoint": "http://127'),
    ],
    "aioflux rate reset [URL]": [
        Call("rate reset gs://{b}", r"(?m)^reset \d+ key\(s\) in "),
    ],
    "aioflux shards ls|index|verify [--format tar|lines|parquet] [--json] [--force] "
    "[--decode json|utf-8|none] URL": [
        # Five samples in three tar shards written without sidecars, and a lines shard.
        Call("shards ls gs://{b}/shards/", r"(?m)^ *- +10240  none +gs://{b}/shards/s-00\.tar$"),
        Call("shards index gs://{b}/shards/", r"indexed 3 shards, 0 already indexed$"),
        Call("shards ls --format tar --json gs://{b}/shards/s-{{00..02}}.tar",
             r'"total": \{{"bytes": 30720, "indexed": 3, "samples": 5, "shards": 3\}}'),
        Call("shards index --force gs://{b}/shards/s-01.tar", r"indexed 1 shards, 0 already"),
        # A tar read as Parquet: its end is no footer.
        Call("shards ls --format parquet gs://{b}/shards/s-00.tar",
             r"(?m)^ *- +10240  damaged  gs://{b}/shards/s-00\.tar$"),
        Call("shards verify --format lines gs://{b}/text/", r"(?s)^ok +2 +indexed .*all good$"),
        Call("shards verify --decode utf-8 gs://{b}/text/", r"(?s)^ok +2 +indexed .*all good$"),
        Call("shards verify --decode json gs://{b}/text/t-0.jsonl", r"(?s)^ok +2 .*all good$"),
        Call("shards verify --decode none gs://{b}/shards/s-00.tar", r"(?s)^ok +2 .*all good$"),
    ],
    "aioflux emulator [--port N] [--s3-port N] [--profile gcs-like] [--p-503 0.1] "
    "[--bucket NAME]": [
        # Served in the background by test_cli_emulator_line; listed so the
        # flag check below covers this synopsis too.
        Call("emulator --port 0 --s3-port 0 --profile gcs-like --p-503 0.1 --p-429 0.05 "
             "--p-reset 0.01 --bucket {b}"),
    ],
    "aioflux --version": [Call("--version", r"^aioflux \d+\.\d+")],
    "aioflux demo [--url gs://bucket/prefix]": [
        Call("demo --url gs://{b}/demo --samples 200 --steps 12 --ckpt-every 4 --crash-at 8 "
             "--batch-size 16", r"removed the \d+ objects"),
    ],
}


def flags(synopsis: str) -> set[str]:
    """Options and literal subcommands a synopsis documents."""
    words = set(re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", synopsis))
    for alternatives in re.findall(r"\b[a-z][\w-]*(?:\|[a-z][\w-]*)+", synopsis):
        words.update(alternatives.split("|"))
    return words


def test_every_synopsis_has_calls() -> None:
    assert len(SYNOPSES) >= 10, SYNOPSES
    assert set(SYNOPSES) == set(CLI_CALLS), (
        "docs/guides/cli.md's Synopsis and CLI_CALLS disagree: "
        f"undocumented here {sorted(set(SYNOPSES) - set(CLI_CALLS))}, "
        f"no longer on the page {sorted(set(CLI_CALLS) - set(SYNOPSES))}")


@pytest.mark.parametrize("synopsis", list(CLI_CALLS))
def test_calls_use_every_documented_flag(synopsis: str) -> None:
    subcommand = synopsis.split()[1]
    used = {word for call in CLI_CALLS[synopsis] for word in call.argv.split()}
    assert subcommand in used
    assert flags(synopsis) <= used, flags(synopsis) - used


@pytest.fixture
def cli_world(tmp_path: Path) -> Iterator[tuple[Emulator, Path]]:
    """An emulator holding objects, a checkpoint run and an open multipart
    upload; local files to copy up."""
    import torch

    from aioflux.torch import CheckpointManager, ShardWriter

    (tmp_path / "local.txt").write_text("local file\n")
    (tmp_path / "tree" / "x").mkdir(parents=True)
    (tmp_path / "tree" / "x" / "y.txt").write_text("deep\n")
    (tmp_path / "tree" / "z.txt").write_text("top\n")
    with running_emulator() as emulator:
        emulator.create_bucket(B)
        with Client(endpoint=emulator.endpoint) as client:
            for name in ("data/a.txt", "data/b.txt", "data/sub/c.txt"):
                client.write(B, name, f"hello, {name.rsplit('/', 1)[1]}".encode())
            client.initiate_multipart(B, "data/abandoned.bin")  # what `clean` aborts
            # A disk cache holding those three, for `cache info|clear`.
            list(load_files([f"gs://{B}/data/{n}" for n in ("a.txt", "b.txt", "sub/c.txt")],
                            client=client, cache_dir=tmp_path / "cache"))
            manager = CheckpointManager(f"gs://{B}/run", client=client)
            for step in (1, 2, 3):
                manager.save({"w": torch.full((4,), float(step))}, step)
            manager.close()
        with ShardWriter(f"gs://{B}/shards/s-%02d.tar", max_count=2, index=False,
                         endpoint=emulator.endpoint) as sink:
            for i in range(5):
                sink.write({"__key__": f"k{i}", "txt": f"sample {i}"})
        with ShardWriter(f"gs://{B}/text/t-%d.jsonl", format="lines",
                         endpoint=emulator.endpoint) as sink:
            sink.write({"i": 1})
            sink.write({"i": 2})
        yield emulator, tmp_path


@dataclass(frozen=True)
class Ran:
    """What a command line did, as its shell sees it."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(argv: list[str], endpoint: str) -> Ran:
    """``aioflux ARGV`` in a process of its own (``python -m aioflux``)."""
    env = {**os.environ, "STORAGE_EMULATOR_HOST": endpoint}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-m", "aioflux", *argv], env=env, text=True,
                          capture_output=True, timeout=150, check=False)
    return Ran(proc.returncode, proc.stdout, proc.stderr)


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives a process (its message aside)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


@contextlib.contextmanager
def _as_a_process_of_its_own(env: dict[str, str]) -> Iterator[None]:
    """Give a command line what a fresh process would and take back what it
    changed: the environment, the working directory, the signal handlers,
    the root logger, the warning filters, and the portal (the background
    loop thread a command drives: a fresh one, shut down at the end as at
    a process's exit, so no session, task or thread outlives its line)."""
    environ, cwd = dict(os.environ), os.getcwd()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)}
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    outer_portal = portal._portal
    portal._portal = None
    os.environ.update(env)
    try:
        with warnings.catch_warnings():
            yield
    finally:
        own, portal._portal = portal._portal, outer_portal
        if own is not None:
            own.shutdown()
        for name in os.environ.keys() - environ.keys():
            del os.environ[name]
        os.environ.update(environ)  # not cleared first: other threads read it meanwhile
        os.chdir(cwd)
        for number, handler in handlers.items():
            signal.signal(number, handler)
        root.handlers[:], root.level = root_handlers, root_level


def run_in_process(argv: Sequence[str], endpoint: str) -> Ran:
    """``aioflux ARGV`` in this interpreter, through what the console script
    and ``python -m aioflux`` call (``sys.exit(main())``): its exit status,
    stdout (binary writes included, as ``cat`` makes) and stderr."""
    raw_out, raw_err = io.BytesIO(), io.BytesIO()
    out, err = (io.TextIOWrapper(raw, encoding="utf-8") for raw in (raw_out, raw_err))
    with (_as_a_process_of_its_own({"STORAGE_EMULATOR_HOST": endpoint}),
          contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)):
        try:
            code: object = main(list(argv))
        except SystemExit as exc:  # argparse's --version, --help and usage errors
            code = exc.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
        out.flush()
        err.flush()
    return Ran(_exit_status(code), *(raw.getvalue().decode("utf-8", "surrogateescape")
                                     for raw in (raw_out, raw_err)))


# The documented lines that run as a user runs them, in a process of their
# own: cat's bytes go down a real pipe, the endpoint comes from the process's
# environment.
IN_A_PROCESS = {"cat gs://{b}/data/a.txt"}


@pytest.mark.timeout(400)
def test_cli_lines_run(cli_world: tuple[Emulator, Path]) -> None:
    emulator, tmp = cli_world
    assert IN_A_PROCESS <= {c.argv for calls in CLI_CALLS.values() for c in calls}
    for synopsis, calls in CLI_CALLS.items():
        if synopsis.startswith("aioflux emulator"):
            continue
        for call in calls:
            argv = call.argv.format(b=B, tmp=tmp).split()
            run = run_cli if call.argv in IN_A_PROCESS else run_in_process
            proc = run(argv, emulator.endpoint)
            report = (f"{synopsis}\n  aioflux {' '.join(argv)}: exit {proc.returncode}\n"
                      f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
            assert proc.returncode == 0, report
            assert re.search(call.stdout.format(b=B), proc.stdout.strip()), report
    # What the calls did, seen through the client.
    with Client(endpoint=emulator.endpoint) as client:
        assert (tmp / "back.txt").read_text() == "local file\n"
        assert not (tmp / "tree-copy").exists()  # rm -r emptied it, and removed the directories
        assert not list(client.list_objects(B, "up/"))
        assert not list(client.list_objects(B, "tree/"))
        assert client.list_multipart_uploads(B) == []  # `clean` aborted it
        assert client.read(B, "data/a.txt") == b"hello, a.txt"
    assert (tmp / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _emulator_stats(endpoint: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{endpoint}/_aioflux_stats", timeout=10) as resp:
        return dict(json.load(resp))


async def _together(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """The results of ``coros`` run at once; the first failure cancels the rest."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(coro) for coro in coros]
    return [task.result() for task in tasks]


async def _faulty_traffic(endpoint: str) -> dict[str, int]:
    """Write 40 objects and read them back through the injected faults (10%
    503, 5% 429, 1% resets) a client retries; the emulator's counts.

    The faults are random: the reads go on until both kinds were drawn (80
    requests miss every 429 in ~2% of runs; 800 practically never). The
    requests of a round go out together: one after another they waited
    out the profile's latency 80 times."""
    expected = [bytes([i]) * 100 for i in range(40)]
    async with AsyncClient(endpoint=endpoint) as client:
        await _together(client.write(B, f"o{i}", data) for i, data in enumerate(expected))
        for _ in range(10):
            assert await _together(client.read(B, f"o{i}") for i in range(40)) == expected
            stats = await asyncio.to_thread(_emulator_stats, endpoint)
            if stats.get("injected_503", 0) and stats.get("injected_429", 0):
                break
    return stats


@pytest.mark.timeout(120)
def test_cli_emulator_line(tmp_path: Path) -> None:
    (call,) = CLI_CALLS[next(s for s in CLI_CALLS if s.startswith("aioflux emulator"))]
    proc = subprocess.Popen([sys.executable, "-m", "aioflux", *call.argv.format(b=B).split()],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("aioflux emulator listening on http://127.0.0.1:"), line
        endpoint = line.split()[-1]
        line = proc.stdout.readline()  # --s3-port 0: the S3 face, on a port of its own
        assert line.startswith("aioflux emulator S3 API on http://127.0.0.1:"), line
        s3_endpoint = line.split()[-1]
        assert s3_endpoint != endpoint
        stats = asyncio.run(_faulty_traffic(endpoint))
        assert stats.get("injected_503", 0) > 0 and stats.get("injected_429", 0) > 0, \
            stats  # the flags took
        result = run_in_process(["ls", "--json", f"gs://{B}"], endpoint)
        assert proc.poll() is None  # still serving
        assert result.returncode == 0, result.stderr
        urls = [entry["url"] for entry in json.loads(result.stdout) if "url" in entry]
        assert urls == [f"gs://{B}/o{i}" for i in sorted(range(40), key=str)]
        # The same objects through the S3 face.
        result = run_in_process(["ls", f"s3://{B}", "--s3-endpoint", s3_endpoint], endpoint)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [f"s3://{B}/o{i}" for i in sorted(range(40), key=str)]
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        if proc.stdout is not None:
            proc.stdout.close()


def exit_codes(text: str) -> dict[int, str]:
    """The Exit codes table: code -> meaning."""
    section = text.split("\n## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)): m.group(2).strip()
            for m in re.finditer(r"^\| (\d+) +\| (.+?) \|$", section, re.MULTILINE)}


def test_the_exit_codes_are_the_commands_own() -> None:
    documented = exit_codes(GUIDE)
    assert documented[0] == "done"
    help_text = subprocess.run([sys.executable, "-m", "aioflux", "--help"], text=True,
                               capture_output=True, check=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    epilog = " ".join(help_text.split()).split("Exit codes:", 1)[1]
    assert set(documented) == {int(c) for c in re.findall(r"(?<![\w-])(\d{1,3}) [a-z]", epilog)}


@pytest.mark.timeout(120)
def test_failures_exit_as_documented(tmp_path: Path) -> None:
    codes = exit_codes(GUIDE)
    with running_emulator() as emulator:
        emulator.create_bucket(B)
        # A failure and a usage error exit as a shell sees them, in a
        # process of their own; the rest take the same paths in this one.
        for run, argv, code, why in (
                (run_cli, ["cat", f"gs://{B}/missing"], 1, "no such object"),
                (run_in_process, ["ls", f"gs://{B}/nothing/"], 1, "a URL that matches nothing"),
                (run_in_process, ["cp", f"{tmp_path}/absent", f"gs://{B}/x"], 1,
                 "a local file that cannot be read"),
                (run_cli, ["ls", "ftp://x"], 2, "a URL of no store this version serves"),
                (run_in_process, ["ls", "--concurrency", "0", f"gs://{B}"], 2,
                 "a number out of range")):
            proc = run(argv, emulator.endpoint)
            assert proc.returncode == code, (argv, proc.stderr)
            assert why in codes[code], (why, codes[code])
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
