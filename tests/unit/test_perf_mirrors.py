"""Defaults the perf scenarios copy from the library (perf imports without aioflux)."""

from __future__ import annotations

from aioflux._engines.reader import DEFAULT_CHUNK_SIZE, DEFAULT_READ_AHEAD
from aioflux._engines.writer import DEFAULT_MAX_IN_FLIGHT, DEFAULT_PART_SIZE
from perf.scenarios import ckpt_load, ckpt_save


def test_checkpoint_scenarios_mirror_the_library_defaults() -> None:
    # A stale copy would compare aioflux against a bare loop run differently.
    assert ckpt_load._CHUNK_MIB * 2**20 == DEFAULT_CHUNK_SIZE
    assert ckpt_load._READ_AHEAD == DEFAULT_READ_AHEAD
    assert ckpt_save._PART_MIB * 2**20 == DEFAULT_PART_SIZE
    assert ckpt_save._IN_FLIGHT == DEFAULT_MAX_IN_FLIGHT
