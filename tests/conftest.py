"""Shared fixtures: our emulator, fake-gcs-server, moto's S3 server and
Azurite (tests/servers/azurite.py), one per test session.

Servers bind 127.0.0.1 on an ephemeral port; each test gets a fresh bucket
so tests never see each other's objects.
"""

from __future__ import annotations

import gc
import importlib.machinery
import itertools
import os
import sys
import types
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from aioflux import AsyncClient, Client, ClientConfig, RetryPolicy
from aioflux.testing import Emulator, Faults, fake_gcs_server, running_emulator
from tests import _abandoned_loaders
from tests._allowed_skips import (  # noqa: F401  (hooks: a skip outside the list fails the run)
    pytest_collectreport,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
from tests._hang_report import pytest_configure, pytest_runtest_call  # noqa: F401  (hooks)
from tests.cli.calls import call
from tests.servers.azurite import Azurite, running_azurite

# Bytecode is written for this run (Python's default): with
# PYTHONDONTWRITEBYTECODE set, as on some CI machines, every subprocess the
# suite starts (CLI runs, examples, spawned DataLoader workers, ~hundreds)
# compiled aioflux from source again, ~0.5 s of CPU each. Set here, in the
# first process, so xdist's workers and every child inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

_counter = itertools.count()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made (the test modules, torch's ~180,000
    objects, numpy's...): it lives for the whole session, and every full
    collection walked it again, 0.1-0.9 s each on this machine. A worker of
    ``-n 2`` spent ~50 s of the server tests' run in full collections
    before; objects made by tests are collected as before."""
    del session
    gc.collect()
    gc.freeze()
    _abandoned_loaders.track()


@pytest.fixture(autouse=True)
def _stop_abandoned_loader_workers() -> Iterator[None]:
    # A DataLoader iterator left to the collector waits 5 s a worker (see
    # tests/_abandoned_loaders.py), idle, in whichever test collects it.
    yield
    _abandoned_loaders.shut_down_the_abandoned()


# Fast retries keep fault-injection tests quick; the policy itself is
# unit-tested separately.
FAST_RETRY = RetryPolicy(max_attempts=10, initial_delay=0.001, max_delay=0.02)


@pytest.fixture(autouse=True)
def _no_emulator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's STORAGE_EMULATOR_HOST must not redirect the tests, nor a
    # machine's proxy the tests' https:// servers on 127.0.0.1.
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    # Nor a developer's quota project (it would bill requests to it).
    monkeypatch.delenv("GOOGLE_CLOUD_QUOTA_PROJECT", raising=False)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                 "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Never a developer's ~/.aws, AWS_* variables or instance metadata:
    # dummy credentials moto accepts, in us-east-1; a test of the chain
    # replaces them.
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    nowhere = tmp_path_factory.getbasetemp() / "no-aws-files"
    monkeypatch.setenv("AWS_CONFIG_FILE", str(nowhere / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(nowhere / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@dataclass(frozen=True)
class MotoS3:
    """moto's S3 server (a third-party S3 implementation), in this process.

    Attributes:
        endpoint: ``http://127.0.0.1:<port>``; give it to ``S3Store(endpoint=...)``
            (path-style addressing, credentials from the ``_aws_env`` fixture).
    """

    endpoint: str


def _moto_crc32c() -> None:
    """moto computes CRC32C with the ``crc32c`` package, and silently uses
    CRC32 without it (then every multipart upload fails ``ChecksumMismatch``,
    as it should: see the moto note of docs/guides/testing.md); give it google-crc32c's
    (aioflux's own dependency)."""
    try:
        import crc32c  # noqa: F401
    except ImportError:
        import google_crc32c

        shim = types.ModuleType("crc32c")
        # moto asks importlib whether the package exists.
        shim.__spec__ = importlib.machinery.ModuleSpec("crc32c", None)
        shim.crc32c = lambda data: google_crc32c.value(bytes(data))  # type: ignore[attr-defined]
        sys.modules["crc32c"] = shim


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    from moto.server import ThreadedMotoServer

    _moto_crc32c()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield MotoS3(f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never a developer's Azure account: a test names the store it uses.
    for name in list(os.environ):
        if name.startswith(("AZURE_STORAGE_", "AZURE_CLIENT_", "AZURE_TENANT_")):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """Azurite's blob service (installed from npm on first use)."""
    with running_azurite() as server:
        yield server


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    with running_emulator() as emu:
        yield emu


@pytest.fixture
def faults(emulator: Emulator) -> Iterator[Emulator]:
    """The emulator, with faults reset to none after the test."""
    yield emulator
    emulator.faults = Faults()


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[object]:
    with fake_gcs_server() as server:
        yield server


def unique_bucket(tag: str = "b") -> str:
    return f"{tag}-{os.getpid()}-{next(_counter)}"


@pytest.fixture
def bucket(emulator: Emulator) -> str:
    name = unique_bucket()
    emulator.create_bucket(name)
    return name


@pytest.fixture
def config() -> ClientConfig:
    return ClientConfig(max_concurrency=16, retry=FAST_RETRY)


@pytest.fixture
async def client(emulator: Emulator, config: ClientConfig) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(config, endpoint=emulator.endpoint) as c:
        yield c


@pytest.fixture
def sync_client(emulator: Emulator, config: ClientConfig) -> Iterator[Client]:
    with Client(config, endpoint=emulator.endpoint) as c:
        yield c


@pytest.fixture
def run(emulator: Emulator, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Call the CLI against the emulator: ``run(*argv)`` gives
    ``(exit code, stdout, stderr)``."""

    def invoke(*argv: str) -> tuple[int, str, str]:
        return call(capsys, *argv, "--endpoint", emulator.endpoint)

    return invoke
