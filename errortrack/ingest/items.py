"""The item dispatcher: envelope item type -> handler that turns a payload into rows.

A handler is a plain function::

    def handle(payload: bytes, headers: dict, ctx: ItemContext) -> ItemRows

- ``payload``: the item's raw bytes as sent (already decompressed, without the item
  header line and without the newline that ends the item). Parse it yourself (orjson).
  For ``POST /api/<pid>/store/`` the whole JSON body arrives as the payload of an
  ``event`` item with headers ``{"type": "event"}``.
- ``headers``: the item header as sent (``type``, ``length``, ``content_type``, ...).
- ``ctx``: what the request established (project, clock, retention), see ``ItemContext``.

It returns ``ItemRows``: rows per ClickHouse table, each a plain dict (column name ->
JSON value, the columns of ``clickhouse/000N_<table>.sql``, less those whose default the
table makes, such as ``logs.id``); log rows come already encoded, as JSONEachRow lines
(``ItemRows.log_lines``). A JSON object for a String column is stored as its text;
DateTime64 columns take float Unix seconds or ISO 8601 strings, UUIDs strings, Maps JSON
objects. The rows are serialised as JSONEachRow into the spool before the 200 and
inserted later by the writer thread, so a handler must not write anywhere itself.
Heavy per-batch work (for ``events``: assigning issue ids) belongs in a writer hook, not
here (see ``errortrack.spool.writer``).

A handler raises ``errortrack.errors.BadRequest`` for a malformed payload (the whole
envelope is then refused with 400 and nothing is spooled); any other exception is a bug
(500). Types without a handler are accepted and dropped: ``ItemRows.dropped`` names
them, and they are counted in ``DROPPED`` once their envelope is accepted (spooled).

To register a handler, add ONE line to ``HANDLERS`` below, e.g.
``"event": issues_ingest.handle_event,``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import gc
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from errortrack import timestamps
from errortrack.errors import PayloadTooLarge
from errortrack.ingest import logs
from errortrack.issues.events import handle_event
from errortrack.spool.records import TABLES
from errortrack.traces.spans_v2 import handle_span
from errortrack.traces.transactions import handle_transaction

__all__ = ["HANDLERS", "TABLES", "ItemContext", "ItemRows", "dispatch", "drop_too_old"]


# Rows (logs, spans, events) one envelope may make. An empty log ("{}," three bytes)
# becomes a ~250-byte row: 20 MiB of them, 20 KB gzipped, made 7 M rows, held the event
# loop for 21 s and took the worker to 5 GB. SDKs send at most 100 logs or ~1,000 spans
# per item (and an envelope one event, since the thirtieth session); 100,000 leaves room.
MAX_ENVELOPE_ROWS = 100_000


@dataclasses.dataclass(frozen=True)
class ItemContext:
    project_id: int
    # Server time the request arrived (UTC, timezone-aware); use it for ingested_at.
    received_at: dt.datetime
    # project.retention_days or the instance default (ERRORTRACK_RETENTION_DAYS).
    retention_days: int
    # The envelope's first line, parsed ({} for /store/ bodies).
    envelope_header: dict[str, Any]
    # Seconds to add to the SDK's times: the sender's clock drift when its ``sent_at`` is
    # far from the arrival (``timestamps.drift``), else 0.
    drift: float = 0.0
    # Rows the envelope may still make (``MAX_ENVELOPE_ROWS`` less its items' before):
    # a handler refuses an item past it before making its rows (``check_rows``).
    rows_left: int = MAX_ENVELOPE_ROWS


def check_rows(count: int, what: str, ctx: ItemContext) -> None:
    """413 when an item's ``count`` rows pass what the envelope may still make."""
    if count > ctx.rows_left:
        raise PayloadTooLarge(
            f"the envelope holds more than {MAX_ENVELOPE_ROWS:,} logs, spans and events "
            f"(at {what}); send fewer per envelope"
        )


@dataclasses.dataclass
class ItemRows:
    """Rows per ClickHouse table, plus the event id to answer with (if the item is one)."""

    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    spans: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # 32-hex event id for the response body {"id": ...}; None when the item is no event.
    event_id: str | None = None
    # Log rows come already encoded: ``log_count`` JSONEachRow lines, each ending in a
    # newline. The log handler encodes a whole item at once, which cost ~0.5 us per log
    # less than a JSON object per row joined later (bench/RESULTS.md, eighth session).
    log_lines: bytes = b""
    log_count: int = 0
    # The item's type when no handler took it (counted only if the envelope is accepted).
    dropped: str | None = None

    def count(self) -> int:
        return self.log_count + len(self.events) + len(self.spans)


Handler = Callable[[bytes, dict[str, Any], ItemContext], ItemRows]

HANDLERS: dict[str, Handler] = {
    "log": logs.handle_log,
    "event": handle_event,
    "transaction": handle_transaction,
    "span": handle_span,
}


