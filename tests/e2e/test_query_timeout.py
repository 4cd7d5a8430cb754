"""ERRORTRACK_QUERY_TIMEOUT_SECONDS: an API read that runs too long is stopped and answered
503 query_timeout (the one error shape), and only API reads are bounded; likewise
ERRORTRACK_QUERY_MAX_MEMORY_BYTES for one that needs too much memory (503 query_memory)."""

from __future__ import annotations

import dataclasses
import threading
import time

import falcon.testing
import pytest
import sqlalchemy as sa

from errortrack import db
from errortrack.config import Settings, SettingsError
from errortrack.server import create_server_app
from errortrack.state import AppState
from tests.access_world import build_world
from tests.issue_data import insert_rows, plain_span
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


def _served(
    state: AppState, seconds: float, memory: int | None = None
) -> tuple[falcon.testing.TestClient, AppState]:
    changes: dict = {"query_timeout_seconds": seconds}
    if memory is not None:
        changes["query_max_memory_bytes"] = memory
    timed = AppState.build(
        dataclasses.replace(state.settings, **changes),
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


def test_a_read_that_needs_too_much_memory_answers_503_query_memory(state):
    """Past ERRORTRACK_QUERY_MAX_MEMORY_BYTES a read is stopped (503 query_memory); the
    store itself (writer, retention) is not bounded. A text search's deep page and its
    count fit where they took most of a GB: a sort held every match's body up to the
    page's offset (200k logs of 10 KB: 4.6 GB; API review, thirty-first session), and
    reading the body as PREWHERE held it in large blocks."""
    assert state.settings.query_max_memory_bytes == 2**30  # the default
    client, capped = _served(state, 30, memory=150 * 2**20)
    world = build_world(capped, client)
    try:
        assert capped.api_clickhouse.query_rows("SELECT getSetting('max_memory_usage')") == [
            (150 * 2**20,)
        ]
        assert state.clickhouse.query_rows("SELECT getSetting('max_memory_usage')") == [(0,)]
        state.clickhouse.command(
            "INSERT INTO logs (project_id, timestamp, level, severity_number, body, attributes,"
            " retention_days)"
            f" SELECT {world.project_id}, subtractMicroseconds(now64(6), number * 1000), 'info',"
            " 9, 'request ' || toString(number) || ' ' || randomPrintableASCII(1000), '{}', 3650"
            " FROM numbers(300000)"
        )
        path = f"/api/projects/{world.project_id}/logs?q=request&per_page=1000"
        for sort in ("-severity", "-timestamp"):
            deep = world.call("viewer", "GET", f"{path}&sort={sort}&page=290")
            assert deep.status_code == 200, deep.text
            items = deep.json["items"]
            assert len(items) == 1000 and deep.json["total_count"] >= 290_000
            # Newest first (one severity): the 289,001st newest log opens page 290.
            assert [int(item["body"].split()[1]) for item in items] == list(range(289_000, 290_000))
    finally:
        capped.ingest.writer.spool.close()
    tight, tight_state = _served(state, 30, memory=4 * 2**20)
    try:
        resp = tight.simulate_get(
            f"{path}&sort=-severity&page=290", headers=world.headers("viewer")
        )
        assert resp.status_code == 503, resp.text
        assert resp.json["error"]["code"] == "query_memory"
        assert "narrow the request" in resp.json["error"]["message"]
        assert resp.headers["Retry-After"].isdigit()
    finally:
        tight_state.ingest.writer.spool.close()
    # 0: no limit.
    _, roomy_state = _served(state, 30, memory=0)
    try:
        assert roomy_state.api_clickhouse.query_rows("SELECT getSetting('max_memory_usage')") == [
            (0,)
        ]
    finally:
        roomy_state.ingest.writer.spool.close()


def test_other_query_errors_stay_500s(state):
    """Only a timeout is a 503: a query ClickHouse refuses for another reason is a bug.
    A route of the test's own sends the real store a query it refuses."""
    from errortrack.app import create_app

    timed = AppState.build(
        dataclasses.replace(state.settings, query_timeout_seconds=5),
        engine=state.engine,
        clickhouse=state.clickhouse,
        clock=state.clock,
    )

    class Refused:
        def on_get(self, req, resp):
            resp.media = timed.api_clickhouse.query_rows("SELECT no_such_column FROM logs")

    app = create_app(state=timed)
    app.add_route("/test/refused", Refused())
    resp = falcon.testing.TestClient(app).simulate_get("/test/refused")
    assert resp.status_code == 500
    assert resp.json["error"]["code"] == "internal_error"


@pytest.mark.skipif(not TEST_PG, reason="statement_timeout is PostgreSQL's")
def test_a_statement_waiting_on_a_lock_answers_503_query_timeout(state, database_url):
    client, timed = _served(state, 0.5)
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


def _timeout_in(factory) -> str:
    with factory() as session:
        return session.scalar(sa.text("SHOW statement_timeout"))


@pytest.mark.skipif(not TEST_PG, reason="statement_timeout is PostgreSQL's")
def test_only_api_transactions_are_bounded(state, database_url):
    """The bound is SET LOCAL in each API transaction: background work on the same
    engine (grouping, retention) and the engine's own connections stay unbounded; no
    startup parameter is sent, which PgBouncer refuses (every connection failed behind
    it), and a URL's own options are kept (they made the bound silently absent)."""
    timed = AppState.build(
        dataclasses.replace(state.settings, query_timeout_seconds=2),
        engine=state.engine,
        clickhouse=state.clickhouse,
        clock=state.clock,
    )
    assert _timeout_in(timed.api_sessions) == "2s"
    assert _timeout_in(timed.sessions) == "0"
    with timed.engine.connect() as conn:
        assert conn.scalar(sa.text("SHOW statement_timeout")) == "0"
    # A second transaction of one session is bounded too (a request commits mid-way).
    with timed.api_sessions() as session:
        session.commit()
        assert session.scalar(sa.text("SHOW statement_timeout")) == "2s"
    # The URL's own options stay, and the bound comes on top.
    sep = "&" if "?" in database_url else "?"
    own = db.make_engine(f"{database_url}{sep}options=-c%20search_path%3Dpublic,pg_catalog")
    try:
        factory = db.bounded_sessionmaker(own, 2)
        with factory() as session:
            assert session.scalar(sa.text("SHOW statement_timeout")) == "2s"
            assert session.scalar(sa.text("SHOW search_path")) == "public,pg_catalog"
    finally:
        own.dispose()
    # 0 is no bound.
    assert _timeout_in(db.bounded_sessionmaker(state.engine, 0)) == "0"


def test_the_setting_takes_0_and_at_most_what_postgresql_takes():
    assert Settings.from_env({"ERRORTRACK_QUERY_TIMEOUT_SECONDS": "0"}).query_timeout_seconds == 0
    top = Settings.from_env({"ERRORTRACK_QUERY_TIMEOUT_SECONDS": "2147483"})
    assert top.query_timeout_seconds == 2_147_483
    for bad in ("2147484", "-1", "nan", "inf", "x"):
        with pytest.raises(SettingsError, match="ERRORTRACK_QUERY_TIMEOUT_SECONDS"):
            Settings.from_env({"ERRORTRACK_QUERY_TIMEOUT_SECONDS": bad})


def test_0_leaves_api_reads_unbounded(state):
    _, timed = _served(state, 0, memory=0)
    try:
        assert timed.api_clickhouse is timed.clickhouse
        rows = timed.api_clickhouse.query_rows("SELECT getSetting('max_execution_time')")
        assert rows == [(0.0,)]
    finally:
        timed.ingest.writer.spool.close()


def test_a_trace_of_large_spans_is_read_within_the_memory_bound(state):
    """The trace view and its spans pages read only the page's spans whole: one read with
    LIMIT 1 BY held every span's description through its sort, whatever the caps (a trace
    of 30,000 spans of 50 KB took the worker to 2.3 GB for a page of one span; API review,
    thirty-first session). Under a 100 MiB bound both answer for 150 MB of spans."""
    client, capped = _served(state, 30, memory=100 * 2**20)
    world = build_world(capped, client)
    trace = "cd" * 16
    try:
        start = time.time() - 60
        rows = [
            plain_span(
                world.project_id,
                trace,
                i,
                start=start + i / 1000,
                description=f"{i:05d}" + "q" * 50_000,
            )
            for i in range(3_000)
        ]
        for i in range(0, len(rows), 500):
            insert_rows(state.clickhouse, "spans", rows[i : i + 500])
        path = f"/api/projects/{world.project_id}/traces/{trace}"
        one = world.call("viewer", "GET", f"{path}/spans?per_page=1&page=2000")
        assert one.status_code == 200, one.text
        assert one.json["items"][0]["description"].startswith("01999")
        walk = world.call("viewer", "GET", f"{path}/spans?per_page=1000")
        assert walk.status_code == 200, walk.text
        assert 600 < len(walk.json["items"]) < 700  # cut by the 32 MiB budget
        after = world.call(
            "viewer", "GET", f"{path}/spans?per_page=10&cursor={walk.json['next_cursor']}"
        )
        assert after.status_code == 200, after.text
        first = after.json["items"][0]["description"][:5]
        assert int(first) == len(walk.json["items"])  # right after the cut page
        story = world.call("viewer", "GET", path)
        assert story.status_code == 200, story.text
        assert story.json["truncated"]["spans"] and 600 < story.json["span_count"] < 700
    finally:
        capped.ingest.writer.spool.close()
