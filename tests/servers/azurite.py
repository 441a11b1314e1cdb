"""Azurite, Microsoft's Azure Storage emulator, for the tests: installed from
npm once per machine, started per test session on a free loopback port.

``npm install --prefix <cache> azurite@3.35.0`` runs the first time (3.35.0
is the last release that runs on Node 20; 3.36 and later need Node 21+),
under a file lock so that parallel test sessions install it once. The
cache is ``$AIOFLUX_AZURITE_DIR``, else ``~/.cache/aioflux/azurite-3.35.0``.
``azurite-blob`` then listens on port 0 (the port it took is read from its
first lines), keeps its blobs in a temporary directory, and is stopped by
its process id.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AZURITE_VERSION", "Azurite", "install_azurite", "running_azurite"]

AZURITE_VERSION = "3.35.0"
ACCOUNT = "devstoreaccount1"
#: The development account's key: public, in Microsoft's documentation.
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_LISTENING = re.compile(r"listens on (https?://127\.0\.0\.1:(\d+))")


@dataclass(frozen=True)
class Azurite:
    """A running ``azurite-blob``.

    Attributes:
        endpoint: the development account's blob root
            (``http://127.0.0.1:<port>/devstoreaccount1``).
        pid: its process id.
        location: the directory it keeps blobs in.
    """

    endpoint: str
    pid: int
    location: Path

    @property
    def account(self) -> str:
        """The development account."""
        return ACCOUNT

    @property
    def key(self) -> str:
        """The development account's key."""
        return KEY

    @property
    def connection_string(self) -> str:
        """A connection string for this server (account key)."""
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
                f"BlobEndpoint={self.endpoint};")


def _cache_dir() -> Path:
    configured = os.environ.get("AIOFLUX_AZURITE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "aioflux" / f"azurite-{AZURITE_VERSION}"


def install_azurite() -> Path:
    """``azurite-blob`` of Azurite 3.35.0, installed from npm the first time.

    Returns:
        The path of the ``azurite-blob`` launcher.

    Raises:
        RuntimeError: npm is not installed, or the install failed (its output
            is in the message).
    """
    root = _cache_dir()
    launcher = root / "node_modules" / ".bin" / "azurite-blob"
    done = root / ".installed"
    if done.is_file() and launcher.exists():
        return launcher
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("the Azure tests run Azurite, installed with npm (Node.js 20): "
                           "npm is not on PATH (apt-get install nodejs npm)")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be installing it
        if done.is_file() and launcher.exists():
            return launcher
        result = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix",
                                 os.fspath(root), f"azurite@{AZURITE_VERSION}"],
                                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=600, check=False)
        if result.returncode != 0 or not launcher.exists():
            raise RuntimeError(f"npm install azurite@{AZURITE_VERSION} failed "
                               f"({result.returncode}):\n{result.stdout[-2000:]}"
                               f"{result.stderr[-2000:]}")
        done.write_text(AZURITE_VERSION)
    return launcher


@contextlib.contextmanager
def running_azurite(*extra: str, start_timeout: float = 60.0) -> Iterator[Azurite]:
    """Run ``azurite-blob`` on a free loopback port until the block ends.

    Args:
        *extra: more command-line options (``--oauth basic``, ``--cert``...).
        start_timeout: seconds to wait for it to listen.

    Yields:
        The running server; it is stopped (by its pid) on exit.

    Raises:
        RuntimeError: it could not be installed or did not start.
    """
    launcher = install_azurite()
    with tempfile.TemporaryDirectory(prefix="azurite-") as tmp:
        location = Path(tmp) / "data"
        log = Path(tmp) / "azurite.log"
        argv = [os.fspath(launcher), "--blobHost", "127.0.0.1", "--blobPort", "0",
                "--location", os.fspath(location), "--loose", "--skipApiVersionCheck",
                "--disableTelemetry", *extra]
        # Its output goes to a file: a pipe nobody reads would fill up and
        # stop the server.
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            endpoint = _wait_listening(proc, log, start_timeout)
            yield Azurite(f"{endpoint}/{ACCOUNT}", proc.pid, location)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_listening(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        match = _LISTENING.search(text)
        if match is not None:
            return match.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"azurite-blob exited with code {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.05)
    raise RuntimeError(f"azurite-blob did not listen within {timeout} s")
