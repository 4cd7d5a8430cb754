"""Deleting data older than N days from logs, events and spans, together.

Without a project: every partition whose whole day is older than the cutoff is dropped
(``ALTER TABLE ... DROP PARTITION``, with ClickHouse's 50 GB drop limit lifted: a file
operation, milliseconds whatever its size), then the rows left older than the cutoff --
only in the partitions of the cutoff's own day -- go with a lightweight ``DELETE``.
With a project: partitions hold every project's rows, so only a lightweight
``DELETE ... WHERE project_id = ...`` is possible, one per table.
A dry run counts the same rows and touches nothing. Issues whose events are all gone
afterwards are removed (see ``errortrack.storage.issues``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from sqlalchemy.orm import Session

from errortrack.analytics import ClickHouse
from errortrack.errors import ValidationError
from errortrack.storage import issues, tables

log = logging.getLogger(__name__)

MAX_DAYS = 36500


@dataclasses.dataclass
class CleanupResult:
    cutoff: dt.datetime
    project_id: int | None
    dry_run: bool
    removed: dict[str, int]
    # Root spans among the removed spans: transactions live in the spans table.
    transactions: int
    partitions_dropped: dict[str, int]
    issues_removed: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def cleanup(
    session: Session,
    store: ClickHouse,
    *,
    older_than_days: int,
    now: dt.datetime,
    project_id: int | None = None,
    dry_run: bool = False,
) -> CleanupResult:
    if isinstance(older_than_days, bool) or not 1 <= older_than_days <= MAX_DAYS:
        raise ValidationError(f"must be 1 to {MAX_DAYS}", field="older_than_days")
    if project_id is not None and project_id < 1:
        raise ValidationError("must be a positive project id", field="project_id")
    cutoff = now - dt.timedelta(days=older_than_days)
    removed, transactions = count_older(store, cutoff, project_id)
    orphans = issues.orphaned(
        session, store, last_seen_before=cutoff, project_id=project_id, events_since=cutoff
    )
    if dry_run:
        drops = plan(store, cutoff, project_id).drop
        dropped = {t: len(drops[t]) for t in tables.TABLES}
    else:
        dropped = delete_older(store, cutoff, project_id)
        # Checked again after the deletes (they take seconds): an issue that took an
        # event meanwhile stays.
        orphans = issues.without_events(session, store, orphans)
        gone = issues.remove(session, orphans, last_seen_before=cutoff)
        log.info(
            "cleanup before %s (project %s): removed %s, %d partitions dropped, %d issues",
            cutoff.isoformat(), project_id or "all", removed, sum(dropped.values()), gone,
        )  # fmt: skip
    count = len(orphans) if dry_run else gone
    return CleanupResult(cutoff, project_id, dry_run, removed, transactions, dropped, count)


def _where(table: str, project_id: int | None) -> str:
    where = f"{tables.TIME_COLUMNS[table]} < {{cutoff:DateTime64(6, 'UTC')}}"
    return where + (" AND project_id = {project:UInt64}" if project_id is not None else "")


def count_older(
    store: ClickHouse, cutoff: dt.datetime, project_id: int | None
) -> tuple[dict[str, int], int]:
    """Rows older than the cutoff per table, and the transactions among the spans."""
    # One round trip for the three tables: each call costs a few ms of fixed overhead.
    selects = [
        f"SELECT '{table}', count(), {'countIf(is_segment)' if table == 'spans' else '0'} "
        f"FROM {table} WHERE {_where(table, project_id)}"
        for table in tables.TABLES
    ]
    params = {"cutoff": cutoff, "project": project_id or 0}
    found = {
        t: (int(n), int(tx)) for t, n, tx in store.query_rows(" UNION ALL ".join(selects), params)
    }
    return {t: found[t][0] for t in tables.TABLES}, found["spans"][1]


@dataclasses.dataclass
class Plan:
    """Per table: the partitions entirely older than the cutoff, to drop."""

    drop: dict[str, list[tables.Partition]]


def plan(store: ClickHouse, cutoff: dt.datetime, project_id: int | None) -> Plan:
    found = Plan({t: [] for t in tables.TABLES})
    if project_id is not None:
        return found  # partitions mix projects: never drop one for a single project
    for partition in tables.partitions(store):
        if partition.end <= cutoff:
            found.drop[partition.table].append(partition)
    return found


def delete_older(store: ClickHouse, cutoff: dt.datetime, project_id: int | None) -> dict[str, int]:
    """Drop what can be dropped, lightweight-delete the rest; partitions dropped per table."""
    todo = plan(store, cutoff, project_id)
    for partition in (p for t in tables.TABLES for p in todo.drop[t]):
        tables.drop_partition(store, partition)
    params: dict[str, Any] = {"cutoff": cutoff, "project": project_id or 0}
    for table in tables.TABLES:
        where = _where(table, project_id)
        holding = _holding(store, table, where, params)
        if not holding:
            continue  # a DELETE that matches nothing still costs a mutation over every part
        if project_id is not None:
            # One DELETE for the table, naming no partition: a project's old rows lie in
            # every day up to the cutoff's, and a lightweight DELETE's time grows with the
            # table's parts whatever partition it names, so one per partition made a
            # project's cleanup 9-30x slower (234.7 against 25.7 s on 1.5 M events and
            # 1.5 M spans over 30 days; review, twenty-first session).
            _lightweight_delete(store, table, where, params)
            continue
        # Without a project only the cutoff day's partitions (one per retention) are left
        # after the drops; naming them spares every other part the mutation (1.3 s
        # instead of 2.1 s on a 1 M-row day, measured while writing bench/retention.py).
        for partition_id in holding:
            _lightweight_delete(store, table, where, {**params, "pid": partition_id})
    return {t: len(todo.drop[t]) for t in tables.TABLES}


def _holding(store: ClickHouse, table: str, where: str, params: dict[str, Any]) -> list[str]:
    """The partitions of ``table`` with rows matching ``where``. The partitions' minmax
    index on the day skips every partition newer than the cutoff; with a project the
    key's prefix narrows the rest to its rows."""
    rows = store.query_rows(f"SELECT DISTINCT _partition_id FROM {table} WHERE {where}", params)
    return sorted(str(row[0]) for row in rows)


def _lightweight_delete(store: ClickHouse, table: str, where: str, params: dict[str, Any]) -> None:
    scope = " IN PARTITION ID {pid:String}" if "pid" in params else ""
    local = tables.local_name(store, table)
    store.command(f"DELETE FROM {local}{tables.on_cluster(store)}{scope} WHERE {where}", params)
