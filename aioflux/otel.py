"""Export a client's request metrics through OpenTelemetry (``aioflux-storage[otel]``).

``instrument(client)`` makes every request attempt of ``client`` record into
OpenTelemetry instruments of the meter ``aioflux``, named after
OpenTelemetry's HTTP client conventions where they fit:

- ``http.client.request.duration`` (histogram, seconds) with
  ``http.request.method``, ``server.address``, ``server.port``,
  ``aioflux.operation`` and, for a failed attempt, ``error.type``;
- ``http.client.response.body.size`` (histogram, bytes) of object reads;
- ``aioflux.client.retries`` (counter) with ``error.type``, the cause.

The counters and histograms of ``client.stats`` are kept either way; this
only forwards them to whatever exporter the application configured.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ._core.errors import InvalidArgument
from ._core.metrics import Attempt, Observer, RequestStats

__all__ = ["instrument"]


def instrument(client: Any, meter_provider: Any = None) -> Observer:
    """Record ``client``'s requests into OpenTelemetry instruments.

    Args:
        client: an ``AsyncClient`` or ``Client`` (anything with ``stats``
            and ``transport.endpoint``).
        meter_provider: an OpenTelemetry ``MeterProvider`` (default: the
            global one).

    Returns:
        The observer added to ``client.stats.observers`` (remove it to stop).

    Raises:
        InvalidArgument: OpenTelemetry is not installed (the message names
            the extra), or ``client`` has no request stats.
    """
    try:
        from opentelemetry import metrics
    except ImportError:
        raise InvalidArgument("OpenTelemetry export needs the otel extra: pip install "
                              "'aioflux-storage[otel]'") from None
    stats = getattr(client, "stats", None)
    if not isinstance(stats, RequestStats):
        raise InvalidArgument(f"instrument: {type(client).__name__} has no request stats "
                              "(an AsyncClient or Client has)")
    from ._version import __version__

    provider = meter_provider or metrics.get_meter_provider()
    meter = provider.get_meter("aioflux", __version__)
    duration = meter.create_histogram(
        "http.client.request.duration", unit="s",
        description="Duration of each request attempt to the object store")
    body = meter.create_histogram(
        "http.client.response.body.size", unit="By",
        description="Object body bytes received per read attempt")
    retries = meter.create_counter(
        "aioflux.client.retries", unit="{retry}",
        description="Attempts retried, by the failure that caused them")
    endpoint = urlsplit(client.transport.endpoint)
    server = {"server.address": endpoint.hostname or "",
              "server.port": endpoint.port or (443 if endpoint.scheme == "https" else 80)}

    observer = _Forward(duration, body, retries, server)
    stats.observers.append(observer)
    return observer


class _Forward:
    """Forwards attempts and retries to OpenTelemetry instruments."""

    def __init__(self, duration: Any, body: Any, retries: Any,
                 server: dict[str, str | int]) -> None:
        self._duration = duration
        self._body = body
        self._retries = retries
        self._server = server

    def attempt(self, attempt: Attempt) -> None:
        attributes: dict[str, str | int] = {
            "http.request.method": attempt.method, "aioflux.operation": attempt.operation,
            **self._server}
        if attempt.error:
            attributes["error.type"] = attempt.error
        self._duration.record(attempt.seconds, attributes)
        if attempt.response_bytes:
            self._body.record(attempt.response_bytes, attributes)

    def retry(self, cause: str) -> None:
        self._retries.add(1, {"error.type": cause, **self._server})
