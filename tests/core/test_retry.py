import random

import pytest

from aioflux import NotFound, RateLimited, RetryPolicy, ServerError, TransportError
from aioflux._core.settings.retry import backoff_delay, is_retryable, retry_async


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


def test_retry_after_parsing() -> None:
    from aioflux._core.settings.retry import parse_retry_after

    now = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after("3", lambda: now) == 3.0
    assert parse_retry_after(" 2.5 ", lambda: now) == 2.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", lambda: now) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", lambda: now) == 0.0  # past
    assert parse_retry_after("-5", lambda: now) == 0.0
    for unusable in (None, "", "soon-ish", "nan", "inf", "Wed, 21 Oct 2015 07:28:10"):
        assert parse_retry_after(unusable, lambda: now) is None, unusable
    # a huge value is clamped by the policy, not slept
    assert backoff_delay(RetryPolicy(max_delay=4), 1, retry_after=1e12) == 4


async def test_attempts_with_progress_do_not_count() -> None:
    done = [0]

    async def cut_but_moving() -> str:
        done[0] += 1
        if done[0] < 10:
            raise TransportError("cut")
        return "ok"

    policy = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0)
    assert await retry_async(cut_but_moving, policy, progress=lambda: done[0]) == "ok"
    # without progress the same failures give up at max_attempts
    done[0] = 0
    with pytest.raises(TransportError, match="gave up after 2 attempts"):
        await retry_async(cut_but_moving, policy, progress=lambda: 0)


async def test_a_slow_attempt_is_no_progress_whatever_it_moved() -> None:
    # A drip moves a few bytes an attempt (aioflux._net.slow_drip): resumed
    # forever if those counted, it gives up at max_attempts.
    done = [0]

    async def dripping() -> None:
        done[0] += 1
        slow = TransportError("too slow")
        slow.slow = True  # type: ignore[attr-defined]
        raise slow

    policy = RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0)
    with pytest.raises(TransportError, match="gave up after 3 attempts"):
        await retry_async(dripping, policy, progress=lambda: done[0])


async def test_progress_does_not_outlive_the_deadline() -> None:
    clock = iter(range(0, 1000, 10))
    done = [0]

    async def moving() -> None:
        done[0] += 1
        raise TransportError("cut")

    policy = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0, deadline=35)
    with pytest.raises(TransportError):
        await retry_async(moving, policy, progress=lambda: done[0],
                          clock=lambda: float(next(clock)))
    assert done[0] == 4  # t=10, 20, 30, 40 > 35: the deadline ends it


def test_tls_errors_are_final() -> None:
    from aioflux import TLSError

    assert not is_retryable(TLSError("x"))


async def test_a_long_patient_policy_keeps_backing_off_at_its_cap() -> None:
    # max_delay * 2 ** (n - 1) passes a float's range at n = 1025 (at 309
    # with multiplier=10): a policy patient enough to get there (a high
    # max_attempts, no deadline) must sleep max_delay, not raise OverflowError.
    policy = RetryPolicy(max_attempts=1200, initial_delay=0, max_delay=0, deadline=None)
    assert backoff_delay(RetryPolicy(jitter=False, max_delay=16), 2000) == 16
    assert backoff_delay(RetryPolicy(jitter=False, multiplier=10, max_delay=16), 400) == 16
    calls = []

    async def failing_long() -> str:
        calls.append(1)
        if len(calls) < 1100:
            raise ServerError("503")
        return "ok"

    assert await retry_async(failing_long, policy) == "ok"
    assert len(calls) == 1100


async def test_a_retry_after_past_the_throttle_deadline_is_what_the_error_names() -> None:
    # It said "no request ... succeeded for 0.0 s: past throttle_deadline=5 s",
    # of a throttle whose Retry-After asked for a million seconds at once.
    throttled = RateLimited("stat gs://b/o failed: HTTP 429", operation="stat", bucket="b",
                            name="o", status=429)
    throttled.retry_after = 1e6  # type: ignore[attr-defined]

    async def attempt() -> None:
        raise throttled

    with pytest.raises(RateLimited) as caught:
        await retry_async(attempt, RetryPolicy(), throttle_deadline=5.0)
    assert str(caught.value) == (
        "stat gs://b/o failed: HTTP 429 (throttled, no request of this client succeeded "
        "for 0.0 s, and the service asked to wait 1e+06 s more (Retry-After): past "
        "ClientConfig.throttle_deadline=5 s; 1 attempt)")
