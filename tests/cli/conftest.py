"""Fixtures of the command-line tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aioflux.testing import Emulator, running_emulator
from tests.conftest import unique_bucket

# How many objects `dataset` holds.
OBJECTS = 60


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
