"""Retry classification and capped exponential backoff with full jitter."""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import (
    ChecksumMismatch,
    RateLimited,
    ServerError,
    StorageError,
    TLSError,
    TransportError,
)
from .config import RetryPolicy

__all__ = ["backoff_delay", "is_retryable", "parse_retry_after", "retry_async"]

T = TypeVar("T")


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed attempt may succeed when repeated.

    408, 429, 5xx, connection failures, timeouts, truncated bodies and
    checksum mismatches are transient; every other 4xx is the caller's bug
    or a real state (404, 412...) and fails at once.

    Args:
        exc: the exception an attempt raised.

    Returns:
        True if another attempt is worthwhile.
    """
    if isinstance(exc, TLSError):
        return False  # the same certificate is rejected again
    return isinstance(exc, (ServerError, RateLimited, TransportError, ChecksumMismatch))


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait, or None to back off normally.

    Args:
        value: the header: delay-seconds or an HTTP date. Anything else
            (``soon-ish``, ``nan``) is ignored rather than trusted.
        now: wall clock (tests pin it).

    Returns:
        Seconds (a date in the past gives 0), or None if absent or unparsable.
        The caller clamps to its policy's ``max_delay``.
    """
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None  # RFC 9110 dates are GMT; a zoneless one is not one
        seconds = when.timestamp() - now()
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def backoff_delay(
    policy: RetryPolicy,
    attempt: int,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to sleep before attempt ``attempt + 1``.

    Args:
        policy: the retry policy.
        attempt: attempts made so far (>= 1).
        retry_after: the server's ``Retry-After`` in seconds, if sent.
        rng: random source (tests pass a seeded one).

    Returns:
        The delay in seconds.
    """
    if retry_after is not None:
        return min(max(retry_after, 0.0), policy.max_delay)
    try:
        cap = min(policy.max_delay, policy.initial_delay * policy.multiplier ** (attempt - 1))
    except OverflowError:
        # Past a float's range (attempt 1025 at x2): far past the cap. A
        # patient policy (no deadline, thousands of attempts) gets there.
        cap = policy.max_delay
    if not policy.jitter:
        return cap
    return (rng or random).uniform(0, cap)


async def retry_async(
    attempt_fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[BaseException, int, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[], int] | None = None,
    throttle_deadline: float | None = None,
    progressed_at: Callable[[], float] | None = None,
) -> T:
    """Run ``attempt_fn`` until it succeeds, fails for good, or time runs out.

    Args:
        attempt_fn: one attempt.
        policy: how many attempts and how long to wait between them.
        on_retry: called with (error, attempt number, delay) before sleeping.
        clock: monotonic clock (injectable for tests).
        progress: a counter that grows when an attempt achieved something
            (bytes of a resumed read). A failed attempt that moved it does
            not count against ``max_attempts`` and restarts the backoff,
            unless it failed as too slow (its ``slow`` attribute); the
            deadline still applies.
        throttle_deadline: a throttled attempt (:class:`RateLimited`) is
            retried outside ``max_attempts`` and the policy's deadline (a
            rate controller paces the retry), after the server's
            ``Retry-After`` in full, until this many seconds passed with no
            progress: since the first throttle of this request or
            ``progressed_at()``, whichever is later. None: a throttle is an
            ordinary failure.
        progressed_at: when (on ``clock``) something last succeeded (any
            request of the client).

    Returns:
        The first successful result.

    Raises:
        StorageError: the last attempt's error, with ``attempts`` set and the
            count in its message when more than one attempt was made.
    """
    start = clock()
    attempt = 0
    # Attempts that failed without progress: what max_attempts and the
    # backoff count. A resumed read cut every few MiB keeps going as long as
    # each attempt adds bytes.
    stuck = 0
    throttled_since: float | None = None
    while True:
        attempt += 1
        before = progress() if progress is not None else 0
        try:
            return await attempt_fn()
        except Exception as exc:
            if throttle_deadline is not None and isinstance(exc, RateLimited):
                # Not a failure of this request: the rate controller paces
                # the retry, the server's Retry-After is waited in full.
                now = clock()
                if throttled_since is None:
                    throttled_since = now
                since = max(throttled_since,
                            progressed_at() if progressed_at is not None else throttled_since)
                retry_after = getattr(exc, "retry_after", None)
                # A little jitter even so: a retry never spins on a path
                # the controller does not pace.
                delay = retry_after if retry_after is not None else backoff_delay(policy, 1)
                if now + delay - since > throttle_deadline:
                    _note_throttled(exc, attempt, now - since, throttle_deadline, retry_after)
                    raise
            else:
                # A transfer cut for moving too little (aioflux._net.slow_drip)
                # moved a few bytes: not progress, or a drip would be read forever.
                moved = (progress is not None and progress() > before
                         and not getattr(exc, "slow", False))
                stuck = 0 if moved else stuck + 1
                if not is_retryable(exc) or stuck >= policy.max_attempts:
                    _note_attempts(exc, attempt)
                    raise
                delay = backoff_delay(policy, max(stuck, 1), getattr(exc, "retry_after", None))
                if policy.deadline is not None and clock() - start + delay > policy.deadline:
                    _note_attempts(exc, attempt)
                    raise
            if on_retry is not None:
                on_retry(exc, attempt, delay)
            await asyncio.sleep(delay)


def _note_throttled(exc: RateLimited, attempts: int, stalled: float, deadline: float,
                    retry_after: float | None) -> None:
    exc.attempts = attempts
    tried = f"{attempts} attempt{'s' if attempts > 1 else ''}"
    why = f"no request of this client succeeded for {stalled:.1f} s"
    if retry_after is not None:
        # What takes the wait past the deadline when it comes at once.
        why += f", and the service asked to wait {retry_after:g} s more (Retry-After)"
    exc.args = (f"{exc} (throttled, {why}: past ClientConfig.throttle_deadline="
                f"{deadline:g} s; {tried})",)


def _note_attempts(exc: Exception, attempts: int) -> None:
    if attempts > 1 and isinstance(exc, StorageError):
        exc.attempts = attempts
        exc.args = (f"{exc} (gave up after {attempts} attempts)",)
