"""The per-project token bucket, on an injected clock."""

from __future__ import annotations

import pytest

from errortrack.errors import RateLimited
from errortrack.ingest.ratelimit import RateLimiter


def test_off_by_default():
    limiter = RateLimiter(0, clock=lambda: 0.0)
    for _ in range(1000):
        limiter.take(1, 1000)


def test_limit_per_project_refills_with_time():
    now = [100.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    limiter.take(1, 10)  # one second's worth
    limiter.take(1, 1)  # the bucket may go into debt once...
    with pytest.raises(RateLimited) as info:
        limiter.take(1, 1)  # ...but not take more while in debt
    assert info.value.status == 429
    assert info.value.headers() == {
        "Retry-After": "1",
        "X-Sentry-Rate-Limits": "1::project:rate_limited",
    }
    limiter.take(2, 5)  # another project has its own bucket
    now[0] += 0.5
    limiter.take(1, 3)  # half a second refilled 5 tokens
    now[0] += 10
    limiter.take(1, 10)  # refill is capped at one second's worth, then debt again


def test_one_envelope_larger_than_the_rate_gets_through_once():
    now = [0.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    limiter.take(1, 150)
    with pytest.raises(RateLimited) as info:
        limiter.take(1, 1)
    assert info.value.retry_after == 14  # 140 items of debt at 10/s


def test_a_refund_gives_back_what_a_refused_request_took():
    limiter = RateLimiter(10, clock=lambda: 0.0)
    limiter.take(1, 10)
    limiter.take(1, 5)  # in debt now...
    limiter.refund(1, 5)  # ...until that request turns out refused
    limiter.take(1, 1)
    with pytest.raises(RateLimited):
        limiter.take(1, 1)
    limiter.refund(1, 100)  # never more than a full bucket
    limiter.take(1, 11)
    with pytest.raises(RateLimited):
        limiter.take(1, 1)
