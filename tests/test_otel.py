"""aioflux.otel without a server: what reaches OpenTelemetry's instruments
for attempts fed to a client's stats, read back with the SDK's in-memory
reader; and what instrument() says when it cannot work."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from aioflux import AsyncClient, InvalidArgument, LocalStore
from aioflux._core.metrics import Attempt
from aioflux.otel import instrument

sdk = pytest.importorskip("opentelemetry.sdk.metrics")
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def client(reader: InMemoryMetricReader) -> Iterator[AsyncClient]:
    # Never sends a request: the attempts are fed to its stats by hand.
    client = AsyncClient(endpoint="http://127.0.0.1:9")
    instrument(client, meter_provider=sdk.MeterProvider(metric_readers=[reader]))
    yield client


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    return [point for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics for metric in sm.metrics if metric.name == name
            for point in metric.data.data_points]


def _bucket(point: Any, value: float) -> int:
    """The index of the bucket of ``point`` that holds ``value``."""
    return sum(1 for bound in point.explicit_bounds if value > bound)


def test_request_durations_spread_over_buckets_in_seconds(client: AsyncClient,
                                                          reader: InMemoryMetricReader) -> None:
    for seconds in (0.004, 0.03, 0.3, 3.0):
        client.stats.observe(Attempt("read", "GET", seconds))
    (point,) = _points(reader, "http.client.request.duration")
    assert point.count == 4
    # The SDK's default bounds (0, 5, 10... 10000) are milliseconds' and put
    # all four in one bucket; OpenTelemetry's HTTP conventions advise these.
    assert list(point.explicit_bounds) == [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
                                           0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
    filled = [i for i, n in enumerate(point.bucket_counts) if n]
    assert filled == [_bucket(point, s) for s in (0.004, 0.03, 0.3, 3.0)]
    assert len(set(filled)) == 4


def test_body_sizes_spread_over_buckets_in_bytes(client: AsyncClient,
                                                 reader: InMemoryMetricReader) -> None:
    sizes = (100, 100_000, 10_000_000, 1_000_000_000)
    for size in sizes:
        client.stats.observe(Attempt("read", "GET", 0.01, response_bytes=size))
    (point,) = _points(reader, "http.client.response.body.size")
    assert point.count == 4 and point.sum == sum(sizes)
    assert len({_bucket(point, size) for size in sizes}) == 4
    assert [i for i, n in enumerate(point.bucket_counts) if n] == sorted(
        _bucket(point, size) for size in sizes)


def test_no_attribute_takes_a_part_number(client: AsyncClient,
                                          reader: InMemoryMetricReader) -> None:
    for number in range(1, 101):
        client.stats.observe(Attempt(f"upload part {number}", "PUT", 0.01))
        client.stats.observe(Attempt(f"upload part {number}", "PUT", 0.01, "ServerError"))
    points = _points(reader, "http.client.request.duration")
    assert len(points) == 2  # success and ServerError, not 200 series
    assert {p.attributes["aioflux.operation"] for p in points} == {"upload part"}
    assert sum(p.count for p in points) == 200
    assert points[0].attributes["server.address"] == "127.0.0.1"
    assert points[0].attributes["server.port"] == 9


def test_instrumenting_twice_records_each_attempt_once(reader: InMemoryMetricReader) -> None:
    client = AsyncClient(endpoint="http://127.0.0.1:9")
    provider = sdk.MeterProvider(metric_readers=[reader])
    first = instrument(client, meter_provider=provider)
    assert instrument(client, meter_provider=provider) is first
    other = InMemoryMetricReader()
    instrument(client, meter_provider=sdk.MeterProvider(metric_readers=[other]))
    client.stats.observe(Attempt("read", "GET", 0.01))
    client.stats.count_retry("ServerError")
    (point,) = _points(reader, "http.client.request.duration")
    assert point.count == 1
    (retried,) = _points(reader, "aioflux.client.retries")
    assert retried.value == 1
    (elsewhere,) = _points(other, "http.client.request.duration")  # a second provider's own
    assert elsewhere.count == 1


def test_a_store_without_http_requests_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgument, match="LocalStore has no HTTP endpoint"):
        instrument(LocalStore())


def test_without_opentelemetry_the_error_names_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("opentelemetry", "opentelemetry.metrics"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    client = AsyncClient(endpoint="http://127.0.0.1:9")
    with pytest.raises(InvalidArgument, match=r"otel extra.*aioflux-storage\[otel\]"):
        instrument(client)
    assert client.stats.observers == []


GLOBAL_SET_BETWEEN = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from aioflux import AsyncClient
from aioflux._core.metrics import Attempt
from aioflux.otel import instrument

client = AsyncClient(endpoint="http://127.0.0.1:9")
first = instrument(client)  # the global provider: OpenTelemetry's proxy until set
reader = InMemoryMetricReader()
provider = MeterProvider(metric_readers=[reader])
metrics.set_meter_provider(provider)
assert instrument(client) is first
assert instrument(client, meter_provider=provider) is first
client.stats.observe(Attempt("read", "GET", 0.01))
print([point.count for rm in reader.get_metrics_data().resource_metrics
       for sm in rm.scope_metrics for m in sm.metrics
       if m.name == "http.client.request.duration" for point in m.data.data_points])
"""


def test_instrumenting_before_and_after_the_global_provider_is_set_records_once() -> None:
    # A library instruments at import (the global provider is then
    # OpenTelemetry's proxy), its application again after setting the
    # provider: the proxy forwards to that provider, so two observers
    # recorded every attempt twice. In a child: the global provider can
    # be set once per process.
    done = subprocess.run([sys.executable, "-c", GLOBAL_SET_BETWEEN], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "[1]\n"), done.stderr


def test_throttling_is_exported(client: AsyncClient, reader: InMemoryMetricReader) -> None:
    stats = client.stats
    stats.throttled, stats.budget_wait = 7, 2.5
    stats.rates.update({"a read": 100.0, "b read": 50.0, "a write": 20.0})
    (throttled,) = _points(reader, "aioflux.client.throttled")
    (waited,) = _points(reader, "aioflux.client.budget.wait")
    assert throttled.value == 7 and waited.value == 2.5
    rates = {p.attributes["aioflux.request.kind"]: p.value
             for p in _points(reader, "aioflux.client.request.rate")}
    assert rates == {"read": 150.0, "write": 20.0}
