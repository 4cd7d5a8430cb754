"""The grouping hook's SQL: claim a batch token, find or create issues, bump counts.

Written for both SQLite and Postgres, and for several writers at once (one per server
process): issues are created with ``INSERT ... ON CONFLICT DO NOTHING`` and read back,
counts are added in SQL (``event_count + n``), and rows are always touched in the same
(sorted) order so that two writers cannot deadlock. Everything an existing issue takes
from a batch -- count, first/last seen, regression, title/culprit/level -- is decided
inside that one UPDATE from the row's current values, never read first and written
later, so writers racing on one issue cannot undo each other's changes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from errortrack import timestamps
from errortrack.db import UTCDateTime, in_parts
from errortrack.models import GroupedBatch, Issue, Project

Key = tuple[int, str]  # (project_id, fingerprint)
ISSUES = cast(sa.Table, Issue.__table__)
BATCHES = cast(sa.Table, GroupedBatch.__table__)


# An event on a resolved issue reopens it (a regression) unless it is dated more than
# this before the resolution: such an old one (an SDK's offline buffer, a backlog) is
# counted and leaves it resolved. Event times come from the sender's clock and the
# resolution from the server's, and ingest corrects a sender's clock only when it is 55
# minutes or more off (Relay's rule, ``timestamps.MIN_CLOCK_DRIFT``): within that, an
# event dated before the resolution may well have happened after it. A 5 s margin (the
# first version) let a browser whose clock was two minutes slow hide a real regression
# for two minutes after every resolve (review, twentieth session). So the margin is that
# same threshold: every event that can have happened after the resolution reopens it, as
# Sentry reopens on any event (its issue 85316 asks for the buffered-event rule).
REGRESSION_MARGIN = dt.timedelta(seconds=timestamps.MIN_CLOCK_DRIFT)


@dataclasses.dataclass
class Group:
    """The events of one batch that share a project and a fingerprint.

    ``title``, ``culprit`` and ``level`` are the newest event's (of equal times, the
    later in the batch): an issue shows what its latest event says, as Sentry's
    ``_process_existing_aggregate`` does."""

    count: int
    first_seen: dt.datetime
    last_seen: dt.datetime
    title: str
    culprit: str
    level: str


def _insert(session: Session, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    dialect = session.get_bind().dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


def claim_batch(
    session: Session, token: str, now: dt.datetime, enclosing: Sequence[str] = ()
) -> bool:
    """Record the token; False when it was recorded before (the batch is a replay), or
    when one of ``enclosing`` was: the writer bisected a batch the hook had taken whole
    (or a larger part of it), so these rows were counted with that one."""
    if enclosing and session.scalar(
        sa.select(BATCHES.c.token).where(BATCHES.c.token.in_(list(enclosing))).limit(1)
    ):
        return False
    stmt = (
        _insert(session, BATCHES)
        .values(token=token, processed_at=now)
        .on_conflict_do_nothing(index_elements=["token"])
        # RETURNING yields nothing on conflict; rowcount is not reliable on every driver.
        .returning(BATCHES.c.token)
    )
    return session.execute(stmt).first() is not None


def forget_batches_before(session: Session, cutoff: dt.datetime) -> None:
    session.execute(sa.delete(GroupedBatch).where(GroupedBatch.processed_at < cutoff))


def find_issues(session: Session, keys: Iterable[Key]) -> dict[Key, int]:
    by_project: dict[int, list[str]] = {}
    for project_id, fp in keys:
        by_project.setdefault(project_id, []).append(fp)
    found: dict[Key, int] = {}
    for project_id, fps in by_project.items():
        for part in in_parts(fps):
            rows = session.execute(
                sa.select(Issue.id, Issue.fingerprint).where(
                    Issue.project_id == project_id, Issue.fingerprint.in_(part)
                )
            )
            found.update({(project_id, fp): issue_id for issue_id, fp in rows})
    return found


def existing_projects(session: Session, project_ids: Iterable[int]) -> set[int]:
    return _existing(session, Project.id, project_ids)


def existing_issues(session: Session, issue_ids: Iterable[int]) -> set[int]:
    return _existing(session, Issue.id, issue_ids)


def _existing(session: Session, column: Any, wanted: Iterable[int]) -> set[int]:
    ids = sorted(set(wanted))
    found: set[int] = set()
    for part in in_parts(ids):
        found.update(session.scalars(sa.select(column).where(column.in_(part))))
    return found


def create_issues(session: Session, groups: dict[Key, Group]) -> None:
    """Insert the issues that do not exist yet, with a zero count (``add_counts`` counts)."""
    values = [
        {
            "project_id": project_id,
            "fingerprint": fp,
            "title": g.title,
            "culprit": g.culprit,
            "level": g.level,
            "status": "unresolved",
            "first_seen": g.first_seen,
            "last_seen": g.last_seen,
            "event_count": 0,
        }
        for (project_id, fp), g in sorted(groups.items())
    ]
    if values:
        stmt = _insert(session, ISSUES).on_conflict_do_nothing(
            index_elements=["project_id", "fingerprint"]
        )
        session.execute(stmt, values)


_LAST = sa.bindparam("last", type_=UTCDateTime())
# The batch's newest event is at least as new as any the issue has seen: it names the
# issue. An older one (late, or from an SDK's buffer) is counted but renames nothing.
_NEWEST = ISSUES.c.last_seen <= _LAST
# A regression: resolved, and the newest event dated after the resolution less the
# margin (``resolved_before`` = newest + REGRESSION_MARGIN, computed by the caller so
# that no date arithmetic differs between SQLite and PostgreSQL). A resolved issue
# without a resolution time reopens on any event, as every one did before 0009.
_REOPENS = sa.and_(
    ISSUES.c.status == "resolved",
    sa.or_(
        ISSUES.c.resolved_at.is_(None),
        ISSUES.c.resolved_at < sa.bindparam("resolved_before", type_=UTCDateTime()),
    ),
)

# Every right-hand side reads the row as it was before this UPDATE (SQL's rule, kept by
# SQLite and PostgreSQL alike), so the order of the SET clauses does not matter.
_ADD_COUNTS = (
    sa.update(ISSUES)
    # The fingerprint too: SQLite reuses the id of a deleted last row, so a cached id may
    # now name another issue; then no row matches and the caller resolves again.
    .where(
        ISSUES.c.id == sa.bindparam("issue_id"),
        ISSUES.c.fingerprint == sa.bindparam("fp"),
    )
    .values(
        event_count=ISSUES.c.event_count + sa.bindparam("n"),
        first_seen=sa.case(
            (
                ISSUES.c.first_seen > sa.bindparam("first", type_=UTCDateTime()),
                sa.bindparam("first", type_=UTCDateTime()),
            ),
            else_=ISSUES.c.first_seen,
        ),
        last_seen=sa.case((ISSUES.c.last_seen < _LAST, _LAST), else_=ISSUES.c.last_seen),
        title=sa.case((_NEWEST, sa.bindparam("title", type_=sa.Text())), else_=ISSUES.c.title),
        culprit=sa.case(
            (_NEWEST, sa.bindparam("culprit", type_=sa.Text())), else_=ISSUES.c.culprit
        ),
        level=sa.case((_NEWEST, sa.bindparam("level", type_=sa.String(16))), else_=ISSUES.c.level),
        # Muted stays muted; a late event leaves a resolved issue resolved.
        status=sa.case((_REOPENS, sa.literal("unresolved")), else_=ISSUES.c.status),
        resolved_at=sa.case((_REOPENS, sa.null()), else_=ISSUES.c.resolved_at),
    )
)


def _resolved_before(newest: dt.datetime, now: dt.datetime | None) -> dt.datetime:
    """The time before which a resolution counts as regressed by an event dated
    ``newest``: the resolution compared as ``min(resolved_at, now)``. A resolution after
    ``now`` was recorded while the server's clock was ahead; compared as it stands, events
    were counted and left the issue resolved for hours after the clock was put right
    (review). As min(a, now) < b holds whenever now < b, that case is any resolution."""
    before = newest + REGRESSION_MARGIN
    return _ALWAYS if now is not None and now < before else before


# Later than any resolution: the bound that reopens whatever the resolution time.
_ALWAYS = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)


def add_counts(
    session: Session, counts: dict[Key, tuple[int, Group]], now: dt.datetime | None = None
) -> set[Key]:
    """One statement run for many issues (executemany) in issue-id order; returns the keys
    whose issue no longer exists (deleted since its id was cached). ``now``: the
    grouping's time, which a resolution dated later cannot be (``_resolved_before``)."""
    params = [
        {
            "issue_id": i,
            "fp": fp,
            "n": g.count,
            "first": g.first_seen,
            "last": g.last_seen,
            "resolved_before": _resolved_before(g.last_seen, now),
            "title": g.title,
            "culprit": g.culprit,
            "level": g.level,
        }
        for (_, fp), (i, g) in sorted(counts.items(), key=lambda kv: kv[1][0])
    ]
    if not params:
        return set()
    result = session.connection().execute(_ADD_COUNTS, params)
    if result.rowcount == len(params):
        return set()
    present: set[tuple[Any, ...]] = set()
    for part in in_parts([i for i, _ in counts.values()]):
        rows = session.execute(
            sa.select(Issue.project_id, Issue.fingerprint, Issue.id).where(Issue.id.in_(part))
        )
        present.update(tuple(row) for row in rows)
    return {k for k, (i, _) in counts.items() if (k[0], k[1], i) not in present}
