"""Export a client's request metrics through OpenTelemetry (``aioflux-storage[otel]``).

``instrument(client)`` makes every request attempt of ``client`` record into
OpenTelemetry instruments of the meter ``aioflux``, named after
OpenTelemetry's HTTP client conventions where they fit:

- ``http.client.request.duration`` (histogram, seconds) with
  ``http.request.method``, ``server.address``, ``server.port``,
  ``aioflux.operation`` and, for a failed attempt, ``error.type``;
- ``http.client.response.body.size`` (histogram, bytes) of object reads;
- ``aioflux.client.retries`` (counter) with ``error.type``, the cause;
- ``aioflux.client.throttled`` (counter): attempts the service throttled
  (429, ``SlowDown``, ``ServerBusy``);
- ``aioflux.client.budget.wait`` (counter, seconds): time requests waited
  for the request rate's budget;
- ``aioflux.client.request.rate`` (gauge, requests/s) with
  ``aioflux.request.kind`` (``read``, ``write``): the paced rate, summed
  over the buckets being paced (none while nothing is).

Every attribute takes a bounded set of values: the operation is a kind
(``read``, ``upload part``: never a part number, bucket or object name),
``error.type`` a class name. The histograms advise bucket boundaries in
their units (the convention's for the duration, 1 KiB to 1 GiB for body
sizes): the SDK's default ones (0 to 10,000) are meant for milliseconds,
and put every request under 5 seconds in one bucket. A view of the
application's still takes precedence; an OpenTelemetry API older than 1.30
takes no advice, and then the SDK's defaults apply.

The counters and histograms of ``client.stats`` are kept either way; this
only forwards them to whatever exporter the application configured.
"""

from __future__ import annotations

import weakref
from typing import Any
from urllib.parse import urlsplit

from ._core.errors import InvalidArgument
from ._core.metrics import Attempt, Observer, RequestStats

__all__ = ["instrument"]

# OpenTelemetry's HTTP semantic conventions advise these for
# http.client.request.duration.
_DURATION_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0)
# Object reads, 1 KiB to 1 GiB, a bucket per factor of 4 (the conventions give none).
_BODY_BOUNDS = tuple(float(1024 * 4 ** k) for k in range(11))


def instrument(client: Any, meter_provider: Any = None) -> Observer:
    """Record ``client``'s requests into OpenTelemetry instruments.

    Args:
        client: an ``AsyncClient`` or ``Client``, an ``S3Store`` or an
            ``AzureStore`` (anything with ``stats`` and ``transport.endpoint``;
            a ``LocalStore`` sends no HTTP requests).
        meter_provider: an OpenTelemetry ``MeterProvider`` (default: the
            global one).

    Returns:
        The observer added to ``client.stats.observers`` (remove it to stop).
        A client already instrumented for this meter provider keeps its
        observer, which is returned: each attempt is recorded once (the
        global provider is one provider, whether it was set before the
        first call or between the calls).

    Raises:
        InvalidArgument: OpenTelemetry is not installed (the message names
            the extra), or ``client`` has no request stats or no HTTP endpoint.
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
    address = getattr(getattr(client, "transport", None), "endpoint", None)
    if not isinstance(address, str):
        raise InvalidArgument(f"instrument: {type(client).__name__} has no HTTP endpoint (its "
                              "attempts are no HTTP requests); read its stats instead")
    from ._version import __version__

    provider = meter_provider or metrics.get_meter_provider()
    for observer in stats.observers:
        # A second call (a library and its application both instrumenting
        # one client) would record every attempt into the same instruments
        # twice. One made for the global provider before the application
        # set it forwards to the one set later (OpenTelemetry's proxy does):
        # that one is the same provider.
        if isinstance(observer, _Forward) and (
                observer.provider is provider
                or (observer.for_global and provider is metrics.get_meter_provider())):
            return observer
    meter = provider.get_meter("aioflux", __version__)
    duration = _histogram(meter, "http.client.request.duration", "s",
                          "Duration of each request attempt to the object store",
                          _DURATION_BOUNDS)
    body = _histogram(meter, "http.client.response.body.size", "By",
                      "Object body bytes received per read attempt", _BODY_BOUNDS)
    retries = meter.create_counter(
        "aioflux.client.retries", unit="{retry}",
        description="Attempts retried, by the failure that caused them")
    endpoint = urlsplit(address)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    server: dict[str, str | int] = {"server.address": endpoint.hostname or "",
                                    "server.port": port}

    forward = _Forward(provider, provider is metrics.get_meter_provider(), duration, body,
                       retries, server)
    _observe_throttling(meter, stats, server)
    stats.observers.append(forward)
    return forward


def _observe_throttling(meter: Any, stats: RequestStats, server: dict[str, str | int]) -> None:
    """The request-rate controller's counts, read from ``stats`` at each collection."""
    from opentelemetry.metrics import Observation

    # Read through a weak reference: the meter provider outlives a client,
    # and its callbacks must not keep the client's stats alive.
    ref = weakref.ref(stats)

    def throttled(_options: Any) -> list[Any]:
        live = ref()
        return [] if live is None else [Observation(live.throttled, server)]

    def waited(_options: Any) -> list[Any]:
        live = ref()
        return [] if live is None else [Observation(live.budget_wait, server)]

    def rates(_options: Any) -> list[Any]:
        live = ref()
        if live is None:
            return []
        totals: dict[str, float] = {}
        for label, rate in list(live.rates.items()):
            kind = label.rpartition(" ")[2]
            totals[kind] = totals.get(kind, 0.0) + rate
        return [Observation(rate, {"aioflux.request.kind": kind, **server})
                for kind, rate in sorted(totals.items())]

    meter.create_observable_counter(
        "aioflux.client.throttled", callbacks=[throttled], unit="{request}",
        description="Attempts the object store throttled (429, SlowDown, ServerBusy)")
    meter.create_observable_counter(
        "aioflux.client.budget.wait", callbacks=[waited], unit="s",
        description="Seconds requests waited for the request rate's budget")
    meter.create_observable_gauge(
        "aioflux.client.request.rate", callbacks=[rates], unit="{request}/s",
        description="Requests/s the rate controller allows, by kind (while pacing)")


def _histogram(meter: Any, name: str, unit: str, description: str,
               bounds: tuple[float, ...]) -> Any:
    try:
        return meter.create_histogram(name, unit=unit, description=description,
                                      explicit_bucket_boundaries_advisory=bounds)
    except TypeError:  # an API (or SDK) before 1.30: no advice taken
        return meter.create_histogram(name, unit=unit, description=description)


class _Forward:
    """Forwards attempts and retries to OpenTelemetry instruments."""

    def __init__(self, provider: Any, for_global: bool, duration: Any, body: Any,
                 retries: Any, server: dict[str, str | int]) -> None:
        #: the meter provider the instruments came from
        self.provider = provider
        #: it was the global one (or its proxy, until the application sets it)
        self.for_global = for_global
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
