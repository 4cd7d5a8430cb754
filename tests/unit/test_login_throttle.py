"""The login failure counter: lockout, doubling delay, window, memory bound, reservations,
and the budget of a client address across emails."""

from __future__ import annotations

import pytest

from errortrack.api.client_ip import ProxyAddress
from errortrack.auth.throttle import ADDRESS_FREE_FAILURES, LoginThrottle
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
    t.release("a@example.com", "1.2.3.4")  # check() reserves an attempt
    _fail(t, 1)
    waits = []
    for _ in range(6):
        with pytest.raises(RateLimited) as caught:
            t.check("a@example.com", "1.2.3.4")
        waits.append(caught.value.retry_after)
        clock.advance(seconds=caught.value.retry_after)
        _fail(t, 1)
    assert waits == [60, 120, 240, 480, 900, 900]


def test_a_lockout_holds_however_many_lockouts_came_before():
    """One try as each lockout ends keeps the count: at 46 failures the delay's
    2**41 minutes overflowed timedelta, ``failed`` raised (a 500) before the lockout was
    set, and every try after that passed the check (eleven hours in)."""
    clock = FrozenClock()
    t = LoginThrottle(clock)
    _fail(t, 5)
    for _ in range(100):
        with pytest.raises(RateLimited) as caught:
            t.check("a@example.com", "1.2.3.4")
        clock.advance(seconds=caught.value.retry_after)
        _fail(t, 1)
    assert t._pairs.entries[("a@example.com", "1.2.3.4")].failures == 105
    with pytest.raises(RateLimited) as caught:
        t.check("a@example.com", "1.2.3.4")
    assert caught.value.retry_after == 900


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
        t.failed("a@example.com", f"10.0.{i // 256}.{i % 256}")
    assert len(t._pairs.entries) <= 100
    assert len(t._addresses.entries) <= 100


def test_junk_failures_never_evict_a_lockout():
    # Failing logins for thousands of other emails must not lift a pair's lockout, nor
    # reset the doubling of one whose lockout has run out.
    clock = FrozenClock()
    t = LoginThrottle(clock, max_entries=100)
    for _ in range(8):  # as the failures of parallel checks land
        t.failed("victim@example.com", "1.2.3.4")
    _fail(t, 5, email="other@example.com")
    clock.advance(minutes=1)  # other's 1-minute lockout is over; victim's 8 are not
    for i in range(1000):
        clock.advance(microseconds=1)
        # From many addresses: one address has a budget of its own across emails.
        _fail(t, 1, email=f"junk{i}@example.com", ip=f"10.0.{i // 256}.{i % 256}")
    with pytest.raises(RateLimited):
        t.check("victim@example.com", "1.2.3.4")
    _fail(t, 1, email="other@example.com")  # the one try after a lockout: now 2 min
    with pytest.raises(RateLimited) as caught:
        t.check("other@example.com", "1.2.3.4")
    assert caught.value.retry_after == 120
    # New pairs are still admitted: nobody else is locked out.
    t.check("someone@example.com", "1.2.3.4")
    assert len(t._pairs.entries) <= 100


def test_a_table_full_of_lockouts_grows_rather_than_refusing_new_pairs():
    clock = FrozenClock()
    t = LoginThrottle(clock, max_entries=10)
    for i in range(20):
        _fail(t, 5, email=f"locked{i}@example.com", ip=f"10.0.0.{i}")
    t.check("newcomer@example.com", "9.9.9.9")
    assert len(t._pairs.entries) == 21


def test_parallel_attempts_are_reserved_before_the_password_check():
    # check() for attempts whose failures have not landed yet: only the 5 free ones pass.
    clock = FrozenClock()
    t = LoginThrottle(clock)
    passed = 0
    for _ in range(32):
        try:
            t.check("a@example.com", "1.2.3.4")
            passed += 1
        except RateLimited as e:
            # The attempts in flight land within a password check (and may succeed).
            assert e.retry_after == 1
    assert passed == 5
    for _ in range(5):
        t.failed("a@example.com", "1.2.3.4")
    with pytest.raises(RateLimited) as locked:
        t.check("a@example.com", "1.2.3.4")
    assert locked.value.retry_after == 60  # now the lockout's own delay
    # After the lockout only one attempt at a time.
    clock.advance(minutes=1)
    t.check("a@example.com", "1.2.3.4")
    with pytest.raises(RateLimited):
        t.check("a@example.com", "1.2.3.4")


def test_success_and_release_free_the_reservation():
    clock = FrozenClock()
    t = LoginThrottle(clock)
    for _ in range(5):
        t.check("a@example.com", "1.2.3.4")
    t.succeeded("a@example.com", "1.2.3.4")
    for _ in range(4):
        t.check("b@example.com", "1.2.3.4")
    t.release("b@example.com", "1.2.3.4")
    t.check("b@example.com", "1.2.3.4")


