"""perf/shaper.py: the emulator's network in front of a server with none."""

from __future__ import annotations

import time
import urllib.request

from aioflux.testing import running_emulator
from perf.shaper import shaped


def test_the_shaper_relays_with_the_profiles_latency_and_caps() -> None:
    data = bytes(range(256)) * 20_000  # 5.12 MB: 51 ms at 100 MB/s a connection
    with running_emulator() as emu:  # no profile of its own
        emu.create_bucket("shaped")
        emu.store.put("shaped", "x", data)
        with shaped(emu.endpoint) as front:
            assert front != emu.endpoint
            start = time.monotonic()
            with urllib.request.urlopen(f"{front}/shaped/x") as answer:
                assert answer.read() == data
            # At least the 20 ms before the answer and its bytes at 100 MB/s;
            # load only lengthens it.
            assert time.monotonic() - start >= 0.020 + len(data) / 100e6
        with shaped(emu.endpoint, "none") as front:
            assert front == emu.endpoint
