"""Slowing down password guessing: a failure counter per (email, client IP).

After ``FREE_FAILURES`` failed logins within ``WINDOW`` for one email from one IP, that
pair is locked out for a delay that doubles with every further failure (1 min, 2, 4, ...
capped at 15 min); attempts during a lockout answer 429 with ``Retry-After`` without
checking the password at all (so they cost no argon2 time either). A success clears the
counter. The same applies whether or not the email exists, so the throttle reveals
nothing either.

Kept in memory, per process: a restart forgets it, and with N gunicorn workers an
attacker gets up to N times the budget. That is enough to turn online guessing from
thousands of tries a minute into a handful an hour; a shared store is not worth it here.
Behind a reverse proxy every client has the proxy's IP, so the lockout then works per
email (still per email, so one attacker cannot lock out everyone).
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


@dataclasses.dataclass
class _Entry:
    failures: int
    last_failure: dt.datetime
    blocked_until: dt.datetime | None = None


class LoginThrottle:
    def __init__(self, clock: Clock, *, max_entries: int = MAX_ENTRIES) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()

    def check(self, email: str, ip: str) -> None:
        """Raise 429 while this (email, ip) is locked out."""
        now = self._clock()
        with self._lock:
            entry = self._live(email, ip, now)
            if entry and entry.blocked_until and entry.blocked_until > now:
                wait = math.ceil((entry.blocked_until - now).total_seconds())
                raise RateLimited(
                    f"too many failed logins; try again in {wait} seconds", retry_after=wait
                )

    def failed(self, email: str, ip: str) -> None:
        now = self._clock()
        with self._lock:
            entry = self._live(email, ip, now)
            if entry is None:
                if len(self._entries) >= self._max_entries:
                    self._evict(now)
                entry = self._entries[(email, ip)] = _Entry(0, now)
            entry.failures += 1
            entry.last_failure = now
            over = entry.failures - FREE_FAILURES
            if over >= 0:
                entry.blocked_until = now + min(FIRST_DELAY * 2**over, MAX_DELAY)

    def succeeded(self, email: str, ip: str) -> None:
        with self._lock:
            self._entries.pop((email, ip), None)

    def _live(self, email: str, ip: str, now: dt.datetime) -> _Entry | None:
        entry = self._entries.get((email, ip))
        if entry is not None and self._stale(entry, now):
            del self._entries[(email, ip)]
            return None
        return entry

    @staticmethod
    def _stale(entry: _Entry, now: dt.datetime) -> bool:
        blocked = entry.blocked_until is not None and entry.blocked_until > now
        return not blocked and now - entry.last_failure > WINDOW

    def _evict(self, now: dt.datetime) -> None:
        for key in [k for k, e in self._entries.items() if self._stale(e, now)]:
            del self._entries[key]
        if len(self._entries) >= self._max_entries:
            # Still full of live entries: forget the oldest half rather than grow.
            ordered = sorted(self._entries, key=lambda k: self._entries[k].last_failure)
            for key in ordered[: self._max_entries // 2]:
                del self._entries[key]
