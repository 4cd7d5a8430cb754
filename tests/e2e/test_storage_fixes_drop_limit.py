"""Partitions over ClickHouse's ``max_partition_size_to_drop`` (50 GB by default) are
dropped all the same, by the retention pass, the disk cap and cleanup.

A partition is one day at one retention, and a day of logs passes 50 GB at ~20k logs/s
sustained. ClickHouse refused such a DROP (code 359): until the nineteenth session the
retention pass stopped at that day (nothing after it dropped, the disk cap never
enforced) and cleanup was a 500. Real chDB and relational store; the only stand-in is
the limit, lowered on the test thread's client so that small partitions are "too big".
"""

from __future__ import annotations

import datetime as dt

import pytest

from errortrack import db
from errortrack.storage import cleanup, retention, tables
from tests import storage_rows as rows

D = dt.timedelta(days=1)


@pytest.fixture
def today() -> dt.datetime:
    # Around real time: ClickHouse's own TTL (real clock) must keep the rows.
    return dt.datetime.now(dt.UTC).replace(hour=12, minute=0, second=0, microsecond=0)


@pytest.fixture
def sessions(engine):
    return db.make_sessionmaker(engine)


def _pass(sessions, store, now, cap=0):
    with db.unit_of_work(sessions) as s:
        return retention.run_pass(s, store, now=now, disk_cap_bytes=cap)


@pytest.fixture
def drop_limit(clickhouse):
    """Days over ClickHouse's ``max_partition_size_to_drop`` (50 GB by default; ~1.7
    billion logs): the limit lowered to 1000 bytes on this thread's client, where the
    pass runs. ClickHouse then refuses the DROP as it would a 50 GB day's."""
    name = "max_partition_size_to_drop"
    client = clickhouse.client()
    sql = "SELECT value FROM system.settings WHERE name = {n:String}"
    default = clickhouse.query_rows(sql, {"n": name})[0][0]
    client.set_client_setting(name, "1000")  # a SET on this client's chDB session
    yield
    client.set_client_setting(name, default)  # the store is shared with later tests


def _old_rows(store, day: dt.datetime, *, retention: int = 90) -> None:
    seconds = [day - dt.timedelta(seconds=i) for i in range(500)]
    rows.add_all(store, 1, seconds, retention=retention)


def test_pass_drops_expired_partitions_over_the_drop_size_limit(
    clickhouse, sessions, today, drop_limit
):
    _old_rows(clickhouse, today - 3 * D, retention=30)
    assert min(p.bytes_on_disk for p in tables.partitions(clickhouse)) > 1000
    # Until the nineteenth session ClickHouse refused the first drop and the pass ended.
    report = _pass(sessions, clickhouse, today + 28 * D)
    assert {p.table for p in report.expired} == set(tables.TABLES) and not report.failed
    assert rows.counts(clickhouse) == {"logs": 0, "events": 0, "spans": 0}


def test_disk_cap_drops_days_over_the_drop_size_limit(clickhouse, sessions, today, drop_limit):
    _old_rows(clickhouse, today - 2 * D)
    rows.add_all(clickhouse, 1, [today])
    report = _pass(sessions, clickhouse, today, cap=1)
    assert {p.day for p in report.over_cap} == {(today - 2 * D).date()}
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}


def test_cleanup_drops_days_over_the_drop_size_limit(clickhouse, sessions, today, drop_limit):
    _old_rows(clickhouse, today - 5 * D)
    rows.add_all(clickhouse, 1, [today])
    with db.unit_of_work(sessions) as s:
        result = cleanup.cleanup(s, clickhouse, older_than_days=3, now=today)
    assert result.partitions_dropped == {"logs": 1, "events": 1, "spans": 1}
    assert result.removed == {"logs": 500, "events": 500, "spans": 500}
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}
