import random

import pytest

from aioflux import NotFound, RetryPolicy, ServerError, TransportError
from aioflux._retry import backoff_delay, is_retryable, retry_async


def test_classification() -> None:
    assert is_retryable(ServerError("x"))
    assert is_retryable(TransportError("x"))
    assert not is_retryable(NotFound("x"))
    assert not is_retryable(ValueError("x"))


def test_backoff_is_capped_and_jittered() -> None:
    policy = RetryPolicy(initial_delay=1, max_delay=4, multiplier=2)
    rng = random.Random(0)
    for attempt in range(1, 10):
        cap = min(4, 2 ** (attempt - 1))
        assert 0 <= backoff_delay(policy, attempt, rng=rng) <= cap
    assert backoff_delay(RetryPolicy(jitter=False, initial_delay=1, max_delay=4), 5) == 4
    assert backoff_delay(policy, 1, retry_after=2.5) == 2.5
    assert backoff_delay(policy, 1, retry_after=100) == 4


async def test_retries_until_success() -> None:
    calls = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ServerError("503")
        return "ok"

    assert await retry_async(flaky, RetryPolicy(initial_delay=0, max_delay=0)) == "ok"
    assert len(calls) == 3


async def test_gives_up_with_attempt_count() -> None:
    async def always() -> None:
        raise ServerError("read gs://b/o failed: HTTP 503")

    with pytest.raises(ServerError, match="gave up after 4 attempts") as info:
        await retry_async(always, RetryPolicy(max_attempts=4, initial_delay=0, max_delay=0))
    assert info.value.attempts == 4


async def test_no_retry_on_not_found() -> None:
    calls = []

    async def missing() -> None:
        calls.append(1)
        raise NotFound("nope")

    with pytest.raises(NotFound):
        await retry_async(missing, RetryPolicy())
    assert len(calls) == 1


async def test_deadline_stops_retries() -> None:
    now = [0.0]
    calls = []

    async def slow_fail() -> None:
        calls.append(1)
        now[0] += 10
        raise ServerError("x")

    with pytest.raises(ServerError):
        await retry_async(slow_fail, RetryPolicy(max_attempts=100, initial_delay=0, max_delay=0,
                                                 deadline=25), clock=lambda: now[0])
    assert len(calls) == 3
