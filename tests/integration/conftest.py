"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aioflux.testing import Emulator, running_emulator
from tests.cli_calls import call
from tests.conftest import unique_bucket

# How many objects `dataset` holds.
OBJECTS = 60


@pytest.fixture
def run(emulator: Emulator, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Call the CLI against the emulator: ``run(*argv)`` gives
    ``(exit code, stdout, stderr)``."""

    def invoke(*argv: str) -> tuple[int, str, str]:
        return call(capsys, *argv, "--endpoint", emulator.endpoint)

    return invoke


@pytest.fixture
def dataset() -> Iterator[tuple[Emulator, str]]:
    """An emulator of its own (its cap and its key in the node's rate table
    touch no other test), with ``OBJECTS`` small objects under ``d/`` of a
    bucket."""
    with running_emulator() as emu:
        bucket = unique_bucket("cli-objects")
        emu.create_bucket(bucket)
        for i in range(OBJECTS):
            emu.store.put(bucket, f"d/o{i}", f"object {i}".encode())
        yield emu, bucket
