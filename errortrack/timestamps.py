"""SDK timestamps: ISO 8601 strings (Python) or float Unix seconds (Node)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

# Sentry's own window: an event, span or log dated too far from its arrival gets its
# arrival time, so one SDK with a wrong clock cannot pin an issue's last-seen in the
# future, nor keep logs past their retention (or lose them to the TTL at once).
MAX_FUTURE = 60.0
MAX_PAST = 30 * 86400.0
# The times a row can carry: the tables' TTLs and the retention pass compute with
# DateTime (seconds, 1970-01-01 to 2106-02-07), and a DateTime64 column refuses values far
# beyond it (1e30) at insert, which failed the whole batch on every retry and so stopped
# every later insert.
MIN_STORABLE, MAX_STORABLE = 0.0, float(2**32 - 1)
# Relay's clock drift correction: when the envelope's ``sent_at`` and the arrival differ
# by at least this much, the sender's clock is taken to be off by the difference and
# every time in the envelope is moved by it. Below it, the difference is network delay,
# a retry from the SDK's queue or small drift, and nothing is moved (Relay's 55 minutes).
MIN_CLOCK_DRIFT = 55 * 60.0


def parse(value: Any) -> float | None:
    """Unix seconds, or None when the value is missing or not a timestamp."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an integer beyond a double (msgspec reads those exactly)
            return None
    if isinstance(value, str) and value:
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return None
        if parsed.tzinfo is None:
            # SDKs send UTC; a naive string means UTC, never the server's zone.
            parsed = parsed.replace(tzinfo=dt.UTC)
        return parsed.timestamp()
    return None


def clamped(value: Any, received: float, drift: float = 0.0) -> float:
    """The SDK's time (any form ``parse`` reads) through ``corrected``; the server's
    arrival time when there is none."""
    ts = parse(value)
    return received if ts is None else corrected(ts, received, drift)


def corrected(ts: float, received: float, drift: float) -> float:
    """``ts`` moved by the sender's clock ``drift`` when the result lies in Sentry's window
    around the arrival (which only times a DateTime can hold do, see ``storable``), else
    the arrival time.

    The moved time itself is judged, on the server's clock: a float sum of two huge
    times is not the time it should be (1e20 plus a drift of -1e20 came out an hour ahead
    of the arrival, 1e30 plus -1e30 at 0, which dropped the row as too old after its 200,
    when the window was judged on the sender's clock before adding). An integer too
    large for a float (a log dated 10**400, which msgspec reads exactly) cannot be added
    to at all: the arrival time. On the hot path (every log) this costs what the check
    it replaced did (~90 ns a call, twentieth session)."""
    try:
        moved = ts + drift
    except OverflowError:
        return received
    return moved if received - MAX_PAST <= moved <= received + MAX_FUTURE else received


def drift(sent_at: Any, received: float) -> float:
    """Seconds to add to every SDK time of an envelope: arrival minus the envelope's
    ``sent_at`` when they differ by ``MIN_CLOCK_DRIFT`` or more (the sender's clock is
    off), else 0. A missing or unreadable ``sent_at`` corrects nothing, and neither does
    one no row could carry (``storable``: 1970 to 2106): a clock reading 1e20 is garbage,
    not an offset, and a float ``received - 1e20`` is off by up to 8,192 s (the spacing
    of doubles there is 16,384 s), so every time moved by it landed hours from where it
    belongs, or at 0 for a sent_at of 1e30. Within that range the difference is exact to
    well under a microsecond. Such an envelope's times are judged as sent: outside the
    window they get the arrival, and a whole span item from that clock ends at it
    (``traces.rows.place_item``)."""
    sent = parse(sent_at) if isinstance(sent_at, str) else None
    if sent is None or not MIN_STORABLE <= sent <= MAX_STORABLE:
        return 0.0
    difference = received - sent
    return difference if abs(difference) >= MIN_CLOCK_DRIFT else 0.0


def storable(ts: float, fallback: float) -> float:
    """``ts`` when a row can carry it (``MIN_STORABLE``..``MAX_STORABLE``), else ``fallback``."""
    return ts if MIN_STORABLE <= ts <= MAX_STORABLE else fallback


def finite(value: Any) -> float | None:
    """``parse``, with NaN and the infinities (``"nan"``, ``1e400``) as no time at all."""
    ts = parse(value)
    return ts if ts is not None and math.isfinite(ts) else None


def in_window(ts: float, received: float) -> bool:
    """Whether a time on the server's clock lies in Sentry's window around the arrival."""
    return received - MAX_PAST <= ts <= received + MAX_FUTURE
