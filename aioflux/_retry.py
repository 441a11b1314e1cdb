"""Retry classification and capped exponential backoff with full jitter."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ._config import RetryPolicy
from ._errors import ChecksumMismatch, RateLimited, ServerError, StorageError, TransportError

__all__ = ["backoff_delay", "is_retryable", "retry_async"]

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
    return isinstance(exc, (ServerError, RateLimited, TransportError, ChecksumMismatch))


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
    cap = min(policy.max_delay, policy.initial_delay * policy.multiplier ** (attempt - 1))
    if not policy.jitter:
        return cap
    return (rng or random).uniform(0, cap)


async def retry_async(
    attempt_fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[BaseException, int, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run ``attempt_fn`` until it succeeds, fails for good, or time runs out.

    Args:
        attempt_fn: one attempt.
        policy: how many attempts and how long to wait between them.
        on_retry: called with (error, attempt number, delay) before sleeping.
        clock: monotonic clock (injectable for tests).

    Returns:
        The first successful result.

    Raises:
        StorageError: the last attempt's error, with ``attempts`` set and the
            count in its message when more than one attempt was made.
    """
    start = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await attempt_fn()
        except Exception as exc:
            if not is_retryable(exc) or attempt >= policy.max_attempts:
                _note_attempts(exc, attempt)
                raise
            delay = backoff_delay(policy, attempt, getattr(exc, "retry_after", None))
            if policy.deadline is not None and clock() - start + delay > policy.deadline:
                _note_attempts(exc, attempt)
                raise
            if on_retry is not None:
                on_retry(exc, attempt, delay)
            await asyncio.sleep(delay)


def _note_attempts(exc: Exception, attempts: int) -> None:
    if attempts > 1 and isinstance(exc, StorageError):
        exc.attempts = attempts
        exc.args = (f"{exc} (gave up after {attempts} attempts)",)
