"""Logs test data: rows built by ingest's own row builder, inserted into a real store."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import orjson

from errortrack.analytics import ClickHouse
from errortrack.ingest.items import ItemContext
from errortrack.ingest.logs import handle_log

BASE = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


def sdk_log(
    body: str,
    *,
    level: str = "info",
    at: float = 0.0,
    trace_id: str = "0" * 32,
    span_id: str | None = None,
    **attributes: Any,
) -> dict[str, Any]:
    """One log as sentry-sdk sends it; ``at`` is seconds after BASE; attributes typed
    from their Python values (pass ``{"value", "type"}`` dicts to choose the type)."""
    log: dict[str, Any] = {
        "timestamp": BASE.timestamp() + at,
        "level": level,
        "body": body,
        "trace_id": trace_id,
        "attributes": {name: _typed(value) for name, value in attributes.items()},
    }
    if span_id:
        log["span_id"] = span_id
    return log


def _typed(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    kind = {bool: "boolean", int: "integer", float: "double", str: "string"}[type(value)]
    return {"value": value, "type": kind}


def log_rows(
    project_id: int, logs: list[dict[str, Any]], *, received: dt.datetime = BASE
) -> list[dict[str, Any]]:
    """The logs table's rows ingest's row builder makes of ``logs``, each with an id.

    Ingest leaves ids to the column's default (clickhouse/0010); here each row gets
    one first, so that tests know which id to expect."""
    # Ten years of retention: the TTL must not drop these rows while a test runs.
    ctx = ItemContext(project_id, received, 3650, {})
    encoded = handle_log(orjson.dumps({"items": logs}), {"type": "log"}, ctx).log_lines
    rows = [orjson.loads(line) for line in encoded.splitlines()]
    for row in rows:
        row["id"] = str(uuid.uuid4())
    return rows


def insert_logs(
    store: ClickHouse, project_id: int, logs: list[dict[str, Any]], *, received: dt.datetime = BASE
) -> list[dict[str, Any]]:
    """Insert through ingest's row builder; returns the rows (with their ids)."""
    rows = log_rows(project_id, logs, received=received)
    block = b"\n".join(orjson.dumps(row) for row in rows)
    store.client().raw_insert("logs", insert_block=block, fmt="JSONEachRow")
    return rows
