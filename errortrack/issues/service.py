"""Issue status changes and deletion: plain functions over a session (and ClickHouse).

Permission checks belong to the caller (the HTTP resource, MCP tool or dashboard), which
also owns the transaction; these functions only flush.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.analytics import ClickHouse
from errortrack.errors import NotFound, ValidationError
from errortrack.models import ISSUE_STATUSES, Issue


def as_dict(issue: Issue) -> dict[str, Any]:
    return {
        "id": issue.id,
        "project_id": issue.project_id,
        "fingerprint": issue.fingerprint,
        "title": issue.title,
        "culprit": issue.culprit,
        "level": issue.level,
        "status": issue.status,
        "first_seen": issue.first_seen,
        "last_seen": issue.last_seen,
        "event_count": issue.event_count,
    }


def get_issue(session: Session, *, project_id: int, issue_id: int) -> Issue:
    issue = session.scalar(
        sa.select(Issue).where(Issue.id == issue_id, Issue.project_id == project_id)
    )
    if issue is None:
        raise NotFound("issue not found")
    return issue


def set_status(
    session: Session,
    *,
    project_id: int,
    issue_id: int,
    status: str,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """``resolved``: an event dated after now (less the grouping's REGRESSION_MARGIN)
    reopens it, a regression, while older ones are only counted; ``muted``: new events
    are counted but it stays muted; ``unresolved``: back in the open list.

    ``now`` (UTC, default the current time) is recorded as ``resolved_at`` when the
    issue becomes resolved. Resolving a resolved issue keeps the first time: events
    since were judged against it, and a repeated request changes nothing. Any other
    status clears it, so ``resolved_at`` is set exactly while the issue is resolved."""
    if status not in ISSUE_STATUSES:
        raise ValidationError(f"status must be one of {', '.join(ISSUE_STATUSES)}", field="status")
    issue = get_issue(session, project_id=project_id, issue_id=issue_id)
    if status != "resolved":
        issue.resolved_at = None
    elif issue.status != "resolved" or issue.resolved_at is None:
        issue.resolved_at = now or dt.datetime.now(dt.UTC)
    issue.status = status
    session.flush()
    return as_dict(issue)


def resolve(
    session: Session, *, project_id: int, issue_id: int, now: dt.datetime | None = None
) -> dict[str, Any]:
    return set_status(session, project_id=project_id, issue_id=issue_id, status="resolved", now=now)


def mute(session: Session, *, project_id: int, issue_id: int) -> dict[str, Any]:
    return set_status(session, project_id=project_id, issue_id=issue_id, status="muted")


def unresolve(session: Session, *, project_id: int, issue_id: int) -> dict[str, Any]:
    return set_status(session, project_id=project_id, issue_id=issue_id, status="unresolved")


def delete(
    session: Session,
    clickhouse: ClickHouse,
    *,
    project_id: int,
    issue_id: int,
    wait: bool = True,
) -> None:
    """Delete the issue and its events.

    The events first, then the relational row (flushed; the caller commits): a failing
    ClickHouse leaves the issue in place, and no relational write lock is held while
    ClickHouse works. It was the other way round, and on a big events table the
    DELETE's mutation (~19 s for 2 M rows in 128 parts, however few the issue's events)
    held SQLite's write lock all along, stalling logins, status changes and the
    grouping hook (review, twentieth session). ``wait=False`` (the API) only schedules
    the mutation (``lightweight_deletes_sync = 0``): the request answers at once, and
    the rows, unreachable through the deleted issue, go within the mutation's time.
    Events of this fingerprint still in the spool will open a new issue, as they would
    for a new error. A batch grouped into this issue before its row went but inserted
    after this DELETE was made is not touched by it: the API deletes the events again
    after its commit, and the writer after such an insert (GroupingHook.after_insert).
    """
    issue = get_issue(session, project_id=project_id, issue_id=issue_id)  # 404 first
    delete_events(clickhouse, project_id=project_id, issue_id=issue_id, wait=wait)
    session.delete(issue)
    session.flush()


def delete_events(
    clickhouse: ClickHouse, *, project_id: int, issue_id: int, wait: bool = True
) -> None:
    # A lightweight DELETE hides the rows once its mutation ran and lets merges drop
    # them later; on a cluster it must reach the local (Replicated) tables, not the
    # Distributed one.
    table = f"events_local ON CLUSTER '{clickhouse.cluster}'" if clickhouse.cluster else "events"
    clickhouse.command(
        f"DELETE FROM {table} WHERE project_id = {int(project_id)} AND issue_id = {int(issue_id)}",
        settings=None if wait else {"lightweight_deletes_sync": 0},
    )
