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
import dataclasses
import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

from errortrack.ingest import logs
from errortrack.issues.events import handle_event
from errortrack.spool.records import TABLES
from errortrack.traces.spans_v2 import handle_span
from errortrack.traces.transactions import handle_transaction

__all__ = ["HANDLERS", "TABLES", "ItemContext", "ItemRows", "dispatch"]


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


class DroppedCounter:
    """Items accepted but not stored, by type (unknown types, types without a handler),
    and items the rate limit dropped from an envelope otherwise stored, as
    ``<type>:rate_limited``.

    Per process; exposed for logs and tests. A lock because request threads share it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()

    def add(self, item_type: str, n: int = 1) -> None:
        with self._lock:
            self._counts[item_type] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


DROPPED = DroppedCounter()


def dispatch(item_type: str, payload: bytes, headers: dict[str, Any], ctx: ItemContext) -> ItemRows:
    handler = HANDLERS.get(item_type)
    if handler is None:
        return ItemRows(dropped=item_type or "<none>")
    return handler(payload, headers, ctx)
