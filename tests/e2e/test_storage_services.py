"""Storage services on the real embedded ClickHouse and the real relational store:
TTL, usage, cleanup (dry run, whole partitions, project scope) and issues left empty."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from errortrack import db
from errortrack.errors import ValidationError
from errortrack.issues.service import delete_events
from errortrack.models import Issue
from errortrack.projects.service import create_project
from errortrack.storage import cleanup, usage
from tests import storage_rows as rows

H = dt.timedelta(hours=1)
D = dt.timedelta(days=1)


@pytest.fixture
def now() -> dt.datetime:
    # Real time, at noon: ClickHouse's TTL compares against the server's clock, so rows
    # must be placed relative to it, not to a fixed date that would expire one day.
    today = dt.datetime.now(dt.UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    return today


@pytest.fixture
def sessions(engine):
    return db.make_sessionmaker(engine)


def _projects(sessions, *names):
    with db.unit_of_work(sessions) as s:
        return [create_project(s, name=n).id for n in names]


def test_ttl_pass_removes_expired_rows_and_keeps_newer(clickhouse, now):
    for table in ("logs", "events", "spans"):
        # Otherwise the background TTL merge drops expired rows before we can see them.
        clickhouse.command(f"SYSTEM STOP TTL MERGES {table}")
    rows.add_all(clickhouse, 1, [now - 15 * D, now - 12 * D], retention=10)
    rows.add_all(clickhouse, 1, [now - 8 * D, now - 2 * D], retention=10)
    rows.add_all(clickhouse, 2, [now - 15 * D], retention=30)
    assert rows.counts(clickhouse) == {"logs": 5, "events": 5, "spans": 5}
    for table in ("logs", "events", "spans"):
        clickhouse.command(f"SYSTEM START TTL MERGES {table}")
        clickhouse.command(f"OPTIMIZE TABLE {table} FINAL")
    assert rows.counts(clickhouse) == {"logs": 3, "events": 3, "spans": 3}
    expired = f"project_id = 1 AND {{ts}} < '{(now - 10 * D):%Y-%m-%d %H:%M:%S}'"
    assert rows.counts(clickhouse, expired) == {"logs": 0, "events": 0, "spans": 0}


def test_usage_counts_rows_bytes_and_time_span(clickhouse, sessions, now):
    p1, p2, empty = _projects(sessions, "one", "two", "empty")
    rows.add_logs(clickhouse, p1, [now - 3 * D + i * H for i in range(7)])
    rows.add_logs(clickhouse, p2, [now - D, now])
    rows.add_events(clickhouse, p1, [now - 2 * D, now - H])
    rows.add_spans(clickhouse, p2, [now - 5 * D, now - 4 * D, now - 3 * D])
    rows.add_logs(clickhouse, 999, [now])  # left behind by a deleted project
    with sessions() as s:
        report = usage.usage(s, clickhouse, default_retention_days=90)

    assert {t: f["rows"] for t, f in report["tables"].items()} == {
        "logs": 10, "events": 2, "spans": 3
    }  # fmt: skip
    by_id = {p["project_id"]: p for p in report["projects"]}
    assert set(by_id) == {p1, p2, empty, 999}
    assert by_id[p1]["tables"]["logs"]["rows"] == 7
    assert by_id[p1]["tables"]["logs"]["oldest"] == (now - 3 * D).replace(tzinfo=None)
    assert by_id[p1]["tables"]["logs"]["newest"] == (now - 3 * D + 6 * H).replace(tzinfo=None)
    assert by_id[p1]["total"]["rows"] == 9
    assert by_id[p2]["tables"]["spans"]["rows"] == 3
    assert by_id[empty]["total"]["rows"] == 0 and by_id[empty]["exists"]
    assert by_id[999]["exists"] is False and by_id[999]["name"] is None
    assert report["total"]["rows"] == 15
    # Per-project bytes are shares of the exact per-table bytes: they add up to them.
    for table, figures in report["tables"].items():
        assert figures["bytes_on_disk"] > 0 and figures["uncompressed_bytes"] > 0
        shared = sum(p["tables"][table]["bytes_on_disk"] for p in report["projects"])
        assert shared == pytest.approx(figures["bytes_on_disk"])
    assert report["total"]["bytes_on_disk"] == sum(
        f["bytes_on_disk"] for f in report["tables"].values()
    )
    assert report["relational"]["bytes"] > 0


def test_retention_shown_is_the_override_or_the_default(clickhouse, sessions):
    p1, p2 = _projects(sessions, "a", "b")
    with db.unit_of_work(sessions) as s:
        s.execute(sa.text("UPDATE projects SET retention_days = 7 WHERE id = :id"), {"id": p1})
    with sessions() as s:
        report = usage.usage(s, clickhouse, default_retention_days=30)
    shown = {
        p["project_id"]: (p["retention_days"], p["retention_override"]) for p in report["projects"]
    }
    assert shown == {p1: (7, 7), p2: (30, None)}


def _spread(store, project_id, now):
    """Rows 40, 35 and 31 days old (whole days before the 30-day cutoff), two on the
    cutoff's own day (one older, one newer than the cutoff), and two recent ones."""
    cutoff = now - 30 * D
    at = [now - 40 * D, now - 35 * D, now - 31 * D, cutoff - H, cutoff + H, now - D, now]
    rows.add_all(store, project_id, at)
    return cutoff


