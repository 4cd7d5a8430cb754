"""What the data takes: rows, bytes and time span per table, per project, and in total.

Bytes per table are exact (``system.parts``). Bytes per project are **estimates**: a
partition holds several projects' rows and ClickHouse keeps no size per row, so each
partition's bytes are shared out by each project's share of that partition's rows.
Splitting partition by partition (rather than by the table-wide row share) follows
projects whose volume changes from day to day, since every partition is one day (at one
retention). The rows themselves are exact counts.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.analytics import ClickHouse
from errortrack.models import Project
from errortrack.storage import tables

SIZES = ("bytes_on_disk", "compressed_bytes", "uncompressed_bytes")
ESTIMATE_NOTE = (
    "Bytes per project are estimated: each partition's (day's) bytes are split by the "
    "project's share of its rows. Bytes per table and in total are exact."
)


def _zero() -> dict[str, Any]:
    return {"rows": 0, **dict.fromkeys(SIZES, 0), "oldest": None, "newest": None}


def _add(
    into: dict[str, Any], rows: int, sizes: Mapping[str, float], span: tuple[Any, Any]
) -> None:
    into["rows"] += rows
    for key in SIZES:
        into[key] += sizes[key]
    oldest, newest = span
    if oldest is not None and (into["oldest"] is None or oldest < into["oldest"]):
        into["oldest"] = oldest
    if newest is not None and (into["newest"] is None or newest > into["newest"]):
        into["newest"] = newest


def _partitions(store: ClickHouse, table: str) -> tuple[dict[tuple[str, str], dict[str, int]], int]:
    """({(host, partition id): its bytes}, the number of parts)."""
    rows = store.query_rows(
        "SELECT hostName(), partition_id, count(), sum(bytes_on_disk), "
        "sum(data_compressed_bytes), sum(data_uncompressed_bytes) "
        f"FROM {tables.parts_source(store)} "
        "WHERE database = {db:String} AND table = {table:String} AND active AND rows > 0 "
        "GROUP BY hostName(), partition_id",
        {"db": store.database, "table": tables.local_name(store, table)},
    )
    sizes = {(host, pid): dict(zip(SIZES, map(int, b), strict=True)) for host, pid, _, *b in rows}
    return sizes, sum(int(row[2]) for row in rows)


def counts_query(table: str) -> str:
    """Rows, oldest and newest time per (host, partition, project) of ``table``: how the
    events and spans are counted.

    The engine answers it from the table's ``usage`` projection (clickhouse/0015), one
    row per project per part, instead of reading every row: keep its aggregates and its
    GROUP BY within what that projection holds. Shared out by partition, not by part: a
    merge that ended between this and the bytes query renamed the parts, and rows
    counted under a new part's name found no bytes, so every project could show 0 bytes;
    a partition keeps its id through merges. hostName() tells shards apart in a cluster,
    where partition ids repeat across shards."""
    column = tables.TIME_COLUMNS[table]
    return (
        f"SELECT hostName(), _partition_id, project_id, count(), min({column}), max({column}) "
        f"FROM {table} GROUP BY hostName(), _partition_id, project_id"
    )


# The logs are counted from the severity_counts projection (clickhouse/0006: a count per
# project, hour and severity) that the logs list's counts already keep, not from a usage
# projection of their own: on the hottest table that one cost 2-3 % of the engine's CPU
# per stored log (12.9 -> 13.1 us, raw inserts alternating; twenty-first session). The
# inner GROUP BY keeps within the projection's keys so that the engine reads it, not the
# rows; the hours bound each project's oldest and newest log, read exactly below.
LOG_HOURS_QUERY = (
    "SELECT host, partition, project_id, sum(n), min(hour), max(hour) FROM ("
    "SELECT hostName() AS host, _partition_id AS partition, project_id, "
    "toStartOfHour(timestamp) AS hour, count() AS n "
    "FROM logs GROUP BY host, partition, project_id, hour"
    ") GROUP BY host, partition, project_id"
)
# Each project's oldest and newest log, read only in its oldest and newest hour: the
# table's key (project_id, timestamp) narrows the read to those granules.
LOG_SPAN_QUERY = (
    "SELECT project_id, min(timestamp), max(timestamp) FROM logs "
    "WHERE (project_id, toStartOfHour(timestamp)) IN {hours:Array(Tuple(UInt64, DateTime('UTC')))} "
    "GROUP BY project_id"
)


def _counts(store: ClickHouse, table: str) -> list[tuple[Any, ...]]:
    """(host, partition, project, rows, oldest, newest) of ``table``; for logs the
    oldest and newest are those of the whole project, on each of its rows."""
    if table != "logs":
        return [tuple(row) for row in store.query_rows(counts_query(table))]
    hourly = store.query_rows(LOG_HOURS_QUERY)
    bounds: dict[int, tuple[Any, Any]] = {}
    for _, _, project_id, _, first, last in hourly:
        low, high = bounds.get(project_id, (first, last))
        bounds[project_id] = (min(low, first), max(high, last))
    hours = sorted({(p, h) for p, (first, last) in bounds.items() for h in (first, last)})
    exact = {
        project_id: (oldest, newest)
        for project_id, oldest, newest in (
            store.query_rows(LOG_SPAN_QUERY, {"hours": hours}) if hours else []
        )
    }
    # A project whose rows went between the two queries (a delete, a dropped partition)
    # keeps its hours, the closest bounds known.
    return [
        (host, partition, project_id, count, *exact.get(project_id, bounds[project_id]))
        for host, partition, project_id, count, _, _ in hourly
    ]


def table_usage(store: ClickHouse, table: str) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """(the table's totals, {project_id: that project's share})."""
    partitions, part_count = _partitions(store, table)
    counts = _counts(store, table)
    visible: collections.Counter[tuple[str, str]] = collections.Counter()
    for host, partition, _, count, _, _ in counts:
        visible[(host, partition)] += count
    total = _zero()
    projects: dict[int, dict[str, Any]] = collections.defaultdict(_zero)
    for host, partition, project_id, count, oldest, newest in counts:
        # A partition made after the first query (a new day, a new retention) has no bytes
        # counted yet: its rows count, its bytes show in the next report.
        sizes = partitions.get((host, partition), dict.fromkeys(SIZES, 0))
        share = {k: v * count / visible[(host, partition)] for k, v in sizes.items()}
        _add(projects[int(project_id)], count, share, (oldest, newest))
        _add(total, count, dict.fromkeys(SIZES, 0), (oldest, newest))
    for sizes in partitions.values():  # exact bytes, including parts only holding deleted rows
        _add(total, 0, sizes, (None, None))
    total.update(parts=part_count, partitions=len({pid for _, pid in partitions}))
    return total, projects


def usage(
    session: Session, store: ClickHouse, *, default_retention_days: int, disk_cap_bytes: int = 0
) -> dict[str, Any]:
    """The whole report served by ``GET /api/storage``."""
    known = {p.id: p for p in session.scalars(sa.select(Project).order_by(Project.id))}
    by_table: dict[str, dict[str, Any]] = {}
    per_project: dict[int, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    total = _zero()
    for table in tables.TABLES:
        table_total, projects = table_usage(store, table)
        by_table[table] = table_total
        _add(
            total, table_total["rows"], table_total, (table_total["oldest"], table_total["newest"])
        )
        for project_id, figures in projects.items():
            per_project[project_id][table] = figures
    return {
        "tables": by_table,
        "projects": [
            _project_entry(pid, known.get(pid), per_project.get(pid, {}), default_retention_days)
            for pid in sorted(set(known) | set(per_project))
        ],
        "total": total,
        "relational": relational_size(session),
        "retention": {"default_days": default_retention_days, "disk_cap_bytes": disk_cap_bytes},
        "estimates": ESTIMATE_NOTE,
    }


def _project_entry(
    project_id: int,
    project: Project | None,
    figures: dict[str, dict[str, Any]],
    default_days: int,
) -> dict[str, Any]:
    """One project's line; ``exists`` is false for data left by a deleted project."""
    entry_tables = {t: figures.get(t, _zero()) for t in tables.TABLES}
    total = _zero()
    for f in entry_tables.values():
        _add(total, f["rows"], f, (f["oldest"], f["newest"]))
    override = project.retention_days if project is not None else None
    return {
        "project_id": project_id,
        "name": project.name if project is not None else None,
        "exists": project is not None,
        "retention_days": override if override is not None else default_days,
        "retention_override": override,
        "tables": entry_tables,
        "total": total,
    }


def relational_size(session: Session) -> dict[str, Any]:
    """Bytes of the relational database when they can be read, else None."""
    bind = session.get_bind()
    dialect = bind.dialect.name
    url = bind.engine.url
    size: int | None = None
    if dialect == "postgresql":
        size = session.scalar(sa.text("SELECT pg_database_size(current_database())"))
    elif dialect == "sqlite" and url.database not in (None, "", ":memory:"):
        path = Path(str(url.database))
        # WAL mode: recent writes sit in the -wal file until a checkpoint.
        files = [path, path.with_name(path.name + "-wal")]
        size = sum(f.stat().st_size for f in files if f.exists()) or None
    return {"backend": dialect, "bytes": size}
