"""Benchmarks: aioflux against its peers on one emulator, pair by pair.

Run ``python -m perf setup`` once to build the peers' virtual
environments, then ``python -m perf run read_small``. See ``harness.py``
for how a run is laid out and ``scenarios/`` for what is measured.
"""
