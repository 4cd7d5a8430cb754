"""The per-project, per-category token bucket, on an injected clock."""

from __future__ import annotations

from errortrack.config import Settings
from errortrack.ingest.ratelimit import RateLimiter, header

LOGS = "log_item"
ERRORS = "error;default"


def test_off_by_default():
    assert Settings.from_env({}).rate_limit_per_second == 0
    limiter = RateLimiter(0, clock=lambda: 0.0)
    for _ in range(1000):
        assert limiter.take(1, {LOGS: 1000}) == {}


def test_limit_per_project_refills_with_time():
    now = [100.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    assert limiter.take(1, {LOGS: 10}) == {}  # one second's worth
    assert limiter.take(1, {LOGS: 1}) == {}  # the bucket may go into debt once...
    waits = limiter.take(1, {LOGS: 1})  # ...but not take more while in debt
    assert waits == {LOGS: 1}
    refused = limiter.refused(1, waits)
    assert refused.status == 429
    assert refused.headers() == {
        "Retry-After": "1",
        "X-Sentry-Rate-Limits": "1:log_item:project:rate_limited",
    }
    assert limiter.take(2, {LOGS: 5}) == {}  # another project has its own bucket
    now[0] += 0.5
    assert limiter.take(1, {LOGS: 3}) == {}  # half a second refilled 5 tokens
    now[0] += 10
    assert limiter.take(1, {LOGS: 10}) == {}  # refill capped at one second's worth...
    assert limiter.take(1, {LOGS: 1}) == {}  # ...then debt again
    assert limiter.take(1, {LOGS: 1}) == {LOGS: 1}


def test_one_envelope_larger_than_the_rate_gets_through_once():
    now = [0.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    assert limiter.take(1, {LOGS: 150}) == {}
    assert limiter.take(1, {LOGS: 1}) == {LOGS: 14}  # 140 items of debt at 10/s


def test_the_debt_one_envelope_leaves_is_at_most_a_minute():
    # 20,000 logs under 2/s went through, then the project's logs were refused for 2.8
    # hours (Retry-After: 9999) (ingest review, twenty-seventh session).
    now = [0.0]
    limiter = RateLimiter(2, clock=lambda: now[0])
    waits = limiter.take(1, {LOGS: 20_000, ERRORS: 1})
    assert waits == {LOGS: 1}  # refused; the error beside it paid
    assert limiter.refused(1, waits).headers() == {
        "Retry-After": "1",
        "X-Sentry-Rate-Limits": "1:log_item:project:rate_limited",
    }
    # Nothing was charged for the refused logs: a full bucket takes up to a minute's
    # debt beyond it, here 2 + 120 logs, and then waits that minute.
    assert limiter.take(1, {LOGS: 123}) == {LOGS: 1}
    assert limiter.take(1, {LOGS: 122}) == {}
    assert limiter.take(1, {LOGS: 1}) == {LOGS: 60}
    now[0] += 60
    assert limiter.take(1, {LOGS: 1}) == {}


def test_a_category_in_debt_is_not_charged_and_the_others_are():
    # One bucket for everything, answered with no categories ("all"), made SDKs drop a
    # project's errors for as long as a burst of logs was in debt.
    now = [0.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    assert limiter.take(1, {LOGS: 500}) == {}
    assert limiter.take(1, {ERRORS: 1}) == {}  # errors have their own bucket
    assert limiter.take(1, {LOGS: 1, ERRORS: 1}) == {LOGS: 49}  # the errors were paid
    assert limiter.take(1, {ERRORS: 8}) == {}  # 10 paid in all: the bucket is empty
    assert limiter.take(1, {ERRORS: 5}) == {}  # into debt
    waits = limiter.take(1, {LOGS: 1, ERRORS: 1})
    assert waits == {LOGS: 49, ERRORS: 1}
    assert header(waits) == "1:error;default:project:rate_limited, 49:log_item:project:rate_limited"
    assert limiter.refused(1, waits).headers()["Retry-After"] == "49"
    # A refused category paid nothing: its debt is what it was.
    now[0] += 49
    assert limiter.take(1, {LOGS: 1}) == {}


def test_the_header_is_what_sentry_sdk_reads_as_those_categories():
    from sentry_sdk.transport import _parse_rate_limits

    limiter = RateLimiter(10, clock=lambda: 0.0)
    limiter.take(1, {LOGS: 30, ERRORS: 25})
    waits = limiter.take(1, {LOGS: 1, ERRORS: 1})
    parsed = dict(_parse_rate_limits(header(waits), now=None))
    assert set(parsed) == {"log_item", "error", "default"} and None not in parsed


def test_a_refund_gives_back_what_a_refused_request_took():
    limiter = RateLimiter(10, clock=lambda: 0.0)
    limiter.take(1, {LOGS: 10})
    limiter.take(1, {LOGS: 5})  # in debt now...
    limiter.refund(1, {LOGS: 5})  # ...until that request turns out refused
    assert limiter.take(1, {LOGS: 1}) == {}
    assert limiter.take(1, {LOGS: 1}) == {LOGS: 1}
    limiter.refund(1, {LOGS: 100})  # never more than a full bucket
    assert limiter.take(1, {LOGS: 11}) == {}
    assert limiter.take(1, {LOGS: 1}) == {LOGS: 1}


def test_buckets_of_projects_no_longer_sending_are_let_go(monkeypatch):
    """Each project and category ever charged kept a bucket, deleted projects' too (soak
    review): past PRUNE_AT, buckets refilled to the full second (the same as none) go,
    and a project in debt keeps its debt."""
    from errortrack.ingest import ratelimit

    monkeypatch.setattr(ratelimit, "PRUNE_AT", 100)
    now = [0.0]
    limiter = RateLimiter(10, clock=lambda: now[0])
    assert limiter.take(1, {"log_item": 50}) == {}  # in debt for 4 s
    now[0] = 1.0
    for project in range(2, 101):
        limiter.take(project, {"error": 1})
    assert len(limiter._buckets) == 100
    now[0] = 2.0  # the others are full again; project 1 is still in debt
    limiter.take(500, {"error": 1})
    assert set(limiter._buckets) == {(1, "log_item"), (500, "error")}
    assert limiter.take(1, {"log_item": 1}) == {"log_item": 2}  # 20 of its 40 left
