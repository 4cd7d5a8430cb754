"""Issues, events and spans for API tests: issues in the relational store, events and
spans built by the issue engineer's own row builders and inserted into real ClickHouse."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import orjson

from errortrack import db
from errortrack.analytics import ClickHouse
from errortrack.ingest.items import ItemContext
from errortrack.issues.events import event_row
from errortrack.models import Issue
from errortrack.state import AppState
from errortrack.traces.rows import span_row
from tests.logs_data import BASE


def add_issue(
    state: AppState,
    project_id: int,
    title: str,
    *,
    seen: tuple[float, float] = (0, 0),
    status: str = "unresolved",
    count: int = 1,
) -> int:
    """``seen`` = (first, last) in seconds after BASE."""
    with db.unit_of_work(state.sessions) as s:
        issue = Issue(
            project_id=project_id,
            fingerprint=uuid.uuid4().hex,
            title=title,
            culprit="app.py",
            level="error",
            status=status,
            event_count=count,
            first_seen=BASE + dt.timedelta(seconds=seen[0]),
            last_seen=BASE + dt.timedelta(seconds=seen[1]),
        )
        s.add(issue)
        s.flush()
        return issue.id


def add_event(
    state: AppState,
    project_id: int,
    issue_id: int,
    *,
    at: float,
    message: str = "boom",
    trace_id: str = "",
    span_id: str = "",
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "event_id": uuid.uuid4().hex,
        "timestamp": (BASE + dt.timedelta(seconds=at)).isoformat(),
        "level": "error",
        "platform": "python",
        "message": message,
        "exception": {"values": [{"type": "ValueError", "value": message}]},
    }
    if trace_id:
        event["contexts"] = {"trace": {"trace_id": trace_id, "span_id": span_id}}
    payload = orjson.dumps(event)
    ctx = ItemContext(project_id, BASE + dt.timedelta(seconds=at + 1), 3650, {})
    row = event_row(event, payload, event["event_id"], ctx)
    row["issue_id"] = issue_id
    _insert(state, "events", [row])
    return event


def add_span(
    state: AppState,
    project_id: int,
    trace_id: str,
    span_id: str,
    parent: str = "",
    *,
    at: float = 0,
    seconds: float = 1,
    op: str = "http.server",
    is_segment: bool = False,
) -> None:
    start = BASE.timestamp() + at
    row = span_row(
        project_id=project_id,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        segment_id="",
        segment_name="GET /checkout" if is_segment else "",
        is_segment=is_segment,
        op=op,
        description=f"span {span_id}",
        start=start,
        end=start + seconds,
        status="ok",
        received_at=start + 5,
        attributes={"http.method": {"value": "GET", "type": "string"}},
        retention_days=3650,
    )
    _insert(state, "spans", [row])


def plain_span(
    project_id: int, trace_id: str, i: int, *, start: float, description: str = "q"
) -> dict[str, Any]:
    """Span ``i`` of a trace (its id ``i`` in 16 hex digits) as ``span_row`` makes it: a
    one-second db span without parent or segment, for tests that store many."""
    return span_row(
        project_id=project_id,
        trace_id=trace_id,
        span_id=f"{i:016x}",
        parent_span_id="",
        segment_id="",
        segment_name="",
        is_segment=False,
        op="db",
        description=description,
        start=start,
        end=start + 1,
        status="ok",
        received_at=start,
        attributes={},
        retention_days=3650,
    )


def insert_rows(store: ClickHouse, table: str, rows: list[dict[str, Any]]) -> None:
    """Rows straight into a table, as the writer inserts them (JSONEachRow), past any
    check of ingest's: rows as an earlier version, or another sender, stored them."""
    block = b"\n".join(orjson.dumps(row) for row in rows)
    store.client().raw_insert(table, insert_block=block, fmt="JSONEachRow")


def _insert(state: AppState, table: str, rows: list[dict[str, Any]]) -> None:
    insert_rows(state.clickhouse, table, rows)
