"""Latency, bandwidth and fault-injection knobs of the emulator.

Both classes are frozen: to change behaviour at runtime, assign a new
instance to ``Emulator.profile`` / ``Emulator.faults`` (built with
``dataclasses.replace`` if only one field changes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GCS_LIKE_PROFILE", "NO_FAULTS", "NO_PROFILE", "EmulatorProfile", "Faults"]


def _check_non_negative(name: str, value: float | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_positive(name: str, value: float | None) -> None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise ValueError(f"{name} must be a finite number > 0 or None, got {value!r}")


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")


@dataclass(frozen=True)
class EmulatorProfile:
    """Performance shape of the emulated service.

    Args:
        ttfb: seconds slept before the response headers of every object
            request (downloads, uploads, list, compose, delete...).
        bandwidth: bytes/s cap per response body and per request body
            (``None`` = unlimited): one connection's stream. A download body
            is sent in chunks of ~5 ms of data (16-256 KiB), each once its
            last byte is due; a body of one chunk leaves together with the
            response head.
        host_bandwidth: bytes/s cap on the sum of every response body
            (and apart from it of every request body) the emulator sends at
            once: the host's NIC, full duplex (``None`` = unlimited). The
            streams take turns a chunk at a time, so each gets an even
            share; with ``bandwidth`` too, N parallel reads get at most
            ``min(N * bandwidth, host_bandwidth)``.
        qps_limit: object reads/s, and apart from them object writes/s,
            above which the emulator answers 429 (a token bucket for each
            kind, as GCS and S3 limit reads and writes apart; ``None`` =
            unlimited).
        tail_fraction: the fraction of media GETs (object bodies, JSON or
            XML API) held back before their first byte by a heavy tail.
        tail_delay: ``(low, high)`` seconds, the tail's extra wait, drawn
            uniformly (on top of ``ttfb``).
        tail_seed: seed of the tail's RNG (``None`` = nondeterministic);
            assigning a profile restarts it.
        qps_burst: seconds of ``qps_limit`` each bucket holds: the requests
            it admits at once after a lull (at least one). Services do not
            say theirs, and it is often small: 0.1 s of 200/s admits 20.

    Raises:
        ValueError: a field is negative, zero where it must be positive, or
            not finite; ``tail_fraction`` outside [0, 1]; ``tail_delay`` not
            ``low <= high``.
    """

    ttfb: float = 0.0
    bandwidth: float | None = None
    host_bandwidth: float | None = None
    qps_limit: float | None = None
    tail_fraction: float = 0.0
    tail_delay: tuple[float, float] = (0.5, 2.0)
    tail_seed: int | None = None
    qps_burst: float = 1.0

    def __post_init__(self) -> None:
        _check_non_negative("ttfb", self.ttfb)
        _check_positive("bandwidth", self.bandwidth)
        _check_positive("host_bandwidth", self.host_bandwidth)
        _check_positive("qps_limit", self.qps_limit)
        if not math.isfinite(self.qps_burst) or self.qps_burst <= 0:
            raise ValueError(f"qps_burst must be a finite number > 0, got {self.qps_burst!r}")
        _check_probability("tail_fraction", self.tail_fraction)
        low, high = self.tail_delay
        _check_non_negative("tail_delay", low)
        _check_non_negative("tail_delay", high)
        if low > high:
            raise ValueError(f"tail_delay must be (low, high) with low <= high, "
                             f"got {self.tail_delay!r}")


@dataclass(frozen=True)
class Faults:
    """Fault probabilities, drawn per object request from ``random.Random(seed)``.

    Args:
        p_429: probability of answering 429 (rateLimitExceeded / SlowDown).
        p_503: probability of answering 503 (backendError / ServiceUnavailable).
        p_reset: probability that a download body is cut: headers and about
            half the body are sent, then the connection is aborted.
        p_stall: probability that a download pauses mid-body.
        stall_seconds: length of that pause.
        seed: seed of the fault RNG (``None`` = nondeterministic).

    Raises:
        ValueError: a probability is outside [0, 1] or ``stall_seconds`` < 0.
    """

    p_429: float = 0.0
    p_503: float = 0.0
    p_reset: float = 0.0
    p_stall: float = 0.0
    stall_seconds: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("p_429", "p_503", "p_reset", "p_stall"):
            _check_probability(name, getattr(self, name))
        if self.p_429 + self.p_503 > 1.0:
            raise ValueError("p_429 + p_503 must not exceed 1")
        _check_non_negative("stall_seconds", self.stall_seconds)

    @property
    def any(self) -> bool:
        """Whether any fault can fire (lets the hot path skip the RNG)."""
        return bool(self.p_429 or self.p_503 or self.p_reset or self.p_stall)


NO_PROFILE = EmulatorProfile()
"""No latency, no caps."""

NO_FAULTS = Faults()
"""No faults."""

GCS_LIKE_PROFILE = EmulatorProfile(ttfb=0.020, bandwidth=100e6, host_bandwidth=800e6)
"""20 ms to first byte, 100 MB/s per connection and 800 MB/s for the host
(a NIC's sum), as the perf harness uses."""
