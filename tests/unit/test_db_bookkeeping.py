"""Bookkeeping writes after the request (db.after_commit / db.commit): best effort, and a
store refusing them is said once a minute, not once per request."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from errortrack import db


def _failing_commit(factory: sessionmaker) -> None:
    with factory() as session:
        session.execute(sa.text("SELECT 1"))
        # A write the store refuses (here: no such table) after the request's own work.
        db.after_commit(session, sa.text("UPDATE no_such_table SET x = 1"))
        db.commit(session)


def test_refused_bookkeeping_is_logged_once_a_minute_with_a_count(monkeypatch, caplog):
    # Every request with a token retried its last-use write while the database refused
    # writes, and each logged a warning: a busy client flooded the log (review).
    engine = sa.create_engine("sqlite://")
    factory = sessionmaker(engine)
    now = [1000.0]
    monkeypatch.setattr(db, "_monotonic", lambda: now[0])
    monkeypatch.setattr(db, "_refused", db._Refused())
    with caplog.at_level(logging.WARNING, logger="errortrack.db"):
        for _ in range(5):
            _failing_commit(factory)
        assert [r.getMessage() for r in caplog.records] == [
            "last-use times not recorded: OperationalError"
        ]
        now[0] += 59
        _failing_commit(factory)
        assert len(caplog.records) == 1
        now[0] += 1
        _failing_commit(factory)
        assert [r.getMessage() for r in caplog.records][1:] == [
            "last-use times not recorded: OperationalError (5 more since the last warning)"
        ]


def test_the_requests_own_work_stays_committed():
    engine = sa.create_engine("sqlite://")
    factory = sessionmaker(engine)
    with factory() as session:
        session.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        session.execute(sa.text("INSERT INTO t VALUES (1)"))
        db.after_commit(session, sa.text("UPDATE no_such_table SET x = 1"))
        db.commit(session)
    with factory() as session:
        assert session.scalar(sa.text("SELECT x FROM t")) == 1
