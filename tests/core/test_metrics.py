"""Latency histograms and request counters (aioflux/_core/metrics.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from aioflux._core import metrics
from aioflux._core.metrics import Attempt, LatencyHistogram, RequestStats


def test_percentiles_are_within_one_bucket_of_the_exact_ones() -> None:
    rng = random.Random(3)
    values = sorted(rng.lognormvariate(-4, 1.2) for _ in range(20_000))
    histogram = LatencyHistogram()
    for v in values:
        histogram.record(v)
    for q in (0.5, 0.95, 0.99):
        exact = values[int(q * len(values)) - 1]
        got = histogram.percentile(q)
        # the upper edge of the bucket holding the rank: >= exact, < 19% above
        assert exact <= got <= exact * 2 ** 0.25 * 1.0001, (q, exact, got)
    assert histogram.count == len(values)
    assert histogram.summary()["mean"] == pytest.approx(sum(values) / len(values))


def test_extremes_and_empty() -> None:
    histogram = LatencyHistogram()
    assert histogram.percentile(0.99) == 0.0
    histogram.record(0.0)
    histogram.record(1e6)  # beyond the top bucket: kept, not lost
    assert histogram.count == 2
    assert histogram.percentile(0.5) == pytest.approx(50e-6)
    assert histogram.percentile(1.0) > 800


def test_request_stats_feed_histograms_counters_and_observers() -> None:
    seen: list[object] = []

    class Recorder:
        def attempt(self, attempt: Attempt) -> None:
            seen.append(attempt)

        def retry(self, cause: str) -> None:
            seen.append(cause)

    stats = RequestStats()
    stats.observers.append(Recorder())
    stats.observe(Attempt("read", "GET", 0.02, response_bytes=100))
    stats.observe(Attempt("read", "GET", 0.5, error="ServerError"))
    stats.count_retry("ServerError")
    stats.observe(Attempt("list", "GET", 0.01))
    assert stats.bytes_received == 100
    assert stats.retries == 1 and stats.retries_by_cause == {"ServerError": 1}
    assert stats.latency["read"].count == 2 and stats.latency["list"].count == 1
    assert set(stats.summary()) == {"list", "read"}
    assert seen[-2] == "ServerError" and len(seen) == 4


def test_merged_histograms_hold_every_latency() -> None:
    a, b = LatencyHistogram(), LatencyHistogram()
    for v in (0.001, 0.002, 0.003):
        a.record(v)
    b.record(1.0)
    merged = LatencyHistogram.merged([a, b])
    assert merged.count == 4 and merged.total == pytest.approx(1.006)
    assert merged.percentile(1.0) >= 1.0 > merged.percentile(0.75)
    assert a.count == 3  # the inputs are left alone


def test_a_part_number_makes_no_operation_of_its_own() -> None:
    seen: list[str] = []

    class Recorder:
        def attempt(self, attempt: Attempt) -> None:
            seen.append(attempt.operation)

        def retry(self, cause: str) -> None:
            pass

    stats = RequestStats()
    stats.observers.append(Recorder())
    for number in range(1, 1001):  # a 1000-part upload, each part's op named for errors
        stats.observe(Attempt(f"upload part {number}", "PUT", 0.01))
    stats.observe(Attempt("copy part 12", "PUT", 0.01))
    stats.observe(Attempt("initiate multipart upload", "POST", 0.01))
    assert set(stats.summary()) == {"upload part", "copy part", "initiate multipart upload"}
    assert stats.latency["upload part"].count == 1000
    assert set(seen) == {"upload part", "copy part", "initiate multipart upload"}
    assert len(seen) == 1002


def test_a_first_attempt_from_another_thread_is_not_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's first attempt of an operation, let in where this
    thread makes the operation's histogram (a thread switch can fall
    there), is counted."""
    stats = RequestStats()
    switched: list[bool] = []

    class Switching(LatencyHistogram):
        def __init__(self) -> None:
            super().__init__()
            if not switched:
                switched.append(True)
                stats.observe(Attempt("read", "GET", 0.01))  # the other thread's

    monkeypatch.setattr(metrics, "LatencyHistogram", Switching)
    stats.observe(Attempt("read", "GET", 0.02))
    assert switched and stats.latency["read"].count == 2


def test_a_first_retry_from_another_thread_is_not_lost() -> None:
    """As above, for a retry's cause: Counter's ``__missing__`` (Python
    code) is where the other thread could come in."""
    stats = RequestStats()
    calls: list[str] = []

    class Switching(Counter[str]):
        def __missing__(self, key: str) -> int:
            if len(calls) == 1:
                calls.append(key)
                stats.count_retry(key)  # the other thread's
            return 0

    def count(cause: str) -> None:
        calls.append(cause)
        stats.count_retry(cause)

    stats.retries_by_cause = Switching()
    count("ServerError")
    assert stats.retries == len(calls)
    assert stats.retries_by_cause["ServerError"] == len(calls)
