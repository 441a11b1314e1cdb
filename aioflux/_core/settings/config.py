"""Configuration as frozen dataclasses.

Every knob has a module-level ``DEFAULT_*`` constant and is validated in
``__post_init__``; per-call overrides go through ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Literal

from ..._version import DISTRIBUTION, __version__
from ..errors import InvalidArgument

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_RATE_DOUBLING",
    "DEFAULT_READ_STALL_TIMEOUT",
    "DEFAULT_THROTTLE_DEADLINE",
    "DEFAULT_USER_AGENT",
    "ClientConfig",
    "RetryPolicy",
    "Timeouts",
]

# Requests in flight. A 100 KiB read costs ~21 ms under the GCS-like profile
# (20 ms to first byte, 100 MB/s per connection), so 64 permits cap an epoch
# of 10,000 at ~3.3 s; measured (perf/scenarios/loader_small.py, lean reads,
# 2 cores): 64 -> 4.5 s, 128 -> 3.1 s, 192-256 -> 2.9-3.0 s (CPU-bound).
# 128 reads in flight at >= 25 ms each stay under the ~5,000 reads/s a fresh
# GCS bucket serves before it ramps up.
DEFAULT_MAX_CONCURRENCY = 128
# Names the distribution and version, so server-side logs tell releases apart.
DEFAULT_USER_AGENT = f"{DISTRIBUTION}/{__version__}"
DEFAULT_CONNECT_TIMEOUT = 30.0
# A read-stall timeout (no bytes for this long), not a total timeout: a 5 GiB
# body legitimately takes minutes, a silent socket does not.
DEFAULT_READ_STALL_TIMEOUT = 60.0
# aiohttp's default keep-alive; servers drop idle connections after a while
# (GCS after minutes), and a socket reused after that costs a retry.
DEFAULT_IDLE_TIMEOUT = 15.0
DEFAULT_MAX_ATTEMPTS = 8
DEFAULT_INITIAL_DELAY = 0.1
DEFAULT_MAX_DELAY = 16.0
DEFAULT_MULTIPLIER = 2.0
DEFAULT_DEADLINE = 300.0
# GCS asks that a bucket's request rate double no faster than every 20
# minutes (its request-rate guidelines); the adaptive rate grows no faster.
DEFAULT_RATE_DOUBLING = 1200.0
# Throttled this long with no request of the client succeeding, a request
# fails: the service is refusing, not metering.
DEFAULT_THROTTLE_DEADLINE = 300.0


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _require(condition: bool, cls: str, name: str, value: object, rule: str) -> None:
    if not condition:
        raise InvalidArgument(f"{cls}.{name} must be {rule}, got {value!r}")


def _typed(cls: str, name: str, value: object, kind: type | tuple[type, ...], what: str, *,
           optional: bool = False) -> None:
    # Checked before the range rules, so ``timeouts=5`` or ``retry='x'``
    # fails here naming the field rather than later inside a request.
    # ``bool`` is an int to Python but never a count or a duration here.
    if value is None and optional:
        return
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise InvalidArgument(f"{cls}.{name} must be {what}, got bool {value!r}")
    if not isinstance(value, kind):
        raise InvalidArgument(f"{cls}.{name} must be {what}"
                              f"{' or None' if optional else ''}, got "
                              f"{type(value).__name__} {value!r:.60}")


def _finite(cls: str, name: str, value: float | None) -> None:
    # inf passes every ">= 0" rule, then fails inside a request as a bare
    # OverflowError from asyncio or aiohttp (connect, idle, total), or sleeps
    # forever between attempts (a delay); NaN fails every comparison, so
    # the range rules already refuse it. None where a field allows it
    # means "no limit".
    try:
        finite = value is None or math.isfinite(value)
    except OverflowError:  # an int too large for a float (10**400)
        finite = False
    if not finite:
        unit = {"multiplier": "", "request_rate": " of requests/s"}.get(name, " of seconds")
        raise InvalidArgument(f"{cls}.{name} must be a finite number{unit}"
                              f"{' (None for no limit)' if name in ('total', 'deadline') else ''}"
                              f", got {value!r:.60}")


@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried.

    Delays follow capped exponential backoff with full jitter: attempt ``n``
    sleeps ``uniform(0, min(max_delay, initial_delay * multiplier**n))``, or
    the server's ``Retry-After`` when it sent one (capped at ``max_delay``).

    Args:
        max_attempts: total attempts including the first (1 disables retry);
            a read whose attempt brought bytes resumes from where it was cut
            without counting one (``deadline`` bounds a read's time).
        initial_delay: backoff base in seconds.
        max_delay: cap on one sleep in seconds.
        multiplier: growth factor per attempt.
        jitter: use full jitter (recommended; avoids synchronized retries).
        deadline: give up once this many seconds passed since the first
            attempt, whatever ``max_attempts`` says. ``None`` means no deadline.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_delay: float = DEFAULT_INITIAL_DELAY
    max_delay: float = DEFAULT_MAX_DELAY
    multiplier: float = DEFAULT_MULTIPLIER
    jitter: bool = True
    deadline: float | None = DEFAULT_DEADLINE

    def __post_init__(self) -> None:
        n = "RetryPolicy"
        _typed(n, "max_attempts", self.max_attempts, int, "an int")
        for name in ("initial_delay", "max_delay", "multiplier"):
            _typed(n, name, getattr(self, name), (int, float), "a number")
        _typed(n, "jitter", self.jitter, bool, "a bool")
        _typed(n, "deadline", self.deadline, (int, float), "a number", optional=True)
        for name in ("initial_delay", "max_delay", "multiplier", "deadline"):
            _finite(n, name, getattr(self, name))
        _require(self.max_attempts >= 1, n, "max_attempts", self.max_attempts, ">= 1")
        _require(self.initial_delay >= 0, n, "initial_delay", self.initial_delay, ">= 0")
        _require(self.max_delay >= self.initial_delay, n, "max_delay", self.max_delay,
                 ">= initial_delay")
        _require(self.multiplier >= 1, n, "multiplier", self.multiplier, ">= 1")
        _require(self.deadline is None or self.deadline > 0, n, "deadline", self.deadline,
                 "> 0 or None")

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries a failed request (a read cut after
        bringing bytes still resumes: see ``max_attempts``).

        Returns:
            RetryPolicy with ``max_attempts=1``.
        """
        return cls(max_attempts=1)