def test_dry_run_reports_and_changes_nothing(clickhouse, sessions, now):
    cutoff = _spread(clickhouse, 1, now)
    before = rows.counts(clickhouse)
    with db.unit_of_work(sessions) as s:
        result = cleanup.cleanup(s, clickhouse, older_than_days=30, now=now, dry_run=True)
    assert result.removed == {"logs": 4, "events": 4, "spans": 4}
    assert result.partitions_dropped == {"logs": 3, "events": 3, "spans": 3}
    assert result.cutoff == cutoff and result.dry_run
    assert rows.counts(clickhouse) == before


def test_cleanup_removes_exactly_the_old_rows_from_all_tables(clickhouse, sessions, now):
    cutoff = _spread(clickhouse, 1, now)
    _spread(clickhouse, 2, now)
    newer = f"{{ts}} >= '{cutoff:%Y-%m-%d %H:%M:%S}'"
    kept = rows.counts(clickhouse, newer)
    with db.unit_of_work(sessions) as s:
        result = cleanup.cleanup(s, clickhouse, older_than_days=30, now=now)
    assert result.removed == {"logs": 8, "events": 8, "spans": 8}
    # Spans at even positions are roots: 0 and 2 of the 4 older ones, per project.
    assert result.transactions == 4
    assert result.partitions_dropped == {"logs": 3, "events": 3, "spans": 3}
    assert rows.counts(clickhouse) == kept == {"logs": 6, "events": 6, "spans": 6}
    assert rows.counts(clickhouse, newer) == kept
    # Nothing is left to do: the same cleanup again finds nothing.
    with db.unit_of_work(sessions) as s:
        again = cleanup.cleanup(s, clickhouse, older_than_days=30, now=now)
    assert again.removed == {"logs": 0, "events": 0, "spans": 0}


def test_project_cleanup_touches_only_that_project(clickhouse, sessions, now):
    _spread(clickhouse, 1, now)
    _spread(clickhouse, 2, now)
    with db.unit_of_work(sessions) as s:
        result = cleanup.cleanup(s, clickhouse, older_than_days=30, now=now, project_id=1)
    assert result.removed == {"logs": 4, "events": 4, "spans": 4}
    assert result.partitions_dropped == {"logs": 0, "events": 0, "spans": 0}
    assert rows.counts(clickhouse, "project_id = 1") == {"logs": 3, "events": 3, "spans": 3}
    assert rows.counts(clickhouse, "project_id = 2") == {"logs": 7, "events": 7, "spans": 7}


def _issue(session, project_id, fingerprint, last_seen):
    issue = Issue(
        project_id=project_id, fingerprint=fingerprint, title=fingerprint,
        first_seen=last_seen - 50 * D, last_seen=last_seen, event_count=1,
    )  # fmt: skip
    session.add(issue)
    session.flush()
    return issue.id


def test_issues_whose_events_are_all_gone_are_removed(clickhouse, sessions, now):
    (p,) = _projects(sessions, "p")
    with db.unit_of_work(sessions) as s:
        old = _issue(s, p, "old", now - 40 * D)
        mixed = _issue(s, p, "mixed", now - 20 * D)
        fresh = _issue(s, p, "fresh", now - 45 * D)
    rows.add_events(clickhouse, p, [now - 45 * D, now - 40 * D], issue_id=old)
    rows.add_events(clickhouse, p, [now - 40 * D, now - 20 * D], issue_id=mixed)
    # "fresh" has an event newer than its last_seen says (a late write): it must stay.
    rows.add_events(clickhouse, p, [now - D], issue_id=fresh)

    with db.unit_of_work(sessions) as s:
        dry = cleanup.cleanup(s, clickhouse, older_than_days=30, now=now, dry_run=True)
    assert dry.issues_removed == 1
    with sessions() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Issue)) == 3
    with db.unit_of_work(sessions) as s:
        done = cleanup.cleanup(s, clickhouse, older_than_days=30, now=now)
    assert done.issues_removed == 1
    with sessions() as s:
        assert set(s.scalars(sa.select(Issue.fingerprint))) == {"mixed", "fresh"}


