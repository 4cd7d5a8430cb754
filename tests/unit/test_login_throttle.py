"""The login failure counter: lockout, doubling delay, window, memory bound."""

from __future__ import annotations

import pytest

from errortrack.auth.throttle import LoginThrottle
from errortrack.errors import RateLimited
from tests.support import FrozenClock


def _fail(t, n, email="a@example.com", ip="1.2.3.4"):
    for _ in range(n):
        t.check(email, ip)
        t.failed(email, ip)


def test_five_free_failures_then_a_doubling_lockout_capped_at_15_minutes():
    clock = FrozenClock()
    t = LoginThrottle(clock)
    _fail(t, 4)
    t.check("a@example.com", "1.2.3.4")
    _fail(t, 1)
    waits = []
    for _ in range(6):
        with pytest.raises(RateLimited) as caught:
            t.check("a@example.com", "1.2.3.4")
        waits.append(caught.value.retry_after)
        clock.advance(seconds=caught.value.retry_after)
        _fail(t, 1)
    assert waits == [60, 120, 240, 480, 900, 900]


def test_failures_outside_the_window_are_forgotten():
    clock = FrozenClock()
    t = LoginThrottle(clock)
    _fail(t, 4)
    clock.advance(minutes=16)
    _fail(t, 4)
    t.check("a@example.com", "1.2.3.4")


def test_success_clears_and_keys_are_separate():
    clock = FrozenClock()
    t = LoginThrottle(clock)
    _fail(t, 5)
    t.check("b@example.com", "1.2.3.4")
    t.check("a@example.com", "5.6.7.8")
    t.succeeded("a@example.com", "1.2.3.4")
    t.check("a@example.com", "1.2.3.4")


def test_memory_stays_bounded():
    clock = FrozenClock()
    t = LoginThrottle(clock, max_entries=100)
    for i in range(1000):
        t.failed(f"user{i}@example.com", "1.2.3.4")
    assert len(t._entries) <= 100