@dataclass(frozen=True)
class Timeouts:
    """Network timeouts in seconds.

    Args:
        connect: time to set up a new connection (TCP + TLS). Waiting for
            a free connection under ``connection_limit`` is not counted, as
            waiting for a permit is not.
        read_stall: longest silence allowed while waiting for response bytes.
        total: optional cap on a whole HTTP request; ``None`` (default)
            because a short total timeout kills large bodies
            (gcloud-aio-storage's 10 s). A read cut by it resumes in a new
            request where it brought bytes: ``RetryPolicy.deadline`` bounds
            a whole read.
        idle: how long an unused keep-alive connection stays open, in both
            connection pools (aiohttp's and the lean reads').
    """

    connect: float = DEFAULT_CONNECT_TIMEOUT
    read_stall: float = DEFAULT_READ_STALL_TIMEOUT
    total: float | None = None
    idle: float = DEFAULT_IDLE_TIMEOUT

    def __post_init__(self) -> None:
        n = "Timeouts"
        for name in ("connect", "read_stall", "idle"):
            _typed(n, name, getattr(self, name), (int, float), "a number of seconds")
        _typed(n, "total", self.total, (int, float), "a number of seconds", optional=True)
        for name in ("connect", "read_stall", "idle", "total"):
            _finite(n, name, getattr(self, name))
        _require(self.connect > 0, n, "connect", self.connect, "> 0")
        _require(self.read_stall > 0, n, "read_stall", self.read_stall, "> 0")
        _require(self.total is None or self.total > 0, n, "total", self.total, "> 0 or None")
        _require(self.idle > 0, n, "idle", self.idle, "> 0")


