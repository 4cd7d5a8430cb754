"""Issues whose events are all gone are removed, not marked.

An issue is a summary of its events; once retention, a cleanup or the disk cap has
removed every one of them, there is nothing left to open and keeping the row would show
issues that lead nowhere. Removing it also means a later event with the same
fingerprint starts a fresh issue (status ``unresolved``), which is what Sentry does
after its retention too. The check asks ClickHouse which candidate issue ids still have
events, in chunks so that a large instance never builds one giant ``IN`` list.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.analytics import ClickHouse
from errortrack.db import in_parts
from errortrack.models import Issue

CHUNK = 5000


def orphaned(
    session: Session,
    store: ClickHouse,
    *,
    last_seen_before: dt.datetime,
    project_id: int | None = None,
    events_since: dt.datetime | None = None,
) -> list[int]:
    """Ids of issues last seen before ``last_seen_before`` that have no events left
    (with ``events_since``: none at or after that instant, i.e. none a cleanup with that
    cutoff would keep).

    The ``last_seen`` guard keeps issues the ingest writer has just created, whose
    events may still be on their way from the spool, out of reach.
    """
    query = sa.select(Issue.id, Issue.project_id).where(Issue.last_seen < last_seen_before)
    if project_id is not None:
        query = query.where(Issue.project_id == project_id)
    candidates = [(int(i), int(p)) for i, p in session.execute(query.order_by(Issue.id))]
    return _eventless(store, candidates, events_since)


def without_events(session: Session, store: ClickHouse, ids: list[int]) -> list[int]:
    """Of these issues, those with no event at all now. Run after a cleanup's deletes:
    an event still under one came in meanwhile, whatever its date (an SDK's retry after
    an outage can be dated before the cutoff, so ``last_seen`` alone does not tell)."""
    candidates: list[tuple[int, int]] = []
    for chunk in in_parts(ids, CHUNK):
        query = sa.select(Issue.id, Issue.project_id).where(Issue.id.in_(chunk))
        candidates.extend((int(i), int(p)) for i, p in session.execute(query))
    return _eventless(store, candidates, None)


def _eventless(
    store: ClickHouse, candidates: list[tuple[int, int]], since: dt.datetime | None
) -> list[int]:
    """Of (issue id, project id) pairs, the ids with no event (at or after ``since``)."""
    gone: list[int] = []
    for chunk in in_parts(candidates, CHUNK):
        alive = _with_events(store, chunk, since)
        gone.extend(issue_id for issue_id, _ in chunk if issue_id not in alive)
    return gone


def _with_events(
    store: ClickHouse, chunk: Sequence[tuple[int, int]], since: dt.datetime | None
) -> set[int]:
    # project_id leads the events ordering key, so naming the projects prunes granules.
    where = "project_id IN {projects:Array(UInt64)} AND issue_id IN {ids:Array(UInt64)}"
    params: dict[str, object] = {
        "projects": sorted({project for _, project in chunk}),
        "ids": [issue_id for issue_id, _ in chunk],
    }
    if since is not None:
        where += " AND timestamp >= {since:DateTime64(6, 'UTC')}"
        params["since"] = since
    rows = store.query_rows(f"SELECT DISTINCT issue_id FROM events WHERE {where}", params)
    return {int(row[0]) for row in rows}


def remove(session: Session, ids: list[int], *, last_seen_before: dt.datetime) -> int:
    """Delete these issues, but only while still last seen before ``last_seen_before``:
    one that took a new event since ``orphaned`` found it (the writer raised its
    last_seen) stays, or that event would sit in ClickHouse under an issue that is gone.
    Returns how many went."""
    removed = 0
    for chunk in in_parts(ids, CHUNK):
        query = sa.delete(Issue).where(Issue.id.in_(chunk), Issue.last_seen < last_seen_before)
        removed += session.execute(query).rowcount or 0  # type: ignore[attr-defined]
    session.flush()
    return removed
