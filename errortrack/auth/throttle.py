"""Slowing down password guessing: a failure counter per (email, client IP), an IPv6
client's IP being its /64 (``api/client_ip.client_key``), and one per client IP across
emails.

After ``FREE_FAILURES`` failed logins within ``WINDOW`` for one email from one IP, that
pair is locked out for a delay that doubles with every further failure (1 min, 2, 4, ...
capped at 15 min); attempts during a lockout answer 429 with ``Retry-After`` without
checking the password at all (so they cost no argon2 time either). A success clears the
counter. The same applies whether or not the email exists, so the throttle reveals
nothing either.

The pair's lockout never stops an address that tries a new email each time: junk logins
from one address, a new email each, cost a password check apiece and were never limited
(security review). So the address has a budget of its own, across emails: after
``ADDRESS_FREE_FAILURES`` (20) failures within ``WINDOW`` from one IP, every login from it,
for any email, is locked out alike (the same delays, 1 min doubling to 15). 20 is four
people's worth of lockouts in a quarter of an hour from one office's NAT, more than a
team's typing errors, and an attacker's argon2 work per address per 15 minutes falls from
unbounded to 20 checks (about 8 s of the two cores) and then one per lockout (16 or 64
clients looping junk logins for 15 s: 20 were 401s, the other ~5,000 429s). A success
does not clear the address's count, else one account of the attacker's own, logged into
every 19 guesses, would lift it. It locks out only that address (an IPv6 /64), never
anyone else; which is why it is not applied to an address that stands for many clients:
a proxy's (``api/client_ip.ProxyAddress``: a request from a trusted proxy that names no
client, or from an untrusted one that sends a forwarding header, as one does behind a
proxy when ``ERRORTRACK_TRUSTED_PROXIES`` is not set). There every client has the same
address, and one attacker's 20 failures would lock everyone's logins out. A client
that sends such a header itself to escape the budget is where it was before the budget:
the pair's lockout holds, and the bound on password checks (``auth/passwords.py``) keeps
the API answering.

``check`` reserves the attempt under the lock, before the slow password check, and counts
it as in flight (for the pair and for the address) until ``failed``, ``succeeded`` or
``release``: parallel requests cannot all pass the check before the first failure is
counted, so a pair never has more checks running than it has failures left (one at a time
once it has been locked out), nor has an address.

Memory: pairs and addresses are two tables, each bounded alike. At ``MAX_ENTRIES`` stale
entries go first, then the oldest entries below their lockout threshold with no attempt in
flight. A locked-out entry (one that reached the threshold within the window) is never
dropped, else failing logins for junk emails (or from junk addresses) would lift a
lockout; and new pairs or addresses are never refused, else one attacker could lock out
everyone. So a table full of lockouts grows instead: each such entry costs five failed
password checks (twenty for an address) and is gone 15 minutes after its last failure or
lockout, which keeps the growth proportional to the argon2 work an attacker can make us
do.

Kept in memory, per process: a restart forgets it, and with N gunicorn workers an
attacker gets up to N times the budget. That is enough to turn online guessing from
thousands of tries a minute into a handful an hour; a shared store is not worth it here.
Behind a reverse proxy every client has the proxy's IP unless the operator lists it in
``ERRORTRACK_TRUSTED_PROXIES`` (the key then takes the client from X-Forwarded-For,
``api/client_ip.py``); without that the lockout works per email alone (still per email,
so one attacker cannot lock out everyone), and the address budget only where the proxy
cannot be told from a client (one that sends no forwarding header).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

from errortrack.api.client_ip import ProxyAddress
from errortrack.errors import RateLimited
from errortrack.state import Clock

FREE_FAILURES = 5
# Failures from one address across emails: see the module's docstring for the number.
ADDRESS_FREE_FAILURES = 20
WINDOW = dt.timedelta(minutes=15)
FIRST_DELAY = dt.timedelta(minutes=1)
MAX_DELAY = dt.timedelta(minutes=15)
# Bound the memory an attacker can make us use by cycling through emails (per table).
MAX_ENTRIES = 10_000


IN_FLIGHT_WAIT = dt.timedelta(seconds=1)

K = TypeVar("K", bound=Hashable)


@dataclasses.dataclass
class _Entry:
    failures: int
    last_failure: dt.datetime
    blocked_until: dt.datetime | None = None
    in_flight: int = 0
    # The first failure of the window now counted (below the lockout threshold).
    since: dt.datetime | None = None


class _Counts(Generic[K]):
    """The entries of one key (a pair, an address) with their threshold. Not locked:
    ``LoginThrottle`` holds its lock around every call."""

    def __init__(self, free_failures: int, max_entries: int) -> None:
        self.free_failures = free_failures
        self.max_entries = max_entries
        self.entries: dict[K, _Entry] = {}

    def wait(self, entry: _Entry | None, now: dt.datetime) -> dt.timedelta | None:
        """How long until ``entry`` may try again; None if it may now."""
        if entry is None:
            return None
        if entry.blocked_until and entry.blocked_until > now:
            return entry.blocked_until - now
        if entry.in_flight and entry.failures + entry.in_flight >= self.free_failures:
            # Locked out if the attempts in flight fail: they must land first, which
            # takes about one password check, so come back in a second (they may
            # well succeed; the lockout's own delay is told once they have failed).
            return IN_FLIGHT_WAIT
        return None

    def reserve(self, key: K, entry: _Entry | None, now: dt.datetime) -> None:
        (entry or self.add(key, now)).in_flight += 1

    def fail(self, key: K, now: dt.datetime) -> None:
        # None if a success cleared the entry meanwhile: count afresh.
        entry = self.live(key, now) or self.add(key, now)
        entry.in_flight = max(entry.in_flight - 1, 0)
        if entry.failures < self.free_failures and (
            entry.since is None or now - entry.since > WINDOW
        ):
            # Below the lockout, failures count within WINDOW of the first: staleness
            # alone (a window without any failure) let a trickle add up, and one mistype
            # every 14 minutes behind an office's address, which no success clears,
            # locked the office out after 4 h 26 min (diff review, thirty-second
            # session). Past the threshold the count goes on (the doubling) until stale.
            entry.failures = 0
            entry.since = now
        entry.failures += 1
        entry.last_failure = now
        if entry.failures >= self.free_failures:
            entry.blocked_until = now + self._delay(entry.failures)

    def unreserve(self, key: K) -> _Entry | None:
        entry = self.entries.get(key)
        if entry is not None:
            entry.in_flight = max(entry.in_flight - 1, 0)
        return entry

    def add(self, key: K, now: dt.datetime) -> _Entry:
        if len(self.entries) >= self.max_entries:
            self._evict(now)
        entry = self.entries[key] = _Entry(0, now)
        return entry

    def live(self, key: K, now: dt.datetime) -> _Entry | None:
        entry = self.entries.get(key)
        if entry is not None:
            # Times ahead of now were taken before the wall clock was stepped back: a step
            # of 2 h made a 1-minute lockout last 2 h (review). Bound them by now.
            entry.last_failure = min(entry.last_failure, now)
            if entry.blocked_until is not None:
                entry.blocked_until = min(entry.blocked_until, now + MAX_DELAY)
        if entry is not None and self._stale(entry, now):
            del self.entries[key]
            return None
        return entry

    @staticmethod
    def _blocked(entry: _Entry, now: dt.datetime) -> bool:
        return entry.blocked_until is not None and entry.blocked_until > now

    @classmethod
    def _stale(cls, entry: _Entry, now: dt.datetime) -> bool:
        return (
            not cls._blocked(entry, now)
            and not entry.in_flight
            and now - entry.last_failure > WINDOW
        )

    def _delay(self, failures: int) -> dt.timedelta:
        # The exponent is capped: one try per lockout for ~11 h took a pair to 46
        # failures, FIRST_DELAY * 2**41 overflowed timedelta, and each failure after
        # raised in ``fail`` before the lockout was set (a 500, and no lockout at all).
        return min(FIRST_DELAY * 2 ** min(failures - self.free_failures, 16), MAX_DELAY)

    def _evict(self, now: dt.datetime) -> None:
        for key in [k for k, e in self.entries.items() if self._stale(e, now)]:
            del self.entries[key]
        excess = len(self.entries) - self.max_entries // 2
        if excess > 0:
            # Still full: forget the oldest entries below the lockout threshold with no
            # attempt in flight, down to half if there are that many. One whose lockout
            # has run out is kept too, or the doubling would start over at its free tries.
            idle = [
                k
                for k, e in self.entries.items()
                if not e.in_flight and e.failures < self.free_failures
            ]
            idle.sort(key=lambda k: self.entries[k].last_failure)
            for key in idle[:excess]:
                del self.entries[key]


class LoginThrottle:
    def __init__(self, clock: Clock, *, max_entries: int = MAX_ENTRIES) -> None:
        self._clock = clock
        self._pairs: _Counts[tuple[str, str]] = _Counts(FREE_FAILURES, max_entries)
        self._addresses: _Counts[str] = _Counts(ADDRESS_FREE_FAILURES, max_entries)
        self._lock = threading.Lock()

    def check(self, email: str, ip: str) -> None:
        """Raise 429 while this (email, ip), or this ip, is locked out; else reserve one
        attempt for both."""
        now = self._clock()
        with self._lock:
            pair = self._pairs.live((email, ip), now)
            address = self._addresses.live(ip, now) if _budgeted(ip) else None
            pair_wait = self._pairs.wait(pair, now)
            address_wait = self._addresses.wait(address, now)
            if address_wait is not None and (pair_wait is None or address_wait > pair_wait):
                # Both may be locked out: the later end is when a try can pass.
                self._refuse(address_wait, "too many failed logins from this address")
            if pair_wait is not None:
                self._refuse(pair_wait, "too many failed logins")
            self._pairs.reserve((email, ip), pair, now)
            if _budgeted(ip):
                self._addresses.reserve(ip, address, now)

    def failed(self, email: str, ip: str) -> None:
        now = self._clock()
        with self._lock:
            self._pairs.fail((email, ip), now)
            if _budgeted(ip):
                self._addresses.fail(ip, now)

    def succeeded(self, email: str, ip: str) -> None:
        with self._lock:
            self._pairs.entries.pop((email, ip), None)
            if not _budgeted(ip):
                return
            # The address keeps its failures (see the module's docstring); an entry with
            # none is dropped at once rather than held for the window.
            address = self._addresses.unreserve(ip)
            if address is not None and not address.failures and not address.in_flight:
                del self._addresses.entries[ip]

    def release(self, email: str, ip: str) -> None:
        """Neither success nor failure (the check itself broke, or no hashing slot was
        free): free the reservation."""
        with self._lock:
            self._pairs.unreserve((email, ip))
            if _budgeted(ip):
                self._addresses.unreserve(ip)

    @staticmethod
    def _refuse(wait: dt.timedelta, why: str) -> None:
        seconds = math.ceil(wait.total_seconds())
        raise RateLimited(f"{why}; try again in {seconds} seconds", retry_after=seconds)


def _budgeted(ip: str) -> bool:
    """Whether the address budget applies: not to a proxy's address, which every client
    behind it shares (see the module's docstring)."""
    return not isinstance(ip, ProxyAddress)
