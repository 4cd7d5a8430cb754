"""Rows written straight into the three ClickHouse tables, with explicit timestamps and
retention, for the storage and retention tests (which are about storage itself)."""

from __future__ import annotations

import datetime as dt
import uuid

from errortrack.analytics import ClickHouse


def add_logs(
    store: ClickHouse, project_id: int, at: list[dt.datetime], *, retention: int = 90
) -> None:
    rows = [
        [project_id, ts, uuid.uuid4(), ts, "info", 9, f"log {i}", retention]
        for i, ts in enumerate(at)
    ]
    cols = ["project_id", "timestamp", "id", "ingested_at", "level", "severity_number", "body"]
    store.client().insert("logs", rows, column_names=[*cols, "retention_days"])


def add_events(
    store: ClickHouse,
    project_id: int,
    at: list[dt.datetime],
    *,
    issue_id: int = 1,
    retention: int = 90,
) -> None:
    rows = [[project_id, issue_id, ts, uuid.uuid4(), ts, "error", retention] for ts in at]
    cols = ["project_id", "issue_id", "timestamp", "event_id", "received_at", "level"]
    store.client().insert("events", rows, column_names=[*cols, "retention_days"])


def add_spans(
    store: ClickHouse, project_id: int, at: list[dt.datetime], *, retention: int = 90
) -> None:
    """Every other span is a transaction's root (is_segment)."""
    rows = [
        [project_id, uuid.uuid4().hex, uuid.uuid4().hex[:16], i % 2 == 0, ts, 1000, ts, retention]
        for i, ts in enumerate(at)
    ]
    cols = ["project_id", "trace_id", "span_id", "is_segment", "start_timestamp", "duration_us"]
    store.client().insert("spans", rows, column_names=[*cols, "received_at", "retention_days"])


def add_all(
    store: ClickHouse, project_id: int, at: list[dt.datetime], *, retention: int = 90
) -> None:
    add_logs(store, project_id, at, retention=retention)
    add_events(store, project_id, at, retention=retention)
    add_spans(store, project_id, at, retention=retention)


TIME = {"logs": "timestamp", "events": "timestamp", "spans": "start_timestamp"}


def counts(store: ClickHouse, where: str = "1") -> dict[str, int]:
    """Rows per table matching ``where``, in which ``{ts}`` stands for the time column."""
    out = {}
    for table, column in TIME.items():
        sql = f"SELECT count() FROM {table} WHERE {where.format(ts=column)}"
        out[table] = int(store.query_rows(sql)[0][0])
    return out
