"""Reading issues (relational) and their events (ClickHouse) for the management API and MCP.

Status changes and deletion live in ``errortrack.issues.service``; this module only reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.analytics import ClickHouse
from errortrack.errors import ValidationError
from errortrack.logs.query import iso_utc, stored_json
from errortrack.models import ISSUE_STATUSES, Issue
from errortrack.paging import PageRequest, page_body, parse_choices

# Every order ends on the id so that pages never overlap when times are equal.
ISSUE_SORTS: dict[str, tuple[sa.ColumnElement[Any], ...]] = {
    "-last_seen": (Issue.last_seen.desc(), Issue.id.desc()),
    "last_seen": (Issue.last_seen.asc(), Issue.id.asc()),
    "-first_seen": (Issue.first_seen.desc(), Issue.id.desc()),
    "-count": (Issue.event_count.desc(), Issue.id.desc()),
}
EVENT_COLUMNS = (
    "event_id, issue_id, timestamp, received_at, level, platform, release, environment, "
    "title, culprit, trace_id, span_id"
)


def parse_statuses(raw: Iterable[str]) -> tuple[str, ...]:
    """``status=resolved&status=muted`` or ``status=resolved,muted``."""
    return parse_choices(raw, ISSUE_STATUSES, field="status")


def issue_item(issue: Issue) -> dict[str, Any]:
    return {
        "id": issue.id,
        "project_id": issue.project_id,
        "title": issue.title,
        "culprit": issue.culprit,
        "level": issue.level,
        "status": issue.status,
        "count": issue.event_count,
        "first_seen": iso_utc(issue.first_seen),
        "last_seen": iso_utc(issue.last_seen),
        "fingerprint": issue.fingerprint,
    }


def list_issues(
    session: Session,
    project_id: int,
    *,
    statuses: tuple[str, ...] = (),
    sort: str = "-last_seen",
    page: PageRequest,
) -> dict[str, Any]:
    """A project's issues, most recently seen first by default; all statuses unless asked."""
    if sort not in ISSUE_SORTS:
        raise ValidationError(f"sort must be one of {', '.join(ISSUE_SORTS)}", field="sort")
    where = [Issue.project_id == project_id]
    if statuses:
        where.append(Issue.status.in_(statuses))
    total = session.scalar(sa.select(sa.func.count()).select_from(Issue).where(*where)) or 0
    items: list[dict[str, Any]] = []
    if not page.past_end(total):
        rows = session.scalars(
            sa.select(Issue)
            .where(*where)
            .order_by(*ISSUE_SORTS[sort])
            .limit(page.per_page)
            .offset(page.offset)
        )
        items = [issue_item(issue) for issue in rows]
    return page_body(items, total, page)


def issue_events(
    store: ClickHouse, project_id: int, issue_id: int, page: PageRequest
) -> dict[str, Any]:
    """An issue's events, newest first, each with the payload as the SDK sent it."""
    params = {"project_id": project_id, "issue_id": issue_id}
    where = "project_id = {project_id:UInt64} AND issue_id = {issue_id:UInt64}"
    total = int(store.query_rows(f"SELECT count() FROM events WHERE {where}", params)[0][0])
    items: list[dict[str, Any]] = []
    if not page.past_end(total):
        rows = store.query_rows(
            f"SELECT {EVENT_COLUMNS}, payload FROM events WHERE {where} "
            "ORDER BY timestamp DESC, event_id DESC LIMIT {limit:UInt32} OFFSET {offset:UInt64}",
            {**params, "limit": page.per_page, "offset": page.offset},
        )
        items = [{**event_item(row[:-1]), "payload": stored_json(row[-1])} for row in rows]
    return page_body(items, total, page)


def event_item(row: tuple[Any, ...]) -> dict[str, Any]:
    """One ``EVENT_COLUMNS`` row: ids as 32 hex (as SDKs send them), times in ISO UTC."""
    event_id, issue_id, timestamp, received, level, platform, release, env, *rest = row
    title, culprit, trace_id, span_id = rest
    return {
        "event_id": _hex(event_id),
        "issue_id": issue_id,
        "timestamp": iso_utc(timestamp),
        "received_at": iso_utc(received),
        "level": level,
        "platform": platform,
        "release": release or None,
        "environment": env or None,
        "title": title,
        "culprit": culprit,
        "trace_id": trace_id or None,
        "span_id": span_id or None,
    }


def _hex(value: uuid.UUID | str) -> str:
    return value.hex if isinstance(value, uuid.UUID) else str(value).replace("-", "")
