"""Slowing down password guessing: a failure counter per (email, client IP), an IPv6
client's IP being its /64 (``api/client_ip.client_key``).

After ``FREE_FAILURES`` failed logins within ``WINDOW`` for one email from one IP, that
pair is locked out for a delay that doubles with every further failure (1 min, 2, 4, ...
capped at 15 min); attempts during a lockout answer 429 with ``Retry-After`` without
checking the password at all (so they cost no argon2 time either). A success clears the
counter. The same applies whether or not the email exists, so the throttle reveals
nothing either.

``check`` reserves the attempt under the lock, before the slow password check, and counts
it as in flight until ``failed``, ``succeeded`` or ``release``: parallel requests cannot
all pass the check before the first failure is counted, so a pair never has more checks
running than it has failures left (one at a time once it has been locked out).

Memory: at ``MAX_ENTRIES`` stale entries go first, then the oldest entries with fewer than
``FREE_FAILURES`` failures and no attempt in flight. A locked-out entry (one that reached
the threshold within the window) is never dropped, else failing logins for junk emails
would lift a lockout; and new pairs are never refused, else one attacker could lock out
everyone. So a table full of lockouts grows instead: each such entry costs five failed
password checks and is gone 15 minutes after its last failure or lockout, which keeps the
growth proportional to the argon2 work an attacker can make us do.

Kept in memory, per process: a restart forgets it, and with N gunicorn workers an
attacker gets up to N times the budget. That is enough to turn online guessing from
thousands of tries a minute into a handful an hour; a shared store is not worth it here.
Behind a reverse proxy every client has the proxy's IP unless the operator lists it in
``ERRORTRACK_TRUSTED_PROXIES`` (the key then takes the client from X-Forwarded-For,
``api/client_ip.py``); without that the lockout works per email alone (still per email,
so one attacker cannot lock out everyone).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import threading

from errortrack.errors import RateLimited
from errortrack.state import Clock

FREE_FAILURES = 5
WINDOW = dt.timedelta(minutes=15)
FIRST_DELAY = dt.timedelta(minutes=1)
MAX_DELAY = dt.timedelta(minutes=15)
# Bound the memory an attacker can make us use by cycling through emails.
MAX_ENTRIES = 10_000


IN_FLIGHT_WAIT = dt.timedelta(seconds=1)


@dataclasses.dataclass
class _Entry:
    failures: int
    last_failure: dt.datetime
    blocked_until: dt.datetime | None = None
    in_flight: int = 0


class LoginThrottle:
    def __init__(self, clock: Clock, *, max_entries: int = MAX_ENTRIES) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()

    def check(self, email: str, ip: str) -> None:
        """Raise 429 while this (email, ip) is locked out; else reserve one attempt."""
        now = self._clock()
        with self._lock:
            entry = self._live(email, ip, now)
            if entry and entry.blocked_until and entry.blocked_until > now:
                self._refuse(entry.blocked_until - now)
            if entry and entry.in_flight and entry.failures + entry.in_flight >= FREE_FAILURES:
                # Locked out if the attempts in flight fail: they must land first, which
                # takes about one password check, so come back in a second (they may
                # well succeed; the lockout's own delay is told once they have failed).
                self._refuse(IN_FLIGHT_WAIT)
            (entry or self._add(email, ip, now)).in_flight += 1

    def failed(self, email: str, ip: str) -> None:
        now = self._clock()
        with self._lock:
            # None if a success cleared the pair meanwhile: count afresh.
            entry = self._live(email, ip, now) or self._add(email, ip, now)
            entry.in_flight = max(entry.in_flight - 1, 0)
            entry.failures += 1
            entry.last_failure = now
            if entry.failures >= FREE_FAILURES:
                entry.blocked_until = now + self._delay(entry.failures)

    def succeeded(self, email: str, ip: str) -> None:
        with self._lock:
            self._entries.pop((email, ip), None)

    def release(self, email: str, ip: str) -> None:
        """Neither success nor failure (the check itself broke): free the reservation."""
        with self._lock:
            entry = self._entries.get((email, ip))
            if entry is not None:
                entry.in_flight = max(entry.in_flight - 1, 0)

    def _add(self, email: str, ip: str, now: dt.datetime) -> _Entry:
        if len(self._entries) >= self._max_entries:
            self._evict(now)
        entry = self._entries[(email, ip)] = _Entry(0, now)
        return entry

    def _live(self, email: str, ip: str, now: dt.datetime) -> _Entry | None:
        entry = self._entries.get((email, ip))
        if entry is not None:
            # Times ahead of now were taken before the wall clock was stepped back: a step
            # of 2 h made a 1-minute lockout last 2 h (review). Bound them by now.
            entry.last_failure = min(entry.last_failure, now)
            if entry.blocked_until is not None:
                entry.blocked_until = min(entry.blocked_until, now + MAX_DELAY)
        if entry is not None and self._stale(entry, now):
            del self._entries[(email, ip)]
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

    @staticmethod
    def _delay(failures: int) -> dt.timedelta:
        # The exponent is capped: one try per lockout for ~11 h took a pair to 46
        # failures, FIRST_DELAY * 2**41 overflowed timedelta, and each failure after
        # raised in ``failed`` before the lockout was set (a 500, and no lockout at all).
        return min(FIRST_DELAY * 2 ** min(failures - FREE_FAILURES, 16), MAX_DELAY)

    @staticmethod
    def _refuse(wait: dt.timedelta) -> None:
        seconds = math.ceil(wait.total_seconds())
        raise RateLimited(
            f"too many failed logins; try again in {seconds} seconds", retry_after=seconds
        )

    def _evict(self, now: dt.datetime) -> None:
        for key in [k for k, e in self._entries.items() if self._stale(e, now)]:
            del self._entries[key]
        excess = len(self._entries) - self._max_entries // 2
        if excess > 0:
            # Still full: forget the oldest entries below the lockout threshold with no
            # attempt in flight, down to half if there are that many. One whose lockout
            # has run out is kept too, or the doubling would start over at 5 free tries.
            idle = [
                k
                for k, e in self._entries.items()
                if not e.in_flight and e.failures < FREE_FAILURES
            ]
            idle.sort(key=lambda k: self._entries[k].last_failure)
            for key in idle[:excess]:
                del self._entries[key]
