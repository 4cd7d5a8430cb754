"""Per-project limit on accepted items per second, answered the way SDKs understand.

A token bucket per project holding at most one second's worth. A request is accepted
while the bucket is not in debt and then pays for all its items (so one envelope larger
than the rate still gets through once); over the limit it gets 429 with ``Retry-After``
and ``X-Sentry-Rate-Limits: <seconds>::project:rate_limited`` (empty categories = all),
which makes sentry-python and @sentry/javascript hold back every category. A request
refused after paying (the spool full: 503) gets its items back with ``refund``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from errortrack.errors import RateLimited


class RateLimiter:
    def __init__(self, per_second: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.clock = clock
        self._lock = threading.Lock()
        # project id -> (tokens, last refill time)
        self._buckets: dict[int, tuple[float, float]] = {}

    def take(self, project_id: int, items: int) -> None:
        if self.per_second <= 0 or items <= 0:
            return
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(project_id, (float(self.per_second), now))
            tokens = min(float(self.per_second), tokens + (now - last) * self.per_second)
            if tokens < 0:
                self._buckets[project_id] = (tokens, now)
                wait = max(1, math.ceil(-tokens / self.per_second))
                raise RateLimited(
                    f"project {project_id} is over its limit of {self.per_second} items/s",
                    retry_after=wait,
                    sentry_limits=f"{wait}::project:rate_limited",
                )
            self._buckets[project_id] = (tokens - items, now)

    def refund(self, project_id: int, items: int) -> None:
        """Give back what ``take`` charged for a request that was then refused."""
        if self.per_second <= 0 or items <= 0:
            return
        with self._lock:
            bucket = self._buckets.get(project_id)
            if bucket is not None:
                tokens, last = bucket
                self._buckets[project_id] = (min(float(self.per_second), tokens + items), last)
