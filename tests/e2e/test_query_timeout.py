"""ERRORTRACK_QUERY_TIMEOUT_SECONDS: an API read that runs too long is stopped and answered
503 query_timeout (the one error shape), and only API reads are bounded."""

from __future__ import annotations

import dataclasses
import threading
import time

import falcon.testing
import pytest
import sqlalchemy as sa

from errortrack import db
from errortrack.server import create_server_app
from errortrack.state import AppState
from tests.access_world import build_world
from tests.support import TEST_PG

# A query that never ends by itself: a bounded store must stop it.
ENDLESS = "SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) % 7 = 3"


def test_a_bounded_store_stops_reads_and_the_store_itself_does_not(clickhouse):
    bounded = clickhouse.bounded(0.2)
    started = time.monotonic()
    with pytest.raises(Exception, match="TIMEOUT_EXCEEDED"):
        bounded.query_rows(ENDLESS)
    assert time.monotonic() - started < 5
    # The view shares connections but not its bound: the writer's and retention's reads
    # (through the store itself) are not cut short.
    assert clickhouse.query_rows("SELECT getSetting('max_execution_time')") == [(0.0,)]
    assert bounded.query_rows("SELECT getSetting('max_execution_time')") == [(0.2,)]
    # A caller's own settings still apply beside the bound.
    rows = bounded.query_rows(
        "SELECT getSetting('max_execution_time'), getSetting('max_threads')",
        settings={"max_threads": 1},
    )
    assert rows == [(0.2, 1)]


def _served(state: AppState, seconds: float) -> tuple[falcon.testing.TestClient, AppState]:
    timed = AppState.build(
        dataclasses.replace(state.settings, query_timeout_seconds=seconds),
        engine=state.engine,
        clickhouse=state.clickhouse,
        clock=state.clock,
    )
    return falcon.testing.TestClient(create_server_app(state=timed)), timed


def test_a_slow_log_search_answers_503_query_timeout(state):
    client, timed = _served(state, 0.01)
    world = build_world(timed, client)
    try:
        # Enough rows that sorting them all (by severity) takes far longer than 10 ms.
        state.clickhouse.command(
            "INSERT INTO logs (project_id, timestamp, level, severity_number, body, attributes,"
            " retention_days)"
            f" SELECT {world.project_id}, now64(6) - number / 1000, 'info', 9, 'line ' || "
            "toString(number), '{}', 3650 FROM numbers(3000000)"
        )
        path = f"/api/projects/{world.project_id}/logs"
        resp = world.call("viewer", "GET", f"{path}?sort=-severity&level=info")
        assert resp.status_code == 503, resp.text
        assert resp.json["error"]["code"] == "query_timeout"
        assert "narrow the request" in resp.json["error"]["message"]
        assert resp.headers["Retry-After"].isdigit()
    finally:
        timed.ingest.writer.spool.close()
    # The same request under a bound it fits in answers.
    roomy, roomy_state = _served(state, 120)
    try:
        again = roomy.simulate_get(
            f"{path}?sort=-severity&level=info", headers=world.headers("viewer")
        )
        assert again.status_code == 200, again.text
        assert again.json["total_count"] >= 100
    finally:
        roomy_state.ingest.writer.spool.close()


def test_other_query_errors_stay_500s(state, monkeypatch):
    """Only a timeout is a 503: a query ClickHouse refuses for another reason is a bug."""
    client, timed = _served(state, 5)
    world = build_world(timed, client)
    try:
        real = type(timed.api_clickhouse).query_rows

        def broken(self, sql, parameters=None, settings=None):
            return real(self, "SELECT no_such_column FROM logs", parameters, settings)

        monkeypatch.setattr(type(timed.api_clickhouse), "query_rows", broken)
        resp = world.call("viewer", "GET", f"/api/projects/{world.project_id}/logs")
        assert resp.status_code == 500
        assert resp.json["error"]["code"] == "internal_error"
    finally:
        timed.ingest.writer.spool.close()


@pytest.mark.skipif(not TEST_PG, reason="statement_timeout is PostgreSQL's")
def test_a_statement_waiting_on_a_lock_answers_503_query_timeout(state, database_url):
    engine = db.make_engine(database_url, statement_timeout=0.5)
    timed = AppState.build(
        dataclasses.replace(state.settings, query_timeout_seconds=0.5),
        engine=engine,
        clickhouse=state.clickhouse,
        clock=state.clock,
    )
    client = falcon.testing.TestClient(create_server_app(state=timed))
    world = build_world(timed, client)
    locker = sa.create_engine(database_url)
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        # An operator's psql session holding a table lock.
        with locker.begin() as conn:
            conn.execute(sa.text("LOCK TABLE projects IN ACCESS EXCLUSIVE MODE"))
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        resp = world.call("viewer", "GET", f"/api/projects/{world.project_id}")
        assert resp.status_code == 503, resp.text
        assert resp.json["error"]["code"] == "query_timeout"
        assert time.monotonic() - started < 10
    finally:
        release.set()
        holder.join()
        locker.dispose()
    assert world.call("viewer", "GET", f"/api/projects/{world.project_id}").status_code == 200
    timed.ingest.writer.spool.close()
    engine.dispose()


def test_migrations_and_the_cli_engine_have_no_statement_timeout(database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("statement_timeout is PostgreSQL's")
    plain, bounded = db.make_engine(database_url), db.make_engine(database_url, statement_timeout=2)
    try:
        with plain.connect() as conn:
            assert conn.scalar(sa.text("SHOW statement_timeout")) == "0"
        with bounded.connect() as conn:
            assert conn.scalar(sa.text("SHOW statement_timeout")) == "2s"
    finally:
        plain.dispose()
        bounded.dispose()
