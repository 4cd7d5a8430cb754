"""The three ClickHouse tables as retention sees them: their time column and partitions.

Every table is partitioned by ``(toDate(<time>), retention_days)`` (clickhouse/0001-0003),
so a partition id reads ``YYYYMMDD-<retention_days>`` and covers exactly one UTC day.
The day is taken from the partition id rather than from ``system.parts.max_time``:
that column is only filled for ``Date``/``DateTime`` minmax indexes and reads 1970 for
our ``DateTime64`` columns (checked on chDB 4.4 / ClickHouse 26.9).

With a cluster (``ERRORTRACK_CLICKHOUSE_CLUSTER``) the data lives in ``<table>_local``
on every shard: partitions are listed through ``cluster()`` and dropped or deleted
``ON CLUSTER``; reads of rows keep going through the Distributed table.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from errortrack.analytics import ClickHouse

# table -> its time column; the order is the order of every report.
TIME_COLUMNS = {"logs": "timestamp", "events": "timestamp", "spans": "start_timestamp"}
TABLES = tuple(TIME_COLUMNS)


@dataclasses.dataclass(frozen=True)
class Partition:
    table: str
    partition_id: str
    day: dt.date
    retention_days: int
    rows: int
    bytes_on_disk: int

    @property
    def end(self) -> dt.datetime:
        """The first instant after the partition's day: every row is older than this."""
        start = dt.datetime.combine(self.day, dt.time(), tzinfo=dt.UTC)
        return start + dt.timedelta(days=1)

    @property
    def expires_at(self) -> dt.datetime:
        """When TTL has expired every row of the partition."""
        return self.end + dt.timedelta(days=self.retention_days)


def parse_partition_id(partition_id: str) -> tuple[dt.date, int]:
    day, _, retention = partition_id.partition("-")
    return dt.datetime.strptime(day, "%Y%m%d").date(), int(retention)


def local_name(store: ClickHouse, table: str) -> str:
    return f"{table}_local" if store.cluster else table


def on_cluster(store: ClickHouse) -> str:
    return f" ON CLUSTER '{store.cluster}'" if store.cluster else ""


def parts_source(store: ClickHouse) -> str:
    # One replica per shard: summing every replica would count each byte several times.
    return f"cluster('{store.cluster}', system.parts)" if store.cluster else "system.parts"


def partitions(store: ClickHouse, tables: tuple[str, ...] = TABLES) -> list[Partition]:
    """Active, non-empty partitions of ``tables``, oldest day first."""
    names = {local_name(store, t): t for t in tables}
    rows = store.query_rows(
        f"SELECT table, partition_id, sum(rows), sum(bytes_on_disk) FROM {parts_source(store)} "
        "WHERE database = {db:String} AND table IN {tables:Array(String)} AND active "
        "GROUP BY table, partition_id HAVING sum(rows) > 0",
        parameters={"db": store.database, "tables": list(names)},
    )
    found = []
    for table, partition_id, count, size in rows:
        day, retention = parse_partition_id(partition_id)
        found.append(Partition(names[table], partition_id, day, retention, count, size))
    return sorted(found, key=lambda p: (p.day, p.table, p.retention_days))


# ClickHouse refuses to drop a partition above ``max_partition_size_to_drop`` (50 GB by
# default): a guard against dropping by hand what one did not mean to. Here the drop is
# the point, and a day of logs passes 50 GB at ~20k logs/s sustained (bench/RESULTS.md:
# ~30 bytes per log), where the refusal stopped the retention pass (and so the disk cap)
# at that day and made cleanup a 500. 0 lifts the limit for this query only.
DROP_SETTINGS = {"max_partition_size_to_drop": 0}


def drop_partition(store: ClickHouse, partition: Partition) -> None:
    table = local_name(store, partition.table)
    store.command(
        f"ALTER TABLE {table}{on_cluster(store)} DROP PARTITION ID {{pid:String}}",
        parameters={"pid": partition.partition_id},
        settings=DROP_SETTINGS,
    )
