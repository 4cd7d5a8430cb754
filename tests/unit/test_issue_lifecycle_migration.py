"""Migration 0009 (issues.resolved_at) on a scratch database of the suite's backend:
issues resolved before it keep their state and reopen only on events newer than their
last seen; down and up again keep the issues and the table's constraints."""

import datetime as dt

import orjson
import pytest
import sqlalchemy as sa

from errortrack import db, relational
from errortrack.ingest.items import ItemContext
from errortrack.issues.events import handle_event
from errortrack.issues.fingerprint import fingerprint
from errortrack.issues.grouping import GroupingHook
from errortrack.issues.store import REGRESSION_MARGIN
from errortrack.models import Issue
from tests.support import scratch_database


def _fingerprint(name):
    return fingerprint({"fingerprint": [name]})


NAMES = {_fingerprint(name): name for name in ("r1", "r2", "u")}


def _event(project_id, at, name):
    event = {
        "fingerprint": [name],
        "exception": {"values": [{"type": "KeyError", "value": "boom"}]},
        "timestamp": at.timestamp(),
    }
    [row] = handle_event(orjson.dumps(event), {}, ItemContext(project_id, at, 30, {})).events
    return row


def _old_issue(conn, project_id, name, status, last_seen):
    """An issue as the schema before 0009 holds it (the ORM follows the newest schema),
    of the fingerprint events sent with ``fingerprint: [name]`` get."""
    conn.execute(
        sa.text(
            "INSERT INTO issues (project_id, fingerprint, title, culprit, level, status,"
            " first_seen, last_seen, event_count)"
            " VALUES (:p, :f, :n, '', 'error', :s, :t, :t, 1)"
        ).bindparams(sa.bindparam("t", type_=db.UTCDateTime())),  # as the app writes it
        {"p": project_id, "f": _fingerprint(name), "n": name, "s": status, "t": last_seen},
    )


def test_issues_resolved_before_0009_reopen_only_on_events_newer_than_their_last_seen(
    tmp_path, clock
):
    last_seen = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
    with scratch_database(tmp_path) as url:
        relational.upgrade(url, "0008")
        engine = db.make_engine(url)
        with engine.begin() as conn:
            project_id = conn.execute(
                sa.text(
                    "INSERT INTO projects (name, created_at) VALUES ('p', CURRENT_TIMESTAMP)"
                    " RETURNING id"
                )
            ).scalar_one()
            for name, status in [("r1", "resolved"), ("r2", "resolved"), ("u", "muted")]:
                _old_issue(conn, project_id, name, status, last_seen)
        engine.dispose()
        relational.upgrade(url)
        engine = db.make_engine(url)
        sessions = db.make_sessionmaker(engine)
        with sessions() as s:
            got = {
                NAMES[i.fingerprint]: (i.status, i.resolved_at) for i in s.scalars(sa.select(Issue))
            }
        assert got == {
            "r1": ("resolved", last_seen),
            "r2": ("resolved", last_seen),
            "u": ("muted", None),
        }
        hook = GroupingHook(sessions, clock=clock)
        older = last_seen - REGRESSION_MARGIN - dt.timedelta(minutes=5)
        hook([_event(project_id, older, "r1"), _event(project_id, clock(), "r2")], "b1")
        with sessions() as s:
            got = {
                NAMES[i.fingerprint]: (i.status, i.event_count) for i in s.scalars(sa.select(Issue))
            }
        assert got == {"r1": ("resolved", 2), "r2": ("unresolved", 2), "u": ("muted", 1)}
        engine.dispose()

        relational.downgrade(url, "0008")
        engine = db.make_engine(url)
        with engine.begin() as conn:
            assert "resolved_at" not in {c["name"] for c in sa.inspect(conn).get_columns("issues")}
            kept = conn.execute(sa.text("SELECT fingerprint, status FROM issues ORDER BY id"))
            assert [(NAMES[f], status) for f, status in kept] == [
                ("r1", "resolved"),
                ("r2", "unresolved"),
                ("u", "muted"),
            ]
            if engine.dialect.name == "sqlite":  # 0004's AUTOINCREMENT survives the rebuild
                sql = conn.execute(
                    sa.text("SELECT sql FROM sqlite_master WHERE name = 'issues'")
                ).scalar_one()
                assert "AUTOINCREMENT" in sql
        # The unique and check constraints still hold.
        for name, status in [("r1", "muted"), ("x", "bogus")]:
            with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
                _old_issue(conn, project_id, name, status, last_seen)
        engine.dispose()
        relational.upgrade(url)


def test_rolling_back_0009_on_sqlite_keeps_deleted_issue_ids_unused(tmp_path, clock):
    # The downgrade rebuilds the table, whose new counter started from the highest
    # remaining id: a deleted last issue's id went to the next new issue (0004's rule).
    url = f"sqlite:///{tmp_path / 'seq.sqlite3'}"
    relational.upgrade(url)
    engine = db.make_engine(url)
    at = dt.datetime.now(dt.UTC)
    with engine.begin() as conn:
        project_id = conn.execute(
            sa.text(
                "INSERT INTO projects (name, created_at) VALUES ('p', CURRENT_TIMESTAMP)"
                " RETURNING id"
            )
        ).scalar_one()
        for name in ("r1", "r2", "u"):
            _old_issue(conn, project_id, name, "unresolved", at)
        conn.execute(sa.text("DELETE FROM issues WHERE id = 3"))
    engine.dispose()
    relational.downgrade(url, "0008")
    engine = db.make_engine(url)
    with engine.begin() as conn:
        _old_issue(conn, project_id, "x", "unresolved", at)
        ids = conn.execute(sa.text("SELECT id FROM issues ORDER BY id")).scalars().all()
    engine.dispose()
    assert ids == [1, 2, 4]
