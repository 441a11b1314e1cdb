"""Using aioflux's GCS emulator in your own pytest suite.

One line enables the fixtures: ``gcs_emulator`` (one emulator per test
session, on 127.0.0.1 and a free port) and ``gcs_bucket`` (a new, empty
bucket per test, deleted afterwards; the emulator's faults are reset too).
The plugin changes nothing global: hand ``gcs_emulator.endpoint`` to your
code (or ``monkeypatch.setenv("STORAGE_EMULATOR_HOST", ...)`` if it reads
the environment).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aioflux import Client, ClientConfig, RetryPolicy
from aioflux.testing import Emulator

pytest_plugins = ["aioflux.testing.pytest_plugin"]


@pytest.fixture
def client(gcs_emulator: Emulator) -> Iterator[Client]:
    """A client of the emulator, with short retry delays so fault tests stay fast."""
    config = ClientConfig(retry=RetryPolicy(max_attempts=10, initial_delay=0.005,
                                            max_delay=0.05))
    with Client(config, endpoint=gcs_emulator.endpoint) as c:
        yield c