def test_an_issue_seen_again_while_the_cleanup_runs_is_kept(clickhouse, sessions, now, monkeypatch):
    # The writer groups a new event into an old issue between the cleanup's listing of
    # orphans and their removal (the ClickHouse deletes take seconds in between): the
    # issue was removed by id, and its fresh event was left under an issue that is gone.
    (p,) = _projects(sessions, "p")
    with db.unit_of_work(sessions) as s:
        old = _issue(s, p, "old", now - 40 * D)
    real = cleanup.delete_older

    def while_an_event_arrives(store, cutoff, project_id):
        with db.unit_of_work(sessions) as s:  # what the grouping hook does to it
            s.execute(sa.update(Issue).where(Issue.id == old).values(last_seen=now))
        rows.add_events(clickhouse, p, [now], issue_id=old)
        return real(store, cutoff, project_id)

    monkeypatch.setattr(cleanup, "delete_older", while_an_event_arrives)
    with db.unit_of_work(sessions) as s:
        done = cleanup.cleanup(s, clickhouse, older_than_days=30, now=now)
    assert done.issues_removed == 0
    with sessions() as s:
        assert list(s.scalars(sa.select(Issue.id))) == [old]


def test_an_issue_given_an_old_dated_event_while_the_cleanup_runs_is_kept(
    clickhouse, sessions, now, monkeypatch
):
    # An SDK's retry after an outage is dated before the cutoff: last_seen stays old, so
    # only the event itself, still there after the deletes, tells that the issue is live.
    (p,) = _projects(sessions, "p")
    with db.unit_of_work(sessions) as s:
        old = _issue(s, p, "old", now - 40 * D)
    real = cleanup.delete_older

    def then_a_late_event(store, cutoff, project_id):
        dropped = real(store, cutoff, project_id)
        rows.add_events(clickhouse, p, [now - 35 * D], issue_id=old)
        return dropped

    monkeypatch.setattr(cleanup, "delete_older", then_a_late_event)
    with db.unit_of_work(sessions) as s:
        done = cleanup.cleanup(s, clickhouse, older_than_days=30, now=now)
    assert done.issues_removed == 0
    with sessions() as s:
        assert list(s.scalars(sa.select(Issue.id))) == [old]


@pytest.mark.parametrize(("days", "project"), [(0, None), (-1, None), (36501, None), (5, 0)])
def test_bad_arguments_are_refused_before_anything_is_deleted(
    clickhouse, sessions, now, days, project
):
    _spread(clickhouse, 1, now)
    before = rows.counts(clickhouse)
    with db.unit_of_work(sessions) as s, pytest.raises(ValidationError):
        cleanup.cleanup(s, clickhouse, older_than_days=days, now=now, project_id=project)
    assert rows.counts(clickhouse) == before


def test_per_project_bytes_add_up_when_a_merge_ends_between_the_two_reads(
    clickhouse, now, monkeypatch
):
    """The report reads the bytes (system.parts) and then the rows. A merge that ended in
    between renamed the parts: split part by part, rows counted under the new names
    found no bytes and every project showed 0 bytes (until the nineteenth session)."""
    clickhouse.command("SYSTEM STOP MERGES logs")
    for i in range(4):  # several parts in one partition (one day, one retention)
        rows.add_logs(clickhouse, 1, [now - i * H] * 30)
        rows.add_logs(clickhouse, 2, [now - i * H] * 10)
    clickhouse.command("SYSTEM START MERGES logs")
    real = clickhouse.query_rows

    # A real merge, run at the moment a background one could end.
    def query_rows(sql, parameters=None, settings=None):
        if "FROM logs GROUP BY" in sql:
            clickhouse.command("OPTIMIZE TABLE logs FINAL")
        return real(sql, parameters, settings)

    monkeypatch.setattr(clickhouse, "query_rows", query_rows)
    total, projects = usage.table_usage(clickhouse, "logs")
    assert total["rows"] == 160 and total["parts"] >= 2 and total["partitions"] == 1
    assert {p: f["rows"] for p, f in projects.items()} == {1: 120, 2: 40}
    for key in usage.SIZES:
        assert sum(f[key] for f in projects.values()) == pytest.approx(total[key])
    # Split by each project's share of the partition's rows.
    assert projects[1]["bytes_on_disk"] == pytest.approx(3 * projects[2]["bytes_on_disk"])


@pytest.mark.parametrize("table", ["events", "spans"])
def test_usage_is_read_from_the_usage_projection_not_the_rows(clickhouse, now, table):
    """GET /api/storage read every row's project and time (1.9 s at 50 M rows): the
    report's counts must come from the aggregate projection (clickhouse/0015)."""
    rows.add_all(clickhouse, 1, [now - D, now - H, now])
    plan = [line for (line,) in clickhouse.query_rows("EXPLAIN " + usage.counts_query(table))]
    assert any("ReadFromMergeTree (usage)" in line for line in plan), plan


