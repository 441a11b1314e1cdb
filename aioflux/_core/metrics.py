"""What a client did: counters and latency histograms, cheap enough for every request.

``RequestStats`` is what ``client.stats`` returns (the transport's counters):
requests, retries by cause, failures, bytes each way, lean-read fallbacks,
and a latency histogram per operation. Observers (the OpenTelemetry bridge
in :mod:`aioflux.otel`, tests) are called once per attempt. ``BatchStats``
is what a dataset's ``stats`` returns: how long each batch kept its
consumer waiting.

A histogram is a fixed array of log-spaced buckets, four per doubling (each
~19% wide) from 50 us to ~14 minutes: recording is one ``log2`` and one
increment, and a percentile is exact to within one bucket (the value
reported is the bucket's upper edge).
"""

from __future__ import annotations

import itertools
import math
import os
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

__all__ = ["Attempt", "BatchStats", "LatencyHistogram", "Observer", "RequestStats",
           "operation_kind"]

_STEPS_PER_DOUBLING = 4
_LOWEST = 50e-6
_BUCKETS = 96  # the top edge: 50 us x 2**(96 / 4), ~14 minutes


@dataclass(frozen=True, slots=True)
class Attempt:
    """One request attempt, as observers see it.

    Attributes:
        operation: what it did (``read``, ``list``, ``write``...).
        method: HTTP method.
        seconds: from taking a permit to the handler's return or failure.
        error: the failure's class name (``NotFound``, ``TransportError``...),
            or "" for success.
        response_bytes: body bytes received (media reads), else 0.
    """

    operation: str
    method: str
    seconds: float
    error: str = ""
    response_bytes: int = 0


def operation_kind(operation: str) -> str:
    """``operation`` without the part number an error message names
    (``upload part 7`` is ``upload part``).

    The latency histograms and the observers' attributes are kept per
    kind: one per part number made an upload of 10,000 parts 10,000
    histograms, and as many time series in a metrics backend.

    Args:
        operation: an attempt's operation.

    Returns:
        Its kind.
    """
    head, space, tail = operation.rpartition(" ")
    return head if space and tail.isdecimal() else operation


class Observer(Protocol):
    """Receives every attempt and every retry of a client."""

    def attempt(self, attempt: Attempt) -> None:
        """One attempt finished (well or not)."""
        ...

    def retry(self, cause: str) -> None:
        """A failed attempt (of class ``cause``) is retried."""
        ...


