"""A job after a throttled one (issue 59): the node's shared rate state the
earlier job left does not hold the next job below what the service serves.

The emulator behind the tests' capping proxy (tests/servers/capping_proxy.py), at
a cap of 20 requests/s with a burst of 2, as the issue's table was
measured; the cap is then lifted. Instead of waiting out the seconds
without a throttle after which a state is an earlier job's, the test sets
the state's last throttle back (its clock is the state's own).

Bounded by counts: throttles, the seconds requests waited for budget (0:
none was paced) and the rate the stats report."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from aioflux import AsyncClient, ClientConfig
from aioflux._core.rate.shared_table import SharedRate
from aioflux._net.throttle import gate_key
from aioflux.testing import running_emulator
from tests.conftest import unique_bucket
from tests.servers.capping_proxy import CappingProxy

PAYLOAD = b"x" * 100
#: seconds the test sets the node's last throttle back by (the controller
#: restarts a state with none for REPROBE_QUIET_SECONDS = 3)
AGED = 30.0


@pytest.fixture
def lifted() -> Iterator[tuple[CappingProxy, str, str]]:
    """A capping proxy at 20/s (burst 2) in front of an emulator holding
    200 objects; yields the proxy, its endpoint and the bucket."""
    bucket = unique_bucket("lifted")
    with running_emulator() as emu:
        emu.create_bucket(bucket)

        async def seed() -> None:
            async with AsyncClient(ClientConfig(max_concurrency=32),
                                   endpoint=emu.endpoint) as client:
                await asyncio.gather(*(client.write(bucket, f"o{i}", PAYLOAD)
                                       for i in range(200)))

        asyncio.run(seed())
        proxy = CappingProxy(emu.endpoint, 20.0, "gcs", burst=2.0)
        with proxy as endpoint:
            yield proxy, endpoint, bucket


async def _job(endpoint: str, bucket: str, count: int, **config: Any) -> dict[str, Any]:
    async with AsyncClient(ClientConfig(max_concurrency=16, **config),
                           endpoint=endpoint) as client:
        got = await asyncio.gather(*(client.read(bucket, f"o{i}") for i in range(count)))
        assert got == [PAYLOAD] * count
        stats = client.stats
        return {"throttled": stats.throttled, "waited": stats.budget_wait,
                "rates": dict(stats.rates)}


def _capped_job_then_lift(proxy: CappingProxy, endpoint: str, bucket: str) -> SharedRate:
    """A job throttled by the cap (the node paces it), then the cap lifted
    and the node's last throttle set back: an earlier job's state."""
    first = asyncio.run(_job(endpoint, bucket, 40))
    node = SharedRate(gate_key(endpoint, bucket, False))
    assert first["throttled"] > 0 and node.paced, first
    with node.locked() as state:
        assert state.rate < 40.0, state
        state.throttle_at -= AGED
    proxy.rate = proxy.burst = 1e6
    return node


def test_a_job_after_the_cap_is_lifted_is_not_paced_by_the_earlier_one(
        lifted: tuple[CappingProxy, str, str]) -> None:
    # The table: 200 objects took 10.8 s after the cap was lifted
    # (0.06 s fresh), every request waiting for the pace the capped job left.
    proxy, endpoint, bucket = lifted
    node = _capped_job_then_lift(proxy, endpoint, bucket)
    throttled_before = proxy.stats["throttled"]
    second = asyncio.run(_job(endpoint, bucket, 200))
    assert second["waited"] == 0.0 and second["rates"] == {}, second
    assert second["throttled"] == 0 == proxy.stats["throttled"] - throttled_before
    assert not node.paced


def test_a_configured_rate_paces_at_its_number_after_an_adaptive_job(
        lifted: tuple[CappingProxy, str, str]) -> None:
    # request_rate=1000 was paced at the 61/s an earlier adaptive job left.
    proxy, endpoint, bucket = lifted
    _capped_job_then_lift(proxy, endpoint, bucket)
    second = asyncio.run(_job(endpoint, bucket, 200, request_rate=1000))
    assert second["throttled"] == 0 and second["rates"] == {f"{bucket} read": 1000.0}, second
