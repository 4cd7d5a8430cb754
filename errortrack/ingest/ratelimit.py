"""Per-project limit on accepted items per second, answered the way SDKs understand.

One token bucket per project and data category (errors, transactions, spans, logs), each
holding at most one second's worth of the limit. ``take`` charges every category that is
not in debt (so one envelope larger than the rate still gets through once, as an SDK's
batch of 100 logs under a limit of 10/s) and returns the ones that are, with their waits.
The debt is bounded: a category whose charge would leave more than ``MAX_DEBT_SECONDS``
of it is not charged but refused like one in debt (one envelope of 20,000 logs under a
limit of 2/s went through and then shut the project's logs out for 2.8 hours). As Relay
does, ingest then drops only the items of those categories: the envelope's other items
are stored and its answer is a 200 naming the limited categories in
``X-Sentry-Rate-Limits`` (SDKs read that header on any answer, develop.sentry.dev "Rate
Limiting"); only when nothing is left to store is it a 429 with ``Retry-After`` (the
longest wait) and the same header, e.g. ``12:log_item:project:rate_limited``. SDKs then
hold back only those categories: a burst of logs no longer stops a project's errors. A
request refused after paying (the spool full: 503) gets its items back with ``refund``.

Per process: with N gunicorn workers (server mode; the embedded default runs one) each
keeps its own buckets at the full setting. An SDK's keep-alive connection stays on one
worker, so one client never gets less than the setting; clients spread over several
workers can reach up to N times it (docs/INGEST.md). A shared bucket would need a
shared store on the request path, which this limit is not worth.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping

from errortrack.errors import RateLimited

# Item type -> the data category SDKs read in X-Sentry-Rate-Limits (develop.sentry.dev
# "Rate Limiting"; sentry_sdk's _parse_rate_limits). Events are "error", and "default"
# for SDKs that file message events under it.
CATEGORIES = {
    "event": "error;default",
    "transaction": "transaction",
    "span": "span",
    "log": "log_item",
}


# The most debt one envelope may leave, in seconds of the limit: what Retry-After can say.
MAX_DEBT_SECONDS = 60

# Buckets kept before the full ones are dropped (``RateLimiter._prune``).
PRUNE_AT = 10_000


class RateLimiter:
    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = float(per_second)
        self.clock = clock
        self._lock = threading.Lock()
        # (project id, category) -> (tokens, last refill time)
        self._buckets: dict[tuple[int, str], tuple[float, float]] = {}
        self._prune_at = PRUNE_AT

    def take(self, project_id: int, items: Mapping[str, int]) -> dict[str, int]:
        """Charge ``items`` (category -> count) for every category not in debt, unless the
        charge would leave more than ``MAX_DEBT_SECONDS`` of it; return the categories not
        charged, with the seconds until each is out of debt (at least 1; empty: all paid)."""
        if self.per_second <= 0:
            return {}
        wanted = {c: n for c, n in items.items() if n > 0}
        if not wanted:
            return {}
        now = self.clock()
        with self._lock:
            tokens = {c: self._refilled(project_id, c, now) for c in wanted}
            most = MAX_DEBT_SECONDS * self.per_second
            waits = {
                c: max(1, math.ceil(-left / self.per_second))
                for c, left in tokens.items()
                if left < 0 or wanted[c] - left > most
            }
            for category, count in wanted.items():
                paid = 0 if category in waits else count
                self._buckets[(project_id, category)] = (tokens[category] - paid, now)
            if len(self._buckets) > self._prune_at:
                self._prune(now)
        return waits

    def _prune(self, now: float) -> None:
        """Drop the buckets refilled to the full second: one is the same as no entry. Each
        project and category ever charged kept one, deleted projects' too (soak review)."""
        self._buckets = {
            key: (tokens, last)
            for key, (tokens, last) in self._buckets.items()
            if tokens + (now - last) * self.per_second < self.per_second
        }
        # Only the buckets in use are left; look again once as many more have come.
        self._prune_at = max(PRUNE_AT, 2 * len(self._buckets))

    def refused(self, project_id: int, waits: Mapping[str, int]) -> RateLimited:
        """The 429 for a request all of whose items are in categories over the limit."""
        return RateLimited(
            f"project {project_id} is over its limit of {self.per_second:g} items/s "
            f"for {', '.join(sorted(waits))}",
            retry_after=max(waits.values()),
            sentry_limits=header(waits),
        )

    def refund(self, project_id: int, items: Mapping[str, int]) -> None:
        """Give back what ``take`` charged for a request that was then refused."""
        if self.per_second <= 0:
            return
        with self._lock:
            for category, count in items.items():
                bucket = self._buckets.get((project_id, category))
                if bucket is not None and count > 0:
                    tokens, last = bucket
                    full = min(self.per_second, tokens + count)
                    self._buckets[(project_id, category)] = (full, last)

    def _refilled(self, project_id: int, category: str, now: float) -> float:
        tokens, last = self._buckets.get((project_id, category), (self.per_second, now))
        return min(self.per_second, tokens + (now - last) * self.per_second)


def header(waits: Mapping[str, int]) -> str:
    """``X-Sentry-Rate-Limits`` for the categories in ``waits`` (category -> seconds)."""
    return ", ".join(
        f"{wait}:{category}:project:rate_limited" for category, wait in sorted(waits.items())
    )