@dataclass(frozen=True)
class ClientConfig:
    """Settings of one ``AsyncClient``.

    Args:
        max_concurrency: one semaphore bounds every request of the client.
        connection_limit: most sockets open at once, aiohttp's and the lean
            reads' together; defaults to ``max_concurrency`` so a permit
            always finds a connection. aiohttp's connector is capped at it;
            the lean reads open a socket only while both pools together stay
            under it (closing their idle ones first, else waiting for one of
            theirs, else handing the read to aiohttp), and close a returning
            socket instead of keeping it idle when aiohttp's have grown.
        connection_limit_per_host: per-host limit of aiohttp's connector
            (0 = unlimited).
        timeouts: connect and read-stall timeouts.
        retry: retry policy for every request.
        user_agent: sent as ``User-Agent``; no control characters.
        verify_crc32c: check crc32c of whole-object reads and uploads (or,
            where an S3 object has none, the MD5 its ETag is).
        lean_reads: GET object bodies over aioflux's own keep-alive
            HTTP/1.1 connections (a third of aiohttp's CPU per request);
            unusual responses still go through aiohttp. ``False`` sends
            every request through aiohttp.
        ca_file: PEM file of extra CA certificates to trust (a private CA
            or a TLS-terminating proxy), on every request path. Pickles
            with the config, so spawned workers trust it too.
        ssl_context: the TLS settings of every connection, overriding
            ``ca_file`` and the system trust store. Not picklable: a
            ``Client`` meant for spawned workers should use ``ca_file``.
        request_rate: requests/s per bucket and kind (reads, writes), one
            budget for every process of the machine. ``"adaptive"``
            (default): nothing is paced until the service throttles (429,
            ``SlowDown``, ``ServerBusy``), then the rate adapts (AIMD). A
            number: paced at that rate from the first request, and below
            it while throttled. ``"off"`` (or None): no pacing, and a
            throttled attempt counts against ``retry.max_attempts`` like
            any failure.
        rate_doubling: while paced, the rate grows by at most a doubling
            per this many seconds (additively below 1,000 requests/s).
        throttle_deadline: with pacing on, a throttled attempt is retried
            without counting against ``retry.max_attempts`` or its
            deadline, until the client went this many seconds without a
            request succeeding; then ``RateLimited`` is raised.
    """

    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    connection_limit: int | None = None
    connection_limit_per_host: int = 0
    timeouts: Timeouts = field(default_factory=Timeouts)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    user_agent: str = DEFAULT_USER_AGENT
    verify_crc32c: bool = True
    lean_reads: bool = True
    ca_file: str | os.PathLike[str] | None = None
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    request_rate: float | Literal["adaptive", "off"] | None = "adaptive"
    rate_doubling: float = DEFAULT_RATE_DOUBLING
    throttle_deadline: float = DEFAULT_THROTTLE_DEADLINE

    def __post_init__(self) -> None:
        n = "ClientConfig"
        rate = self.request_rate
        if not (rate is None or rate in ("adaptive", "off")):
            _typed(n, "request_rate", rate, (int, float),
                   "'adaptive', 'off', None or a number of requests/s")
            _finite(n, "request_rate", rate)  # type: ignore[arg-type]
            _require(rate > 0, n, "request_rate", rate,  # type: ignore[operator]
                     "> 0 ('off' for no pacing)")  # type: ignore[operator]
        for name in ("rate_doubling", "throttle_deadline"):
            _typed(n, name, getattr(self, name), (int, float), "a number of seconds")
            _finite(n, name, getattr(self, name))
            _require(getattr(self, name) > 0, n, name, getattr(self, name), "> 0")
        _typed(n, "max_concurrency", self.max_concurrency, int, "an int")
        _typed(n, "connection_limit", self.connection_limit, int, "an int", optional=True)
        _typed(n, "connection_limit_per_host", self.connection_limit_per_host, int, "an int")
        _typed(n, "timeouts", self.timeouts, Timeouts, "a Timeouts")
        _typed(n, "retry", self.retry, RetryPolicy, "a RetryPolicy")
        _typed(n, "verify_crc32c", self.verify_crc32c, bool, "a bool")
        _typed(n, "lean_reads", self.lean_reads, bool, "a bool")
        _typed(n, "user_agent", self.user_agent, str, "a str")
        # Checked here, not when the first connection opens (a TypeError
        # from the ssl module or aiohttp, outside the aioflux error tree).
        _typed(n, "ca_file", self.ca_file, (str, os.PathLike), "a path", optional=True)
        _typed(n, "ssl_context", self.ssl_context, ssl.SSLContext, "an ssl.SSLContext",
               optional=True)
        _require(self.max_concurrency >= 1, n, "max_concurrency", self.max_concurrency, ">= 1")
        _require(self.connection_limit is None or self.connection_limit >= 1, n,
                 "connection_limit", self.connection_limit, ">= 1 or None")
        _require(self.connection_limit_per_host >= 0, n, "connection_limit_per_host",
                 self.connection_limit_per_host, ">= 0")
        if _CONTROL.search(self.user_agent):
            # CR/LF would split the request head (header injection).
            raise InvalidArgument(
                f"ClientConfig.user_agent: header 'User-Agent' contains a control character, "
                f"got {self.user_agent!r}")
        try:
            # HTTP header values are sent as latin-1 (aiohttp and the lean
            # reads alike); anything else failed at the first request with
            # a UnicodeEncodeError.
            self.user_agent.encode("latin-1")
        except UnicodeEncodeError:
            raise InvalidArgument(
                f"ClientConfig.user_agent: header 'User-Agent' must be latin-1 (ASCII is "
                f"safest), got {self.user_agent!r}") from None

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context every connection uses (None: the system's defaults).

        Returns:
            ``ssl_context``, else one trusting ``ca_file``, else None.
        """
        if self.ssl_context is not None:
            return self.ssl_context
        if self.ca_file is not None:
            return ssl.create_default_context(cafile=self.ca_file)
        return None

    @property
    def rate_ceiling(self) -> float | None:
        """The configured requests/s, or None (adaptive or off)."""
        rate = self.request_rate
        return None if rate is None or isinstance(rate, str) else float(rate)

    @property
    def paces(self) -> bool:
        """Whether requests go through the rate controller (not ``"off"``)."""
        return self.request_rate not in (None, "off")

    @property
    def effective_connection_limit(self) -> int:
        """Connector limit actually used (``connection_limit`` or concurrency)."""
        return self.connection_limit or self.max_concurrency

    def replace(self, **changes: object) -> ClientConfig:
        """Return a copy with ``changes`` applied (validated again).

        Args:
            **changes: field names and new values.

        Returns:
            A new ClientConfig.
        """
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
