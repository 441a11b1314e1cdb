"""``client.stats``: latency per operation, retries by cause, bytes; and their
OpenTelemetry export (aioflux.otel), read back with the SDK's in-memory reader."""

from __future__ import annotations

import os

import pytest

import aioflux
from aioflux import AsyncClient, Client, ClientConfig, InvalidArgument
from aioflux.otel import instrument
from aioflux.testing import Emulator, Faults
from tests.conftest import FAST_RETRY


async def test_stats_count_latency_retries_and_bytes(faults: Emulator, bucket: str) -> None:
    async with AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=faults.endpoint) as client:
        data = os.urandom(300_000)
        await client.write(bucket, "m", data)
        faults.faults = Faults(p_503=0.3, seed=5)
        for _ in range(20):
            assert await client.read(bucket, "m") == data
        faults.faults = Faults()
        stats = client.stats
        assert stats is client.transport.stats
        assert stats.retries > 0
        assert stats.retries_by_cause["ServerError"] == stats.retries
        assert stats.bytes_sent >= len(data)
        assert stats.bytes_received == 20 * len(data)  # a retried 503 carries no object bytes
        summary = stats.summary()
        assert summary["read"]["count"] == 20 + stats.retries
        assert 0 < summary["read"]["p50"] <= summary["read"]["p99"]
        assert summary["write"]["count"] >= 1


def test_sync_client_shares_the_stats(emulator: Emulator, bucket: str) -> None:
    with Client(endpoint=emulator.endpoint) as client:
        client.write(bucket, "s", b"x")
        assert client.stats is client.aio.stats
        assert client.stats.latency["write"].count == 1


async def test_otel_export_follows_the_http_client_conventions(faults: Emulator,
                                                               bucket: str) -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = sdk.MeterProvider(metric_readers=[reader])
    async with AsyncClient(ClientConfig(retry=FAST_RETRY), endpoint=faults.endpoint) as client:
        observer = instrument(client, meter_provider=provider)
        await client.write(bucket, "o", b"y" * 1000)
        faults.faults = Faults(p_503=0.5, seed=2)
        for _ in range(6):
            await client.read(bucket, "o")
        faults.faults = Faults()
        client.stats.observers.remove(observer)
        retries = client.stats.retries
    metrics = {m.name: m for rm in reader.get_metrics_data().resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics}
    duration = metrics["http.client.request.duration"]
    assert duration.unit == "s"
    points = duration.data.data_points
    ok_reads = [p for p in points if p.attributes["aioflux.operation"] == "read"
                and "error.type" not in p.attributes]
    assert ok_reads and ok_reads[0].count == 6
    assert ok_reads[0].attributes["http.request.method"] == "GET"
    assert ok_reads[0].attributes["server.address"] == "127.0.0.1"
    failed = [p for p in points if p.attributes.get("error.type") == "ServerError"]
    assert sum(p.count for p in failed) == retries > 0
    counted = metrics["aioflux.client.retries"].data.data_points
    assert sum(p.value for p in counted) == retries
    body = metrics["http.client.response.body.size"].data.data_points
    assert sum(p.sum for p in body) == 6 * 1000


def test_instrument_refuses_what_has_no_stats() -> None:
    with pytest.raises(InvalidArgument, match="no request stats"):
        instrument(object())


def test_the_parts_of_an_upload_share_one_operation(emulator: Emulator, bucket: str) -> None:
    with Client(endpoint=emulator.endpoint) as client:
        with aioflux.open(f"gs://{bucket}/parts", "wb", client=client) as f:
            f.write(b"p" * (17 << 20))  # three 8 MiB parts
        latency = client.stats.latency
    assert latency["upload part"].count == 3
    assert not [op for op in latency if op[-1].isdigit()], sorted(latency)
