"""Defaults the perf scenarios copy from the library (perf imports without aioflux)."""

from __future__ import annotations

from aioflux import ReaderOptions, WriterOptions
from perf.scenarios import ckpt_load, ckpt_save


def test_checkpoint_scenarios_mirror_the_library_defaults() -> None:
    # A stale copy would compare aioflux against a bare loop run differently.
    assert ckpt_load._CHUNK_MIB * 2**20 == ReaderOptions().block_size
    assert ckpt_load._READ_AHEAD == ReaderOptions().read_ahead
    assert ckpt_save._PART_MIB * 2**20 == WriterOptions().part_size
    assert ckpt_save._IN_FLIGHT == WriterOptions().max_in_flight