def test_an_address_failing_for_many_emails_is_locked_out_for_every_email():
    """Junk logins with a new email each time, from one address, were never limited: the
    lockout counts per (email, address). The address has a budget across emails."""
    clock = FrozenClock()
    t = LoginThrottle(clock)
    for i in range(ADDRESS_FREE_FAILURES - 1):
        _fail(t, 1, email=f"junk{i}@example.com")
    # A success does not clear the address's count (an attacker's own account would).
    t.check("mine@example.com", "1.2.3.4")
    t.succeeded("mine@example.com", "1.2.3.4")
    _fail(t, 1, email="one-more@example.com")
    for email in ("new@example.com", "mine@example.com"):
        with pytest.raises(RateLimited) as caught:
            t.check(email, "1.2.3.4")
        assert caught.value.retry_after == 60
        assert "from this address" in caught.value.message
    t.check("new@example.com", "5.6.7.8")  # that address only
    # The same doubling as a pair's: one try after the lockout, then 2 min.
    clock.advance(seconds=60)
    _fail(t, 1, email="again@example.com")
    with pytest.raises(RateLimited) as caught:
        t.check("other@example.com", "1.2.3.4")
    assert caught.value.retry_after == 120
    # A quarter of an hour without a failure: a fresh budget.
    clock.advance(minutes=16)
    t.check("other@example.com", "1.2.3.4")


def test_a_pair_locked_out_longer_than_its_address_says_its_own_wait():
    clock = FrozenClock()
    t = LoginThrottle(clock)
    for _ in range(8):  # as the failures of parallel checks land: the pair, 8 min
        t.failed("a@example.com", "1.2.3.4")
    for i in range(ADDRESS_FREE_FAILURES - 8):
        _fail(t, 1, email=f"junk{i}@example.com")  # the address: 1 min
    with pytest.raises(RateLimited) as caught:
        t.check("a@example.com", "1.2.3.4")
    assert caught.value.retry_after == 480
    with pytest.raises(RateLimited) as caught:
        t.check("b@example.com", "1.2.3.4")
    assert caught.value.retry_after == 60


def test_parallel_attempts_from_one_address_are_reserved_too():
    clock = FrozenClock()
    t = LoginThrottle(clock)
    passed = 0
    for i in range(64):
        try:
            t.check(f"junk{i}@example.com", "1.2.3.4")
            passed += 1
        except RateLimited as e:
            assert e.retry_after == 1
    assert passed == ADDRESS_FREE_FAILURES
    # Attempts that did not check a password (no hashing slot: 503) free their place.
    for i in range(ADDRESS_FREE_FAILURES):
        t.release(f"junk{i}@example.com", "1.2.3.4")
    t.check("late@example.com", "1.2.3.4")


def test_a_proxys_address_has_no_address_budget():
    """Behind a proxy that is not trusted every client has its address: a budget there
    would let one attacker lock every login out. The pair's lockout still holds."""
    clock = FrozenClock()
    t = LoginThrottle(clock)
    proxy = ProxyAddress("10.0.0.5")
    for i in range(5 * ADDRESS_FREE_FAILURES):
        _fail(t, 1, email=f"junk{i}@example.com", ip=proxy)
    t.check("someone@example.com", proxy)
    t.succeeded("someone@example.com", proxy)
    assert not t._addresses.entries
    _fail(t, 5, ip=proxy)
    with pytest.raises(RateLimited):
        t.check("a@example.com", proxy)
    # The same address not as a proxy's (no forwarding header) has its budget untouched.
    t.check("b@example.com", "10.0.0.5")
    t.release("b@example.com", "10.0.0.5")


def test_junk_addresses_never_evict_an_address_lockout():
    clock = FrozenClock()
    t = LoginThrottle(clock, max_entries=100)
    for i in range(ADDRESS_FREE_FAILURES):
        _fail(t, 1, email=f"junk{i}@example.com")
    for i in range(1000):
        clock.advance(microseconds=1)
        _fail(t, 1, ip=f"10.0.{i // 256}.{i % 256}")
    with pytest.raises(RateLimited):
        t.check("new@example.com", "1.2.3.4")
    assert len(t._addresses.entries) <= 100
    t.check("new@example.com", "9.9.9.9")  # new addresses are still admitted


def test_failures_below_the_lockout_count_within_a_window_of_the_first():
    """Only a window without any failure forgot them: one mistype every 14 minutes from
    an office's address (which no success clears) added up, and the whole office was
    locked out after 4 h 26 min though no quarter of an hour held more than two
    failures (diff review, thirty-second session)."""
    clock = FrozenClock()
    t = LoginThrottle(clock)
    for i in range(3 * ADDRESS_FREE_FAILURES):
        _fail(t, 1, email=f"typo{i}@example.com")
        clock.advance(minutes=14)
        t.check("someone@example.com", "1.2.3.4")  # never locked out
        t.succeeded("someone@example.com", "1.2.3.4")
    # Within a window they still add up, for an address and for a pair alike.
    for i in range(ADDRESS_FREE_FAILURES):
        _fail(t, 1, email=f"x{i}@example.com")
    with pytest.raises(RateLimited):
        t.check("other@example.com", "1.2.3.4")
    _fail(t, 4, email="y@example.com", ip="5.6.7.8")
    clock.advance(minutes=10)
    _fail(t, 1, email="y@example.com", ip="5.6.7.8")
    with pytest.raises(RateLimited):
        t.check("y@example.com", "5.6.7.8")
