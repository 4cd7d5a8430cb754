"""The periodic retention pass on the real embedded stores, with an injected clock:
expired partitions, the disk cap (oldest first, never today) and empty issues."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import sqlalchemy as sa
from clickhouse_connect.driver.exceptions import Error as DriverError

from errortrack import db
from errortrack.models import Issue, Project
from errortrack.projects import manage
from errortrack.projects.service import create_project
from errortrack.storage import cleanup, deleted, retention, tables
from tests import storage_rows as rows

D = dt.timedelta(days=1)


@pytest.fixture
def today() -> dt.datetime:
    # Rows are placed around real time so that ClickHouse's own TTL (real clock) keeps
    # them; the pass itself is driven by the clock passed in.
    return dt.datetime.now(dt.UTC).replace(hour=12, minute=0, second=0, microsecond=0)


@pytest.fixture
def sessions(engine):
    return db.make_sessionmaker(engine)


def _pass(sessions, store, now, cap=0):
    with db.unit_of_work(sessions) as s:
        return retention.run_pass(s, store, now=now, disk_cap_bytes=cap)


def test_pass_drops_partitions_whose_retention_ran_out(clickhouse, sessions, today):
    rows.add_all(clickhouse, 1, [today - 3 * D, today - 2 * D, today], retention=30)
    rows.add_all(clickhouse, 1, [today - 3 * D], retention=60)
    # A day's partition expires 30 days after the day's END (its newest possible row):
    # the day 3 days back at midnight 28 days from today, not before.
    assert _pass(sessions, clickhouse, today + 27 * D).expired == []
    report = _pass(sessions, clickhouse, today + 28 * D)
    # The day 3 days back with 30-day retention has expired in all three tables.
    assert {(p.table, p.day, p.retention_days) for p in report.expired} == {
        (t, (today - 3 * D).date(), 30) for t in tables.TABLES
    }
    assert rows.counts(clickhouse) == {"logs": 3, "events": 3, "spans": 3}
    _pass(sessions, clickhouse, today + 32 * D)
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}  # the 60-day row


def test_disk_cap_drops_the_oldest_days_first(clickhouse, sessions, today, caplog):
    for back in range(5):
        rows.add_all(clickhouse, 1, [today - back * D] * 50)
    parts = tables.partitions(clickhouse)
    size = {d: sum(p.bytes_on_disk for p in parts if p.day == d) for d in {p.day for p in parts}}
    total = sum(size.values())
    oldest = sorted(size)
    # Room for everything but the two oldest days (and a byte less than with the second).
    cap = total - size[oldest[0]] - size[oldest[1]]
    with caplog.at_level("INFO", logger="errortrack.storage.retention"):
        report = _pass(sessions, clickhouse, today, cap=cap)
    assert {p.day for p in report.over_cap} == {oldest[0], oldest[1]}
    assert report.bytes_after <= cap
    assert sorted({p.day for p in tables.partitions(clickhouse)}) == oldest[2:]
    assert "over disk cap" in caplog.text
    # Under the cap now: the next pass leaves everything alone.
    assert _pass(sessions, clickhouse, today, cap=cap).over_cap == []


def test_disk_cap_never_drops_today(clickhouse, sessions, today):
    rows.add_all(clickhouse, 1, [today - D, today])
    report = _pass(sessions, clickhouse, today, cap=1)
    assert {p.day for p in report.over_cap} == {(today - D).date()}
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}


def test_pass_removes_issues_left_without_events(clickhouse, sessions, today):
    with db.unit_of_work(sessions) as s:
        pid = create_project(s, name="p").id
        for name, seen in (("gone", today - 5 * D), ("kept", today - 5 * D), ("new", today)):
            s.add(
                Issue(project_id=pid, fingerprint=name, title=name, first_seen=seen, last_seen=seen)
            )
        s.flush()
        kept = s.scalar(sa.select(Issue.id).where(Issue.fingerprint == "kept"))
    rows.add_events(clickhouse, pid, [today - 5 * D], issue_id=kept)
    with sessions() as s:
        gone = s.scalar(sa.select(Issue.id).where(Issue.fingerprint == "gone"))
    # The first pass only notes it: its events might still be on their way.
    first = _pass(sessions, clickhouse, today)
    assert (first.issues_removed, first.orphans) == (0, {gone})
    with db.unit_of_work(sessions) as s:
        second = retention.run_pass(s, clickhouse, now=today, seen_orphans=first.orphans)
    assert second.issues_removed == 1
    with sessions() as s:
        # "new" has no event yet either, but it is within the grace period.
        assert set(s.scalars(sa.select(Issue.fingerprint))) == {"kept", "new"}


def test_an_issue_whose_events_arrive_between_passes_stays(clickhouse, sessions, today):
    with db.unit_of_work(sessions) as s:
        pid = create_project(s, name="p").id
        late = Issue(project_id=pid, fingerprint="late", title="late",
                     first_seen=today - 5 * D, last_seen=today - 5 * D)  # fmt: skip
        s.add(late)
        s.flush()
        late_id = late.id
    first = _pass(sessions, clickhouse, today)
    assert first.orphans == {late_id}
    rows.add_events(clickhouse, pid, [today - 5 * D], issue_id=late_id)  # the writer catches up
    with db.unit_of_work(sessions) as s:
        second = retention.run_pass(s, clickhouse, now=today, seen_orphans=first.orphans)
    assert second.issues_removed == 0 and second.orphans == frozenset()


def test_job_runs_every_interval_survives_failures_and_stops():
    calls: list[int] = []
    ran_three = threading.Event()

    def run():
        calls.append(1)
        if len(calls) >= 3:
            ran_three.set()
        if len(calls) == 1:
            raise RuntimeError("store down")  # the loop must carry on

    job = retention.RetentionJob(run, interval=0.01)
    job.start()
    assert ran_three.wait(5)
    job.stop()
    done = len(calls)
    assert job.passes >= 3
    threading.Event().wait(0.05)
    assert len(calls) == done  # stopped means stopped


def test_the_app_runs_the_retention_job_in_the_background(state, app):
    jobs = [task for task in state.background if isinstance(task, retention.RetentionJob)]
    assert len(jobs) == 1
    assert jobs[0].interval == state.settings.retention_interval_seconds


def test_the_longest_retention_allowed_keeps_its_rows(clickhouse, today):
    # The TTL is `toDateTime(time) + retention_days`, and DateTime ends in 2106: a
    # retention that wraps it puts the expiry in the past, and ClickHouse drops the rows
    # as soon as they are written (it did for 36500 days, once the documented maximum).
    from errortrack.config import MAX_RETENTION_DAYS, Settings, SettingsError

    rows.add_all(clickhouse, 1, [today], retention=MAX_RETENTION_DAYS)
    for table in tables.TABLES:
        clickhouse.command(f"OPTIMIZE TABLE {table} FINAL")  # applies the TTL now
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}
    expiry = clickhouse.command(
        f"SELECT toDateTime(now()) + toIntervalDay({MAX_RETENTION_DAYS}) > now()"
    )
    assert expiry == 1
    with pytest.raises(SettingsError, match="RETENTION_DAYS"):
        Settings.from_env({"ERRORTRACK_RETENTION_DAYS": str(MAX_RETENTION_DAYS + 1)})


def test_a_refused_drop_is_logged_and_the_pass_goes_on(
    clickhouse, sessions, today, caplog, monkeypatch
):
    """Until the nineteenth session one refused drop ended the pass: the partitions
    after it, the disk cap and the removal of issues without events all waited."""
    from clickhouse_connect.driver.exceptions import DatabaseError

    with db.unit_of_work(sessions) as s:
        pid = create_project(s, name="p").id
        seen = today - 5 * D
        empty = Issue(project_id=pid, fingerprint="e", title="e", first_seen=seen, last_seen=seen)
        s.add(empty)
        s.flush()
        empty_id = empty.id
    rows.add_all(clickhouse, 999, [today - 3 * D, today - 2 * D], retention=30)
    refused = f"{(today - 3 * D):%Y%m%d}-30"
    real = clickhouse.command

    # The one stand-in: ClickHouse refusing one partition (every other statement runs).
    def command(sql, parameters=None, settings=None):
        if "ALTER TABLE events" in sql and (parameters or {}).get("pid") == refused:
            raise DatabaseError("Code: 359. DB::Exception: Table or Partition was not dropped")
        return real(sql, parameters=parameters, settings=settings)

    monkeypatch.setattr(clickhouse, "command", command)
    logged = caplog.at_level("INFO", logger="errortrack.storage.retention")
    with logged, db.unit_of_work(sessions) as s:
        report = retention.run_pass(
            s, clickhouse, now=today + 29 * D, seen_orphans=frozenset({empty_id})
        )
    assert [(p.table, p.partition_id) for p in report.failed] == [("events", refused)]
    assert len(report.expired) == 5  # the other day in every table, the refused day's others
    assert report.bytes_after == report.failed[0].bytes_on_disk
    assert rows.counts(clickhouse) == {"logs": 0, "events": 1, "spans": 0}
    assert report.issues_removed == 1  # the pass's last step still ran
    assert f"could not drop events partition {refused}" in caplog.text


# Partitions over ClickHouse's ``max_partition_size_to_drop`` (50 GB by default) are
# dropped all the same, by the pass, the disk cap and cleanup. A day of logs passes
# 50 GB at ~20k logs/s sustained; ClickHouse refused such a DROP (code 359): until the
# nineteenth session the pass stopped at that day (nothing after it dropped, the disk
# cap never enforced) and cleanup was a 500. The only stand-in is the limit, lowered on
# the test thread's client so that small partitions are "too big".


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


def test_pass_deletes_rows_of_deleted_projects_that_arrive_after_the_delete(
    clickhouse, sessions, today
):
    """Rows the spool still held for a project reach ClickHouse after its delete; a
    project id with rows but never recorded as deleted (a relational store restored from
    an older backup lacks the project) is left alone."""
    with db.unit_of_work(sessions) as s:
        gone = create_project(s, name="gone").id
        kept = create_project(s, name="kept").id
    stray = kept + 10**6
    for pid in (gone, kept, stray):
        rows.add_all(clickhouse, pid, [today, today - D])
    with db.unit_of_work(sessions) as s:
        manage.delete_project(s, s.get(Project, gone), now=today)
    assert deleted.delete_rows(clickhouse, [gone]) == {"logs": 1, "events": 1, "spans": 1}
    assert rows.counts(clickhouse, f"project_id = {gone}") == {"logs": 0, "events": 0, "spans": 0}
    rows.add_logs(clickhouse, gone, [today])  # from the spool, after the delete
    rows.add_spans(clickhouse, gone, [today, today])
    assert _pass(sessions, clickhouse, today).deleted_projects == {"logs": 1, "spans": 1}
    assert rows.counts(clickhouse, f"project_id = {gone}") == {"logs": 0, "events": 0, "spans": 0}
    for pid in (kept, stray):
        assert rows.counts(clickhouse, f"project_id = {pid}") == {
            "logs": 2,
            "events": 2,
            "spans": 2,
        }
    assert _pass(sessions, clickhouse, today).deleted_projects == {}


def test_a_pass_goes_on_when_the_rows_of_deleted_projects_cannot_be_deleted(
    clickhouse, sessions, today, monkeypatch, caplog
):
    with db.unit_of_work(sessions) as s:
        pid = create_project(s, name="p").id
        manage.delete_project(s, s.get(Project, pid), now=today)
    # Alive by the real clock, so that ClickHouse's own TTL cannot drop it before the
    # pass (a row 400 days old sometimes was, and the pass found nothing to expire);
    # expired by the pass's clock, three days on.
    rows.add_logs(clickhouse, pid, [today], retention=1)

    def refuse(store, project_ids, wait=True):
        raise DriverError("mutations refused")

    monkeypatch.setattr(deleted, "delete_rows", refuse)
    report = _pass(sessions, clickhouse, today + 3 * D)
    assert [p.table for p in report.expired] == ["logs"]  # the rest of the pass ran
    assert "could not delete the rows of deleted projects" in caplog.text