# Item types are the sender's to name, and each new name was a key kept for the
# process's life: an envelope of 20,000 items of distinct 1 KB types (20 MiB, a few KB
# gzipped) kept 20 MB, for good (review, thirtieth session). Sentry's own item types
# are counted by name (with the ":rate_limited" and ":too_old" forms of the handled
# ones); any other as OTHER, so no sender's text is kept or shown on /readyz.
OTHER = "<other>"
SENTRY_TYPES = frozenset(
    {
        "event", "transaction", "attachment", "session", "sessions", "user_report",
        "user_report_v2", "client_report", "replay_event", "replay_recording",
        "replay_video", "check_in", "profile", "profile_chunk", "statsd", "metric_buckets",
        "feedback", "span", "log", "otel_log", "otel_span", "otel_traces_data",
        "trace_metric", "form_data", "security", "raw_security", "unreal_report", "nel",
        "integration", "<none>",
    }
)  # fmt: skip
# The names counted as they are: an item typed "log:<anything>" is not one of them.
_NAMED = SENTRY_TYPES | {f"{t}:{why}" for t in SENTRY_TYPES for why in ("too_old", "rate_limited")}


class DroppedCounter:
    """Items accepted but not stored, by type (unknown types, types without a handler),
    items the rate limit dropped from an envelope otherwise stored, as
    ``<type>:rate_limited``, and items that lost rows already past their retention on
    arrival, as ``<type>:too_old`` (``drop_too_old``).

    Per process; exposed on /readyz (``dropped_items``) and to tests. A lock because
    request threads share it. A type that is not one of Sentry's counts as ``OTHER``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()

    def add(self, item_type: str, n: int = 1) -> None:
        with self._lock:
            self._counts[item_type if item_type in _NAMED else OTHER] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


DROPPED = DroppedCounter()


# Payloads larger than this are read with the cyclic GC paused (``_gc_paused``).
GC_PAUSE_FROM = 256 * 1024


def dispatch(item_type: str, payload: bytes, headers: dict[str, Any], ctx: ItemContext) -> ItemRows:
    handler = HANDLERS.get(item_type)
    if handler is None:
        return ItemRows(dropped=item_type or "<none>")
    if len(payload) <= GC_PAUSE_FROM:  # the hot path: SDKs' items are a few KB to ~100 KB
        return handler(payload, headers, ctx)
    with _gc_paused():
        return handler(payload, headers, ctx)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC off while a large item is read. Reading JSON builds its containers one
    by one, and each few hundred new ones start a collection that walks the young ones
    again: 12 MiB of nested arrays in one attribute value (~12 KB gzipped) took 1.2-1.6 s
    of the event loop, ~80 % of it the GC's (ingest review, thirty-first session). What
    is built is either kept as rows or dropped whole, so nothing is left for the GC to
    find that reference counting does not free. Process-wide, so another thread's
    collection waits those moments too; whoever paused it turns it back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


DAY = 86400


class _Stamp(msgspec.Struct):
    timestamp: float


# Reads only the time of an encoded log row; msgspec skips the other fields in C.
_LOG_TIMES = msgspec.json.Decoder(_Stamp)


def drop_too_old(rows: ItemRows, ctx: ItemContext) -> bool:
    """Remove the rows already past their retention when they arrive; True if any went.

    The tables' TTL is ``toDateTime(<time>) + toIntervalDay(retention_days)``, so such a
    row would be expired by ClickHouse within a second of its insert. An event would
    first have been grouped: an issue created, or counted, moved back in ``first_seen``
    and reopened, with no event to show. Relay drops events too old for their retention
    too. Times are already inside Sentry's window (30 days back at most,
    ``timestamps.MAX_PAST``), so only a retention of 30 days or less can drop anything.
    """
    # Logs are the hot path: every log time is at most MAX_PAST old (the handler puts
    # any older one at the arrival), so with a longer retention, the default 90 days
    # included, no log can be too old and a log item costs this one comparison.
    check_logs = rows.log_count and ctx.retention_days * DAY <= timestamps.MAX_PAST
    if not (rows.events or rows.spans or check_logs):
        return False
    # toDateTime truncates to the second: the row expires once floor(time) + retention
    # is at or before the arrival, i.e. when its time is below this.
    limit = math.floor(ctx.received_at.timestamp()) - ctx.retention_days * DAY + 1
    removed = False
    if rows.events:
        kept = [row for row in rows.events if row["timestamp"] >= limit]
        removed = len(kept) < len(rows.events)
        rows.events = kept
    if rows.spans:
        # A segment (a transaction's root) past its retention takes its spans with it:
        # children stored without it showed a span whose parent and segment never exist.
        gone = {
            row["segment_id"]
            for row in rows.spans
            if row["start_timestamp"] < limit and row.get("is_segment") and row.get("segment_id")
        }
        kept = [
            row
            for row in rows.spans
            if row["start_timestamp"] >= limit and row.get("segment_id") not in gone
        ]
        removed = removed or len(kept) < len(rows.spans)
        rows.spans = kept
    if check_logs:
        removed = _drop_old_logs(rows, limit) or removed
    return removed


def _drop_old_logs(rows: ItemRows, limit: float) -> bool:
    times = _LOG_TIMES.decode_lines(rows.log_lines)
    if all(t.timestamp >= limit for t in times):
        return False
    # One row per line, each ending in b"\n" (a newline in a value is escaped in JSON;
    # not splitlines: attributes kept as sent may hold a bare "\r" between tokens).
    lines = rows.log_lines.split(b"\n")[:-1]
    kept = [line + b"\n" for line, t in zip(lines, times, strict=True) if t.timestamp >= limit]
    rows.log_lines, rows.log_count = b"".join(kept), len(kept)
    return True