class LatencyHistogram:
    """Latencies in log-spaced buckets; percentiles to within one bucket."""

    __slots__ = ("count", "counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (_BUCKETS + 1)  # the last bucket takes everything above
        self.count = 0
        self.total = 0.0

    def record(self, seconds: float) -> None:
        """Add one latency.

        Args:
            seconds: the latency.
        """
        if seconds <= _LOWEST:
            index = 0
        else:
            index = min(_BUCKETS, math.ceil(math.log2(seconds / _LOWEST) * _STEPS_PER_DOUBLING))
        self.counts[index] += 1
        self.count += 1
        self.total += seconds

    def percentile(self, q: float) -> float:
        """The latency below which a fraction ``q`` of the recorded ones fall.

        Args:
            q: 0 < q <= 1 (0.5 for the median, 0.99 for p99).

        Returns:
            The upper edge of the bucket holding that rank, in seconds;
            0.0 when nothing was recorded.
        """
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                return float(_LOWEST * 2 ** (index / _STEPS_PER_DOUBLING))
        return float(_LOWEST * 2 ** (_BUCKETS / _STEPS_PER_DOUBLING))

    @classmethod
    def merged(cls, histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
        """One histogram holding the latencies of all of ``histograms``.

        Args:
            histograms: histograms to combine.

        Returns:
            A new histogram.
        """
        out = cls()
        for h in histograms:
            out.counts = [a + b for a, b in zip(out.counts, h.counts, strict=True)]
            out.count += h.count
            out.total += h.total
        return out

    def summary(self) -> dict[str, float]:
        """``count``, ``mean``, ``p50``, ``p95``, ``p99`` (seconds)."""
        return {"count": self.count, "mean": self.total / self.count if self.count else 0.0,
                "p50": self.percentile(0.5), "p95": self.percentile(0.95),
                "p99": self.percentile(0.99)}

    def __repr__(self) -> str:
        s = self.summary()
        return (f"LatencyHistogram(count={self.count}, p50={s['p50'] * 1e3:.1f} ms, "
                f"p95={s['p95'] * 1e3:.1f} ms, p99={s['p99'] * 1e3:.1f} ms)")


@dataclass
class RequestStats:
    """Counters of one client's requests (mutable; read them any time).

    Attributes:
        requests: attempts sent (a retry is one more).
        retries: attempts that were retried.
        retries_by_cause: retries per failure class (``ServerError``,
            ``RateLimited``, ``TransportError``, ``ChecksumMismatch``...).
        failures: logical requests that failed after their retries.
        bytes_sent: request body bytes.
        bytes_received: object body bytes read.
        lean_reads: media GETs answered over aioflux's own connections.
        lean_fallbacks: media GETs the lean client handed to aiohttp.
        throttled: attempts the service throttled (429, ``SlowDown``,
            ``ServerBusy``).
        budget_wait: seconds requests waited for the request rate's budget
            (summed over requests: 10 waiting 1 s together count 10).
        rates: the paced requests/s per bucket and kind (``"bucket read"``,
            ``"bucket write"``), as last seen; absent while not paced.
        latency: per operation, the latency of every attempt (per kind of
            operation: every ``upload part N`` is ``upload part``, see
            :func:`operation_kind`).
        observers: called with each :class:`Attempt`, its operation a kind
            (see :mod:`aioflux.otel`).

    A forked child's copy starts from zero (its observers kept): a
    DataLoader worker's ``client.stats`` counts the worker's requests, not
    its parent's before the fork again.
    """

    requests: int = 0
    retries: int = 0
    retries_by_cause: Counter[str] = field(default_factory=Counter)
    failures: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    lean_reads: int = 0
    lean_fallbacks: int = 0
    throttled: int = 0
    budget_wait: float = 0.0
    rates: dict[str, float] = field(default_factory=dict)
    latency: dict[str, LatencyHistogram] = field(default_factory=dict)
    observers: list[Observer] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        _LIVE[next(_KEYS)] = self

    def _restart(self) -> None:
        """Every count back to zero, the observers kept."""
        self.requests = self.retries = self.failures = 0
        self.bytes_sent = self.bytes_received = 0
        self.lean_reads = self.lean_fallbacks = self.throttled = 0
        self.budget_wait = 0.0
        self.rates = {}
        self.retries_by_cause = Counter()
        self.latency = {}

    def observe(self, attempt: Attempt) -> None:
        """Record one attempt and pass it to the observers.

        Args:
            attempt: what it did and how long it took.
        """
        operation = attempt.operation
        if operation[-1:].isdecimal():
            operation = operation_kind(operation)
            attempt = replace(attempt, operation=operation)
        histogram = self.latency.get(operation)
        if histogram is None:
            # One step (the GIL's): a transport serves several loops' threads
            # (an fsspec filesystem's), and between a test and an assignment
            # another thread's first attempt of this operation was lost.
            histogram = self.latency.setdefault(operation, LatencyHistogram())
        histogram.record(attempt.seconds)
        self.bytes_received += attempt.response_bytes
        for observer in self.observers:
            observer.attempt(attempt)

    def observe_many(self, operation: str, seconds: Sequence[float],
                     response_bytes: Sequence[int]) -> None:
        """Record successful attempts of one operation (a batch's), as
        :meth:`observe` records each; an ``Attempt`` is built only for
        observers.

        Args:
            operation: what they did.
            seconds: each one's latency.
            response_bytes: each one's body bytes received.
        """
        if self.observers or operation[-1:].isdecimal():
            for took, received in zip(seconds, response_bytes, strict=True):
                self.observe(Attempt(operation, "", took, "", received))
            return
        if not seconds:
            return
        histogram = self.latency.get(operation)
        if histogram is None:
            histogram = self.latency.setdefault(operation, LatencyHistogram())
        for took in seconds:
            histogram.record(took)
        self.bytes_received += sum(response_bytes)

    def count_retry(self, cause: str) -> None:
        """Count one retry of a failure of class ``cause``.

        Args:
            cause: the failure's class name.
        """
        self.retries += 1
        causes = self.retries_by_cause
        if cause not in causes:
            # Counter's __missing__ is Python code, where another thread's
            # first retry of this cause could come in between and be lost.
            causes.setdefault(cause, 0)
        causes[cause] += 1
        for observer in self.observers:
            observer.retry(cause)

    def summary(self) -> dict[str, dict[str, float]]:
        """Latency summaries per operation (see :meth:`LatencyHistogram.summary`)."""
        return {op: h.summary() for op, h in sorted(self.latency.items())}


# Every RequestStats of the process, for the reset in a forked child. Keyed
# by a serial number: a dataclass with eq is unhashable, so no WeakSet.
_LIVE: weakref.WeakValueDictionary[int, RequestStats] = weakref.WeakValueDictionary()
_KEYS = itertools.count()


def _restart_in_child() -> None:
    # The child's copies held the parent's counts, which the child would
    # report as its own (and forward to a metrics backend a second time).
    for stats in list(_LIVE.values()):
        stats._restart()


os.register_at_fork(after_in_child=_restart_in_child)


@dataclass
class BatchStats:
    """How long the batches of a dataset kept their consumer waiting.

    Kept per process: each DataLoader worker records the batches it builds
    in its own copy (the main process's stays empty with workers); read it
    inside the worker, or with ``num_workers=0``.

    Attributes:
        latency: seconds per batch, from the batch being asked for to its
            bytes being ready (transforms not included).
        samples: samples in those batches.
    """

    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    samples: int = 0

    def record(self, seconds: float, samples: int) -> None:
        """Add one batch.

        Args:
            seconds: how long it took.
            samples: how many samples it held.
        """
        self.latency.record(seconds)
        self.samples += samples

    def summary(self) -> dict[str, float]:
        """``batches``, ``samples``, ``mean``, ``p50``, ``p95``, ``p99`` (seconds)."""
        s = self.latency.summary()
        return {"batches": s["count"], "samples": self.samples, "mean": s["mean"],
                "p50": s["p50"], "p95": s["p95"], "p99": s["p99"]}
