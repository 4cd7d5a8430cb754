"""Realistic logs, shaped like what sentry-sdk 2.x sends (../shared/fixtures), for benchmarks."""

from __future__ import annotations

import random
import time
from typing import Any

LEVELS = ("trace", "debug", "info", "info", "info", "warn", "error", "fatal")
SEVERITY = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}


def _attr(value: Any, kind: str) -> dict[str, Any]:
    return {"value": value, "type": kind}


def one_log(rng: random.Random, now: float, spread_days: float = 0) -> dict[str, Any]:
    level = rng.choice(LEVELS)
    user = rng.randrange(10_000)
    log: dict[str, Any] = {
        # Spread: logs of the last N days (an SDK's buffered or late logs, or a client
        # sending old timestamps), one (day, retention) partition each in ClickHouse.
        "timestamp": now + rng.random() - rng.random() * spread_days * 86_400,
        "level": level,
        "body": f"order {rng.randrange(10**6)} for user {user} took {rng.random() * 900:.1f} ms",
        "trace_id": f"{rng.getrandbits(128):032x}",
        "attributes": {
            "sentry.message.template": _attr("order {} for user {} took {} ms", "string"),
            "sentry.message.parameter.0": _attr(rng.randrange(1_000_000), "integer"),
            "user.id": _attr(str(user), "string"),
            "http.duration": _attr(rng.random() * 900, "double"),
            "cache.hit": _attr(rng.random() < 0.5, "boolean"),
            "sentry.sdk.name": _attr("sentry.python", "string"),
            "sentry.sdk.version": _attr("2.75.0", "string"),
            "sentry.environment": _attr("production", "string"),
            "sentry.release": _attr("shop@1.4.2", "string"),
            "server.address": _attr("web-3", "string"),
            "sentry.severity_number": _attr(SEVERITY[level], "integer"),
            "sentry.severity_text": _attr(level, "string"),
        },
    }
    if rng.random() < 0.5:
        log["span_id"] = f"{rng.getrandbits(64):016x}"
    return log


def envelope_logs(n: int, seed: int | None = None, spread_days: float = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    now = time.time()
    return [one_log(rng, now, spread_days) for _ in range(n)]
