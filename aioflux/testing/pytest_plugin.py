"""Opt-in pytest plugin: ``pytest_plugins = ["aioflux.testing.pytest_plugin"]``.

Provides a session-scoped ``gcs_emulator`` (an :class:`Emulator` on its own
thread) and a function-scoped ``gcs_bucket`` (a fresh bucket name, deleted
afterwards). It sets no environment variable or other global state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from aioflux.testing._errors import ApiError
from aioflux.testing._server import Emulator, running_emulator

__all__ = ["gcs_bucket", "gcs_emulator"]


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[Emulator]:
    """A running emulator shared by the session (no latency, no faults).

    Yields:
        The emulator; use ``.endpoint`` to reach it.
    """
    with running_emulator() as emu:
        yield emu


@pytest.fixture
def gcs_bucket(gcs_emulator: Emulator) -> Iterator[str]:
    """A new, uniquely named, empty bucket on ``gcs_emulator``.

    The emulator's profile and faults are put back after the test as they
    were when it started (none, unless a session-wide fixture set some), so
    a test that flips them cannot leak into the next one, failing or not.

    Yields:
        The bucket name.
    """
    name = f"test-{uuid.uuid4().hex[:16]}"
    gcs_emulator.create_bucket(name)
    profile, faults = gcs_emulator.profile, gcs_emulator.faults
    try:
        yield name
    finally:
        gcs_emulator.profile, gcs_emulator.faults = profile, faults
        try:
            gcs_emulator.store.delete_bucket(name, force=True)
        except ApiError:
            pass  # the test deleted it itself
