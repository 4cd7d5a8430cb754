"""Per-project limit on accepted items per second, answered the way SDKs understand.

One token bucket per project and data category (errors, transactions, spans, logs), each
holding at most one second's worth of the limit. A request is accepted while none of the
buckets it needs is in debt and then pays for all its items (so one envelope larger than
the rate still gets through once); otherwise it gets 429 with ``Retry-After`` (the
longest wait) and ``X-Sentry-Rate-Limits`` naming each category that is over, e.g.
``12:log_item:project:rate_limited``, as Relay answers. SDKs then hold back only those
categories: a burst of logs no longer stops a project's errors, which an empty category
list ("all") did for as long as the logs' debt lasted. A request refused after paying
(the spool full: 503) gets its items back with ``refund``.

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


class RateLimiter:
    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = float(per_second)
        self.clock = clock
        self._lock = threading.Lock()
        # (project id, category) -> (tokens, last refill time)
        self._buckets: dict[tuple[int, str], tuple[float, float]] = {}

    def take(self, project_id: int, items: Mapping[str, int]) -> None:
        """Charge ``items`` (category -> count) or raise 429 for the categories in debt."""
        if self.per_second <= 0:
            return
        wanted = {c: n for c, n in items.items() if n > 0}
        if not wanted:
            return
        now = self.clock()
        with self._lock:
            tokens = {c: self._refilled(project_id, c, now) for c in wanted}
            waits = {
                c: max(1, math.ceil(-left / self.per_second))
                for c, left in tokens.items()
                if left < 0
            }
            if waits:
                for category in waits:
                    self._buckets[(project_id, category)] = (tokens[category], now)
                raise RateLimited(
                    f"project {project_id} is over its limit of {self.per_second:g} items/s "
                    f"for {', '.join(sorted(waits))}",
                    retry_after=max(waits.values()),
                    sentry_limits=", ".join(
                        f"{wait}:{category}:project:rate_limited"
                        for category, wait in sorted(waits.items())
                    ),
                )
            for category, count in wanted.items():
                self._buckets[(project_id, category)] = (tokens[category] - count, now)

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
