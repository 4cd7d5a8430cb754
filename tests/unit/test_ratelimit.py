"""The per-project, per-category token bucket, on an injected clock."""

from __future__ import annotations

import pytest

from errortrack.errors import RateLimited
from errortrack.ingest.ratelimit import RateLimiter

LOGS = "log_item"
ERRORS = "error;default"


def test_off_by_default():
    limiter = RateLimiter(0, clock=lambda: 0.0)
    for _ in range(1000):
        limiter.take(1, {LOGS: 1000})


def test_limit_per_project_refills_with_time():
    now = [100.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    limiter.take(1, {LOGS: 10})  # one second's worth
    limiter.take(1, {LOGS: 1})  # the bucket may go into debt once...
    with pytest.raises(RateLimited) as info:
        limiter.take(1, {LOGS: 1})  # ...but not take more while in debt
    assert info.value.status == 429
    assert info.value.headers() == {
        "Retry-After": "1",
        "X-Sentry-Rate-Limits": "1:log_item:project:rate_limited",
    }
    limiter.take(2, {LOGS: 5})  # another project has its own bucket
    now[0] += 0.5
    limiter.take(1, {LOGS: 3})  # half a second refilled 5 tokens
    now[0] += 10
    limiter.take(1, {LOGS: 10})  # refill is capped at one second's worth, then debt again


def test_one_envelope_larger_than_the_rate_gets_through_once():
    now = [0.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    limiter.take(1, {LOGS: 150})
    with pytest.raises(RateLimited) as info:
        limiter.take(1, {LOGS: 1})
    assert info.value.retry_after == 14  # 140 items of debt at 10/s


def test_a_burst_of_logs_does_not_stop_errors():
    # One bucket for everything, answered with no categories ("all"), made SDKs drop a
    # project's errors for as long as a burst of logs was in debt.
    limiter = RateLimiter(10, clock=lambda: 0.0)
    limiter.take(1, {LOGS: 2000})
    limiter.take(1, {ERRORS: 1})  # errors have their own bucket
    with pytest.raises(RateLimited) as info:
        limiter.take(1, {LOGS: 1, ERRORS: 1})  # an envelope needing both: the logs are over
    assert info.value.headers() == {
        "Retry-After": "199",
        "X-Sentry-Rate-Limits": "199:log_item:project:rate_limited",
    }
    limiter.take(1, {ERRORS: 9})
    limiter.take(1, {ERRORS: 5})  # into debt
    with pytest.raises(RateLimited) as info:
        limiter.take(1, {LOGS: 1, ERRORS: 1})
    assert info.value.headers() == {
        "Retry-After": "199",
        "X-Sentry-Rate-Limits": (
            "1:error;default:project:rate_limited, 199:log_item:project:rate_limited"
        ),
    }


def test_the_header_is_what_sentry_sdk_reads_as_those_categories():
    from sentry_sdk.transport import _parse_rate_limits

    limiter = RateLimiter(10, clock=lambda: 0.0)
    limiter.take(1, {LOGS: 30, ERRORS: 25})
    with pytest.raises(RateLimited) as info:
        limiter.take(1, {LOGS: 1, ERRORS: 1})
    parsed = dict(_parse_rate_limits(info.value.headers()["X-Sentry-Rate-Limits"], now=None))
    assert set(parsed) == {"log_item", "error", "default"} and None not in parsed


def test_a_refund_gives_back_what_a_refused_request_took():
    limiter = RateLimiter(10, clock=lambda: 0.0)
    limiter.take(1, {LOGS: 10})
    limiter.take(1, {LOGS: 5})  # in debt now...
    limiter.refund(1, {LOGS: 5})  # ...until that request turns out refused
    limiter.take(1, {LOGS: 1})
    with pytest.raises(RateLimited):
        limiter.take(1, {LOGS: 1})
    limiter.refund(1, {LOGS: 100})  # never more than a full bucket
    limiter.take(1, {LOGS: 11})
    with pytest.raises(RateLimited):
        limiter.take(1, {LOGS: 1})
