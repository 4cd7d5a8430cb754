"""The rows of deleted projects: deleted from ClickHouse with the project, and by every
retention pass after it.

Deleting a project records its id in ``deleted_projects`` in the same transaction; once
that commits, the API schedules one lightweight ``DELETE`` per table holding its rows
(answering at once; ClickHouse applies it within its mutation time). Rows of the project
can still reach ClickHouse later: the spool holds what was acknowledged before the
delete (and during the key cache's 10 s after it), and a ClickHouse that was down missed
the ``DELETE``. So each retention pass looks for rows of every recorded id -- the tables'
sort keys begin with ``project_id``, so that reads only their granules -- and deletes what
it finds. Events are mostly spared that round trip: the writer's grouping drops the rows
of a project that no longer exists.

Only recorded ids are deleted. A project id that has rows but no project is not taken
for a deleted one: a relational store restored from an older backup, or an
``ERRORTRACK_DATABASE_URL`` pointed at an empty database, would have lost every project's
data to the next pass.
"""

from __future__ import annotations

import datetime as dt
import logging

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.analytics import ClickHouse
from errortrack.models import DeletedProject
from errortrack.storage import tables

log = logging.getLogger(__name__)


def record(session: Session, project_id: int, *, now: dt.datetime) -> None:
    """Remember a project being deleted (in the deleting transaction)."""
    session.add(DeletedProject(project_id=project_id, deleted_at=now))


def recorded(session: Session) -> list[int]:
    return list(session.scalars(sa.select(DeletedProject.project_id)))


def delete_rows(store: ClickHouse, project_ids: list[int], *, wait: bool = True) -> dict[str, int]:
    """Delete every row of ``project_ids`` from the three tables; per table, how many of
    the projects had rows. A DELETE that matches nothing still costs a mutation over
    every part, so a table is only asked to delete the projects it holds rows of."""
    if not project_ids:
        return {}
    found: dict[str, int] = {}
    settings = None if wait else {"lightweight_deletes_sync": 0}
    for table in tables.TABLES:
        query = f"SELECT DISTINCT project_id FROM {table} WHERE project_id IN {{ids:Array(UInt64)}}"
        holding = [int(row[0]) for row in store.query_rows(query, {"ids": project_ids})]
        if not holding:
            continue
        found[table] = len(holding)
        local = tables.local_name(store, table)
        store.command(
            f"DELETE FROM {local}{tables.on_cluster(store)} "
            "WHERE project_id IN {ids:Array(UInt64)}",
            {"ids": holding},
            settings=settings,
        )
    return found
