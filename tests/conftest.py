"""Shared fixtures: our emulator and fake-gcs-server, one per test session.

Servers bind 127.0.0.1 on an ephemeral port; each test gets a fresh bucket
so tests never see each other's objects.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator

import pytest

from aioflux import AsyncClient, Client, ClientConfig, RetryPolicy
from aioflux.testing import Emulator, Faults, fake_gcs_server, running_emulator

_counter = itertools.count()

# Fast retries keep fault-injection tests quick; the policy itself is
# unit-tested separately.
FAST_RETRY = RetryPolicy(max_attempts=10, initial_delay=0.001, max_delay=0.02)


@pytest.fixture(autouse=True)
def _no_emulator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's STORAGE_EMULATOR_HOST must not redirect the tests.
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


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