def test_log_usage_is_read_from_the_severity_counts_projection_and_exact(clickhouse, sessions, now):
    """Logs have no usage projection (it cost 2-3 % of the engine per stored log): their
    counts come from severity_counts, and each project's oldest and newest log from a
    read of its first and last hour only, exact to the microsecond."""
    p1, p2 = _projects(sessions, "one", "two")
    m, us = dt.timedelta(minutes=1), dt.timedelta(microseconds=1)
    rows.add_logs(clickhouse, p1, [now - 2 * D + 7 * m + 5 * us, now - 2 * D + 50 * m])
    rows.add_logs(clickhouse, p1, [now - H + 59 * m + 999_999 * us, now - H + m])
    rows.add_logs(clickhouse, p2, [now - 5 * D + 33 * m])
    plan = [line for (line,) in clickhouse.query_rows("EXPLAIN " + usage.LOG_HOURS_QUERY)]
    assert any("ReadFromMergeTree (severity_counts)" in line for line in plan), plan
    total, projects = usage.table_usage(clickhouse, "logs")
    assert (total["rows"], projects[p1]["rows"], projects[p2]["rows"]) == (5, 4, 1)
    naive = lambda t: t.replace(tzinfo=None)  # noqa: E731 (as ClickHouse gives them)
    assert projects[p1]["oldest"] == naive(now - 2 * D + 7 * m + 5 * us)
    assert projects[p1]["newest"] == naive(now - H + 59 * m + 999_999 * us)
    assert projects[p2]["oldest"] == projects[p2]["newest"] == naive(now - 5 * D + 33 * m)
    assert total["oldest"] == naive(now - 5 * D + 33 * m)
    # A project cleanup's lightweight delete rebuilds the projection: nothing deleted counts.
    with db.unit_of_work(sessions) as s:
        cleanup.cleanup(s, clickhouse, older_than_days=1, now=now, project_id=p1)
    total, projects = usage.table_usage(clickhouse, "logs")
    assert (total["rows"], projects[p1]["rows"]) == (3, 2)
    assert projects[p1]["oldest"] == naive(now - H + m)


def test_usage_leaves_out_events_removed_by_an_issue_delete(clickhouse, sessions, now):
    """A lightweight DELETE rebuilds the touched parts' projection, so the report read
    from it counts no deleted row (the events table's lightweight_mutation_projection_mode)."""
    (project_id,) = _projects(sessions, "one")
    rows.add_events(clickhouse, project_id, [now - 2 * H, now - H], issue_id=1)
    rows.add_events(clickhouse, project_id, [now - 3 * H, now], issue_id=2)
    delete_events(clickhouse, project_id=project_id, issue_id=2)
    total, projects = usage.table_usage(clickhouse, "events")
    assert total["rows"] == projects[project_id]["rows"] == 2
    assert projects[project_id]["oldest"] == (now - 2 * H).replace(tzinfo=None)
    assert projects[project_id]["newest"] == (now - H).replace(tzinfo=None)


def test_a_project_cleanup_is_one_delete_per_table(clickhouse, sessions, now):
    """One lightweight DELETE per table holding the project's old rows, naming no
    partition: one per partition holding them (tried in the twenty-first session) made a
    project's cleanup 9-30x slower, a DELETE's time growing with the table's parts
    whatever partition it names (review, twenty-first session)."""
    for project_id in (1, 2):
        rows.add_all(clickhouse, project_id, [now - 3 * D, now - 2 * D, now - H, now])
    rows.add_all(clickhouse, 2, [now - 5 * D])  # a day only the other project has

    def deletes() -> set[tuple[str, str]]:
        # Listed by mutation id: earlier tests' on this reused database stay listed.
        return set(
            clickhouse.query_rows(
                "SELECT table, mutation_id || ' ' || command FROM system.mutations "
                "WHERE database = currentDatabase() AND command LIKE '%_row_exists = 0%'"
            )
        )

    earlier = deletes()
    with db.unit_of_work(sessions) as s:
        result = cleanup.cleanup(s, clickhouse, older_than_days=1, now=now, project_id=1)
    assert result.removed == {"logs": 2, "events": 2, "spans": 2}
    found = sorted(deletes() - earlier)
    assert [table for table, _ in found] == ["events", "logs", "spans"], found
    assert all("IN PARTITION" not in command for _, command in found), found
    assert rows.counts(clickhouse, "project_id = 1") == {"logs": 2, "events": 2, "spans": 2}
    assert rows.counts(clickhouse, "project_id = 2") == {"logs": 5, "events": 5, "spans": 5}
